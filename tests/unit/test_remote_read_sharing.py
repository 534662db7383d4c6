"""How remote reads share the broker (issue 27, storage/tiered/remote_chunks.py and remote_log_reader.py): a read
waiting for the store gives its reader slot back, a reader's own GET waits while GETs under way fill the memory
budget, chunks evicted while responses still hold them count against the budget, a read-ahead window longer than a
segment goes on into the following ones, a read's whole batches go out as one view per chunk, and a read_committed
fetch asks for the transaction indexes of later segments at once."""
from __future__ import annotations

import asyncio
import gc
import os

from storage.tiered.remote_chunks import ChunkCache, GetEstimate, RangedObject, RangedReads
from test_remote_chunks import _GatedStore
from test_remote_log_manager import VALUE, Broker, offsets

MiB = 1 << 20


def _hold_gets(b, suffix: str) -> tuple[_GatedStore, list[str]]:
    """The broker's remote store with every GET of a key ending in `suffix` held until `store.gate` is set (GETs,
    not the local store's mapping), and the list of the keys asked for."""
    store = b.rlm.rsm.store = _GatedStore(b.rlm.rsm.store)
    b.rlm.rsm._root = None
    asked: list[str] = []
    inner_get = store.get

    async def get(key, start=0, end=None):
        if key.endswith(suffix):
            asked.append(key)
            await store.gate.wait()
        return await inner_get(key, start, end)
    store.get = get
    return store, asked


async def test_a_reader_gives_its_slot_back_while_it_waits_for_the_store(tmp_path):
    """With remote.log.reader.threads=1, a read of one partition waiting on a slow GET does not keep the read of
    another partition from starting its own GET (Kafka's reader threads would block; here only working holds a
    slot), and both complete once the store answers."""
    b = Broker(tmp_path, **{"remote.log.reader.threads": "1", "remote.log.reader.chunk.size.bytes": "4096"})
    try:
        parts = [b.create(t, remote_storage_enable="true", segment_bytes=20 * (VALUE + 80), local_retention_bytes=1)
                 for t in ("a", "c")]
        for p, t in zip(parts, ("a", "c")):
            b.produce(p, 25)
            await b.rlm.run_once(t, 0)
        store, asked = _hold_gets(b, ".log")          # every chunk GET is held, the first one too
        tasks = [b.rlm.remote_read(t, 0, p.log, 0, 1 << 20, True) for t, p in zip(("a", "c"), parts)]
        for _ in range(200):
            if {k[:1] for k in asked} >= {"a", "c"}:
                break
            await asyncio.sleep(0.01)
        assert {k[:1] for k in asked} >= {"a", "c"}, asked           # both reads reached the store
        assert b.rlm._active_reads == 0 and b.rlm._waiting_reads == 2
        store.gate.set()
        done, _ = await asyncio.wait(tasks, timeout=10)
        assert len(done) == 2
        for t, p, task in zip(("a", "c"), parts, tasks):
            views, error = p.remote_read_result(0, task)
            assert error == 0 and offsets([b"".join(views)]) == list(range(20))
        assert b.rlm._active_reads == 0 and b.rlm._waiting_reads == 0 and b.rlm._reads_under_way == 0
    finally:
        await b.close()


async def test_a_readers_own_get_waits_while_gets_under_way_fill_the_budget():
    cache = ChunkCache(capacity=100)
    gates = {k: asyncio.Event() for k in "abc"}
    started = []

    def fetch(k, n):
        async def go():
            started.append(k)
            await gates[k].wait()
            return b"x" * n
        return go
    fa, _ = cache.get("a", 60, fetch("a", 60))
    fb, _ = cache.get("b", 60, fetch("b", 60))        # 120 > 100: waits for room
    fc, _ = cache.get("c", 30, fetch("c", 30))        # behind b, in order, though it would fit
    await asyncio.sleep(0.01)
    assert started == ["a"] and cache.started == 60
    gates["a"].set()
    await fa
    await asyncio.sleep(0.01)
    assert started == ["a", "b", "c"] and cache.started == 90
    fb.cancel()                                        # a reader that goes away ends its GET and its reservation
    await asyncio.sleep(0.01)
    assert cache.started == 30
    gates["c"].set()
    assert await fc == b"x" * 30
    assert cache.started == 0 and not cache._room and cache.peak <= 100


async def test_a_get_cancelled_while_waiting_for_room_leaves_no_reservation():
    cache = ChunkCache(capacity=100)
    gate = asyncio.Event()

    async def quick():
        return bytes(80)
    fa, _ = cache.get("a", 80, lambda: _held_back(gate, 80))
    fb, _ = cache.get("b", 80, quick)
    await asyncio.sleep(0.01)
    fb.cancel()
    await asyncio.sleep(0.01)
    assert not cache._room and cache.started == 80
    gate.set()
    await fa
    fc, _ = cache.get("c", 80, quick)                 # room again: it starts at once
    assert await fc == bytes(80) and cache.started == 0


async def test_evicted_chunks_still_held_by_responses_count_against_the_budget():
    cache = ChunkCache(capacity=400)

    def fetch(n):
        async def go():
            return bytes(n)
        return go
    view = None
    for k in range(5):                               # the fifth pushes the first two out
        fut, _ = cache.get(k, 100, fetch(100))
        data = await fut
        if k == 0:
            view = memoryview(data)[10:20]           # a response still being sent
        del data
        await asyncio.sleep(0)
    fut = None
    gc.collect()
    assert not cache.contains(0) and cache.held == 100
    assert not cache.room_ahead(250)                 # 100 held + 250 > 300
    fut, _ = cache.get(5, 100, fetch(100))
    await fut
    await asyncio.sleep(0)
    assert cache.bytes + cache.held <= 400           # eviction made room for what responses hold
    del view
    assert cache.held == 0 and cache.room_ahead(250)


class _Chain:
    """Objects 0..count-1 of 2 MiB read one after another (each one's `after` starts the next through `reads`), and
    every GET made: (object, start, size)."""

    def __init__(self, reads: RangedReads, count: int):
        self.reads, self.count = reads, count
        self.got: list[tuple[int, int, int]] = []
        self.objs: dict[int, RangedObject] = {}

    def __getitem__(self, n: int) -> RangedObject:
        if n not in self.objs:
            async def fetch(start, end, n=n):
                self.got.append((n, start, end - start))
                return b"x" * (end - start)

            def after(window, count, n=n):
                return n + 1 >= self.count or self.reads.start(self[n + 1], window, count)
            self.objs[n] = RangedObject(("seg", n), 2 * MiB, fetch, after)
        return self.objs[n]


async def test_a_window_longer_than_an_object_reads_ahead_into_the_ones_after_it():
    """Segments of two chunks read with a window of six: the read-ahead reaches three segments ahead, not one."""
    reads = RangedReads(ChunkCache(64 * MiB), GetEstimate(), MiB, 6)
    chain = _Chain(reads, 10)
    await reads.chunk(chain[0], 0)
    await asyncio.sleep(0.01)
    assert {n for n, _, _ in chain.got} == {0, 1, 2, 3}        # chunk 0's window (1..6) spans segments 0-3
    assert len(chain.got) == 7
    await reads.close()


async def test_a_read_ahead_into_the_next_object_keeps_the_readers_chunk_size():
    """The reader's window counts chunks of the object it reads; the next object, read ahead by the same reader, is
    chunked the same even if the store's estimate has changed since (it did between segments, 8 and 16 MiB in
    turns, and a window of 8 MiB chunks applied to 16 MiB ones ran into the budget)."""
    est = GetEstimate()
    reads = RangedReads(ChunkCache(256 * MiB), est, MiB, 6)
    chain = _Chain(reads, 3)
    reads.read_ahead(chain[0].key)                    # the reader starts in 1 MiB chunks: the store is not known
    for size in (100_000, 4 * MiB, 2 * MiB, 150_000):
        est.observe(size, 0.030 + size / 200e6)       # now it is: new readers would take 8 MiB
    await reads.chunk(chain[0], 0)
    await asyncio.sleep(0.01)
    assert {n for n, _, _ in chain.got} == {0, 1, 2} and {size for _, _, size in chain.got} == {MiB}
    await reads.close()


async def test_a_read_ahead_two_objects_ahead_takes_the_chunk_size_of_the_one_before_it():
    """A window longer than the next object goes on into the one after it, chunked as the next object is (whose
    chunk size may differ from the reader's: it was read before, by another reader)."""
    reads = RangedReads(ChunkCache(256 * MiB), GetEstimate(), MiB, 6)
    chain = _Chain(reads, 3)
    reads.read_ahead(chain[1].key).chunk_size = 512 << 10    # object 1 was read in 512 KiB chunks
    await reads.chunk(chain[0], 0)                    # chunk 0's window: chunk 1, then 5 past the end
    await asyncio.sleep(0.01)
    assert {size for n, _, size in chain.got if n == 0} == {MiB}
    assert {size for n, _, size in chain.got if n == 1} == {512 << 10}
    assert {size for n, _, size in chain.got if n == 2} == {512 << 10}      # 5 - 4 chunks past object 1's end
    await reads.close()


async def test_a_reader_staying_in_a_chunk_looks_for_what_follows_the_object_once():
    """A consumer takes a part of a chunk per fetch; finding the objects after this one (the next segment, from the
    metadata) cost more than the read itself when it was done at every fetch. Once everything past the end was
    requested it is not looked for again until the reader moves on to another chunk; if it was not all requested
    (the budget was full), it is tried again at the next fetch."""
    calls: list[int] = []
    answers = [False, True]                           # the first time, not all of it could be requested

    async def fetch(start, end):
        return b"x" * (end - start)

    def after(window, count):
        calls.append(count)
        return answers.pop(0) if answers else True
    reads = RangedReads(ChunkCache(64 * MiB), GetEstimate(), MiB, 6)
    obj = RangedObject(("seg", 0), 3 * MiB, fetch, after)
    for _ in range(4):                                # four fetches within chunk 0: tried, tried again, then done
        await reads.chunk(obj, 0)
    assert len(calls) == 2
    await reads.chunk(obj, 1)                         # the reader moves on: its window reaches further past the end
    await reads.chunk(obj, 1)
    assert len(calls) == 3 and calls[-1] > calls[0]
    await reads.close()


async def test_a_reads_whole_batches_go_out_as_one_view_per_chunk(tmp_path):
    b = Broker(tmp_path, **{"remote.log.reader.chunk.size.bytes": str(8 * (VALUE + 80))})
    try:
        part = b.create("t", remote_storage_enable="true", segment_bytes=20 * (VALUE + 80), local_retention_bytes=1)
        b.produce(part, 25)
        await b.rlm.run_once("t", 0)
        b.rlm.rsm._root = None                        # GETs of chunks, not the local store's mapping
        task = b.rlm.remote_read("t", 0, part.log, 0, 1 << 20, True)
        await asyncio.wait({task}, timeout=10)
        views, error = part.remote_read_result(0, task)
        assert error == 0 and offsets([b"".join(views)]) == list(range(20))
        assert len(views) <= 3 + 2 * 2, len(views)    # 20 batches, 3 chunks: a run each, two batches split in two
    finally:
        await b.close()


async def test_a_read_committed_fetch_asks_for_later_transaction_indexes_at_once(tmp_path):
    """Finding the aborted transactions of a remote read walks the later segments' transaction indexes (an entry is
    in its marker's segment): their GETs go out together, not one store round trip after another."""
    b = Broker(tmp_path)
    try:
        part = await _tiered(b, 16)                   # five segments of three and an active one
        store, asked = _hold_gets(b, ".txnindex")
        task = asyncio.ensure_future(b.rlm.collect_aborted_transactions("t", 0, part.log, 0, 3))
        await asyncio.sleep(0.05)
        assert len(asked) == 5                        # every tiered segment's, while the first is still held
        store.gate.set()
        assert await asyncio.wait_for(task, 10) == []
    finally:
        await b.close()


async def test_a_fetch_that_goes_away_does_not_cancel_an_index_get_another_fetch_waits_for(tmp_path):
    """Index GETs are shared by every read that wants them: a read_committed Fetch cancelled while it waits (its
    connection closed) leaves the GET running for the other Fetch waiting on the same index, which gets its answer
    rather than a CancelledError."""
    b = Broker(tmp_path)
    try:
        part = await _tiered(b, 7)                    # two segments of three and an active one
        store, asked = _hold_gets(b, ".txnindex")
        first = asyncio.ensure_future(b.rlm.collect_aborted_transactions("t", 0, part.log, 0, 3))
        second = asyncio.ensure_future(b.rlm.collect_aborted_transactions("t", 0, part.log, 0, 3))
        await asyncio.sleep(0.05)
        assert len(asked) == 2                        # one GET per segment, shared by both lookups
        first.cancel()
        await asyncio.sleep(0.01)
        store.gate.set()
        assert await asyncio.wait_for(second, 10) == []
        assert first.cancelled() and len(asked) == 2  # nothing asked again
    finally:
        await b.close()


async def test_segment_metadata_says_whether_the_segment_has_aborted_transactions(tmp_path):
    """KIP-1058's TxnIndexEmpty, as Kafka writes it at copy time: false for a segment with a transaction index."""
    from storage.log.transaction_index import AbortedTxn
    b = Broker(tmp_path)
    try:
        part = b.create("t", remote_storage_enable="true", segment_bytes=3 * (VALUE + 80), local_retention_bytes=1)
        b.produce(part, 7)                            # [0-2] [3-5] active [6]
        first = part.log.segments()[0]
        first.log_path.with_suffix(".txnindex").write_bytes(AbortedTxn(7, 0, 1, 0).pack())
        await b.rlm.run_once("t", 0)
        tip = b.rlm.tip_of("t", 0)
        flags = [(md.start_offset, md.txn_index_empty) for md in b.rlm.rlmm.list_remote_log_segments(tip)]
        assert sorted(flags) == [(0, False), (3, True)]
    finally:
        await b.close()


async def test_a_batch_too_large_for_the_budget_is_not_skipped_for_the_next_segments(tmp_path):
    """A Fetch's later partition (min_one false) whose first batch exceeds its budget gets no records, as Kafka
    answers; reading on from the next segment would hand the consumer later offsets and lose the ones skipped."""
    from protocol.record_batch import build_batch, split_and_validate
    b = Broker(tmp_path)
    try:
        part = b.create("t", remote_storage_enable="true", segment_bytes=3000, local_retention_bytes=1)
        for i in range(9):
            value = b"v" * (2000 if i == 1 else VALUE)     # offset 1 is large: [0, 1] [2-6] [7, 8] (active)
            buf = bytearray(build_batch([(b"k", value)], timestamp_ms=10**13 + i))
            assert part.append_records_to_leader(buf, split_and_validate(buf, 10**6), 1).base_offset == i
        await b.rlm.run_once("t", 0)
        tip = b.rlm.tip_of("t", 0)
        assert offsets(await b.rlm.read(tip, part.log, 1, 1000, False)) == []
        assert offsets(await b.rlm.read(tip, part.log, 1, 1000, True)) == [1]          # the first partition
        assert offsets(await b.rlm.read(tip, part.log, 2, 1300, False)) == [2, 3]
    finally:
        await b.close()


async def test_chunks_evicted_while_held_keep_a_new_get_waiting():
    cache = ChunkCache(capacity=400)
    views = []
    for k in "abc":                                  # read, then held by responses being sent
        fut, _ = cache.get(k, 100, lambda: _fresh(100))
        views.append(memoryview(await fut)[:10])
    fut = None
    gate = asyncio.Event()
    fd, _ = cache.get("d", 100, lambda: _held_back(gate, 100))           # 400 in memory: a, b, c and d under way
    await asyncio.sleep(0.01)
    fe, _ = cache.get("e", 100, lambda: _fresh(100))
    await asyncio.sleep(0.01)
    assert not fe.done() and cache.started == 100     # evicting a, b, c frees nothing: views hold them
    assert cache.memory() <= 400
    views.clear()                                     # the responses were sent
    gate.set()
    await fd
    assert await asyncio.wait_for(fe, 5) == bytes(100) and cache.peak <= 400


async def test_chunks_dropped_in_flight_still_count_until_their_gets_end():
    cache = ChunkCache(capacity=1000)
    gate = asyncio.Event()
    own, _ = cache.get(("seg", 0), 100, lambda: _held_back(gate, 100))    # a reader's own chunk
    assert cache.prefetch(("seg", 1), 100, lambda: _held_back(gate, 100))   # read ahead: nobody has it yet
    await asyncio.sleep(0.01)
    cache.drop(lambda k: k[0] == "seg")               # the segment was deleted
    await asyncio.sleep(0.01)
    assert cache.memory() == 100                      # the reader's GET goes on; the read-ahead was cancelled
    gate.set()
    assert await own == bytes(100)
    await asyncio.sleep(0)
    assert cache.memory() == 0 and cache.started == 0 and cache.in_flight == 0


async def test_a_read_across_chunks_stays_right_when_the_chunk_size_shrinks_meanwhile():
    """A reader waits for a chunk while more readers arrive and the object's chunk size shrinks: the rest of its
    range comes from chunks of the new size at the right positions."""
    data = os.urandom(4 * MiB)
    readers = [1]
    gate = asyncio.Event()

    async def fetch(start, end):
        if start == 0:
            await gate.wait()
        return data[start:end]
    obj = RangedObject("seg", len(data), fetch)
    reads = RangedReads(ChunkCache(16 * MiB), GetEstimate(), MiB, 2, readers=lambda: readers[0])
    cur = [-1, None]
    task = asyncio.ensure_future(reads.range(obj, MiB - 100, MiB + 100, cur))   # spans chunks 0 and 1 (1 MiB)
    await asyncio.sleep(0.01)
    readers[0] = 8                                    # 12 MiB / 8 / 6: 256 KiB chunks from here
    reads.read_ahead("seg")
    gate.set()
    got = b"".join(await asyncio.wait_for(task, 5))
    assert got == data[MiB - 100:MiB + 100]
    assert bytes(b"".join(await reads.range(obj, MiB + 100, MiB + 300, cur))) == data[MiB + 100:MiB + 300]
    await reads.close()


async def _tiered(b, n: int):
    """Topic t with n one-record batches in segments of three, all closed ones tiered."""
    part = b.create("t", remote_storage_enable="true", segment_bytes=3 * (VALUE + 80), local_retention_bytes=1)
    b.produce(part, n)
    await b.rlm.run_once("t", 0)
    return part


async def _fresh(n: int) -> bytes:
    return bytes(n)


async def _held_back(gate: asyncio.Event, n: int) -> bytes:
    """A GET answered once `gate` is set (a fresh object: a constant would never be freed)."""
    await gate.wait()
    return bytes(n)


async def test_a_consumers_next_fetch_starts_where_its_last_read_ended(tmp_path):
    """A consumer fetching on from each answer GETs every chunk of the segment once. Kafka's offset index entries
    hold a batch's last offset, so the index puts the next fetch one batch early: often in the chunk the reader has
    passed, which a full budget evicts first, and every such fetch cost a whole GET again for one header."""
    b = Broker(tmp_path, **{"remote.log.reader.chunk.size.bytes": "4096", "remote.log.reader.prefetch.chunks": "0",
                            "remote.fetch.max.memory.bytes": str(3 * 4096)})
    try:
        from protocol.record_batch import build_batch, split_and_validate
        part = b.create("t", remote_storage_enable="true", segment_bytes=60 * (VALUE + 100), local_retention_bytes=1,
                        index_interval_bytes=1)          # an index entry for every batch
        for i in range(0, 126, 2):                        # batches of two records: an entry holds the second's offset
            buf = bytearray(build_batch([(b"k", b"v" * (VALUE // 2))] * 2, timestamp_ms=10**13 + i))
            assert part.append_records_to_leader(buf, split_and_validate(buf, 10**6), 1).base_offset == i
        await b.rlm.run_once("t", 0)
        end = part.log.local_log_start_offset             # one segment tiered
        assert end > 100 and len(b.rlm.rlmm.list_remote_log_segments(b.rlm.tip_of("t", 0))) == 1
        store = b.rlm.rsm.store = _GatedStore(b.rlm.rsm.store)     # GETs, not the local store's mapping
        b.rlm.rsm._root = None
        inner_get = store.inner.get
        starts: list[int] = []

        async def get(key, start=0, end=None):
            if key.endswith(".log"):
                starts.append(start)
            return await inner_get(key, start, end)
        store.get = get
        tip = b.rlm.tip_of("t", 0)
        offset, got = 0, []
        while offset < end:
            views = await b.rlm.read(tip, part.log, offset, VALUE + 100, True)       # a batch per fetch
            read = offsets([b"".join(views)])             # a batch across two chunks is two views
            assert read and read[0] == offset, (offset, read)
            got += read
            offset = read[-1] + 1
        assert got == list(range(end))
        assert sorted(starts) == sorted(set(starts)), f"chunks fetched twice: {starts}"
        assert len(starts) == -(-b.rlm.rlmm.list_remote_log_segments(tip)[0].segment_size_in_bytes // 4096)
    finally:
        await b.close()
