"""Issue 27: the remote reader's reused chunk buffers (ChunkCache.free, chunk_buffers.py) and the stores' get_into.

A buffer is reused only once nothing else refers to it: a view a response still holds, a reader about to get the
chunk, or a GET still writing into it (a cancelled one's thread) each keep it from the next GET. Every buffer alive
counts in the budget, free ones too."""
from __future__ import annotations

import asyncio
import gc
import os
import random
import threading
import types
import weakref

import pytest

from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.object_store import reads_into
from storage.tiered import chunk_buffers, remote_chunks
from storage.tiered.remote_chunks import ChunkCache, GetEstimate, RangedObject, RangedReads

KiB = 1 << 10


@pytest.fixture
def made(monkeypatch) -> list[weakref.ref]:
    """Every buffer the cache makes (weakly: a strong reference would keep it from being free), to count those
    still alive (_alive)."""
    made: list[weakref.ref] = []

    new_buffer = chunk_buffers.new_buffer

    def buffer(size: int):
        buf = new_buffer(size)
        made.append(weakref.ref(buf))
        return buf
    monkeypatch.setattr(chunk_buffers, "new_buffer", buffer)     # FreeBuffers.take's
    return made


def _alive(made: list[weakref.ref]) -> int:
    """Bytes of the cache's buffers still alive."""
    return sum(len(b) for r in made if (b := r()) is not None)


class _Store:
    """An object in memory read by GETs that take a while; at each GET's start, every buffer alive is counted in
    the cache's memory()."""

    def __init__(self, data: bytes, made: list[weakref.ref], seed: int = 0):
        self.data, self.made, self.rng = data, made, random.Random(seed)
        self.fresh = self.into = 0
        self.cache: ChunkCache | None = None

    def _counted(self) -> None:
        if self.cache is not None:
            assert _alive(self.made) <= self.cache.memory(), "a buffer alive outside the budget's count"

    async def fetch(self, start: int, end: int) -> bytes:
        self._counted()
        self.fresh += 1
        await asyncio.sleep(self.rng.random() / 1000)
        return self.data[start:end]

    async def fetch_into(self, start: int, end: int, buf: bytearray) -> bytearray:
        self._counted()
        self.into += 1
        view = memoryview(buf)
        await asyncio.sleep(self.rng.random() / 1000)
        view[:end - start] = self.data[start:end]
        return buf


def _reads(store: _Store, capacity: int, chunk: int, readers=None) -> tuple[RangedReads, RangedObject]:
    obj = RangedObject("seg", len(store.data), store.fetch, fetch_into=store.fetch_into)
    reads = RangedReads(ChunkCache(capacity), GetEstimate(), chunk, 2, readers=readers)
    store.cache = reads.cache
    return reads, obj


async def test_views_a_response_holds_keep_their_bytes_while_buffers_are_reused(made):
    """Randomized: reads of ranges of an object through a cache far smaller than it, some views kept for a while
    (a response being sent); every view kept shows the object's bytes until it is let go, buffers are reused (GETs
    into a buffer outnumber the buffers made), and every buffer alive is counted in memory() at each GET's start.
    With nothing kept at the end, the cache is within its budget."""
    for seed in range(6):
        rng = random.Random(seed)
        made.clear()
        store = _Store(os.urandom(96 * 16 * KiB + 5000), made, seed)    # a short last chunk: fresh memory
        reads, obj = _reads(store, 8 * 16 * KiB, 16 * KiB)
        kept: list[tuple[int, int, list[memoryview]]] = []
        for _ in range(150):
            start = rng.randrange(len(store.data) - 1)
            end = min(len(store.data), start + rng.randrange(1, 40 * KiB))
            views = await reads.range(obj, start, end, [-1, None])
            assert b"".join(views) == store.data[start:end]
            if rng.random() < 0.3:
                kept.append((start, end, views))
            while kept and rng.random() < 0.4:
                s, e, vs = kept.pop(rng.randrange(len(kept)))
                assert b"".join(vs) == store.data[s:e], f"seed {seed}: a held view changed"
        for s, e, vs in kept:
            assert b"".join(vs) == store.data[s:e], f"seed {seed}: a held view changed"
        assert reads.cache.free.reused > store.into // 3, (seed, store.into, reads.cache.free.reused)  # reused
        del kept, views, vs
        await asyncio.sleep(0.01)
        assert reads.cache.memory() <= reads.cache.capacity and _alive(made) <= reads.cache.memory()
        await reads.close()


async def test_a_sequential_reader_reuses_the_buffers_of_the_chunks_it_passed(made):
    """One reader reading an object 10 times the budget in order, letting go of each view as a response would
    once sent: after the first budget's worth, every whole chunk's GET takes a free buffer."""
    store = _Store(os.urandom(80 * 16 * KiB), made)
    reads, obj = _reads(store, 8 * 16 * KiB, 16 * KiB)
    cur = [-1, None]
    for start in range(0, len(store.data), 5000):
        end = min(start + 5000, len(store.data))
        assert b"".join(await reads.range(obj, start, end, cur)) == store.data[start:end]
    assert store.into == 80 and len(made) <= 8 and reads.cache.free.reused >= 80 - 8
    assert reads.cache.peak <= reads.cache.capacity
    await reads.close()


async def test_a_buffer_a_cancelled_get_still_writes_into_is_not_reused_until_the_write_ends(made):
    """GETs cancelled (their segment deleted) while they still write (a store thread goes on after its task is
    cancelled) keep their buffers, counted in the budget, until the writes end; then they are free at once, without
    the cyclic GC (a cancelled GET's traceback held its buffer through a cycle)."""
    release = asyncio.Event()
    writers: list[memoryview] = []

    async def fetch_into(start, end, buf):
        writers.append(memoryview(buf))       # as a worker thread holds the view it reads into, whatever its task
        await release.wait()
        return buf

    gc.disable()
    try:
        obj = RangedObject("seg", 64 * KiB, None, fetch_into=fetch_into)
        reads = RangedReads(ChunkCache(4 * 16 * KiB), GetEstimate(), 16 * KiB, 0)
        cache = reads.cache
        task = asyncio.ensure_future(reads.range(obj, 0, 100, [-1, None]))
        await asyncio.sleep(0.01)
        written = [id(w.obj) for w in writers]     # not the buffers: a reference would keep them from being free
        assert len(written) == 2                  # the reader's chunk and the next one
        reads.drop(lambda k: True)                # the segment is deleted: its read-ahead GET is cancelled
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        del task
        await asyncio.sleep(0.01)
        cache.held
        assert not {id(b) for bufs in cache.free.by_size.values() for b in bufs} & set(written)
        assert cache.memory() >= _alive(made) >= 16 * KiB        # still written into: counted, not free
        for w in writers:
            w.release()                           # the writes end; the reader's own GET (not cancelled: shared)
        writers.clear()
        release.set()                             # ends too, its answer dropped
        await asyncio.sleep(0.01)
        cache.held
        assert {id(b) for bufs in cache.free.by_size.values() for b in bufs} == set(written)
        assert cache.memory() == 2 * 16 * KiB
        await reads.close()
    finally:
        gc.enable()


async def test_a_failed_gets_buffer_is_reused_once_the_failure_is_gone(made):
    """A GET that fails after writing part of its buffer (a cut body): the next GET takes the same buffer, without
    the cyclic GC (the failure's frames no longer hold it)."""
    attempts = []

    async def fetch_into(start, end, buf):
        view = memoryview(buf)
        attempts.append(id(buf))
        view[:10] = b"x" * 10
        if len(attempts) == 1:
            raise ConnectionResetError("cut")
        view[:end - start] = bytes(end - start)
        return buf

    gc.disable()
    try:
        obj = RangedObject("seg", 16 * KiB, None, fetch_into=fetch_into)
        reads = RangedReads(ChunkCache(16 * KiB), GetEstimate(), 16 * KiB, 0)
        try:
            await reads.range(obj, 0, 100, [-1, None])
            raise AssertionError("the first GET fails")
        except ConnectionResetError:
            pass
        views = await reads.range(obj, 0, 100, [-1, None])     # the budget holds one buffer: the same one, reused
        assert bytes(views[0]) == bytes(100) and attempts[0] == attempts[1] and len(made) == 1
        await reads.close()
    finally:
        gc.enable()


async def test_free_buffers_over_the_budget_are_let_go_while_no_read_comes(made):
    """Chunks evicted while responses held them (legitimately over the budget then) become free buffers once the
    responses are sent; with no read after that, the cache still lets go of what is over the budget."""
    store = _Store(os.urandom(16 * 16 * KiB), made)
    reads, obj = _reads(store, 4 * 16 * KiB, 16 * KiB)
    cache = reads.cache
    responses = [await reads.range(obj, start, start + 100, [-1, None]) for start in range(0, 16 * 16 * KiB, 16 * KiB)]
    await asyncio.sleep(0.01)
    assert cache.held > cache.capacity                   # responses hold more than the budget
    del responses                                        # sent
    await asyncio.sleep(3 * remote_chunks.TIDY)
    assert cache.memory() <= cache.capacity and _alive(made) <= cache.capacity and not cache._released
    await reads.close()


async def test_a_metrics_scrape_from_another_thread_changes_nothing(made):
    """The metrics collector runs in the metrics server's thread: what it reads must not recount (which moves
    buffers between held and free under the event loop: the same buffer was once listed twice)."""
    store = _Store(os.urandom(16 * 16 * KiB), made)
    reads, obj = _reads(store, 4 * 16 * KiB, 16 * KiB)
    cache = reads.cache
    responses = [await reads.range(obj, start, start + 100, [-1, None]) for start in range(0, 8 * 16 * KiB, 16 * KiB)]
    await asyncio.sleep(0.05)                 # the GETs read ahead are done: nothing runs on the loop from here
    del responses                             # sent: the evicted chunks they held are free to the next recount
    released, free = [id(d) for d, *_ in cache._released], cache.free.bytes
    assert released
    from storage.tiered.remote_log_manager import _ChunkCacheCollector
    metrics = {}
    scrape = threading.Thread(target=lambda: metrics.update(
        {m.name: m.samples[0].value for m in _ChunkCacheCollector(cache).collect()}))
    scrape.start()
    scrape.join()                             # the loop waits: only the scrape runs
    assert [id(d) for d, *_ in cache._released] == released and cache.free.bytes == free
    assert metrics["strata_remote_log_reader_held_bytes"] == cache._held
    await reads.close()


async def test_free_buffers_count_in_the_budget(made):
    """Buffers left free by one object's reads are let go when chunks in fresh memory (short ones) need the room:
    free buffers and chunks stay within the budget (free ones once sat outside it, up to twice the budget)."""
    data = os.urandom(8 * 16 * KiB)
    store = _Store(data, made)
    reads, big = _reads(store, 8 * 16 * KiB, 16 * KiB)
    await reads.range(big, 0, len(data), [-1, None])
    reads.drop(lambda k: True)
    reads.cache.held
    assert reads.cache.free.bytes >= 4 * 16 * KiB
    for n in range(40):                       # objects shorter than a chunk: every GET is fresh memory
        small = RangedObject(("small", n), 15 * KiB, store.fetch, fetch_into=store.fetch_into)
        await reads.range(small, 0, 15 * KiB, [-1, None])
        assert _alive(made) + sum(e.size for e in reads.cache.entries.values()) <= reads.cache.capacity, n
    assert reads.cache.free.bytes < 4 * 16 * KiB
    await reads.close()


async def test_buffers_of_a_size_no_longer_read_make_room_for_another(made):
    """When more readers share the budget and chunks get smaller, free buffers of the old size are let go for the
    new one, within the budget."""
    MiB = 1 << 20
    readers = [1]
    store = _Store(os.urandom(12 * MiB), made)
    obj = RangedObject("seg", len(store.data), store.fetch, fetch_into=store.fetch_into)
    other = RangedObject("other", len(store.data), store.fetch, fetch_into=store.fetch_into)
    reads = RangedReads(ChunkCache(8 * MiB), GetEstimate(), MiB, 2, readers=lambda: readers[0])
    store.cache = reads.cache
    await reads.range(obj, 0, 4 * MiB, [-1, None])
    readers[0] = 8                            # 6 MiB / 8 / 6: 256 KiB chunks for objects read from here
    for start in range(0, 6 * MiB, 100 * KiB):
        views = await reads.range(other, start, start + 100 * KiB, [-1, None])
        assert b"".join(views) == store.data[start:start + 100 * KiB]
    del views
    assert reads.cache.free.reused > 0 and not reads.cache.free.has(MiB)
    assert _alive(made) <= reads.cache.memory() <= reads.cache.capacity
    await reads.close()


async def test_local_and_faulty_stores_read_into_a_buffer(tmp_path):
    """get_into reads a range into the caller's buffer and answers the part filled: all of it, or less at the
    object's end; through the fault injector, a short answer is a shorter view."""
    local = LocalObjectStore(tmp_path)
    body = os.urandom(300 * KiB)
    await local.put("seg", body)
    assert reads_into(local)
    buf = bytearray(128 * KiB)
    got = await local.get_into("seg", 100, memoryview(buf))
    assert len(got) == 128 * KiB and buf == body[100:100 + 128 * KiB]
    got = await local.get_into("seg", 250 * KiB, memoryview(buf))
    assert bytes(got) == body[250 * KiB:]
    faulty = FaultyObjectStore.from_spec(local, "short_rate=1,seed=3")
    assert reads_into(faulty)
    got = await faulty.get_into("seg", 0, memoryview(buf))
    assert len(got) < 128 * KiB and bytes(got) == body[:len(got)]
    assert not reads_into(FaultyObjectStore.from_spec(object(), "seed=1"))
    await local.close()


def _rss() -> int:
    """The process's anonymous memory (RssAnon): what the benchmarks and an operator see as the broker's own."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))


async def test_a_new_chunk_buffer_takes_no_memory_before_its_get_writes_it():
    """A chunk's new buffer is not zeroed on the event loop before its GET (bytearray(n) did: 2.2 ms per 4 MiB here,
    which every read of a chunk not yet cached waited for): its pages come as the store writes them, and count as the
    process's own (anonymous) memory, not shared memory."""
    size = 16 << 20                           # a whole chunk: a sixth of three quarters of the budget below

    async def fetch_into(start, end, buf):
        seen.append(_rss() - before)          # the buffer exists; nothing has written it yet
        memoryview(buf)[:] = b"\x07" * len(buf)
        seen.append(_rss() - before)
        return buf

    seen = []
    obj = RangedObject("seg", size, None, fetch_into=fetch_into)
    reads = RangedReads(ChunkCache(8 * size), GetEstimate(), size, 0)
    before = _rss()
    views = await reads.range(obj, size - 10, size, [-1, None])
    assert bytes(views[0]) == b"\x07" * 10
    assert seen[0] < 4 << 20 and seen[-1] >= size - (4 << 20), seen
    del views
    await reads.close()


MiB = 1 << 20


class _PieceStore:
    """An object read by ranged GETs into the caller's buffer that take `delay` seconds: records each GET's range and
    how many were under way at once."""

    def __init__(self, data: bytes, size: int | None = None, delay: float = 0.01):
        self.data, self.size, self.delay = data, size or len(data), delay
        self.ranges: list[tuple[int, int]] = []
        self.now = self.most = 0

    async def fetch_into(self, start: int, end: int, buf):
        self.ranges.append((start, end))
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.now -= 1
        got = self.data[start:end]
        memoryview(buf)[:len(got)] = got
        return buf if len(got) == len(buf) else memoryview(buf)[:len(got)]

    def reads(self, chunk: int = 4 * MiB) -> tuple[RangedReads, RangedObject]:
        obj = RangedObject("seg", self.size, None, fetch_into=self.fetch_into)
        return RangedReads(ChunkCache(64 * MiB), GetEstimate(), chunk, 0), obj


async def test_a_chunk_a_reader_waits_for_comes_by_ranged_gets_at_once():
    """A reader's own chunk (nothing cached yet, the store idle) is read as SPLIT ranged GETs of its parts at once,
    into one buffer, so it comes in a GET's latency and a part of its transfer time; they go to the store before its
    next chunk, read ahead as one GET."""
    data = os.urandom(8 * MiB)
    store = _PieceStore(data)
    reads, obj = store.reads()
    views = await reads.range(obj, MiB - 50, MiB + 50, [-1, None])      # across two of the parts
    assert b"".join(views) == data[MiB - 50:MiB + 50]
    await asyncio.gather(*reads.cache.pending)
    assert remote_chunks.SPLIT > 1
    step = 4 * MiB // remote_chunks.SPLIT
    assert store.ranges == [(i, i + step) for i in range(0, 4 * MiB, step)] + [(4 * MiB, 8 * MiB)]  # parts first
    assert store.most == remote_chunks.SPLIT + 1        # the parts and the read-ahead, all under way together
    views = await reads.range(obj, 4 * MiB - 10, 4 * MiB + 10, [-1, None])
    assert b"".join(views) == data[4 * MiB - 10:4 * MiB + 10] and len(store.ranges) == remote_chunks.SPLIT + 1
    del views
    await reads.close()


async def test_a_part_that_fails_fails_the_chunk_and_its_buffer_waits_for_the_parts_still_writing(made):
    """One of a chunk's ranged GETs fails: the read fails, and the buffer is not reused while the other parts' store
    threads may still write into it (they hold views of it); once they end it is free, without the cyclic GC."""
    writers: list[memoryview] = []

    async def fetch_into(start, end, buf):
        if start == MiB:
            raise ConnectionResetError("cut")
        writers.append(memoryview(buf))      # as a worker thread holds the view it reads into, whatever its task
        await asyncio.sleep(1)
        return buf

    gc.disable()
    try:
        obj = RangedObject("seg", 4 * MiB, None, fetch_into=fetch_into)
        reads = RangedReads(ChunkCache(64 * MiB), GetEstimate(), 4 * MiB, 0)
        with pytest.raises(ConnectionResetError):
            await reads.range(obj, 0, 100, [-1, None])
        cache = reads.cache
        assert len(writers) == remote_chunks.SPLIT - 1 and len(made) == 1
        cache.held
        assert not cache.free.bytes and cache.memory() >= 4 * MiB       # still written into: counted, not free
        writers.clear()
        cache.held
        assert cache.free.bytes == 4 * MiB and _alive(made) == 4 * MiB   # free at once, and still counted
        await reads.close()
    finally:
        gc.enable()


async def test_a_part_that_comes_short_ends_the_chunk_where_the_object_ends():
    """An object shorter than its size says (a part's GET answers less, the parts after it nothing): what was read
    is served, a read past it is refused as the object being short."""
    data = os.urandom(2 * MiB + MiB // 2)
    store = _PieceStore(data, size=8 * MiB)
    reads, obj = store.reads()
    views = await reads.range(obj, 2 * MiB, 2 * MiB + 100, [-1, None])
    assert b"".join(views) == data[2 * MiB:2 * MiB + 100]
    with pytest.raises(ValueError, match="shorter"):
        await reads.range(obj, 3 * MiB, 3 * MiB + 100, [-1, None])
    await reads.close()


async def test_chunks_readers_wait_for_while_the_store_is_busy_are_one_get_each():
    """Many readers starting at once (a Fetch of many remote partitions): only a chunk asked for while nothing is in
    flight is split; the others are one GET each, so that the waited-for chunks do not queue behind one another's
    parts on the store's connections."""
    data = os.urandom(8 * MiB)
    store = _PieceStore(data)
    reads = RangedReads(ChunkCache(256 * MiB), GetEstimate(), 4 * MiB, 0)
    objs = [RangedObject(f"seg{n}", len(data), None, fetch_into=store.fetch_into) for n in range(4)]
    got = await asyncio.gather(*(reads.range(o, 10, 20, [-1, None]) for o in objs))
    assert all(b"".join(v) == data[10:20] for v in got)
    await asyncio.gather(*reads.cache.pending)
    sizes = sorted(end - start for start, end in store.ranges)
    assert sizes.count(MiB) == remote_chunks.SPLIT and sizes.count(4 * MiB) == 2 * len(objs) - 1
    del got
    await reads.close()


async def test_a_reader_on_a_known_store_gets_what_it_needs_soon_in_parts_and_what_it_needs_later_in_one_get(
        monkeypatch):
    """At 30 ms + 80 MB/s a GET of a 4 MiB chunk takes 82 ms. A reader that just started (its pace not known yet)
    needs its next chunks at once: they come as SPLIT parts, in a GET's latency and a quarter of its transfer (43 ms).
    Once it went through a chunk in 5 ms, its window grows to a GET's time at that pace before it has to wait, and
    each chunk goes in as few GETs as still come by the time the reader gets there: SPLIT parts up to 11 chunks
    ahead, 2 up to 16, one GET beyond. Beside another object being read, read-ahead is one GET per chunk."""
    now = _clock(monkeypatch)
    est = _known_store()
    data = os.urandom(20 * 4 * MiB)
    store = _PieceStore(data, delay=0)
    obj = RangedObject("seg", len(data), None, fetch_into=store.fetch_into)
    reads = RangedReads(ChunkCache(256 * MiB), est, 4 * MiB, 2)
    cur = [-1, None]
    assert b"".join(await reads.range(obj, 0, MiB, cur)) == data[:MiB]
    await asyncio.gather(*reads.cache.pending)
    assert sorted(store.ranges) == [(s, s + MiB) for s in range(0, 12 * MiB, MiB)]   # chunk 0 and its window of 2
    store.ranges.clear()
    now[0] += 0.005
    assert b"".join(await reads.range(obj, 4 * MiB, 5 * MiB, cur)) == data[4 * MiB:5 * MiB]
    await asyncio.gather(*reads.cache.pending)
    ra = reads.read_aheads["seg"]
    assert ra.window == 18                            # 82 ms over 5 ms per chunk, and one more
    step = {n: 4 * MiB // n for n in (1, 2, remote_chunks.SPLIT)}
    ranges = sorted(store.ranges)
    assert [e - s for s, e in ranges] == \
        [step[remote_chunks.SPLIT]] * 10 * remote_chunks.SPLIT + [step[2]] * 5 * 2 + [step[1]] * 2   # chunks 3-19
    assert ranges[0][0] == 3 * 4 * MiB and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])) and \
        ranges[-1][1] == len(data)                    # each byte once

    store.ranges.clear()
    other = RangedObject("other", len(data), None, fetch_into=store.fetch_into)
    assert b"".join(await reads.range(other, 0, MiB, [-1, None])) == data[:MiB]
    await asyncio.gather(*reads.cache.pending)
    assert sorted(e - s for s, e in store.ranges) == [MiB] * remote_chunks.SPLIT + [4 * MiB] * 2   # its own in parts
    await reads.close()


def _clock(monkeypatch, tick: float = 0.0) -> list[float]:
    """remote_chunks' monotonic clock, set by hand (the event loop keeps its own), `tick` seconds on at each reading."""
    now = [100.0]

    def monotonic() -> float:
        now[0] += tick
        return now[0]
    monkeypatch.setattr(remote_chunks, "time", types.SimpleNamespace(monotonic=monotonic))
    return now


def _known_store() -> GetEstimate:
    """An estimate that has seen GETs of a store at 30 ms + 80 MB/s (a 4 MiB chunk: 82 ms)."""
    est = GetEstimate()
    for size in (100_000, 4 * MiB, 2 * MiB, 150_000):
        est.observe(size, 0.030 + size / 80e6)
    return est


async def test_a_reader_starting_within_a_chunk_takes_no_pace_from_the_rest_of_it(monkeypatch):
    """A consumer's first Fetch at an offset near the end of a chunk reads the rest of it and goes on into the next
    one at once: that moment is not the time the reader takes over a chunk. Taken as its pace, it widened the window
    to the whole share and read every chunk of it in parts (40 chunks in 160 GETs here); the window stays as it was
    until the reader has gone through a chunk from its first byte."""
    now = _clock(monkeypatch, tick=1e-6)
    data = os.urandom(48 * 4 * MiB)
    store = _PieceStore(data, delay=0)
    obj = RangedObject("seg", len(data), None, fetch_into=store.fetch_into)
    reads = RangedReads(ChunkCache(256 * MiB), _known_store(), 4 * MiB, 2)
    cur = [-1, None]
    start = 4 * MiB - 100_000
    assert b"".join(await reads.range(obj, start, start + MiB, cur)) == data[start:start + MiB]
    await asyncio.gather(*reads.cache.pending)
    assert reads.read_aheads["seg"].window == 2
    assert max(e for _, e in store.ranges) <= 4 * 4 * MiB     # its two chunks and the first window's
    store.ranges.clear()
    await reads.range(obj, start + MiB, 2 * 4 * MiB, cur)     # the rest of chunk 1, which it read from its start
    now[0] += 0.005                                          # in 5 ms
    await reads.range(obj, 2 * 4 * MiB, 2 * 4 * MiB + 100, cur)
    assert reads.read_aheads["seg"].window == 18             # 82 ms over 5 ms per chunk, and one more
    await asyncio.gather(*reads.cache.pending)
    await reads.close()


class _SlowFrom(_PieceStore):
    """GETs of ranges from `slow_from` on take `slow` seconds, the others none."""

    def __init__(self, data: bytes, slow_from: int, slow: float):
        super().__init__(data, delay=0)
        self.slow_from, self.slow = slow_from, slow

    async def fetch_into(self, start: int, end: int, buf):
        if start >= self.slow_from:
            await asyncio.sleep(self.slow)
        return await super().fetch_into(start, end, buf)


async def test_a_reader_that_waits_gets_the_window_its_pace_needs_or_twice_the_old_one(monkeypatch):
    """A reader that went through its first chunk in 5 ms and must wait for its second, read ahead: the window goes
    to what its pace needs (a GET of 82 ms at 5 ms per chunk: 17, and one more) or twice what it was, whichever is
    wider; not twice the first of those (36), the budget held for chunks it reads no sooner."""
    now = _clock(monkeypatch)
    data = os.urandom(48 * 4 * MiB)
    store = _SlowFrom(data, slow_from=4 * MiB, slow=0.2)
    obj = RangedObject("seg", len(data), None, fetch_into=store.fetch_into)
    reads = RangedReads(ChunkCache(256 * MiB), _known_store(), 4 * MiB, 2)
    cur = [-1, None]
    pos = 0
    while pos < 4 * MiB:                         # chunk 0 from its first byte, in parts, at once
        await reads.range(obj, pos, pos + MiB, cur)
        pos += MiB
    now[0] += 0.005
    await reads.range(obj, pos, pos + MiB, cur)   # chunk 1: on its way for 0.2 s, the reader waits for it
    assert reads.cache.waits == 1
    assert reads.read_aheads["seg"].window == 18
    await asyncio.gather(*reads.cache.pending)
    await reads.close()
