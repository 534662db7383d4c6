"""Parallel ranged reads of remote segments (issue 27): what the remote tier's reader keeps between Fetch requests.

A real object store answers a GET in tens of milliseconds and streams one connection at 50-100 MB/s, so a sequential
reader that waits for one chunk at a time reads at a fraction of the local log's speed. Three pieces fix that:

- `GetEstimate` fits `time = latency + bytes / bandwidth` to the store's recent GETs (chunks, indexes and the short
  last chunk of each segment give it different sizes), so the reader knows the store it is on.
- `ReadAhead` is one segment's sequential reader state: a chunk size chosen from the estimate (large enough that the
  first byte's latency is a third of a GET at most) and a window of chunks requested ahead of the reader, which
  doubles whenever the reader has to wait for a chunk that was already on its way (the window was too short for the
  reader's pace). Read-ahead happens only on a read, so it stops when the reader stops.
- `ChunkCache` holds chunks, in flight and done, within `remote.fetch.max.memory.bytes`: a read-ahead is only started
  while bytes in flight plus chunks fetched ahead and not yet read fit the budget, and done chunks are evicted
  least recently used first. It counts hits, misses, waits and read-ahead bytes evicted unread (prefetch waste).
- `RangedReads` puts them together for any object read in order (a `RangedObject`): the broker's remote tier and
  Spark's direct reads of the store use it alike.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable

MIN_CHUNK = 2 << 20
MAX_CHUNK = 16 << 20
STALE_AHEAD = 10.0        # seconds after which a chunk read ahead and never read may be evicted for new read-ahead


class GetEstimate:
    """A least-squares fit of `seconds = latency + bytes / bandwidth` over the store's last `samples` GETs."""

    def __init__(self, samples: int = 64):
        self._samples: deque[tuple[float, float]] = deque(maxlen=samples)
        self.listener: Callable[[int, float], None] | None = None     # e.g. a latency histogram

    async def timed(self, get) -> bytes:
        """The answer of the GET coroutine `get`, observed with the time it took."""
        t0 = time.monotonic()
        data = await get
        self.observe(len(data), time.monotonic() - t0)
        return data

    def observe(self, nbytes: int, seconds: float) -> None:
        self._samples.append((float(nbytes), max(seconds, 0.0)))
        if self.listener is not None:
            self.listener(nbytes, seconds)

    def fit(self) -> tuple[float, float] | None:
        """(latency seconds, bandwidth bytes/s), or None until GETs of different enough sizes were seen."""
        n = len(self._samples)
        if n < 4:
            return None
        ss = [s for s, _ in self._samples]
        ts = [t for _, t in self._samples]
        ms, mt = sum(ss) / n, sum(ts) / n
        var = sum((s - ms) ** 2 for s in ss)
        if var <= (0.25 * ms) ** 2 * n:        # sizes too alike: latency and bandwidth cannot be told apart
            return None
        slope = sum((s - ms) * (t - mt) for s, t in zip(ss, ts)) / var
        if slope <= 0:
            return None
        return max(0.0, mt - slope * ms), 1.0 / slope

    def chunk_size(self, default: int) -> int:
        """A chunk for which the first byte's latency is at most a third of the GET: 2 x bandwidth x latency bytes,
        a power of two within [MIN_CHUNK, MAX_CHUNK]; `default` until the store is known."""
        fit = self.fit()
        if fit is None:
            return default
        latency, bandwidth = fit
        want = 2 * bandwidth * latency
        return min(MAX_CHUNK, max(MIN_CHUNK, 1 << max(0, math.ceil(math.log2(max(want, 1))))))


@dataclass(eq=False)
class ReadAhead:
    """One remote segment's sequential reading: its chunk size and how many chunks to keep requested ahead."""
    chunk_size: int
    window: int = 2
    max_window: int = 32

    def stalled(self) -> None:
        """The reader waited for a chunk already requested ahead: it reads faster than the window delivers."""
        self.window = min(self.max_window, self.window * 2)


@dataclass(eq=False)
class _Chunk:
    future: asyncio.Future
    size: int                  # the bytes asked for (what it holds once done)
    ahead: bool                # requested ahead of the reader, and not read since
    done: bool = False
    used: float = 0.0          # monotonic time it was requested or last read
    passed: bool = False       # a sequential reader has moved on to the next chunk


class ChunkCache:
    """Chunks of remote segments, keyed by anything, as futures shared by every reader that wants them. `bytes` counts
    chunks in flight at their requested size and done ones at theirs; a failed or cancelled fetch is forgotten."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.entries: OrderedDict[object, _Chunk] = OrderedDict()
        self.bytes = 0
        self.in_flight = 0          # bytes asked for and not yet answered
        self.unread_ahead = 0       # bytes fetched ahead and not read yet
        self.hits = self.misses = self.waits = 0
        self.ahead_bytes = self.wasted_bytes = 0
        self.pending: set[asyncio.Future] = set()   # GETs not answered yet, held or dropped (close() ends them)

    def contains(self, key) -> bool:
        return key in self.entries

    def get(self, key, size: int, make: Callable[[], object]) -> tuple[asyncio.Future, bool]:
        """The chunk for a reader: (its future, whether it was requested ahead and is not done yet, i.e. the reader
        will wait for a read-ahead). Counts a hit, a wait or a miss."""
        e = self.entries.get(key)
        if e is None:
            self.misses += 1
            return self._start(key, size, make, ahead=False).future, False
        self.entries.move_to_end(key)
        e.used = time.monotonic()
        waiting = not e.future.done()
        if waiting:
            self.waits += 1
        else:
            self.hits += 1
        if e.ahead:
            e.ahead = False
            if e.done:
                self.unread_ahead -= e.size
            return e.future, waiting
        return e.future, False

    def room_ahead(self, size: int) -> bool:
        """Whether a read-ahead of `size` bytes fits the budget: bytes in flight plus chunks fetched ahead and not
        read yet stay within three quarters of it (done chunks already read can always be evicted; the last quarter
        is for readers' own chunks, so that they do not push unread read-ahead out)."""
        return self.in_flight + self.unread_ahead + size <= self.capacity * 3 // 4

    def prefetch(self, key, size: int, make: Callable[[], object]) -> bool:
        """Start a read-ahead of a chunk not held yet, if the budget has room (after evicting chunks read ahead for
        a reader that went away: unread for STALE_AHEAD seconds)."""
        if key in self.entries:
            return False
        if not self.room_ahead(size):
            stale = time.monotonic() - STALE_AHEAD
            for k in [k for k, e in self.entries.items() if e.done and e.ahead and e.used < stale]:
                self._forget(k, self.entries[k])
                if self.room_ahead(size):
                    break
            if not self.room_ahead(size):
                return False
        self._start(key, size, make, ahead=True)
        self.ahead_bytes += size
        return True

    def in_order(self, ra: "ReadAhead", parts, i: int) -> asyncio.Future:
        """Part `i` of a sequence read in order (`parts[j]` is (key, size, make) and `len(parts)` their number), after
        starting the read-ahead of the `ra.window` parts after it as far as the budget allows. A reader that will
        wait for a part already read ahead widens the window. Returns the part's future; `parts.past_end` (when it
        has one) is called with the window and how many of its parts fall past the last one, so that the read-ahead
        can go on in what the reader will read next."""
        key, size, make = parts[i]
        if i > 0:
            prev = self.entries.get(parts[i - 1][0])
            if prev is not None:
                prev.passed = True
        fut, waiting = self.get(key, size, make)
        if waiting:
            ra.stalled()
        end = i + 1 + ra.window
        if self.read_ahead(parts, i + 1, end) and end > len(parts):
            past_end = getattr(parts, "past_end", None)
            if past_end is not None:
                past_end(ra.window, end - len(parts))
        return fut

    def read_ahead(self, parts, first: int, end: int) -> bool:
        """Read ahead parts [first, end) of `parts` (those there are) not held yet, in order; False once the budget
        is full (the rest waits for the reader to come closer)."""
        for j in range(first, min(end, len(parts))):
            key, size, make = parts[j]
            if key not in self.entries and not self.prefetch(key, size, make):
                return False
        return True

    def _start(self, key, size: int, make, ahead: bool) -> _Chunk:
        e = _Chunk(asyncio.ensure_future(make()), size, ahead, used=time.monotonic())
        self.entries[key] = e
        self.pending.add(e.future)
        self.bytes += size
        self.in_flight += size
        e.future.add_done_callback(lambda f, k=key, e=e: self._done(k, e))
        return e

    def _done(self, key, e: _Chunk) -> None:
        self.in_flight -= e.size
        self.pending.discard(e.future)
        f = e.future
        if f.cancelled() or f.exception() is not None:
            if self.entries.get(key) is e:
                del self.entries[key]
                self.bytes -= e.size
            return
        got = len(f.result())
        if self.entries.get(key) is not e:
            return
        self.bytes += got - e.size
        e.size, e.done = got, True
        if e.ahead:
            self.unread_ahead += got
        self._evict(key)

    def _evict(self, keep) -> None:
        """Drop done chunks until the cache fits its capacity: those a sequential reader has moved past first, then
        those read and maybe still being read, then those read ahead and not read yet (prefetch waste), least
        recently used first in each."""
        for rank in (0, 1, 2):
            for key in list(self.entries):
                if self.bytes <= self.capacity:
                    return
                e = self.entries[key]
                if key != keep and e.done and rank == (2 if e.ahead else 0 if e.passed else 1):
                    self._forget(key, e)

    def _forget(self, key, e: _Chunk) -> None:
        del self.entries[key]
        if e.done:
            self.bytes -= e.size
            if e.ahead:
                self.unread_ahead -= e.size
                self.wasted_bytes += e.size
        else:
            self.bytes -= e.size           # its answer is dropped when it comes (_done sees another entry)

    async def close(self) -> None:
        """Cancel every GET still in flight and wait for them to end (the reader is going away)."""
        pending = list(self.pending)
        for f in pending:
            f.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def drop(self, pred) -> None:
        """Forget the chunks whose key matches (a deleted segment, a partition no longer led)."""
        for key in [k for k in self.entries if pred(k)]:
            self._forget(key, self.entries[key])


@dataclass(frozen=True)
class RangedObject:
    """An object read in chunks: `key` names it in the cache (any hashable), `size` is its length, `fetch(start, end)`
    GETs bytes [start, end) (and refuses a short answer), `after(window, count)` is called when a read-ahead reaches
    past its end, with the reader's window and how many chunks of it fall past the end (to go on with what a
    sequential reader wants next: the next segment)."""
    key: object
    size: int
    fetch: Callable[[int, int], object]
    after: Callable[[int, int], None] | None = None


class _Chunks:
    """An object's chunks of `cs` bytes as the parts ChunkCache.in_order reads."""

    def __init__(self, obj: RangedObject, cs: int):
        self.obj, self.cs = obj, cs
        self.past_end = obj.after

    def __len__(self) -> int:
        return -(-self.obj.size // self.cs)

    def __getitem__(self, i: int):
        obj, start = self.obj, i * self.cs
        end = min(start + self.cs, obj.size)
        return (obj.key, self.cs, i), end - start, lambda: obj.fetch(start, end)


class RangedReads:
    """Sequential reads of objects through a ChunkCache, each object with its ReadAhead: what the broker's remote tier
    (remote_log_reader.py) and Spark's direct reads of the store (spark_connector/remote_reader.py) share."""

    def __init__(self, cache: ChunkCache, estimate: GetEstimate, default_chunk: int, first_window: int,
                 max_objects: int = 4096):
        self.cache, self.estimate = cache, estimate
        self.default_chunk, self.first_window, self.max_objects = default_chunk, first_window, max_objects
        self.read_aheads: OrderedDict[object, ReadAhead] = OrderedDict()

    def read_ahead(self, key) -> ReadAhead:
        """The object's reading state, made at its first read with a chunk size from what the store showed so far."""
        ra = self.read_aheads.get(key)
        if ra is None:
            cs = self.estimate.chunk_size(self.default_chunk)
            ra = self.read_aheads[key] = ReadAhead(cs, self.first_window, max(1, self.cache.capacity // (2 * cs)))
            if len(self.read_aheads) > self.max_objects:
                self.read_aheads.popitem(last=False)
        else:
            self.read_aheads.move_to_end(key)
        return ra

    async def close(self) -> None:
        """Cancel the GETs still in flight, held or already dropped, and wait for them to end."""
        await self.cache.close()

    def drop(self, pred) -> None:
        """Forget the objects whose key matches, and their chunks."""
        self.cache.drop(lambda k: pred(k[0]))
        for key in [k for k in self.read_aheads if pred(k)]:
            del self.read_aheads[key]

    async def chunk(self, obj: RangedObject, i: int, ra: ReadAhead | None = None) -> bytes:
        """Chunk `i` of the object, after starting the read-ahead past it (ChunkCache.in_order). Shielded: a reader
        that is cancelled must not cancel a GET other readers share."""
        ra = ra or self.read_ahead(obj.key)
        return await asyncio.shield(self.cache.in_order(ra, _Chunks(obj, ra.chunk_size), i))

    def start(self, obj: RangedObject, window: int, count: int) -> None:
        """Read ahead the object's first `count` chunks for a sequential reader coming from the previous object,
        which it reads with its `window` (at least): the window carries over from one segment to the next."""
        ra = self.read_ahead(obj.key)
        ra.window = min(ra.max_window, max(ra.window, window))
        self.cache.read_ahead(_Chunks(obj, ra.chunk_size), 0, count)

    async def range(self, obj: RangedObject, start: int, end: int, cur: list) -> list[memoryview]:
        """Views covering [start, end) of the object; `cur` keeps ((chunk size, index), view) of the last chunk."""
        ra = self.read_ahead(obj.key)
        cs = ra.chunk_size
        out = []
        pos = start
        while pos < end:
            i = pos // cs
            if cur[0] != (cs, i):
                data = await self.chunk(obj, i, ra)
                cur[0], cur[1] = (cs, i), memoryview(data)
            lo = pos - i * cs
            hi = min(end - i * cs, len(cur[1]))
            if hi <= lo:
                raise ValueError(f"{obj.key} is shorter than {end} bytes")
            out.append(cur[1][lo:hi])
            pos += hi - lo
        return out
