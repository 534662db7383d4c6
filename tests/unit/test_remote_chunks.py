"""Parallel ranged reads of remote segments (issue 27, storage/tiered/remote_chunks.py): the store estimate, the chunk
budget, and the remote reader's read-ahead over a store with real latency (FaultyObjectStore's latency_ms and
bandwidth_mb_s): several GETs in flight, within the memory budget, each byte fetched once, nothing started once the
reader stops, a failed GET failing only that read."""
from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from fakes import MemoryStore
from storage.objectstore.faulty import FaultyObjectStore
from storage.tiered.remote_chunks import MAX_CHUNK, MIN_CHUNK, ChunkCache, GetEstimate, RangedReads
from storage.tiered.remote_log_metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadata,
                                                RemoteStorageException, TopicIdPartition)
from storage.tiered.remote_log_reader import RemoteLogReader, segment_key
from storage.tiered.remote_storage_manager import RemoteStorageManager, segment_key_prefix

MiB = 1 << 20


# -- the store estimate -----------------------------------------------------------------------------------------------

def test_the_estimate_tells_latency_from_bandwidth():
    est = GetEstimate()
    assert est.fit() is None and est.chunk_size(4 * MiB) == 4 * MiB          # nothing seen: the configured size
    for size in (100_000, 4 * MiB, 2 * MiB, 150_000, 4 * MiB, 3 * MiB):
        est.observe(size, 0.030 + size / 80e6)                                # 30 ms to the first byte, 80 MB/s
    latency, bandwidth = est.fit()
    assert latency == pytest.approx(0.030, rel=0.01) and bandwidth == pytest.approx(80e6, rel=0.01)
    assert est.chunk_size(4 * MiB) == 4 * MiB           # 80 MB/s x 30 ms = 2.4 MB, rounded up to a power of two


def test_the_estimate_keeps_the_default_until_sizes_differ_and_stays_within_bounds():
    est = GetEstimate()
    for _ in range(10):
        est.observe(4 * MiB, 0.08)                       # one size only: latency and bandwidth cannot be told apart
    assert est.fit() is None and est.chunk_size(4 * MiB) == 4 * MiB
    fast, slow = GetEstimate(), GetEstimate()
    for size in (10_000, 4 * MiB, 200_000, 2 * MiB):
        fast.observe(size, 0.0002 + size / 2e9)          # a local disk: the smallest chunk
        slow.observe(size, 0.5 + size / 50e6)            # half a second to the first byte: the largest
    assert fast.chunk_size(4 * MiB) == MIN_CHUNK and slow.chunk_size(4 * MiB) == MAX_CHUNK


# -- the chunk budget ---------------------------------------------------------------------------------------------------

async def test_read_ahead_stays_within_the_budget_and_unread_evictions_count_as_waste():
    cache = ChunkCache(capacity=400)             # read-ahead may take 300 (three quarters)
    gate = asyncio.Event()

    async def fetch(n):
        await gate.wait()
        return b"x" * n

    async def read(key, n):
        fut, _ = cache.get(key, n, lambda: fetch(n))
        await fut
        await asyncio.sleep(0)

    assert cache.prefetch("a", 100, lambda: fetch(100)) and cache.prefetch("b", 100, lambda: fetch(100))
    assert cache.prefetch("c", 100, lambda: fetch(100))
    assert not cache.prefetch("d", 100, lambda: fetch(100))        # 300 bytes in flight: no room ahead
    fut, waiting = cache.get("d", 100, lambda: fetch(100))          # a reader's own chunk is never refused
    assert not waiting and cache.misses == 1 and cache.in_flight == 400
    fut_a, waiting = cache.get("a", 100, lambda: fetch(100))
    assert waiting and cache.waits == 1                              # read ahead, still on its way
    gate.set()
    await asyncio.gather(fut, fut_a, *(e.future for e in cache.entries.values()))
    await asyncio.sleep(0)
    assert cache.bytes == 400 and cache.in_flight == 0 and cache.unread_ahead == 200     # b and c
    assert not cache.prefetch("e", 150, lambda: fetch(150))         # 200 unread + 150 > 300
    assert cache.get("d", 100, lambda: fetch(100))[0].done() and cache.hits == 1
    await read("f", 150)                     # 550 bytes: chunks already read go first (a, then d), none unread
    assert not cache.contains("a") and not cache.contains("d") and cache.contains("b") and cache.contains("c")
    assert cache.bytes == 350 and cache.wasted_bytes == 0
    await read("g", 300)                     # 650: f (read) goes, then c (unread, the furthest ahead): waste
    assert not cache.contains("f") and not cache.contains("c") and cache.contains("b")
    assert cache.wasted_bytes == 100 and cache.unread_ahead == 100 and cache.bytes == 400


async def test_read_ahead_left_unread_by_a_reader_that_went_away_makes_room_once_stale(monkeypatch):
    import storage.tiered.remote_chunks as rc
    cache = ChunkCache(capacity=268)             # read-ahead may take 201

    async def fetch(n):
        return b"x" * n
    assert cache.prefetch("a", 100, lambda: fetch(100)) and cache.prefetch("b", 100, lambda: fetch(100))
    await asyncio.gather(*(e.future for e in cache.entries.values()))
    await asyncio.sleep(0)
    assert not cache.prefetch("c", 100, lambda: fetch(100))        # 200 unread: no room while they are fresh
    monkeypatch.setattr(rc, "STALE_AHEAD", 0.0)
    assert cache.prefetch("c", 100, lambda: fetch(100))            # stale: the oldest goes, counted as waste
    assert not cache.contains("a") and cache.contains("b") and cache.wasted_bytes == 100
    await cache.close()
    assert not cache.pending


async def test_a_failed_fetch_is_forgotten_and_the_next_reader_starts_it_again():
    cache = ChunkCache(capacity=1000)

    async def boom():
        raise RemoteStorageException("503")
    fut, _ = cache.get("k", 10, boom)
    with pytest.raises(RemoteStorageException):
        await fut
    await asyncio.sleep(0)
    assert not cache.contains("k") and cache.bytes == 0 and cache.in_flight == 0

    async def fine():
        return b"y" * 10
    fut, _ = cache.get("k", 10, fine)
    assert await fut == b"y" * 10 and cache.misses == 2


# -- the reader over a store with real latency ------------------------------------------------------------------------

class _CountingStore(FaultyObjectStore):
    """Latency and a bandwidth cap per request; records the GETs of segment chunks in flight at once."""

    def __init__(self, cache_of, **faults):
        super().__init__(MemoryStore(), 1, **faults)
        self.cache_of, self.now, self.most, self.ranges, self.over_budget = cache_of, 0, 0, [], []
        self.now_bytes = self.most_bytes = 0

    async def get(self, key, start=0, end=None):
        if not key.endswith(".log"):
            return await super().get(key, start, end)
        cache = self.cache_of()
        if cache.started + cache.unread_ahead > cache.capacity + (end - start):
            self.over_budget.append((cache.started, cache.unread_ahead))
        self.now += 1
        self.now_bytes += end - start
        self.most = max(self.most, self.now)
        self.most_bytes = max(self.most_bytes, self.now_bytes)
        self.ranges.append((start, end))
        try:
            return await super().get(key, start, end)
        finally:
            self.now -= 1
            self.now_bytes -= end - start


class _Reader(RemoteLogReader):
    """The remote reader's chunk path on one segment: a real RSM over the counting store."""

    def __init__(self, store, budget: int, chunk_size: int = 4 * MiB, window: int = 2):
        self.rsm = RemoteStorageManager(store)
        self._chunks = ChunkCache(budget)
        self.reads = 0                   # reads under way, as the broker's read tasks count them
        self._ranged = RangedReads(self._chunks, self.rsm.gets, chunk_size, window, readers=lambda: self.reads)

    def _following(self, tip, md, lg=None):
        return iter(())


async def _segment(store, size: int) -> tuple[RemoteLogSegmentMetadata, bytes]:
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), 0, 999, 0, 1, 0, size, ((0, 0),))
    data = os.urandom(size)
    await store.inner.put(segment_key_prefix(md) + ".log", data)
    return md, data


async def _read_all(reader, md, step: int = 1 << 20) -> bytes:
    cur = [-1, None]
    out = []
    reader.reads += 1
    try:
        for pos in range(0, md.segment_size_in_bytes, step):
            # copied out, as a response that was sent: views still held would count against the budget
            out.append(b"".join(await reader._range(md, pos, min(pos + step, md.segment_size_in_bytes), cur)))
    finally:
        reader.reads -= 1
    cache = reader._chunks            # eviction's list of the chunks readers moved past is exactly those
    assert list(cache._passed) == [k for k in cache._passed if ChunkCache._rank(cache.entries[k]) == 0] and \
        set(cache._passed) == {k for k, e in cache.entries.items() if ChunkCache._rank(e) == 0}
    return b"".join(out)


async def test_a_sequential_reader_keeps_several_gets_in_flight_within_the_budget():
    store = _CountingStore(lambda: reader._chunks, get_latency_ms=30, get_bandwidth_mb_s=80)
    reader = _Reader(store, budget=48 * MiB)
    md, data = await _segment(store, 40 * MiB)
    assert await _read_all(reader, md) == data
    assert store.most > 3, "the read-ahead window never grew past its first two chunks"
    assert not store.over_budget, store.over_budget[:5]
    ranges = sorted(store.ranges)
    assert sum(e - s for s, e in ranges) == len(data), "a byte was fetched twice (or not at all)"
    assert reader._ranged.read_aheads[segment_key(md)].window > 2
    assert reader._chunks.wasted_bytes == 0


async def test_a_small_budget_holds_the_read_ahead_back():
    store = _CountingStore(lambda: reader._chunks, get_latency_ms=30, get_bandwidth_mb_s=80)
    reader = _Reader(store, budget=8 * MiB)                 # 6 MiB for read-ahead: 2 MiB chunks, not the 4 configured
    md, data = await _segment(store, 24 * MiB)
    assert await _read_all(reader, md) == data
    assert {e - s for s, e in store.ranges} == {2 * MiB}
    assert store.most_bytes <= 6 * MiB and not store.over_budget     # two ahead at most, plus the reader's own


async def test_readers_of_many_objects_share_the_budget_with_smaller_chunks():
    """32 segments read at once (a consumer catching up on 32 partitions): each object's chunks and window fit its
    share of the read-ahead budget, so their read-ahead does not evict each other's (no waste, each byte once)."""
    store = _CountingStore(lambda: reader._chunks, get_latency_ms=30, get_bandwidth_mb_s=80)
    reader = _Reader(store, budget=48 * MiB)
    segments = [await _segment(store, 3 * MiB) for _ in range(32)]
    reader.reads = 32                # a Fetch started the 32 reads before the first of them asks for a chunk
    got = await asyncio.gather(*(_read_all(reader, md, step=256 << 10) for md, _ in segments))
    assert got == [data for _, data in segments]
    assert not store.over_budget and store.most_bytes <= 48 * MiB
    assert sum(e - s for s, e in store.ranges) == 32 * 3 * MiB, "a byte was fetched twice (or not at all)"
    assert reader._chunks.wasted_bytes == 0 and reader._chunks.peak <= 48 * MiB
    assert max(e - s for s, e in store.ranges) <= 1 * MiB        # 36 MiB / 32 readers or more / 3, rounded down


async def test_the_chunk_size_follows_the_store_once_it_is_known():
    store = _CountingStore(lambda: reader._chunks)
    reader = _Reader(store, budget=64 * MiB)
    first, data = await _segment(store, 10 * MiB)
    assert await _read_all(reader, first) == data
    assert {e - s for s, e in store.ranges} == {4 * MiB, 2 * MiB}    # the configured size: the store is not known
    reader.rsm.gets._samples.clear()                               # this store answers at once: say it does not
    for size in (100_000, 4 * MiB, 2 * MiB, 150_000):                # what GETs showed: 30 ms + 200 MB/s
        reader.rsm.gets.observe(size, 0.030 + size / 200e6)
    store.ranges.clear()
    second, data = await _segment(store, 20 * MiB)
    assert await _read_all(reader, second) == data
    assert {e - s for s, e in store.ranges} == {8 * MiB, 4 * MiB}    # 200 MB/s x 30 ms = 6 MB, rounded up


def test_a_reader_that_outpaces_its_window_widens_it_at_once_to_cover_a_get_at_its_pace(monkeypatch):
    """A reader that waits for a chunk it had asked for ahead reads faster than its window delivers. Doubling the
    window at each such wait cost a consumer starting on a store 30 ms away three or four waits of 70-90 ms; once
    the store is known, one wait widens the window to a GET's time over the time the reader took per chunk."""
    import storage.tiered.remote_chunks as rc
    now = [100.0]
    monkeypatch.setattr(rc.time, "monotonic", lambda: now[0])
    est = GetEstimate()
    ra = rc.ReadAhead(4 * MiB, window=2, max_window=40, gets=est)
    ra.reading, ra.got_at, ra.whole = 3, 100.0 - 0.005, True     # it went through chunk 3 in 5 ms
    ra.stalled(4)
    assert ra.window == 4                             # the store is not known yet: doubled
    for size in (100_000, 4 * MiB, 2 * MiB, 150_000):
        est.observe(size, 0.030 + size / 80e6)
    ra.stalled(4)                                     # a GET of 4 MiB takes 82 ms: 17 chunks at 5 ms, and one more
    assert ra.window == 18
    ra.got_at = 100.0 - 0.0001                        # a reader faster still: no further than its share allows
    ra.stalled(4)
    assert ra.window == 40
    slow = rc.ReadAhead(4 * MiB, window=8, max_window=40, gets=est)
    slow.reading, slow.got_at, slow.whole = 0, 100.0 - 1.0, True     # slower than the store: at least doubled
    slow.stalled(1)
    assert slow.window == 16
    other = rc.ReadAhead(4 * MiB, window=2, max_window=40, gets=est)
    other.reading, other.got_at = 7, 100.0 - 0.001    # another reader of the object got chunk 7 a moment ago
    other.stalled(3)                                  # this one waits at chunk 3: its own pace is not known
    assert other.window == 4
    off = rc.ReadAhead(4 * MiB, window=0, max_window=40, gets=est)     # remote.log.reader.prefetch.chunks=0
    off.reading, off.got_at, off.whole = 0, 100.0 - 0.001, True
    off.stalled(1)
    assert off.window == 0                            # read-ahead stays off


async def test_a_reader_faster_than_the_store_widens_its_window_at_its_first_wait(monkeypatch):
    """The first chunks of a segment at 30 ms + 80 MB/s, read by a reader faster than the store: at the first wait
    for its read-ahead the window goes to the most its share of the budget holds, rather than doubling at each of
    several waits of a GET's time."""
    import storage.tiered.remote_chunks as rc
    windows: list[int] = []
    stalled = rc.ReadAhead.stalled

    def record(ra, i):
        stalled(ra, i)
        windows.append(ra.window)
    monkeypatch.setattr(rc.ReadAhead, "stalled", record)
    store = _CountingStore(lambda: reader._chunks, get_latency_ms=30, get_bandwidth_mb_s=80)
    reader = _Reader(store, budget=64 * MiB, chunk_size=2 * MiB)
    for size in (100_000, 4 * MiB, 2 * MiB, 150_000):          # the store as earlier GETs showed it
        reader.rsm.gets.observe(size, 0.030 + size / 80e6)
    md, data = await _segment(store, 48 * MiB)
    assert await _read_all(reader, md) == data
    ra = reader._ranged.read_aheads[segment_key(md)]
    assert ra.chunk_size == 4 * MiB and ra.max_window == 11      # 48 MiB ahead: 12 chunks, the reader's and 11
    assert windows and windows[0] == 11, windows
    assert store.most >= 8 and not store.over_budget


async def test_read_ahead_stops_when_the_reader_stops():
    store = _CountingStore(lambda: reader._chunks, get_latency_ms=20, get_bandwidth_mb_s=200)
    reader = _Reader(store, budget=256 * MiB, chunk_size=2 * MiB)
    md, _ = await _segment(store, 64 * MiB)
    cur = [-1, None]
    for pos in range(0, 8 * MiB, MiB):                     # a reader that reads 8 MiB and goes away
        await reader._range(md, pos, pos + MiB, cur)
    for _ in range(300):                                    # what it read ahead lands
        if store.now == 0:
            break
        await asyncio.sleep(0.01)
    started = len(store.ranges)
    assert store.now == 0 and started < 32
    await asyncio.sleep(0.3)
    assert len(store.ranges) == started                     # and nothing more is asked for


async def test_a_failed_get_fails_that_read_and_the_next_read_fetches_it_again():
    store = _CountingStore(lambda: reader._chunks, get_latency_ms=5)
    reader = _Reader(store, budget=64 * MiB, window=0)
    md, data = await _segment(store, 6 * MiB)
    store.faults.get_error_rate = 1
    with pytest.raises(RemoteStorageException):
        await reader._range(md, 0, MiB, [-1, None])
    assert not reader._chunks.entries
    store.faults.get_error_rate = 0
    assert await _read_all(reader, md) == data


async def test_the_reader_metrics_show_gets_misses_and_memory(tmp_path):
    from prometheus_client import generate_latest
    from test_remote_log_manager import offsets
    from test_store_read_checks import _fetch, tiered_broker
    b, part = await tiered_broker(tmp_path, "get_latency_ms=5,seed=3")
    try:
        views, error = await _fetch(b, part, 3)
        assert error == 0 and offsets(views) == [3, 4, 5]
        await asyncio.gather(*b.rlm._chunks.pending)     # the next segment's first chunk, read ahead
        # offset 3 starts its segment: the read sent its chunk's GET without waiting for the indexes' GETs
        await asyncio.gather(*b.rlm._indexes.entries.values(), return_exceptions=True)
        await asyncio.sleep(0)
        text = generate_latest(b.rlm.registry).decode()
        metric = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                  if line.startswith("strata_remote_log_reader_")}
        assert metric["strata_remote_log_reader_chunk_misses_total"] >= 1
        assert metric["strata_remote_log_reader_get_time_seconds_count"] >= 3      # the chunk and two indexes
        assert metric["strata_remote_log_reader_buffer_limit_bytes"] == 256 << 20
        assert metric["strata_remote_log_reader_in_flight_bytes"] == 0
        assert 0 < metric["strata_remote_log_reader_buffer_bytes"] < 1 << 20
        assert metric["strata_remote_log_reader_free_buffer_bytes"] == 0       # nothing evicted yet
        assert metric["strata_remote_log_reader_buffers_reused_total"] == 0
    finally:
        await b.close()


class _GatedStore:
    """A store whose segment GETs past the first chunk wait for `gate`."""

    def __init__(self, inner):
        self.inner, self.gate = inner, asyncio.Event()

    async def get(self, key, start=0, end=None):
        if key.endswith(".log") and start > 0:
            await self.gate.wait()
        return await self.inner.get(key, start, end)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def get_into(self, key, start, view):
        """As get (gated, and counted where a test counts GETs), into the reader's reused buffer."""
        data = await self.get(key, start, start + len(view))
        view[:len(data)] = data
        return view[:len(data)]


async def test_a_fetch_that_stops_waiting_gets_the_whole_batches_read_so_far(tmp_path):
    """Issue 27: a remote read still running when remote.fetch.max.wait.ms ends answers the whole batches it has
    (here those of the first 4 KiB chunk, the next chunk's GET being held), and the client's next fetch, from the
    offset after them, gets the rest once the store answers."""
    from test_remote_log_manager import VALUE, Broker, offsets
    b = Broker(tmp_path, **{"remote.log.reader.chunk.size.bytes": "4096", "remote.log.reader.prefetch.chunks": "0"})
    try:
        part = b.create("t", remote_storage_enable="true", segment_bytes=20 * (VALUE + 80), local_retention_bytes=1)
        b.produce(part, 25)                              # [0-19] tiered, [20-24] local
        await b.rlm.run_once("t", 0)
        assert part.log.local_log_start_offset == 20
        store = b.rlm.rsm.store = _GatedStore(b.rlm.rsm.store)
        b.rlm.rsm._root = None                           # GETs, not the local store's mapping
        task = b.rlm.remote_read("t", 0, part.log, 0, 1 << 20, True)
        for _ in range(200):
            if task.progress:
                break
            await asyncio.sleep(0.01)
        views, error = part.remote_read_result(0, task)  # the Fetch stops waiting here
        got = offsets([b"".join(views)])                # a batch may span two chunks' views
        assert error == 0 and not task.done() and 1 <= len(got) < 20 and got == list(range(len(got)))
        store.gate.set()
        nxt = b.rlm.remote_read("t", 0, part.log, len(got), 1 << 20, True)
        assert nxt is not task                           # a read of its own, from where the answer ended
        await asyncio.wait({nxt})
        views, error = part.remote_read_result(len(got), nxt)
        assert error == 0 and offsets([b"".join(views)]) == list(range(len(got), 20))
        await asyncio.wait({task})                       # the first read ends too, unclaimed
    finally:
        await b.close()


async def test_chunks_a_sequential_reader_moved_past_are_evicted_first():
    """Under pressure, a chunk whose reader has gone on to the next one goes before an older chunk that may still be
    read (another reader's, partly consumed)."""
    from storage.tiered.remote_chunks import ReadAhead
    cache = ChunkCache(capacity=300)

    async def fetch():
        return bytes(100)                              # a fresh object (a folded constant is never freed)
    other, _ = cache.get("other", 100, fetch)          # the oldest, read by a reader that has not moved on
    await other
    parts = [(("seg", i), 100, fetch) for i in range(3)]
    ra = ReadAhead(100, 0)
    for i in range(3):
        await cache.in_order(ra, parts, i)             # 400 bytes at the third: one must go
        await asyncio.sleep(0)
    assert cache.contains("other") and not cache.contains(("seg", 0)) and cache.bytes == 300


def _window_reader(capacity: int, window: int):
    """A ChunkCache of `capacity`, eight 100-byte parts whose GETs answer at once and are logged in `gets`, and
    `read(i, window=None)`: the reader's fetch in part i (with that window from then on), its GETs let finish."""
    from storage.tiered.remote_chunks import ReadAhead
    cache, gets, ra = ChunkCache(capacity=capacity), [], ReadAhead(100, window)

    async def fetch(i):
        gets.append(i)
        return bytes(100)
    parts = [(("seg", i), 100, lambda i=i: fetch(i)) for i in range(8)]

    async def read(i: int, window: int | None = None):
        if window is not None:
            ra.window = window
        await cache.in_order(ra, parts, i)
        await asyncio.sleep(0)
    return cache, read, gets


async def test_a_reader_within_its_chunk_requests_again_what_left_its_window():
    """A reader fetches several times within one chunk; its window, once all requested, is not looked up again until
    something leaves the cache: a chunk of the window forgotten meanwhile (here dropped, as a deleted segment's are)
    is requested again at the reader's next fetch, not only once it moves on to the next chunk."""
    cache, read, gets = _window_reader(1000, window=3)
    await read(0)
    assert sorted(gets) == [0, 1, 2, 3]                 # its chunk and the window of 3 after it
    await read(0)                                       # the same chunk again: nothing to request
    assert len(gets) == 4
    cache.drop(lambda k: k == ("seg", 2))
    await read(0)
    assert sorted(gets) == [0, 1, 2, 2, 3] and cache.contains(("seg", 2))


async def test_a_chunk_of_the_window_forgotten_by_its_own_read_ahead_is_requested_again(monkeypatch):
    """A read-ahead that makes room by forgetting a stale chunk of the same window (read ahead, never read) still
    answers 'all requested'; the window is looked at again at the reader's next fetch, which requests that chunk."""
    import time
    import storage.tiered.remote_chunks as rc
    cache, read, gets = _window_reader(400, window=2)     # read-ahead may take 300
    await read(0)
    await read(0, window=3)                      # the reader's own chunk is in: room for one more ahead
    assert sorted(gets) == [0, 1, 2, 3]
    monkeypatch.setattr(rc, "STALE_AHEAD", 0.0)
    cache.entries[("seg", 1)].used = time.monotonic() + 60      # the next chunk is not stale; 2 and 3 are
    await read(0, window=4)                      # 4 needs room: 2, stale, goes
    assert gets[4:] == [4] and not cache.contains(("seg", 2))
    await read(0)                                # the reader's next fetch in the same chunk
    assert 2 in gets[5:] and cache.contains(("seg", 2))
