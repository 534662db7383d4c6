"""storage.tiered.remote_storage_manager on both object stores: the key layout, copy of a real closed segment with its indexes,
ranged segment reads, index fetches, idempotent deletes, and errors as RemoteStorageException."""
from __future__ import annotations

import uuid

import pytest

from moto_server import MotoServer, moto_server  # noqa: F401  (fixture)
from protocol.record_batch import build_batch, split_and_validate
from storage.log.log import Log
from storage.log.log_config import LogConfig
from storage.objectstore.object_store import list_all, open_object_store
from storage.tiered.remote_log_metadata import (
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteResourceNotFoundException, RemoteStorageException,
    TopicIdPartition, kafka_uuid,
)
from storage.tiered.remote_storage_manager import IndexType, LogSegmentData, RemoteStorageManager, segment_key_prefix


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
async def rsm(request, tmp_path):
    if request.param == "s3":
        server: MotoServer = request.getfixturevalue("moto_server")
        store = open_object_store(f"s3://{server.new_bucket()}/rsm", **server.store_options(max_attempts=2))
    else:
        store = open_object_store(f"file://{tmp_path}/objects", fsync=False)
    r = RemoteStorageManager(store)
    yield r
    await r.close()


def closed_segment(tmp_path):
    log = Log(tmp_path / "orders-3", LogConfig(segment_bytes=2000, index_interval_bytes=1))
    for i in range(12):
        buf = bytearray(build_batch([(b"k", b"x" * 300)], timestamp_ms=1000 + i))
        log.append_as_leader(buf, split_and_validate(buf, 10**6), 0)
    seg, nxt = log.segments()[0], log.segments()[1]
    return log, seg, nxt


async def test_copy_fetch_delete(rsm, tmp_path):
    log, seg, nxt = closed_segment(tmp_path)
    tip = TopicIdPartition(uuid.uuid4(), "orders", 3)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), seg.base_offset, nxt.base_offset - 1,
                                  seg.largest_timestamp, 1, 0, seg.size, ((0, 0),))
    snapshot = log.dir / f"{nxt.base_offset:020d}.snapshot"
    assert snapshot.exists()
    data = LogSegmentData(seg.log_path, seg.index_path, seg.time_index_path, None, snapshot, b"0\n1\n0 0\n")
    await rsm.copy_log_segment_data(md, data)

    prefix = f"orders-{kafka_uuid(tip.topic_id)}/3/00000000000000000000-{kafka_uuid(md.segment_id.id)}"
    assert segment_key_prefix(md) == prefix
    keys = sorted(i.key for i in await list_all(rsm.store) if not i.key.startswith(".strata"))
    assert keys == sorted(prefix + s for s in (".log", ".index", ".timeindex", ".snapshot",
                                               ".leader_epoch_checkpoint"))
    raw = seg.log_path.read_bytes()
    assert await rsm.fetch_log_segment(md, 0) == raw
    assert await rsm.fetch_log_segment(md, 100, 700) == raw[100:700]
    assert await rsm.fetch_index(md, IndexType.OFFSET) == seg.index_path.read_bytes()
    assert await rsm.fetch_index(md, IndexType.TIMESTAMP) == seg.time_index_path.read_bytes()
    assert await rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) == snapshot.read_bytes()
    assert await rsm.fetch_index(md, IndexType.LEADER_EPOCH) == b"0\n1\n0 0\n"
    with pytest.raises(RemoteResourceNotFoundException):
        await rsm.fetch_index(md, IndexType.TRANSACTION)

    await rsm.delete_log_segment_data(md)
    await rsm.delete_log_segment_data(md)                 # idempotent
    assert [i.key for i in await list_all(rsm.store) if not i.key.startswith(".strata")] == []
    with pytest.raises(RemoteResourceNotFoundException):
        await rsm.fetch_log_segment(md, 0)
    log.close()


async def test_missing_local_file_and_closed_store_raise_remote_storage_exception(rsm, tmp_path):
    log, seg, nxt = closed_segment(tmp_path)
    tip = TopicIdPartition(uuid.uuid4(), "orders", 3)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), 0, 1, 0, 1, 0, 10, ((0, 0),))
    data = LogSegmentData(tmp_path / "nope.log", seg.index_path, seg.time_index_path, None, None, b"")
    with pytest.raises(RemoteStorageException):
        await rsm.copy_log_segment_data(md, data)
    await rsm.store.close()
    with pytest.raises(RemoteStorageException):
        await rsm.fetch_log_segment(md, 0)
    log.close()


class _RecordingStore:
    """Wraps a store and records when each put and delete starts and ends (by key suffix)."""

    def __init__(self, store):
        self.inner, self.events = store, []

    async def put(self, key, data):
        suffix = key.rsplit(".", 1)[1]
        self.events.append(("put-start", suffix))
        etag = await self.inner.put(key, data)
        self.events.append(("put-end", suffix))
        return etag

    async def delete(self, key):
        suffix = key.rsplit(".", 1)[1]
        self.events.append(("delete-start", suffix))
        await self.inner.delete(key)
        self.events.append(("delete-end", suffix))

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def at(self, event, suffix):
        return self.events.index((event, suffix))


async def test_log_object_is_uploaded_last_and_deleted_first(tmp_path):
    """The .log object is the commit point for readers that list the store (the Spark connector without a broker):
    it appears only after every other object of the segment and goes before any of them."""
    log, seg, nxt = closed_segment(tmp_path)
    store = _RecordingStore(open_object_store(f"file://{tmp_path}/objects", fsync=False))
    r = RemoteStorageManager(store)
    tip = TopicIdPartition(uuid.uuid4(), "orders", 3)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), seg.base_offset, nxt.base_offset - 1,
                                  seg.largest_timestamp, 1, 0, seg.size, ((0, 0),))
    snapshot = log.dir / f"{nxt.base_offset:020d}.snapshot"
    await r.copy_log_segment_data(md, LogSegmentData(seg.log_path, seg.index_path, seg.time_index_path, None,
                                                     snapshot, b"0\n1\n0 0\n"))
    others = ["index", "timeindex", "snapshot", "leader_epoch_checkpoint"]
    assert all(store.at("put-end", o) < store.at("put-start", "log") for o in others), store.events
    store.events.clear()
    await r.delete_log_segment_data(md)
    assert all(store.at("delete-end", "log") < store.at("delete-start", o) for o in others + ["txnindex"]), \
        store.events
    await r.close()
    log.close()
