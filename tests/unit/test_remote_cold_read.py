"""A cold remote read (storage/tiered/remote_log_reader.py) at object-store latency: every store round trip on a
Fetch's path is tens of milliseconds. A read from a segment's first offset sends its first chunk's GET without
waiting for the offset index's (the index is still requested, for seeks and the store estimate), and a
read_committed read sends the transaction-index GETs its aborted-transaction lookup will need together with the
read, instead of after it."""
from __future__ import annotations

import asyncio

from storage.tiered.remote_storage_manager import IndexType, LOG_SUFFIX
from test_remote_log_manager import offsets
from test_store_read_checks import tiered_broker


class _GatedStore:
    """The tier's store, recording every GET's key; a GET of a key ending in a gated suffix waits for its gate."""

    def __init__(self, inner):
        self.inner, self.gets, self.gates = inner, [], {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def get(self, key: str, start: int = 0, end: int | None = None):
        self.gets.append(key)
        for suffix, gate in self.gates.items():
            if key.endswith(suffix):
                await gate.wait()
        return await self.inner.get(key, start, end)

    async def get_into(self, key, start, view):
        """As get (gated, and counted where a test counts GETs), into the reader's reused buffer."""
        data = await self.get(key, start, start + len(view))
        view[:len(data)] = data
        return view[:len(data)]

    def got(self, suffix: str) -> list[int]:
        """The base offsets of the segments whose `suffix` object was asked for, in order."""
        return [int(k.rsplit("/", 1)[1].split("-")[0]) for k in self.gets if k.endswith(suffix)]


async def _gated(tmp_path):
    """Topic t with [0-2] [3-5] [6-8] tiered and [9] local, its reader going through a _GatedStore."""
    b, part = await tiered_broker(tmp_path, "seed=1")
    store = _GatedStore(b.rlm.rsm.store)
    b.rlm.rsm.store = store
    return b, part, store


async def test_a_read_from_a_segments_first_offset_does_not_wait_for_its_offset_index(tmp_path):
    b, part, store = await _gated(tmp_path)
    try:
        gate = store.gates[IndexType.OFFSET.value] = asyncio.Event()
        task = b.rlm.remote_read("t", 0, part.log, 3, 1 << 20, True)
        assert offsets(await asyncio.wait_for(task, 10)) == [3, 4, 5]      # the index GET is still held
        assert 3 in store.got(IndexType.OFFSET.value)                        # requested all the same
        b.rlm.consumed("t", 0, 3, task)
        mid = b.rlm.remote_read("t", 0, part.log, 4, 1 << 20, True)         # mid-segment: needs the index
        await asyncio.sleep(0.2)
        assert not mid.done()
        gate.set()
        assert offsets(await asyncio.wait_for(mid, 10)) == [4, 5]
    finally:
        await b.close()


async def test_a_read_committed_read_requests_the_transaction_indexes_with_the_read(tmp_path):
    b, part, store = await _gated(tmp_path)
    try:
        gate = store.gates[LOG_SUFFIX] = asyncio.Event()                     # the segments' data is slow to come
        plain = b.rlm.remote_read("t", 0, part.log, 6, 1 << 20, True)
        await asyncio.sleep(0.2)
        assert not plain.done() and store.got(IndexType.TRANSACTION.value) == []     # read_uncommitted needs none
        gate.set()
        assert offsets(await asyncio.wait_for(plain, 10)) == [6, 7, 8]
        b.rlm.consumed("t", 0, 6, plain)

        gate.clear()
        views, task = part.read(0, 1 << 20, min_one_message=True, read_committed=True)    # as a Fetch reads
        assert views == () and task is not None
        await asyncio.sleep(0.2)
        assert not task.done()
        # the walk from [0-2] reads its index and the later segments': all asked for while the read waits
        assert sorted(store.got(IndexType.TRANSACTION.value)) == [0, 3, 6]
        gate.set()
        views = await asyncio.wait_for(task, 10)
        assert offsets(views) == [0, 1, 2]
        assert await part.remote_aborted_transactions(0, views) == []
        assert len(store.got(IndexType.TRANSACTION.value)) == 3             # the lookup found them cached

        # that lookup's walk is remembered as empty after [0-2], so after [3-5] too: with the indexes evicted, a
        # read from [3-5] asks for its own index only, as its lookup will
        b.rlm._indexes.drop(lambda key: True)
        _, task = part.read(3, 1 << 20, min_one_message=True, read_committed=True)
        await asyncio.sleep(0.2)
        assert store.got(IndexType.TRANSACTION.value)[3:] == [3]
        views = await asyncio.wait_for(task, 10)
        assert await part.remote_aborted_transactions(3, views) == []
        assert store.got(IndexType.TRANSACTION.value)[3:] == [3]
    finally:
        await b.close()
