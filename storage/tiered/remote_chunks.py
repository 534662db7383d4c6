"""Parallel ranged reads of remote segments (issue 27): what the remote tier's reader keeps between Fetch requests.

A real object store answers a GET in tens of milliseconds and streams one connection at 50-100 MB/s, so a sequential
reader that waits for one chunk at a time reads at a fraction of the local log's speed. Three pieces fix that:

- `GetEstimate` fits `time = latency + bytes / bandwidth` to the store's recent GETs (chunks, indexes and the short
  last chunk of each segment give it different sizes), so the reader knows the store it is on.
- `ReadAhead` is one segment's sequential reader state: a chunk size chosen from the estimate (large enough that the
  first byte's latency is half of a GET at most; the next segments a reader reads ahead into keep it) and a window
  of chunks requested ahead of the reader. The window grows to a GET's time at the reader's pace (the time it took
  over its last chunk) once the store is known, and at least doubles whenever the reader has to wait for a chunk
  already on its way. While it is the only object being read, a chunk the reader will need sooner than a whole GET
  takes (its first ones, before its pace is known) is read in ranged parts at once. Read-ahead happens only on a
  read, so it stops when the reader stops.
- `ChunkCache` holds chunks, in flight and done, within `remote.fetch.max.memory.bytes`: a read-ahead is only started
  while bytes in flight plus chunks fetched ahead and not yet read fit the budget, a reader's own GET waits while
  the GETs under way already take the whole budget, and done chunks are evicted least recently used first. Chunks
  evicted while responses still hold views of them count against the budget until those are sent. Where the store
  can read into a buffer (object_store.reads_into), whole chunks are read into buffers the cache reuses once nothing
  refers to them any more (`FreeBuffers`), also within the budget. It counts hits, misses, waits and read-ahead bytes
  evicted unread (prefetch waste).
- `RangedReads` puts them together for any object read in order (a `RangedObject`): the broker's remote tier and
  Spark's direct reads of the store use it alike.
"""
from __future__ import annotations

import asyncio
import math
import mmap
import sys
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable

from storage.tiered.chunk_buffers import FreeBuffers, ReadInto, clear_frames, unreferenced
from storage.tiered.eager import eager

MIN_CHUNK = 2 << 20
MAX_CHUNK = 16 << 20
MIN_SHARED_CHUNK = 256 << 10   # the smallest chunk when many objects share the budget
SPLIT = 4                 # ranged GETs at once for a chunk needed soonest (ChunkCache._start, ReadAhead.parts_for) ...
MIN_PIECE = 512 << 10     # ... each of at least this many bytes
SHARE_CHUNKS = 3          # chunks an object's share of the budget holds at least: its reader's and 2 read ahead
PAST_END = 32             # parts read ahead past an object's end, into the objects after it, at most
ACTIVE = 5.0              # seconds since its last read for which an object counts as being read (shares the budget)
STALE_AHEAD = 10.0        # seconds after which a chunk read ahead and never read may be evicted for new read-ahead
TIDY = 0.5                # seconds between looks at what responses still hold, while they hold any (ChunkCache._tidy)


def _retrieved(f: asyncio.Future) -> None:
    """A part of a chunk that failed after another part already failed the chunk: its error is not logged."""
    if not f.cancelled():
        f.exception()


class GetEstimate:
    """A least-squares fit of `seconds = latency + bytes / bandwidth` over the store's last `samples` GETs."""

    def __init__(self, samples: int = 64):
        self._samples: deque[tuple[float, float]] = deque(maxlen=samples)
        self._last: tuple[float, float] | None = None
        self._fitted = False            # _last is the fit of the samples as they are (readers ask at every chunk)
        self.listener: Callable[[int, float], None] | None = None     # e.g. a latency histogram

    async def timed(self, get) -> bytes:
        """The answer of the GET coroutine `get`, observed with the time it took."""
        t0 = time.monotonic()
        data = await get
        self.observe(len(data), time.monotonic() - t0)
        return data

    def observe(self, nbytes: int, seconds: float) -> None:
        self._samples.append((float(nbytes), max(seconds, 0.0)))
        self._fitted = False
        if self.listener is not None:
            self.listener(nbytes, seconds)

    def fit(self) -> tuple[float, float] | None:
        """(latency seconds, bandwidth bytes/s), or None until GETs of different enough sizes were seen. While the
        recent GETs are too alike in size (a reader taking chunks of the size this chose), the last fit stands."""
        if self._fitted:
            return self._last
        self._fitted = True
        n = len(self._samples)
        if n < 4:
            return self._last
        ss = [s for s, _ in self._samples]
        ts = [t for _, t in self._samples]
        ms, mt = sum(ss) / n, sum(ts) / n
        var = sum((s - ms) ** 2 for s in ss)
        if var <= (0.25 * ms) ** 2 * n:        # sizes too alike: latency and bandwidth cannot be told apart
            return self._last
        slope = sum((s - ms) * (t - mt) for s, t in zip(ss, ts)) / var
        if slope <= 0:
            return self._last
        self._last = max(0.0, mt - slope * ms), 1.0 / slope
        return self._last

    def chunk_size(self, default: int) -> int:
        """A chunk for which the first byte's latency is at most half of the GET: bandwidth x latency bytes, a power
        of two within [MIN_CHUNK, MAX_CHUNK]; `default` until the store is known. Not larger: a GET holds its chunk's
        memory for all of its time, so the budget keeps a reader fed at (budget / GET time), which falls as chunks
        grow; a GET's request costs little beside that (a fraction of a cent per GB on S3)."""
        fit = self.fit()
        if fit is None:
            return default
        latency, bandwidth = fit
        want = bandwidth * latency
        return min(MAX_CHUNK, max(MIN_CHUNK, 1 << max(0, math.ceil(math.log2(max(want, 1))))))


@dataclass(eq=False)
class ReadAhead:
    """One remote segment's sequential reading: its chunk size and how many chunks to keep requested ahead."""
    chunk_size: int
    window: int = 2
    max_window: int = 32
    used: float = 0.0          # monotonic time of its last read
    finished: bool = False     # its reader asked for its last chunk (and goes on with the next object, if any)
    past_end_for: tuple | None = None   # (chunk, window, chunk size, chunks): read-ahead past the end all requested
    ahead_for: tuple | None = None      # (chunk, window, chunk size, chunks, cache removals): the window all requested
    gets: GetEstimate | None = None     # the store's GETs, to size the window from the reader's pace
    reading: int = -1          # the chunk the reader has (RangedReads.chunk) ...
    got_at: float = 0.0        # ... and the monotonic time it got it
    whole: bool = False        # ... from its first byte: the time it then takes over the chunk is its pace
    pace: float = 0.0          # seconds the reader took over the last chunk it read whole (0: not seen yet)
    alone: bool = True         # the only object being read (RangedReads.read_ahead): its read-ahead may go in parts

    def stalled(self, i: int) -> None:
        """The reader waited for chunk `i`, already requested ahead: it reads faster than the window delivers. The
        window at least doubles and, once the store's GETs are known, grows at once to a GET's time at the reader's
        pace (paced). Only doubled when its pace over chunk i - 1 is not known (another reader of the object, a seek,
        a chunk it started within); a window of 0 (read-ahead off) stays 0."""
        if self.window == 0:
            return
        self.window = min(self.max_window, self.window * 2)
        self.next_chunk(i)

    def next_chunk(self, i: int) -> None:
        """The reader asks for chunk `i`: when it comes from i - 1, read from its first byte, the time it took over
        that chunk is its pace, and the window grows to a GET's time at that pace before the reader has to wait for it
        (paced). Not from a chunk it started within (a consumer's first Fetch at an offset in the middle of one): the
        rest of it may take a moment, which is not the reader's pace."""
        if self.reading == i - 1 and self.got_at and self.whole:
            self.pace = time.monotonic() - self.got_at
            if self.window:
                self.paced()

    def paced(self) -> None:
        """The window grows (never shrinks) to cover one GET's time at the reader's pace, and one more: a reader
        starting at a store tens of milliseconds away would otherwise wait again at each doubling."""
        fit = self.gets.fit() if self.gets is not None else None
        if fit is None or self.pace <= 0:
            return
        latency, bandwidth = fit
        want = math.ceil((latency + self.chunk_size / bandwidth) / self.pace) + 1
        self.window = min(self.max_window, max(self.window, want))

    def parts_for(self, ahead: int) -> int:
        """Ranged GETs at once for the chunk `ahead` chunks past the reader's: one GET when the reader, at its pace,
        needs it no sooner than a GET of the whole chunk takes; else SPLIT parts, or 2 when half a chunk's GET comes
        in time. A reader just started (its pace unknown) needs its next chunks soonest: in parts they come in a GET's
        latency and a part of its transfer time, not all of it. One GET for a store not known yet, or beside other
        objects being read: there parts would queue behind each other's on the store's connections (S3's
        max_concurrency) and come later than one GET."""
        fit = self.gets.fit() if self.gets is not None and self.alone and self.window else None
        if fit is None:                          # a window of 0: read-ahead is off, the next chunk one GET as ever
            return 1
        latency, bandwidth = fit
        need = ahead * self.pace
        for parts in (1, 2):
            if latency + self.chunk_size / parts / bandwidth <= need:
                return parts
        return SPLIT


@dataclass(eq=False)
class _Chunk:
    future: asyncio.Future
    size: int                  # the bytes asked for (what it holds once done)
    ahead: bool                # requested ahead of the reader, and not read since
    done: bool = False
    used: float = 0.0          # monotonic time it was requested or last read
    passed: bool = False       # a sequential reader has moved on to the next chunk
    started: bool = False      # its GET was sent (counted in ChunkCache.started until its answer is in `bytes`)
    dropped: bool = False      # forgotten while its GET was in flight
    into: bool = False         # its GET reads into a buffer of the cache's (ReadInto) ...
    buffer: mmap.mmap | None = None     # ... this one, from when it is sent until the chunk is forgotten
    parts: int = 1             # ranged GETs it is read by at once (ChunkCache._fill)

    @property
    def want(self) -> int:
        """The size of the free buffer its GET takes (ChunkCache._evict), 0 for none."""
        return self.size if self.into else 0


class ChunkCache:
    """Chunks of remote segments, keyed by anything, as futures shared by every reader that wants them. `bytes` counts
    chunks in flight at their requested size and done ones at theirs; a failed or cancelled fetch is forgotten."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.entries: OrderedDict[object, _Chunk] = OrderedDict()
        self._passed: dict[object, None] = {}   # the entries of rank 0 (_rank), in the order they last became so or
        #   were read: eviction takes them without a pass over every chunk (at 32 partitions a GET's looked at ~50)
        self.bytes = 0
        self.in_flight = 0          # bytes asked for and not yet answered
        self.unread_ahead = 0       # bytes fetched ahead and not read yet
        self.hits = self.misses = self.waits = 0
        self.removals = 0           # chunks taken out of `entries` so far (ReadAhead.ahead_for)
        self.ahead_bytes = self.wasted_bytes = 0
        self.pending: set[asyncio.Future] = set()   # GETs not answered yet, held or dropped (close() ends them)
        self.started = 0            # bytes of GETs under way (a reader's own GET waits while these fill the budget)
        self._room: deque[tuple[_Chunk, asyncio.Future]] = deque()  # readers' GETs waiting for room, in order
        self._released: list[tuple[object, int, bool]] = []   # evicted chunks that views (responses) still hold,
        #   with their bytes and whether they are the cache's buffers (FreeBuffers once nothing holds them)
        self.free = FreeBuffers()
        self._tidying: asyncio.TimerHandle | None = None

        self.peak = 0               # the most memory() has been
        self._dropped = 0           # bytes of GETs in flight whose chunk was forgotten (in in_flight, not in bytes)
        self._held = 0              # `held` when last computed

    @property
    def held(self) -> int:
        """Bytes of evicted chunks still alive because views of them (a response being sent) hold them, or because
        a GET that failed or was cancelled may still write into them. The cache's own buffers among those nothing
        holds any more become free buffers."""
        held = []
        for item, free in zip(self._released, unreferenced(self._released)):
            if not free:
                held.append(item)
            elif item[2]:
                self.free.put(item[0])
        self._released = held
        self._held = sum(n for _, n, _ in held)
        return self._held

    def _release(self, data, size: int, ours: bool) -> None:
        """An evicted chunk's bytes, or the buffer of a GET whose answer is not kept: held until nothing else refers
        to them (held), then free (the cache's buffers) or gone. While any are held, the cache looks again every
        half second, so that free buffers over the budget are let go though no read comes (_tidy)."""
        self._released.append((data, size, ours))
        self._held += size
        if self._tidying is None:
            try:
                self._tidying = asyncio.get_running_loop().call_later(TIDY, self._tidy)
            except RuntimeError:
                pass                        # no loop (a test driving the cache by hand): the next read does it

    def _tidy(self) -> None:
        self._tidying = None
        self._within(0, 0)
        if self._released:
            self._tidying = asyncio.get_running_loop().call_later(TIDY, self._tidy)

    def figures(self) -> tuple[int, int]:
        """(held, memory()) as last counted, for another thread (a metrics scrape): it must not recount, which
        changes what is held and free under the event loop."""
        held = self._held
        return held, self.memory(held)

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
            self._ranked(key, e)
            return e.future, waiting
        self._ranked(key, e)
        return e.future, False

    def room_ahead(self, size: int) -> bool:
        """Whether a read-ahead of `size` bytes fits the budget: bytes in flight plus chunks fetched ahead and not
        read yet stay within three quarters of it (done chunks already read can always be evicted; the last quarter
        is for readers' own chunks, so that they do not push unread read-ahead out)."""
        return self.in_flight + self.unread_ahead + self.held + size <= self.capacity * 3 // 4

    def prefetch(self, key, size: int, make: Callable[[], object], parts: int = 1) -> bool:
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
        self._start(key, size, make, ahead=True, parts=parts)
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
            if prev is not None and not prev.passed:
                prev.passed = True
                self._ranked(parts[i - 1][0], prev)
        fut, waiting = self.get(key, size, make)
        if waiting:
            ra.stalled(i)                 # at least twice the window, or what the reader's pace needs
        else:
            ra.next_chunk(i)
        if i + 1 < len(parts) and parts[i + 1][0] not in self.entries:
            # the next part always: a read-ahead further out must not keep the reader's next chunk from starting
            nkey, nsize, nmake = parts[i + 1]
            self._start(nkey, nsize, nmake, ahead=True, gate=True, parts=ra.parts_for(1))
            self.ahead_bytes += nsize
        end = i + 1 + ra.window
        # a reader fetches several times per chunk: while none was taken out since its window was all requested,
        # it still is (looking the window up again is most of a Fetch's own time at a wide window)
        ahead_for = (i, ra.window, ra.chunk_size, len(parts), self.removals)
        if ra.ahead_for != ahead_for:
            if not self.read_ahead(parts, i + 1, end, ra, i):
                return fut
            ra.ahead_for = ahead_for      # as before the call: one it made forget (a stale chunk) is looked at again
        if end > len(parts):
            past_end = getattr(parts, "past_end", None)
            # once all requested for this chunk and window, not again at each of the reader's fetches within the
            # chunk (finding the next objects costs more than the reads of the chunk do); at most PAST_END parts:
            # each object after is a call deeper
            done_for = (i, ra.window, ra.chunk_size, len(parts))
            if past_end is not None and ra.past_end_for != done_for:
                if past_end(ra.window, min(end - len(parts), PAST_END)):
                    ra.past_end_for = done_for
        return fut

    def read_ahead(self, parts, first: int, end: int, ra: ReadAhead | None = None, at: int = 0) -> bool:
        """Read ahead parts [first, end) of `parts` (those there are) not held yet, in order; False once the budget
        is full (the rest waits for the reader to come closer). Each in the ranged GETs `ra.parts_for` gives it, for
        a reader at part `at` (one GET without `ra`)."""
        for j in range(first, min(end, len(parts))):
            key, size, make = parts[j]
            if key not in self.entries and not self.prefetch(key, size, make, ra.parts_for(j - at) if ra else 1):
                return False
        return True

    def _start(self, key, size: int, make, ahead: bool, gate: bool | None = None, parts: int = 1) -> _Chunk:
        """Request a chunk; `gate` (a reader's own chunk, or the one it reads next) waits while the GETs under way
        take the budget, other read-ahead was admitted by room_ahead. A chunk read ahead goes in `parts` ranged GETs
        (ReadAhead.parts_for) where the store reads into buffers."""
        gate = not ahead if gate is None else gate
        e = _Chunk(None, size, ahead, used=time.monotonic(), into=type(make) is ReadInto)
        if not ahead and e.into and not self.in_flight and size >= SPLIT * MIN_PIECE:
            # a reader waits for it and the store is idle (a cold read, a seek): in parts (_fill), sent now, before
            # the read-ahead this turn starts (eager.py): behind it, or beside many readers' parts on S3's
            # connections, they would come later than one GET (several partitions starting at once)
            e.parts = SPLIT
            e.future = eager(self._get(e, make, wait=gate))
        else:
            if e.into and parts > 1 and size >= parts * MIN_PIECE:
                e.parts = parts
            e.future = asyncio.ensure_future(self._get(e, make, wait=gate))
        self.entries[key] = e
        self.pending.add(e.future)
        self.bytes += size
        self.in_flight += size
        e.future.add_done_callback(lambda f, k=key, e=e: self._done(k, e))
        return e

    async def _get(self, e: _Chunk, make, wait: bool):
        """Run the GET `make()` for chunk `e`, counted in `started` from when it is sent until its answer is counted
        as done (ChunkCache._done). A reader's own GET (`wait`) first waits, in order, while what is in memory and
        under way leaves no room for it once done chunks are evicted (read-ahead is kept within the budget by
        room_ahead instead)."""
        if wait and self.started and (self._room or not self._fits(e)):
            turn = asyncio.get_running_loop().create_future()
            self._room.append((e, turn))
            try:
                await turn                    # _wake sent it: counted in `started`
            except BaseException:
                if (e, turn) in self._room:
                    self._room.remove((e, turn))
                    self._wake()              # those behind it may fit now
                raise
        else:
            e.started = True
            self.started += e.size
            self._evict(None, want=e.want)    # done chunks make room for what this GET brings
        if not e.into:
            return await make()
        e.buffer = self.free.take(e.size)     # counted in `started` from here, no longer in free.bytes
        try:
            return await self._fill(e, make)
        except BaseException as exc:          # failed or cancelled: its frames must not keep the buffer
            clear_frames(exc)
            raise

    async def _fill(self, e: _Chunk, make: ReadInto):
        """Read chunk `e` into its buffer, in `e.parts` ranged GETs at once: a chunk a reader waits for while the store
        is idle (_start), or read ahead for a reader that will need it soon (ReadAhead.parts_for), comes in a GET's
        latency and a part of its transfer time (a 4 MiB chunk at 30 ms + 80 MB/s: ~45 ms, not 82); any other, one
        GET (fewer requests). The buffer, or the part of it filled up to the first short piece (the object's end)."""
        buf = e.buffer
        if e.parts == 1:
            return await make.fill(0, buf)
        step = -(-e.size // e.parts)
        pieces = [asyncio.ensure_future(make.fill(at, memoryview(buf)[at:at + step]))
                  for at in range(0, e.size, step)]
        try:
            await asyncio.gather(*pieces)
        except BaseException:
            for p in pieces:                  # the others' store threads may go on writing: the buffer stays held
                p.cancel()                    # (chunk_buffers.unreferenced) until they end
                p.add_done_callback(_retrieved)
            raise
        filled = 0
        for p in pieces:
            got = min(len(p.result()), step)
            filled += got
            if got < step:
                break
        return buf if filled >= e.size else memoryview(buf)[:filled]

    def _fits(self, e: _Chunk) -> bool:
        """Whether chunk `e`'s GET fits the budget beside what is in memory, once done chunks are evicted for it."""
        self._evict(None, e.size, e.want)
        return self._memory_but(e.want) + e.size <= self.capacity

    def _wake(self) -> None:
        while self._room:
            e, turn = self._room[0]
            if not self._fits(e) and self.started:   # done chunks are evicted for it even when it goes anyway
                return
            self._room.popleft()
            if not turn.done():
                e.started = True
                self.started += e.size
                self._note_peak(e.want)
                turn.set_result(None)

    def _done(self, key, e: _Chunk) -> None:
        asked = e.size
        self.in_flight -= asked
        if e.started:
            self.started -= asked             # from here its answer is counted in `bytes`, or gone
        self.pending.discard(e.future)
        try:
            f = e.future
            if f.cancelled() or f.exception() is not None:
                if self.entries.get(key) is e:
                    del self.entries[key]
                    self.removals += 1
                    self.bytes -= asked
                self._unkept(e)               # its thread may still write into it; its traceback refers to it
                return
            got = len(f.result()) if e.buffer is None else len(e.buffer)   # a short answer still takes its buffer
            if self.entries.get(key) is not e:
                self._unkept(e)
                return                        # forgotten while in flight (see the finally)
            self.bytes += got - asked
            e.size, e.done = got, True
            if e.ahead:
                self.unread_ahead += got
            self._ranked(key, e)
            self._evict(key)
        finally:
            if e.dropped:
                self._dropped -= asked
            if e.started:
                self._wake()

    def _unkept(self, e: _Chunk) -> None:
        """The buffer of a GET whose answer the cache does not keep (failed, cancelled, its chunk forgotten while
        under way or evicted once done)."""
        if e.buffer is not None:
            self._release(e.buffer, len(e.buffer), True)
            e.buffer = None

    def _evict(self, keep, room: int = 0, want: int = 0) -> None:
        """Drop free buffers, then done chunks, until memory() leaves `room` bytes of the budget: of the chunks, those
        a sequential reader has moved past first, then those read and maybe still being read (least recently used
        first), then those read ahead and not read yet (prefetch waste), the furthest ahead first: the reader needs
        the nearest soonest. A free buffer of `want` bytes is kept, and not counted: a GET starting now takes it
        (the buffer of a chunk evicted for it, most of the time)."""
        if self._within(room, want) or self._evict_passed(keep, room, want):
            self._note_peak(want)
            return
        for rank in (1, 2):               # unread read-ahead: the latest requested (furthest ahead) first
            if rank == 2 and self._within(room, want):
                break
            for key in (list(self.entries) if rank < 2 else list(reversed(self.entries))):
                # no local keeps the chunk (and through its future, its buffer) once it is forgotten
                if key != keep and self._rank(self.entries[key]) == rank:
                    self._forget(key, self.entries[key])
                    if self._within(room, want):     # only a forget changes it (recounting costs a pass)
                        break
        self._note_peak(want)

    def _evict_passed(self, keep, room: int, want: int) -> bool:
        """_evict's first pass: chunks a sequential reader has moved past, in the order of `_passed`, until memory()
        leaves `room` bytes; whether it does."""
        while self._passed:
            it = iter(self._passed)
            key = next(it)
            if key == keep:
                key = next(it, None)
                if key is None:
                    return False
            self._forget(key, self.entries[key])
            if self._within(room, want):
                return True
        return False

    def _ranked(self, key, e: _Chunk) -> None:
        """Keep `_passed` the chunks of rank 0, in the order they were last used, after `e` changed."""
        self._passed.pop(key, None)
        if e.done and e.passed and not e.ahead:
            self._passed[key] = None

    def _note_peak(self, want: int) -> None:
        """memory() as a peak, but for a free buffer of `want` bytes that a GET starting now takes (see _evict)."""
        self.peak = max(self.peak, self._memory_but(want))

    def _memory_but(self, want: int) -> int:
        """memory() as last counted, but for a free buffer of `want` bytes that a GET starting now takes."""
        return self.memory(self._held) - (want if self.free.has(want) else 0)

    def _within(self, room: int, want: int) -> bool:
        """Whether memory() leaves `room` bytes of the budget (but for a free buffer of `want` bytes, see _evict),
        after recounting what is held and letting go of free buffers over it."""
        self.held                         # recount what responses still hold; _forget adds what it evicts
        over = self._memory_but(want) + room - self.capacity
        if over > 0 and self.free.bytes:
            over = self.free.trim(over, want)
        return over <= 0

    @staticmethod
    def _rank(e: _Chunk) -> int:
        """Which pass of _evict may evict the chunk: -1 none (its GET is under way)."""
        return -1 if not e.done else 2 if e.ahead else 0 if e.passed else 1

    def memory(self, held: int | None = None) -> int:
        """Bytes the chunks take: those answered and held, evicted ones responses still hold, GETs under way (at
        their requested size: their answers arrive into memory), not GETs waiting for room, and free buffers."""
        return (self.bytes - (self.in_flight - self._dropped) + self.started + (self.held if held is None else held)
                + self.free.bytes)

    def _forget(self, key, e: _Chunk) -> None:
        del self.entries[key]
        self._passed.pop(key, None)
        self.removals += 1
        if e.done:
            if e.buffer is not None:
                self._unkept(e)   # its future's result until the future is gone (a reader about to get it holds it)
            else:
                data = e.future.result()
                if sys.getrefcount(data) > 3:   # the future's result, `data`, the argument: views hold it too
                    self._release(data, e.size, False)
            self.bytes -= e.size
            if e.ahead:
                self.unread_ahead -= e.size
                self.wasted_bytes += e.size
        else:
            self.bytes -= e.size           # its answer is dropped when it comes (_done sees another entry)
            self._dropped += e.size        # in memory until then (memory())
            e.dropped = True
            if e.ahead:
                self.wasted_bytes += e.size
                e.future.cancel()          # read ahead: no reader has it, so nobody will miss it

    async def close(self) -> None:
        """Cancel every GET still in flight and wait for them to end (the reader is going away)."""
        if self._tidying is not None:
            self._tidying.cancel()
            self._tidying = None
        pending = list(self.pending)
        for f in pending:
            f.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def drop(self, pred, unread_only: bool = False) -> None:
        """Forget the chunks whose key matches (a deleted segment, a partition no longer led), or only those read
        ahead and not read yet (a reader that will not read them: wasted)."""
        for key in [k for k, e in self.entries.items() if pred(k) and (e.ahead or not unread_only)]:
            self._forget(key, self.entries[key])


@dataclass(frozen=True)
class RangedObject:
    """An object read in chunks: `key` names it in the cache (any hashable), `size` is its length, `fetch(start, end)`
    GETs bytes [start, end) (and refuses a short answer), `after(window, count)` is called when a read-ahead reaches
    past its end, with the reader's window and how many chunks of it fall past the end (to go on with what a
    sequential reader wants next: the next segment); it returns whether all of that was requested (RangedReads.start),
    and is called again only if not or once the reader moves on."""
    key: object
    size: int
    fetch: Callable[[int, int], object]
    after: Callable[[int, int], bool] | None = None
    fetch_into: Callable[[int, int, memoryview], object] | None = None  # fetch(start, end) into a buffer, answering it


class _Chunks:
    """An object's chunks of its reader's chunk size (`ra`'s, as it is now) as the parts ChunkCache.in_order reads. A
    read-ahead past the object's end goes on in the chunk size of this one, and the objects it reads ahead into take
    the reader's pace (`reads.carry`): the reader is the same, and its window counts chunks."""

    def __init__(self, obj: RangedObject, ra: ReadAhead, reads: "RangedReads"):
        self.obj, self.ra, self.cs, self.reads = obj, ra, ra.chunk_size, reads
        if obj.after is None:
            self.past_end = None

    def past_end(self, window: int, count: int) -> bool:
        return self.reads.carrying(self.cs, self.ra.pace, self.obj.after, window, count)

    def __len__(self) -> int:
        return -(-self.obj.size // self.cs)

    def __getitem__(self, i: int):
        obj, start = self.obj, i * self.cs
        end = min(start + self.cs, obj.size)
        if obj.fetch_into is not None and end - start == self.cs:      # whole chunks: their buffers are reused
            return (obj.key, self.cs, i), end - start, ReadInto(
                lambda at, buf: obj.fetch_into(start + at, start + at + len(buf), buf))
        return (obj.key, self.cs, i), end - start, lambda: obj.fetch(start, end)


class RangedReads:
    """Sequential reads of objects through a ChunkCache, each object with its ReadAhead: what the broker's remote tier
    (remote_log_reader.py) and Spark's direct reads of the store (spark_connector/remote_reader.py) share."""

    def __init__(self, cache: ChunkCache, estimate: GetEstimate, default_chunk: int, first_window: int,
                 max_objects: int = 4096, readers: Callable[[], int] | None = None):
        self.cache, self.estimate = cache, estimate
        self.readers = readers          # how many reads are under way, when the caller knows (they share the budget)
        self.default_chunk, self.first_window, self.max_objects = default_chunk, first_window, max_objects
        self.read_aheads: OrderedDict[object, ReadAhead] = OrderedDict()
        self.carry = 0                  # the chunk size of the object whose reader reads ahead into the next (_Chunks)
        self.carry_pace = 0.0           # ... and that reader's pace (ReadAhead.pace)

    def streams(self, now: float) -> int:
        """Objects read within the last ACTIVE seconds (the most recently read are last in `read_aheads`), or the
        reads under way if more: a Fetch that starts reads of many partitions at once makes them share the budget
        from their first chunk, not after each has read one chunk at a size meant for fewer. Counted at every call:
        a count kept for 50 ms (it is a tenth of the event loop's Python at 32 partitions) let the chunks' memory
        peak at 260-272 MiB of a 256 MiB budget in 2 of 4 runs of `bench/tiered_fetch.py --only wide --rounds 3`."""
        n = 0
        for ra in reversed(self.read_aheads.values()):
            if ra.used < now - ACTIVE:
                break
            n += not ra.finished
        return max(n, self.readers()) if self.readers is not None else n

    def read_ahead(self, key, reading: bool = True) -> ReadAhead:
        """The object's reading state, made at its first read. Its chunk size comes from what the store showed so far
        (GetEstimate.chunk_size), or is that of the object before it when its reader reads ahead into it, and both
        the chunk size and the window are kept within the object's share of the read-ahead budget (three quarters
        of it, split between the objects being read): a chunk at most a third of the share, so that the reader's own
        chunk and two ahead fit it (a sixth took twice the GETs at 32 partitions, each costing the event loop more
        than the bytes did; two ahead still cover a GET there). With many objects read at once (a consumer catching
        up on many partitions) the chunks get smaller rather than evicting each other's read-ahead; a smaller chunk
        size applies from the reader's next chunk (a larger one only to objects read later).
        `reading=False`: a reader of the previous object reads ahead into this one; it is the same reader, not one
        more sharing the budget, until it comes to read here."""
        now = time.monotonic()
        ra = self.read_aheads.get(key)
        if ra is None:
            ra = self.read_aheads[key] = ReadAhead(0, self.first_window, gets=self.estimate, pace=self.carry_pace)
            if not reading:              # not read yet: with the objects not read lately (streams() stops at them)
                self.read_aheads.move_to_end(key, last=False)
            elif len(self.read_aheads) > self.max_objects:
                self.read_aheads.popitem(last=False)
        elif reading:
            self.read_aheads.move_to_end(key)
        if reading:
            ra.used = now
        streams = self.streams(now)
        ra.alone = streams <= 1
        share = self.cache.capacity * 3 // 4 // max(1, streams)
        fit = 1 << max(0, (share // SHARE_CHUNKS).bit_length() - 1)     # a power of two, a third of the share
        fit = max(fit, MIN_SHARED_CHUNK)
        if ra.chunk_size == 0:
            ra.chunk_size = min(self.carry or self.estimate.chunk_size(self.default_chunk), fit)
        elif fit <= ra.chunk_size // 2:            # more readers now: smaller (never larger: that refetches bytes)
            self.cache.drop(lambda k, old=(key, ra.chunk_size): k[:2] == old, unread_only=True)
            ra.chunk_size = fit                     # what it read ahead in the old size will not be read: freed
        ra.max_window = max(1, share // ra.chunk_size - 1)
        ra.window = min(ra.window, ra.max_window)
        return ra

    async def close(self) -> None:
        """Cancel the GETs still in flight, held or already dropped, and wait for them to end."""
        await self.cache.close()

    def drop(self, pred) -> None:
        """Forget the objects whose key matches, and their chunks."""
        self.cache.drop(lambda k: pred(k[0]))
        for key in [k for k in self.read_aheads if pred(k)]:
            del self.read_aheads[key]

    async def chunk(self, obj: RangedObject, i: int, ra: ReadAhead | None = None, wait=None, at: int = 0) -> bytes:
        """Chunk `i` of the object, after starting the read-ahead past it (ChunkCache.in_order), for a reader starting
        at its byte `at`. Shielded: a reader that is cancelled must not cancel a GET other readers share.
        `wait(future)`, when given, is how the reader waits for its chunk, shielded too (the broker's reader gives its
        pool slot back while it is not there)."""
        ra = ra or self.read_ahead(obj.key)
        chunks = _Chunks(obj, ra, self)
        ra.finished = i + 1 >= len(chunks)       # a reader at its last chunk no longer takes a share of the budget
        fut = self.cache.in_order(ra, chunks, i)
        data = await (wait(fut) if wait is not None else asyncio.shield(fut))
        if ra.reading != i:                      # the reader's pace: from here to when it asks for the next chunk
            ra.reading, ra.got_at, ra.whole = i, time.monotonic(), at == 0
        return data

    def start(self, obj: RangedObject, window: int, count: int) -> bool:
        """Read ahead the object's first `count` chunks for a sequential reader coming from the previous object,
        which it reads with its `window` (at least): the window carries over from one segment to the next, and into
        the objects after this one when it is longer than this one (small segments, a wide window). Whether all of
        them were requested (not while the budget is full; nothing past the last object is all of it)."""
        ra = self.read_ahead(obj.key, reading=False)
        ra.window = min(ra.max_window, max(ra.window, window))
        chunks = _Chunks(obj, ra, self)
        if not self.cache.read_ahead(chunks, 0, count):
            return False
        if count <= len(chunks):
            return True
        # a window longer than this object goes on past it, in this one's chunk size
        return chunks.past_end is None or bool(chunks.past_end(window, count - len(chunks)))

    def carrying(self, chunk_size: int, pace: float, after: Callable[[int, int], bool], window: int,
                 count: int) -> bool:
        """`after(window, count)`, with the objects it starts reading ahead in taking `chunk_size` and the reader's
        `pace` (`carry`): a segment read ahead into is not a reader just started, whose next chunks go in parts."""
        previous = self.carry, self.carry_pace
        self.carry, self.carry_pace = chunk_size, pace
        try:
            return after(window, count)
        finally:
            self.carry, self.carry_pace = previous

    async def range(self, obj: RangedObject, start: int, end: int, cur: list, wait=None) -> list[memoryview]:
        """Views covering [start, end) of the object; `cur` keeps ((chunk size, index), view) of the last chunk;
        `wait` as for chunk()."""
        if cur[1] is not None:              # within the chunk read last (most calls: a batch after the previous one)
            lo = start - cur[0][0] * cur[0][1]
            if lo >= 0 and end - start + lo <= len(cur[1]):
                return [cur[1][lo:lo + end - start]]
        ra = self.read_ahead(obj.key)
        out = []
        pos = start
        while pos < end:
            cs = ra.chunk_size              # again per chunk: it may shrink while the reader waits (more readers)
            i = pos // cs
            if cur[0] != (cs, i):
                data = await self.chunk(obj, i, ra, wait, pos - i * cs)    # takes ra.chunk_size before it awaits
                cur[0], cur[1] = (cs, i), memoryview(data).toreadonly()     # a buffer the cache reuses
            lo = pos - i * cs
            hi = min(end - i * cs, len(cur[1]))
            if hi <= lo:
                raise ValueError(f"{obj.key} is shorter than {end} bytes")
            out.append(cur[1][lo:hi])
            pos += hi - lo
        return out
