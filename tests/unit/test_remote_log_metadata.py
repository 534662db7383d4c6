"""storage.tiered.remote_log_metadata: Kafka's metadata records (byte format), the partitioner, the segment state machine, the
per-partition cache lookups, and the topic-based manager rebuilding its view from `__remote_log_metadata`."""
from __future__ import annotations

import struct
import uuid
from dataclasses import replace

import pytest

from broker.config import BrokerConfig
from replication.internal_topics import InternalTopics
from tests.unit.replica_harness import open_replicas
from storage.tiered.remote_log_metadata import (
    REMOTE_LOG_METADATA_TOPIC, RemoteLogMetadataCache, RemoteLogSegmentId, RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState as S, RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState as P, RemoteStorageException, TopicBasedRemoteLogMetadataManager, TopicIdPartition,
    deserialize, is_valid_transition, kafka_uuid, metadata_partition, murmur2, serialize,
)

TIP = TopicIdPartition(uuid.UUID("0123456789abcdef0123456789abcdef"), "orders", 3)


def seg(start: int, end: int, epochs=((0, None),), sid: uuid.UUID | None = None, size: int = 100,
        max_ts: int = 1000) -> RemoteLogSegmentMetadata:
    ep = tuple((e, start if o is None else o) for e, o in epochs)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, sid or uuid.uuid4()), start, end, max_ts, 1, 5,
                                    size, ep)


def update(md, state, ts: int = 6) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.segment_id, ts, None, state, 1)


# ---- format ------------------------------------------------------------------------------------------------------
def test_kafka_uuid_string():
    assert kafka_uuid(uuid.UUID(int=0)) == "A" * 22            # Kafka's Uuid.ZERO_UUID.toString()
    u = uuid.uuid4()
    import base64
    assert base64.urlsafe_b64decode(kafka_uuid(u) + "==") == u.bytes


def test_partition_delete_record_bytes_match_kafkas_layout():
    ev = RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_STARTED, 1234, 7)
    want = (b"\x01\x02\x00"                                    # frame v1, apiKey 2, version 0
            + b"\x07orders" + TIP.topic_id.bytes + struct.pack(">i", 3) + b"\x00"   # TopicIdPartition + tags
            + struct.pack(">iqb", 7, 1234, 1) + b"\x00")       # BrokerId, EventTimestampMs, state, tags
    assert serialize(ev) == want
    assert deserialize(want) == ev


def test_segment_records_round_trip_and_layout():
    md = replace(seg(100, 199, epochs=((2, None), (5, 150)), size=4096, max_ts=77), txn_index_empty=True)
    data = serialize(md)
    assert data[:3] == b"\x01\x00\x00"
    sid = md.segment_id.id.bytes
    body = (b"\x07orders" + TIP.topic_id.bytes + struct.pack(">i", 3) + b"\x00" + sid + b"\x00"
            + struct.pack(">qqiqq", 100, 199, 1, 77, 5)
            + b"\x03" + struct.pack(">iq", 2, 100) + b"\x00" + struct.pack(">iq", 5, 150) + b"\x00"
            + struct.pack(">i", 4096) + b"\x00" + struct.pack(">b", 0)
            + b"\x01\x00\x01\x01")                              # tagged field 0 TxnIndexEmpty=true
    assert data[3:] == body
    assert deserialize(data) == md
    # a segment with a transaction index: the tag left out, as Kafka leaves out a tagged field at its default
    with_txn = replace(md, txn_index_empty=False)
    assert serialize(with_txn)[3:] == body[:-4] + b"\x00"
    # and a record without the tag (Kafka before KIP-1058) reads as "may have one", Kafka's default
    assert deserialize(serialize(with_txn)) == with_txn
    u = RemoteLogSegmentMetadataUpdate(md.segment_id, 99, b"custom", S.COPY_SEGMENT_FINISHED, 1)
    raw = serialize(u)
    assert raw[:3] == b"\x01\x01\x00" and deserialize(raw) == u


def test_unknown_tagged_fields_are_skipped_and_garbage_rejected():
    ev = RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 1, 1)
    raw = serialize(ev)[:-1] + b"\x01\x05\x02ab"                # one unknown tag (5) of 2 bytes
    assert deserialize(raw) == ev
    for bad in (b"", b"\x02\x00\x00", b"\x01\x09\x00", serialize(ev)[:10]):
        with pytest.raises(ValueError):
            deserialize(bad)


def test_murmur2_matches_kafka_and_partitioner_is_stable():
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    parts = {metadata_partition(TopicIdPartition(TIP.topic_id, "x", p), 50) for p in range(200)}
    assert all(0 <= p < 50 for p in parts) and len(parts) > 30
    assert metadata_partition(TIP, 50) == metadata_partition(TopicIdPartition(TIP.topic_id, "other", 3), 50)


# ---- state machine and cache -----------------------------------------------------------------------------------
def test_state_transitions():
    assert is_valid_transition(S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED)
    assert is_valid_transition(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)      # failed copy
    assert is_valid_transition(S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)    # retry
    assert not is_valid_transition(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
    assert not is_valid_transition(S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED)
    assert not is_valid_transition(S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)


def test_a_later_copy_over_earlier_ones_of_its_epoch_takes_their_place():
    """Kafka's RemoteLogLeaderEpochState: a new leader re-tiers a range the old one tiered with other segment bounds.
    S0 [10, 90], then S1 [5, 100] and S2 [101, 200]: offset 95 is S1's (S0 ends before it), and so is 50; a copy that
    ends before what is already there (S3 [120, 150]) takes nothing's place."""
    c = RemoteLogMetadataCache(TIP)
    s0, s1, s2, s3 = seg(10, 90), seg(5, 100), seg(101, 200), seg(120, 150)
    for md in (s0, s1, s2, s3):
        c.add_copy_in_progress(md)
        c.update(update(md, S.COPY_SEGMENT_FINISHED))
    assert c.segment_for(0, 95).segment_id == s1.segment_id
    assert c.segment_for(0, 50).segment_id == s1.segment_id
    assert c.segment_for(0, 130).segment_id == s3.segment_id and c.segment_for(0, 160) is None
    assert c.highest_offset_for_epoch(0) == 200
    assert len(c.list_segments()) == 4                           # still listed (and expired) as any segment


def test_cache_lookups_by_epoch_and_offset():
    c = RemoteLogMetadataCache(TIP)
    a, b = seg(0, 99), seg(100, 249, epochs=((0, None), (1, 180)))
    for md in (a, b):
        c.add_copy_in_progress(md)
    assert c.segment_for(0, 50) is None and c.highest_offset_for_epoch(0) is None     # not finished yet
    c.update(update(a, S.COPY_SEGMENT_FINISHED))
    c.update(update(b, S.COPY_SEGMENT_FINISHED))
    assert c.segment_for(0, 0).segment_id == a.segment_id
    assert c.segment_for(0, 150).segment_id == b.segment_id
    assert c.segment_for(0, 180) is None                         # offset 180 was written in epoch 1
    assert c.segment_for(1, 200).segment_id == b.segment_id
    assert c.segment_for(1, 250) is None
    assert c.highest_offset_for_epoch(0) == 179 and c.highest_offset_for_epoch(1) == 249
    assert c.remote_log_size() == 200
    assert [s.start_offset for s in c.list_segments()] == [0, 100]
    assert [s.start_offset for s in c.list_segments(1)] == [100]
    c.update(update(a, S.DELETE_SEGMENT_STARTED))
    assert c.segment_for(0, 10) is None and c.remote_log_size() == 100
    assert [s.state for s in c.list_segments()] == [S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED]
    c.update(update(a, S.DELETE_SEGMENT_FINISHED))
    assert [s.start_offset for s in c.list_segments()] == [100]
    assert c.highest_offset_for_epoch(0) == 179                  # what was tiered stays known
    with pytest.raises(ValueError):
        c.update(update(b, S.COPY_SEGMENT_STARTED))
    with pytest.raises(KeyError):
        c.update(update(a, S.DELETE_SEGMENT_FINISHED))
    with pytest.raises(ValueError):
        c.add_copy_in_progress(b)


# ---- the topic-based manager ----------------------------------------------------------------------------------------
def _replicas(tmp_path):
    cfg = BrokerConfig({"log.dirs": str(tmp_path / "logs")})
    rm = open_replicas(cfg)
    rm.startup()
    return rm


def test_manager_persists_to_the_topic_and_rebuilds(tmp_path):
    rm = _replicas(tmp_path)
    m = TopicBasedRemoteLogMetadataManager(InternalTopics(rm), broker_id=1, num_partitions=5)
    m.start()
    info = rm.topics.get(REMOTE_LOG_METADATA_TOPIC)
    assert info.partitions == 5 and info.configs["retention.ms"] == "-1"
    a, b = seg(0, 99), seg(100, 199)
    other = RemoteLogSegmentMetadata(RemoteLogSegmentId(TopicIdPartition(uuid.uuid4(), "t2", 0), uuid.uuid4()),
                                     0, 9, 1, 1, 1, 10, ((0, 0),))
    for md in (a, b, other):
        m.add_remote_log_segment_metadata(md)
    m.update_state(a, S.COPY_SEGMENT_FINISHED)
    m.update_state(b, S.COPY_SEGMENT_FINISHED)
    m.update_state(a, S.DELETE_SEGMENT_STARTED)
    m.update_state(a, S.DELETE_SEGMENT_FINISHED)
    m.put_remote_partition_delete_metadata(other.tip, P.DELETE_PARTITION_MARKED)
    with pytest.raises(ValueError):
        m.update_state(b, S.COPY_SEGMENT_STARTED)
    with pytest.raises(ValueError):
        m.add_remote_log_segment_metadata(b)
    # all events of TIP are in its metadata partition, in order
    p = metadata_partition(TIP, 5)
    assert rm.get(REMOTE_LOG_METADATA_TOPIC, p).log.log_end_offset >= 6
    for part in rm.partitions.values():
        part.log.close()

    rm2 = _replicas(tmp_path)
    m2 = TopicBasedRemoteLogMetadataManager(InternalTopics(rm2), broker_id=1, num_partitions=5)
    m2.start()
    assert m2.events_loaded == 8
    assert [(s.start_offset, s.state) for s in m2.list_remote_log_segments(TIP)] == [(100, S.COPY_SEGMENT_FINISHED)]
    assert m2.remote_log_segment_metadata(TIP, 0, 150).segment_id == b.segment_id
    assert m2.remote_log_segment_metadata(TIP, 0, 50) is None
    assert m2.highest_offset_for_epoch(TIP, 0) == 199
    assert m2.remote_log_size(TIP) == 100
    assert m2.pending_partition_deletes() == [other.tip]
    m2.put_remote_partition_delete_metadata(other.tip, P.DELETE_PARTITION_STARTED)
    m2.put_remote_partition_delete_metadata(other.tip, P.DELETE_PARTITION_FINISHED)
    assert m2.pending_partition_deletes() == [] and m2.list_remote_log_segments(other.tip) == []


async def test_followers_apply_only_committed_events_and_writers_wait_for_the_commit(tmp_path):
    """Kafka's RLMM consumes `__remote_log_metadata` below the high watermark: an event its metadata partition's
    followers have not replicated (one a new leader of that partition could truncate) is not applied by other
    brokers, and the writer's committed() waits for it, failing after its timeout."""
    rm = _replicas(tmp_path)
    writer = TopicBasedRemoteLogMetadataManager(InternalTopics(rm), broker_id=1, num_partitions=5)
    reader = TopicBasedRemoteLogMetadataManager(InternalTopics(rm), broker_id=2, num_partitions=5)
    writer.start()
    reader.start()
    md_part = rm.get(REMOTE_LOG_METADATA_TOPIC, metadata_partition(TIP, 5))
    md_part.isr = (1, 2)                         # a follower that has fetched nothing: the HW stays
    a = seg(0, 99)
    writer.add_remote_log_segment_metadata(a)
    writer.update_state(a, S.COPY_SEGMENT_FINISHED)
    assert md_part.log_end_offset == 2 and md_part.high_watermark == 0
    assert writer.list_remote_log_segments(TIP)[0].state == S.COPY_SEGMENT_FINISHED     # its own view
    with pytest.raises(RemoteStorageException, match="not committed"):
        await writer.committed(TIP, 0.2)
    assert reader.catch_up() == 0 and reader.list_remote_log_segments(TIP) == []

    md_part.update_follower_end_offset(2, 1)     # the first event is committed, not the second
    assert reader.catch_up() == 1
    assert [s.state for s in reader.list_remote_log_segments(TIP)] == [S.COPY_SEGMENT_STARTED]
    md_part.update_follower_end_offset(2, 2)
    await writer.committed(TIP, 0.2)
    assert reader.catch_up() == 1
    assert [s.state for s in reader.list_remote_log_segments(TIP)] == [S.COPY_SEGMENT_FINISHED]
    for part in rm.partitions.values():
        part.log.close()
