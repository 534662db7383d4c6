"""Issue 27: the remote reader's reused chunk buffers (ChunkCache.buffer) and the stores' get_into.

A buffer is reused only when nothing but the cache's list refers to it: a view a response still holds, a chunk
still cached, or a GET still writing into it (a cancelled one's thread) each keep it from the next GET."""
from __future__ import annotations

import asyncio
import gc
import os
import random

from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.object_store import reads_into
from storage.tiered.remote_chunks import ChunkCache, GetEstimate, RangedObject, RangedReads

KiB = 1 << 10


class _Store:
    """An object in memory read by GETs that take a while; `writing` keeps the views GETs still write into."""

    def __init__(self, data: bytes, seed: int = 0):
        self.data, self.rng = data, random.Random(seed)
        self.writing: list[memoryview] = []
        self.fresh = self.into = 0

    async def fetch(self, start: int, end: int) -> bytes:
        self.fresh += 1
        await asyncio.sleep(self.rng.random() / 1000)
        return self.data[start:end]

    async def fetch_into(self, start: int, end: int, buf: bytearray) -> bytearray:
        self.into += 1
        view = memoryview(buf)
        self.writing.append(view)
        try:
            await asyncio.sleep(self.rng.random() / 1000)
            view[:end - start] = self.data[start:end]
        finally:
            self.writing = [v for v in self.writing if v is not view]
        return buf


def _reads(store: _Store, capacity: int, chunk: int) -> tuple[RangedReads, RangedObject]:
    obj = RangedObject("seg", len(store.data), store.fetch, fetch_into=store.fetch_into)
    return RangedReads(ChunkCache(capacity), GetEstimate(), chunk, 2), obj


async def test_views_a_response_holds_keep_their_bytes_while_buffers_are_reused():
    """Randomized: readers read ranges of an object through a cache far smaller than it, keeping some views for a
    while (a response being sent); every view kept shows the object's bytes until it is let go, buffers are
    reused (GETs into a buffer outnumber the buffers made), and the buffers never take more than the budget."""
    for seed in range(6):
        rng = random.Random(seed)
        store = _Store(os.urandom(96 * 16 * KiB), seed)
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
            assert reads.cache.pool_bytes <= reads.cache.capacity
        for s, e, vs in kept:
            assert b"".join(vs) == store.data[s:e], f"seed {seed}: a held view changed"
        made = reads.cache.pool_bytes // (16 * KiB)
        assert store.into > 3 * made, (seed, store.into, made)      # reused, not one buffer per GET
        await reads.close()


async def test_a_buffer_a_cancelled_get_still_writes_into_is_not_reused():
    """A read-ahead cancelled (its segment deleted) while its GET still writes (a thread goes on after its task is
    cancelled) keeps its buffer until the write ends; only then is the buffer another GET's."""
    release = asyncio.Event()
    writers: list[memoryview] = []

    async def fetch_into(start, end, buf):
        view = memoryview(buf)
        writers.append(view)             # as a worker thread holds the view it reads into, whatever its task
        await asyncio.shield(release.wait())
        return buf

    obj = RangedObject("seg", 64 * KiB, None, fetch_into=fetch_into)
    cache = ChunkCache(2 * 16 * KiB)
    reads = RangedReads(cache, GetEstimate(), 16 * KiB, 2)
    parts = reads.read_ahead("seg")
    assert cache.prefetch(("seg", 16 * KiB, 0), 16 * KiB, lambda: fetch_into(0, 16 * KiB, cache.buffer(16 * KiB)))
    await asyncio.sleep(0)
    assert len(writers) == 1 and parts is not None
    cache.drop(lambda k: True)                        # cancelled while "the thread" still writes
    await asyncio.sleep(0)
    gc.collect()
    second = cache.buffer(16 * KiB)
    assert second is not None and second is not writers[0].obj
    del second
    third_before = cache.pool_bytes
    writers.pop().release()                           # the write ends
    gc.collect()
    again = cache.buffer(16 * KiB)
    assert again is not None and cache.pool_bytes == third_before    # one of the two buffers, none made
    release.set()
    await reads.close()


async def test_buffers_of_a_size_no_longer_read_make_room_for_another():
    """When readers' chunk size changes (more of them share the budget), free buffers of the old size are let go
    for the new one rather than the new reads going without; a buffer in use is never let go."""
    cache = ChunkCache(4 * 16 * KiB)
    old = [cache.buffer(16 * KiB) for _ in range(4)]
    assert all(b is not None for b in old) and cache.buffer(16 * KiB) is None     # the budget is full
    in_use = old[0]
    del old
    small = [cache.buffer(8 * KiB) for _ in range(6)]    # three free 16 KiB buffers let go: room for six
    assert all(b is not None for b in small) and cache.buffer(8 * KiB) is None
    assert cache.pool_bytes == 16 * KiB + 6 * 8 * KiB
    assert any(b is in_use for b in cache._pool[16 * KiB])


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
