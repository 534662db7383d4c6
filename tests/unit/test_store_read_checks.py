"""Reads that come back shorter than asked are refused, never passed up or cached: S3ObjectStore checks a ranged GET's
206 against the range (Content-Range's total tells a range ended by the object's end from a truncated answer); the
remote tier checks segment chunks against the segment size and indexes against their objects' sizes, so a short
GET fails that fetch (UNKNOWN_SERVER_ERROR, the client retries) and the next one reads it whole. Also: a fast store
that cannot be opened fails a WAL upload like any failed upload instead of killing the task and stalling the
pointers behind it."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from protocol.errors import ErrorCode
from storage.log.transaction_index import AbortedTxn
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.object_store import ObjectStoreError
from storage.objectstore.s3 import S3ObjectStore
from storage.tiered.remote_log_metadata import (
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteStorageException, TopicIdPartition,
)
from storage.tiered.remote_log_reader import EmptyWalks, RemoteLogReader, _LruFutures
from storage.tiered.remote_storage_manager import IndexType, RemoteStorageManager, segment_key_prefix
from test_remote_log_manager import TIERED, Broker, offsets
from test_remote_wal import _manager, _Part, batch


# -- S3ObjectStore: a 206 against the range asked for --------------------------------------------------------------

class _RangeServer:
    """Answers each GET with the next scripted (status, Content-Range or None, body); records the Range asked."""

    def __init__(self, answers: list):
        self.answers, self.ranges = answers, []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _handle(self, reader, writer):
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                self.ranges.append(next((line.split(":", 1)[1].strip() for line in head.split("\r\n")
                                         if line.lower().startswith("range:")), None))
                status, content_range, body = self.answers.pop(0)
                extra = f"Content-Range: {content_range}\r\n" if content_range else ""
                writer.write(f"HTTP/1.1 {status} {'Partial Content' if status == 206 else 'OK'}\r\n"
                             f"Content-Length: {len(body)}\r\nETag: \"e\"\r\n{extra}\r\n".encode() + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


OBJECT = bytes(range(100))


@pytest.mark.parametrize("start, end, answers, expected", [
    # a short 206 is retried like a cut body; the second answer is whole
    (10, 60, [(206, "bytes 10-39/100", OBJECT[10:40]), (206, "bytes 10-59/100", OBJECT[10:60])], OBJECT[10:60]),
    (10, None, [(206, "bytes 10-49/100", OBJECT[10:50]), (206, "bytes 10-99/100", OBJECT[10:])], OBJECT[10:]),
    # a range past the object's end: S3 truncates it, and that is the whole answer
    (90, 130, [(206, "bytes 90-99/100", OBJECT[90:])], OBJECT[90:]),
    # a server that ignores Range sends the whole object: the slice asked for is cut from it
    (10, 20, [(200, None, OBJECT)], OBJECT[10:20]),
], ids=["short-206", "short-open-ended-206", "range-past-the-end", "range-ignored"])
async def test_a_ranged_get_shorter_than_its_range_is_retried_not_returned(start, end, answers, expected):
    async with _RangeServer(list(answers)) as server:
        store = S3ObjectStore("bucket", endpoint_url=server.url, access_key_id="a", secret_access_key="b",
                              max_attempts=2, retry_base_delay=0.01)
        try:
            assert await store.get("k", start, end) == expected
        finally:
            await store.close()
    assert len(server.ranges) == len(answers)
    assert server.ranges[0] == f"bytes={start}-{'' if end is None else end - 1}"


async def test_a_short_206_on_every_attempt_fails_retriably():
    answers = [(206, "bytes 10-39/100", OBJECT[10:40])] * 2
    async with _RangeServer(answers) as server:
        store = S3ObjectStore("bucket", endpoint_url=server.url, access_key_id="a", secret_access_key="b",
                              max_attempts=2, retry_base_delay=0.01)
        try:
            with pytest.raises(ObjectStoreError, match="gave up after 2 attempts.*30 read, but total bytes "
                                                       "expected is 50") as e:
                await store.get("k", 10, 60)
        finally:
            await store.close()
    assert e.value.retriable


# -- the remote tier: short GETs fail the read and are never cached ------------------------------------------------

async def _check_cache_is_whole(b: Broker) -> None:
    """Every chunk and index the reader cached is as long as the segment metadata / object says."""
    rlm = b.rlm
    await asyncio.gather(*(e.future for e in rlm._chunks.entries.values()), *rlm._indexes.entries.values(),
                         return_exceptions=True)
    await asyncio.sleep(0)
    mds = {md.segment_id.id.int: md for md in rlm.rlmm.list_remote_log_segments(rlm.tip_of("t", 0))}
    for ((_, seg_id), cs, i), e in rlm._chunks.entries.items():
        fut = e.future
        assert fut.done() and fut.exception() is None
        assert len(fut.result()) == min((i + 1) * cs, mds[seg_id].segment_size_in_bytes) - i * cs
    for key, fut in rlm._indexes.entries.items():
        assert fut.done() and fut.exception() is None
        prefix = segment_key_prefix(mds[key[1]])
        if len(key) == 2:
            whole = [await b.rlm.store.inner.get(prefix + t.value) for t in (IndexType.OFFSET, IndexType.TIMESTAMP)]
            assert fut.result().size == sum(map(len, whole)) + 64


async def _fetch(b: Broker, part, offset: int):
    """A Fetch's remote read as the Fetch handler completes it: (record views, error code)."""
    task = b.rlm.remote_read("t", 0, part.log, offset, 1 << 20, True)
    await asyncio.wait({task})
    return part.remote_read_result(offset, task)


async def tiered_broker(tmp_path, faults: str):
    """A broker whose store has `faults`, with topic t: [0-2] [3-5] [6-8] tiered, [9] local. (broker, partition)."""
    b = Broker(tmp_path, **{"remote.log.storage.manager.store.faults": faults})
    part = b.create("t", **TIERED)
    b.produce(part, 10)
    await b.rlm.run_once("t", 0)
    return b, part


async def test_a_short_read_from_the_tier_fails_that_fetch_and_the_next_one_reads_it_whole(tmp_path):
    b, part = await tiered_broker(tmp_path, "seed=5")
    try:
        store = b.rlm.store
        assert isinstance(store, FaultyObjectStore) and part.log.local_log_start_offset == 9
        store.faults.get_short_rate = 1
        assert await _fetch(b, part, 3) == ([], ErrorCode.unknown_server_error)
        assert store.injected[("get", "short")] >= 1
        await _check_cache_is_whole(b)
        store.faults.get_short_rate = 0
        views, error = await _fetch(b, part, 3)
        assert error == 0 and offsets(views) == [3, 4, 5]
        views, error = await _fetch(b, part, 6)
        assert error == 0 and offsets(views) == [6, 7, 8]
        await _check_cache_is_whole(b)
    finally:
        await b.close()


class _TxnReader(RemoteLogReader):
    """Just what collect_aborted_transactions needs: one remote segment, a real RSM, the index cache."""

    def __init__(self, rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata):
        self.rsm, self.md = rsm, md
        self._indexes = _LruFutures(1 << 20, lambda x: x.size)
        self._empty_walks = EmptyWalks()

        class _Rlmm:
            def segments_version(self, tip):
                return None                      # nothing remembered between walks
        self.rlmm = _Rlmm()

    def tip_of(self, topic, partition):
        return self.md.tip

    def segment_for_offset(self, tip, lg, offset):
        return self.md if self.md.start_offset <= offset <= self.md.end_offset else None

    def _following(self, tip, md, lg=None):
        return iter(())


class _Log:
    def collect_aborted_transactions(self, start, upper):
        return []


async def test_a_short_transaction_index_fails_the_read_instead_of_hiding_aborted_transactions(tmp_path):
    store = FaultyObjectStore(LocalObjectStore(tmp_path / "objects", fsync=False), seed=2)
    rsm = RemoteStorageManager(store)
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), 0, 99, 0, 1, 0, 1000, ((0, 0),))
    aborted = [AbortedTxn(pid, 10 * pid, 10 * pid + 5, 10 * pid + 6) for pid in range(8)]
    await store.put(segment_key_prefix(md) + IndexType.TRANSACTION.value, b"".join(e.pack() for e in aborted))
    reader = _TxnReader(rsm, md)
    try:
        store.faults.get_short_rate = 1
        for _ in range(3):
            with pytest.raises(RemoteStorageException, match="truncated") as e:
                await reader.collect_aborted_transactions("t", 0, _Log(), 0, 100)
            assert e.value.retriable
        assert store.injected[("get", "short")] == 3 and not reader._indexes.entries
        store.faults.get_short_rate = 0
        assert await reader.collect_aborted_transactions("t", 0, _Log(), 0, 100) == aborted
    finally:
        await rsm.close()


# -- WAL uploads: a fast store that cannot be opened -----------------------------------------------------------------

async def test_a_fast_store_that_cannot_be_opened_fails_the_upload_instead_of_stalling_the_pointers(tmp_path):
    m = _manager(tmp_path, tmp_path / "fast", remote_wal_upload_interval_ms=1)
    part = _Part(tmp_path, m)
    part.wal.became_leader(0)
    opened = m.stores.get

    def cannot_open(name):
        raise OSError("cannot open the fast store")
    m.stores.get = cannot_open
    m.start()
    try:
        m.add(part, 3, 0, 2, batch(0))
        deadline = time.monotonic() + 5
        while part.wal.serve(2, 0, 1000, time.monotonic())[0] == "wait":     # the upload must resolve
            assert time.monotonic() < deadline, "the failed upload was never published"
            await asyncio.sleep(0.01)
        assert part.wal.serve(2, 0, 1000, time.monotonic())[0] == "records" and m._failures == 1
        assert not any(t.done() for t in m._tasks)              # the combiner and the collector live on
        m.stores.get = opened                                   # the store can be opened again: pointers
        m.add(part, 3, 3, 5, batch(3))
        while part.wal.serve(2, 3, 1000, time.monotonic())[0] == "wait":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert part.wal.serve(2, 3, 1000, time.monotonic())[0] == "pointers" and m._failures == 0
    finally:
        await m.stop()
        del m.stores.get
        await m.stores.close()
        part.wal.close()
