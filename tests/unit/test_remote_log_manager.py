"""storage.tiered.remote_log_manager with a real ReplicaManager, logs and local object store, one task round at a time:
copy order and bounds, failed-copy cleanup, retries of stuck deletions, orphans after a restart, local retention
gated on the remote tier, remote reads (bounds, mid-segment, min-one-message), timestamp lookups and the Log hooks."""
from __future__ import annotations

import asyncio

import pytest

from broker.config import BrokerConfig
from replication.internal_topics import InternalTopics
from tests.unit.replica_harness import open_replicas
from protocol.record_batch import build_batch, split_and_validate
from protocol.records import iter_all_records
from storage.log.log import Log, OffsetOutOfRangeError
from storage.log.log_config import LogConfig
from storage.objectstore.object_store import ObjectStoreError, list_all
from storage.tiered.remote_log_manager import RemoteLogManager
from storage.tiered.remote_log_metadata import (
    REMOTE_LOG_METADATA_TOPIC, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState as S,
    RemoteStorageException, metadata_partition,
)

VALUE = 500
TS0 = 10**13                        # far future: never breaches the default retention.ms


class Broker:
    """The pieces of a broker the RemoteLogManager talks to."""

    def __init__(self, tmp_path, **props):
        self.config = BrokerConfig({"log.dirs": str(tmp_path / "logs"), "remote.log.storage.system.enable": "true",
                                    "remote.log.storage.manager.store.url": f"file://{tmp_path}/objects",
                                    "remote.log.storage.manager.store.fsync": "false",
                                    "remote.log.metadata.topic.num.partitions": "2",
                                    "remote.fetch.max.wait.ms": "2000", **props})
        self.replicas = open_replicas(self.config)
        self.topics = self.replicas.topics
        self.rlm = RemoteLogManager(self.config, self.replicas, InternalTopics(self.replicas))
        self.replicas.remote_log_manager = self.rlm
        self.replicas.startup()
        self.rlm.startup()

    def create(self, name: str, **configs):
        info = self.topics.create(name, 1, {k.replace("_", "."): str(v) for k, v in configs.items()})
        self.replicas.apply_topic(info, None)
        return self.replicas.get(name, 0)

    def produce(self, part, n: int, start: int = 0) -> None:
        for i in range(start, start + n):
            buf = bytearray(build_batch([(b"k", f"v{i}".encode().ljust(VALUE, b"."))], timestamp_ms=TS0 + i))
            r = part.append_records_to_leader(buf, split_and_validate(buf, 10**6), 1)
            assert r.base_offset == i

    async def close(self):
        await self.rlm.stop()
        self.replicas.shutdown()


async def store_keys(b: Broker, suffix: str = ".log") -> list[str]:
    return sorted(i.key for i in await list_all(b.rlm.store) if i.key.endswith(suffix))


SEG = 3 * (VALUE + 80)               # three one-record batches per segment
TIERED = {"remote_storage_enable": "true", "segment_bytes": SEG, "local_retention_bytes": 1}


def offsets(views) -> list[int]:
    return [r.offset for v in views for r in iter_all_records(v)]


async def test_a_copy_counts_only_once_its_metadata_is_committed(tmp_path):
    """Kafka's RLMTask moves the highest tiered offset only after the RLMM has read its COPY_SEGMENT_FINISHED back
    (committed): while `__remote_log_metadata`'s follower lags, local retention keeps the segment, and past
    remote.log.metadata.consume.wait.ms the copy fails; once the follower catches up the copy completes."""
    b = Broker(tmp_path, **{"remote.log.metadata.consume.wait.ms": "300"})
    try:
        part = b.create("t", **TIERED)
        lg = part.log
        b.produce(part, 10)                          # [0-2] [3-5] [6-8] active [9]
        tip = b.rlm.tip_of("t", 0)
        md_part = b.replicas.get(REMOTE_LOG_METADATA_TOPIC, metadata_partition(tip, 2))
        md_part.isr = (1, 2)                         # its follower fetches nothing: the HW stays
        with pytest.raises(RemoteStorageException, match="not committed"):
            await b.rlm.run_once("t", 0)
        assert [s.state for s in b.rlm.rlmm.list_remote_log_segments(tip)] == [S.COPY_SEGMENT_FINISHED]
        assert lg.highest_offset_in_remote_storage == -1
        assert lg.local_log_start_offset == 0 and lg.delete_old_segments() == 0     # the segment stays local

        async def follow():                          # the follower keeps up from now on
            while True:
                md_part.update_follower_end_offset(2, md_part.log_end_offset)
                await asyncio.sleep(0.01)
        follower = asyncio.get_running_loop().create_task(follow())
        try:
            await b.rlm.run_once("t", 0)
        finally:
            follower.cancel()
        assert lg.highest_offset_in_remote_storage == 8 and lg.local_log_start_offset == 9
        assert offsets(await b.rlm.read(tip, lg, 0, 1 << 20, True)) == [0, 1, 2]
    finally:
        await b.close()


async def test_copy_local_retention_and_reads(tmp_path):
    b = Broker(tmp_path)
    try:
        part = b.create("t", **TIERED)
        lg = part.log
        assert lg.remote_log_enabled
        b.produce(part, 10)                          # [0-2] [3-5] [6-8] active [9]
        # nothing tiered yet: local retention (1 byte) may not delete anything
        assert lg.delete_old_segments() == 0 and lg.local_log_start_offset == 0
        await b.rlm.run_once("t", 0)
        assert len(await store_keys(b)) == 3
        assert lg.highest_offset_in_remote_storage == 8
        assert [s.base_offset for s in lg.segments()] == [9]
        assert (lg.log_start_offset, lg.local_log_start_offset) == (0, 9)
        with pytest.raises(OffsetOutOfRangeError):
            lg.read(3, 1 << 20)
        tip = b.rlm.tip_of("t", 0)
        segs = b.rlm.rlmm.list_remote_log_segments(tip)
        assert [(s.start_offset, s.end_offset, s.state) for s in segs] == [
            (0, 2, S.COPY_SEGMENT_FINISHED), (3, 5, S.COPY_SEGMENT_FINISHED), (6, 8, S.COPY_SEGMENT_FINISHED)]
        assert segs[0].max_timestamp_ms == TS0 + 2 and segs[0].segment_leader_epochs == ((0, 0),)

        assert b.rlm.in_remote_range(part.log, 0) and not b.rlm.in_remote_range(part.log, 9)
        assert offsets(await b.rlm.read(tip, lg, 0, 1 << 20, True)) == [0, 1, 2]     # one segment per read
        assert offsets(await b.rlm.read(tip, lg, 4, 1 << 20, True)) == [4, 5]        # mid segment
        assert offsets(await b.rlm.read(tip, lg, 6, VALUE + 100, True)) == [6]       # max bytes
        assert offsets(await b.rlm.read(tip, lg, 6, 10, True)) == [6]                # min one message
        assert offsets(await b.rlm.read(tip, lg, 6, 10, False)) == []
        assert b.rlm.latest_tiered(part.log) == (8, 0)
        assert await b.rlm.find_offset_by_timestamp("t", 0, part.log, TS0 + 4) == (4, TS0 + 4)
        assert await b.rlm.find_offset_by_timestamp("t", 0, part.log, TS0 - 1) == (0, TS0)
        assert await b.rlm.find_offset_by_timestamp("t", 0, part.log, TS0 + 9) is None           # only local has it
        task = b.rlm.remote_read("t", 0, part.log, 3, 1 << 20, True)
        assert task.done() and offsets(task.result()) == [3, 4, 5]     # its chunk is cached: read at once (eager)
        b.rlm._ranged.drop(lambda key: True)                            # no longer: the read waits for its chunk
        task = b.rlm.remote_read("t", 0, part.log, 3, 1 << 20, True)
        assert not task.done()
        assert b.rlm.remote_read("t", 0, part.log, 3, 1 << 20, True) is task                      # joined, not repeated
        assert offsets(await task) == [3, 4, 5]
        b.rlm.consumed("t", 0, 3, task)

        # DeleteRecords into the remote tier: the segment wholly below goes at the next round
        assert lg.delete_records(4) == 4
        await b.rlm.run_once("t", 0)
        assert [s.start_offset for s in b.rlm.rlmm.list_remote_log_segments(tip)] == [3, 6]
        assert len(await store_keys(b)) == 2
        with pytest.raises(OffsetOutOfRangeError):
            await b.rlm.read(tip, lg, 1, 100, True)
    finally:
        await b.close()


async def test_failed_copy_is_cleaned_up_and_retried_with_a_new_id(tmp_path):
    b = Broker(tmp_path)
    try:
        part = b.create("t", **TIERED)
        b.produce(part, 4)
        store = b.rlm.store
        real_put = store.put
        calls = []

        async def failing_put(key, data):
            calls.append(key)
            if key.endswith(".timeindex") and len([c for c in calls if c.endswith(".timeindex")]) == 1:
                raise ObjectStoreError("injected", retriable=True)
            return await real_put(key, data)
        store.put = failing_put
        with pytest.raises(RemoteStorageException):
            await b.rlm.run_once("t", 0)
        tip = b.rlm.tip_of("t", 0)
        assert b.rlm.rlmm.list_remote_log_segments(tip) == []          # DELETE_SEGMENT_FINISHED: gone
        assert await store_keys(b, "") == []                            # nothing left behind
        assert part.log.highest_offset_in_remote_storage == -1
        assert part.log.local_log_start_offset == 0                     # local data kept
        await b.rlm.run_once("t", 0)
        [md] = b.rlm.rlmm.list_remote_log_segments(tip)
        # segment ids are base64url and may contain "-": compare whole key prefixes, not a split of the key
        new_prefix = orphan_prefix(md)
        assert md.state == S.COPY_SEGMENT_FINISHED and not calls[0].startswith(new_prefix)
        assert (await store_keys(b))[0].startswith(new_prefix)
        assert b.rlm.metrics.copy_errors.labels("t")._value.get() == 1
    finally:
        await b.close()


async def test_stuck_delete_and_orphaned_copy_are_retried(tmp_path):
    b = Broker(tmp_path)
    part = b.create("t", **TIERED)
    b.produce(part, 7)
    await b.rlm.run_once("t", 0)
    tip = b.rlm.tip_of("t", 0)
    assert len(b.rlm.rlmm.list_remote_log_segments(tip)) == 2
    # a deletion whose object deletes fail stays DELETE_SEGMENT_STARTED
    store = b.rlm.store
    real_delete = store.delete

    async def failing_delete(key):
        raise ObjectStoreError("down", retriable=True)
    store.delete = failing_delete
    part.log.delete_records(3)
    with pytest.raises(RemoteStorageException):
        await b.rlm.run_once("t", 0)
    states = [s.state for s in b.rlm.rlmm.list_remote_log_segments(tip)]
    assert states == [S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED]
    # a copy that died with the process: COPY_SEGMENT_STARTED without FINISHED
    orphan = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), 6, 8, TS0, 1, 0, 100, ((0, 6),))
    b.rlm.rlmm.add_remote_log_segment_metadata(orphan)
    await store.put(f"{orphan_prefix(orphan)}.log", b"partial")
    store.delete = real_delete
    await b.close()

    b2 = Broker(tmp_path)                             # restart: metadata replayed from __remote_log_metadata
    try:
        part = b2.replicas.get("t", 0)
        assert part.log.highest_offset_in_remote_storage == 5
        assert part.log.log_start_offset == 3 and part.log.local_log_start_offset == 6
        await b2.rlm.run_once("t", 0)
        segs = b2.rlm.rlmm.list_remote_log_segments(tip)
        assert [(s.start_offset, s.state) for s in segs] == [(3, S.COPY_SEGMENT_FINISHED)]
        assert len(await store_keys(b2)) == 1
    finally:
        await b2.close()


def orphan_prefix(md):
    from storage.tiered.remote_storage_manager import segment_key_prefix
    return segment_key_prefix(md)


async def test_remote_retention_by_time_and_size_moves_log_start(tmp_path):
    b = Broker(tmp_path)
    try:
        part = b.create("t", **TIERED)
        b.produce(part, 10)
        await b.rlm.run_once("t", 0)
        lg = part.log
        seg_size = b.rlm.rlmm.list_remote_log_segments(b.rlm.tip_of("t", 0))[0].segment_size_in_bytes
        # local-only (1 batch) + 3 remote segments, one segment allowed: segments go while the excess still
        # covers a whole one (Kafka's rule), so the two oldest go and the excess left (one batch) stays
        b.topics.set_configs("t", {**{k.replace("_", "."): str(v) for k, v in TIERED.items()},
                                   "retention.bytes": str(seg_size)})
        b.replicas.reconfigure(b.topics.get("t"))
        await b.rlm.run_once("t", 0)
        assert lg.log_start_offset == 6 and len(await store_keys(b)) == 1
        # retention.ms: the records are from the far future, so they stay until retention is computed past them
        b.rlm._time_ms = lambda: TS0 + 10**9          # past the 7-day default
        await b.rlm.run_once("t", 0)
        assert lg.log_start_offset == 9 and await store_keys(b) == []
    finally:
        await b.close()


async def test_disable_with_delete_on_disable_and_topic_deletion(tmp_path):
    b = Broker(tmp_path)
    b.rlm.start_background()
    try:
        part = b.create("t", **TIERED)
        b.produce(part, 7)
        await b.rlm.run_once("t", 0)
        assert len(await store_keys(b)) == 2
        b.topics.set_configs("t", {"segment.bytes": str(SEG), "remote.storage.enable": "false",
                                   "remote.log.delete.on.disable": "true"})
        b.replicas.reconfigure(b.topics.get("t"))
        assert not part.log.remote_log_enabled and part.log.log_start_offset == 6
        for _ in range(100):
            if not await store_keys(b, ""):
                break
            await asyncio.sleep(0.05)
        assert await store_keys(b, "") == []
        p2 = b.create("u", **TIERED)
        b.produce(p2, 4)
        await b.rlm.run_once("u", 0)
        assert len(await store_keys(b)) == 1
        b.replicas.delete_topic(b.topics.get("u"))
        b.topics.delete("u")
        for _ in range(100):
            if not await store_keys(b, ""):
                break
            await asyncio.sleep(0.05)
        assert await store_keys(b, "") == []
    finally:
        await b.close()


def test_log_rolls_active_segment_for_local_retention_only_when_tiered(tmp_path):
    now = [TS0 + 10_000]
    cfg = LogConfig(local_retention_ms=1, remote_storage_enable=True)
    lg = Log(tmp_path / "a-0", cfg, time_ms=lambda: now[0], remote_log_enabled=True)
    buf = bytearray(build_batch([(b"k", b"v")], timestamp_ms=TS0))
    lg.append_as_leader(buf, split_and_validate(buf, 10**6), 0)
    lg.update_high_watermark(lg.log_end_offset)                 # as a single-replica partition does
    assert lg.delete_old_segments() == 0                       # rolled, but not tiered yet: nothing deleted
    assert [s.base_offset for s in lg.segments()] == [0, 1]
    lg.highest_offset_in_remote_storage = 0
    assert lg.delete_old_segments() == 1
    assert (lg.log_start_offset, lg.local_log_start_offset) == (0, 1)   # only the local log start moved
    lg.close()
    lg = Log(tmp_path / "a-0", cfg, clean_shutdown=True, remote_log_enabled=True)
    assert (lg.log_start_offset, lg.local_log_start_offset) == (0, 1)
    lg.close()
    plain = Log(tmp_path / "b-0", LogConfig(retention_ms=1), time_ms=lambda: now[0])
    buf = bytearray(build_batch([(b"k", b"v")], timestamp_ms=TS0))
    plain.append_as_leader(buf, split_and_validate(buf, 10**6), 0)
    plain.update_high_watermark(plain.log_end_offset)
    assert plain.delete_old_segments() == 1 and plain.log_start_offset == 1   # untiered: as before
    plain.close()
