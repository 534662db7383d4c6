"""__consumer_offsets persistence: Kafka's record formats byte for byte, the group -> partition hash, append error
mapping, and a coordinator that writes, is dropped, and loads its groups and offsets back from a real log."""
from __future__ import annotations

import asyncio
import struct
import uuid
from types import SimpleNamespace

import pytest

from broker.groups import metadata_store as gms
from broker.groups import records as gr
from broker.config import BrokerConfig
from broker.groups.classic.group_metadata import EMPTY, STABLE
from broker.groups.classic.group_coordinator import GroupCoordinator
from broker.groups.metadata_store import PartitionLoad
from broker.groups.records import ConsumerMemberValue, CurrentAssignmentValue, MemberMetadataValue, OffsetAndMetadata
from replication.internal_topics import InternalTopics
from tests.unit.replica_harness import open_replicas
from protocol.record_batch import read_header
from protocol.records import build_records_batch, iter_all_records

TS = 1_700_000_000_000   # 0x0000018BCFE56800


# ---- exact bytes against Kafka's layouts --------------------------------------------------------------------------
def test_offset_commit_key_and_value_bytes_match_kafka():
    # OffsetCommitKey, written with key version 1: int16 version | int16-length group | topic | int32 partition
    assert gr.offset_commit_key("my-group", "my-topic", 3) == bytes.fromhex(
        "0001" "0008" + b"my-group".hex() + "0008" + b"my-topic".hex() + "00000003")
    # OffsetCommitValue v3: offset int64 | leaderEpoch int32 | metadata string | commitTimestamp int64
    om = OffsetAndMetadata(42, 5, "meta", TS)
    assert gr.encode_offset_commit_value(om) == bytes.fromhex(
        "0003" "000000000000002a" "00000005" "0004" + b"meta".hex() + "0000018bcfe56800")
    # v1 when an explicit retention time gave the commit an expire timestamp: no leader epoch, expireTimestamp last
    om1 = OffsetAndMetadata(7, 9, "", TS, TS + 1000)
    assert gr.encode_offset_commit_value(om1) == bytes.fromhex(
        "0001" "0000000000000007" "0000" "0000018bcfe56800" "0000018bcfe56be8")
    assert gr.decode_offset_commit_value(gr.encode_offset_commit_value(om)) == om
    assert gr.decode_offset_commit_value(gr.encode_offset_commit_value(om1)) == OffsetAndMetadata(7, -1, "", TS,
                                                                                                  TS + 1000)


def test_group_metadata_key_bytes_and_tombstone_key():
    assert gr.group_metadata_key("my-group") == bytes.fromhex("0002" "0008" + b"my-group".hex())
    assert gr.decode_key(gr.group_metadata_key("g")) == gr.RecordKey(2, "g")
    assert gr.decode_key(gr.offset_commit_key("g", "t", 1)) == gr.RecordKey(1, "g", "t", 1)
    # key version 0 is the same layout
    assert gr.decode_key(bytes.fromhex("0000" "0001") + b"g" + bytes.fromhex("0001") + b"t" + bytes(4)) == \
        gr.RecordKey(0, "g", "t", 0)
    assert gr.decode_key(struct.pack(">h", 11) + b"\x00\x01g") is None     # share-group records: not ours


def test_offset_commit_value_all_versions_decode():
    v0 = struct.pack(">hqh", 0, 5, 2) + b"md" + struct.pack(">q", TS)
    assert gr.decode_offset_commit_value(v0) == OffsetAndMetadata(5, -1, "md", TS, None)
    v2 = struct.pack(">hqh", 2, 6, 0) + struct.pack(">q", TS)
    assert gr.decode_offset_commit_value(v2) == OffsetAndMetadata(6, -1, "", TS, None)
    # v4 is flexible: compact string (uvarint length+1) and an empty tagged-field section
    v4 = struct.pack(">hqi", 4, 8, 3) + bytes([3]) + b"ab" + struct.pack(">q", TS) + b"\x00"
    assert gr.decode_offset_commit_value(v4) == OffsetAndMetadata(8, 3, "ab", TS, None)
    with pytest.raises(gr.CorruptGroupRecord):
        gr.decode_offset_commit_value(struct.pack(">h", 9) + bytes(20))


def _group(members, protocol="range", generation=4, leader=None, ts=TS):
    ms = {}
    for mid, instance, sub in members:
        ms[mid] = SimpleNamespace(member_id=mid, group_instance_id=instance, client_id="cid", client_host="/10.0.0.1",
                                  rebalance_timeout_ms=30000, session_timeout_ms=10000,
                                  metadata=lambda p, sub=sub: sub)
    return SimpleNamespace(group_id="g", protocol_type="consumer", generation_id=generation, protocol_name=protocol,
                           leader_id=leader, state_timestamp_ms=ts, members=ms, state=STABLE)


def test_group_metadata_value_v3_layout_and_round_trip():
    g = _group([("m1", None, b"S1"), ("m2", "inst-2", b"S2")], leader="m1")
    data = gr.encode_group_metadata_value(g, {"m1": b"A1", "m2": b"A2"})

    def s(x):
        return struct.pack(">h", len(x)) + x.encode()

    def member(mid, inst, sub, asg):
        return (s(mid) + (s(inst) if inst else struct.pack(">h", -1)) + s("cid") + s("/10.0.0.1")
                + struct.pack(">ii", 30000, 10000) + struct.pack(">i", len(sub)) + sub + struct.pack(">i", len(asg))
                + asg)
    expected = (struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 4) + s("range") + s("m1")
                + struct.pack(">q", TS) + struct.pack(">i", 2) + member("m1", None, b"S1", b"A1")
                + member("m2", "inst-2", b"S2", b"A2"))
    assert data == expected
    v = gr.decode_group_metadata_value(data)
    assert (v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp) == \
        ("consumer", 4, "range", "m1", TS)
    assert v.members == [MemberMetadataValue("m1", None, "cid", "/10.0.0.1", 30000, 10000, b"S1", b"A1"),
                         MemberMetadataValue("m2", "inst-2", "cid", "/10.0.0.1", 30000, 10000, b"S2", b"A2")]
    # Empty group: null protocol and leader
    empty = gr.decode_group_metadata_value(gr.encode_group_metadata_value(_group([], None, 5), {}))
    assert (empty.protocol, empty.leader, empty.members, empty.generation) == (None, None, [], 5)


def test_group_metadata_value_old_and_flexible_versions_decode():
    def s(x):
        return struct.pack(">h", len(x)) + x.encode()
    v0 = (struct.pack(">h", 0) + s("consumer") + struct.pack(">i", 1) + s("range") + s("m") + struct.pack(">i", 1)
          + s("m") + s("c") + s("/h") + struct.pack(">i", 6000) + struct.pack(">i", 1) + b"S"
          + struct.pack(">i", 1) + b"A")
    v = gr.decode_group_metadata_value(v0)
    assert v.current_state_timestamp == -1 and v.members[0].rebalance_timeout == 6000   # v0: rebalance = session

    def cs(x):
        return bytes([len(x) + 1]) + x.encode()
    v4 = (struct.pack(">h", 4) + cs("consumer") + struct.pack(">i", 2) + cs("range") + b"\x00"
          + struct.pack(">q", TS) + bytes([2]) + cs("m") + b"\x00" + cs("c") + cs("/h")
          + struct.pack(">ii", 1000, 2000) + bytes([2]) + b"S" + bytes([2]) + b"A" + b"\x00" + b"\x00")
    v = gr.decode_group_metadata_value(v4)
    assert (v.protocol, v.leader, v.generation) == ("range", None, 2)
    assert v.members == [MemberMetadataValue("m", None, "c", "/h", 1000, 2000, b"S", b"A")]


def test_consumer_group_records_round_trip():
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    key = gr.consumer_group_key(gr.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert key == bytes.fromhex("0008" "0001") + b"g" + bytes.fromhex("0001") + b"m"
    assert gr.decode_key(key) == gr.RecordKey(8, "g", member="m")
    assert gr.decode_key(gr.consumer_group_key(3, "g")) == gr.RecordKey(3, "g")
    assert gr.encode_consumer_group_epoch(7) == bytes.fromhex("0000" "00000007" "00")
    assert gr.decode_consumer_group_value(3, gr.encode_consumer_group_epoch(7)) == 7
    m = ConsumerMemberValue("inst", None, "cid", "/h", ("a", "b"), None, 30000, "uniform")
    assert gr.decode_consumer_group_value(5, gr.encode_consumer_member(m)) == m
    target = {t1: frozenset({0, 2}), t2: frozenset({1})}
    assert gr.decode_consumer_group_value(7, gr.encode_target_assignment_member(target)) == target
    cur = CurrentAssignmentValue(5, 4, 1, {t1: frozenset({0})}, {t2: frozenset({3, 4})})
    data = gr.encode_current_assignment(cur)
    assert data[:11] == bytes.fromhex("0000" "00000005" "00000004" "01")
    assert gr.decode_consumer_group_value(8, data) == cur


# ---- partitioning -------------------------------------------------------------------------------------------------
def test_java_string_hash_and_partition_for_match_kafka():
    # Values printed by java (String.hashCode) on this machine; partition = Utils.abs(hash) % 50.
    assert gms.java_string_hash("") == 0
    assert gms.java_string_hash("hello") == 99162322
    assert gms.java_string_hash("my-group") == -1906497762
    assert gms.partition_for("my-group", 50) == 12          # Math.abs; the bit-mask form would give 36
    assert gms.java_string_hash("polygenelubricants") == -2**31
    assert gms.partition_for("polygenelubricants", 50) == 0  # Utils.abs(Integer.MIN_VALUE) == 0
    assert gms.java_string_hash("g-\N{GRINNING FACE}") == 4884617   # a surrogate pair is two UTF-16 units
    assert gms.partition_for("group-1", 50) == 49
    assert gms.partition_for("console-consumer-12345", 50) == 6
    assert gms.java_string_hash("Aa") == gms.java_string_hash("BB") == 2112


# ---- error mapping ------------------------------------------------------------------------------------------------
def test_append_errors_map_like_kafka():
    assert gms.map_group_error(19) == 15 and gms.map_group_error(3) == 15 and gms.map_group_error(6) == 16
    assert gms.map_group_error(10) == -1 and gms.map_group_error(7) == 27
    assert gms.map_offsets_error(18) == 28 and gms.map_offsets_error(56) == 16 and gms.map_offsets_error(20) == 15
    assert gms.map_operation_error(7) == 15 and gms.map_operation_error(10) == -1


class _FailingInternalTopics:
    def __init__(self, exc, max_bytes=1_048_588):
        self.exc = exc
        self.max_bytes = max_bytes

    def max_message_bytes(self, topic, p):
        return self.max_bytes

    def append(self, topic, p, batch):
        raise self.exc


def test_store_append_failures_become_client_errors():
    cases = [(OSError("append to __consumer_offsets-3 failed with error 18: too big"), 28, -1),
             (OSError("disk on fire"), 16, 16),                    # KAFKA_STORAGE_ERROR -> NOT_COORDINATOR
             (KeyError(("__consumer_offsets", 3)), 15, 15)]        # UNKNOWN_TOPIC_OR_PARTITION
    for exc, offsets_err, group_err in cases:
        store = gms.GroupMetadataStore(_FailingInternalTopics(exc), {})
        assert store.store_offsets("g", {("t", 0): OffsetAndMetadata(1)}) == offsets_err
        assert store.store_group(_group([]), {}) == group_err
    store = gms.GroupMetadataStore(_FailingInternalTopics(None, max_bytes=10), {})
    assert store.store_offsets("g", {("t", 0): OffsetAndMetadata(1)}) == 28   # MESSAGE_TOO_LARGE


def test_partition_load_latest_wins_and_tombstones_delete():
    load = PartitionLoad()
    k = gr.offset_commit_key("g", "t", 0)
    load.add(k, gr.encode_offset_commit_value(OffsetAndMetadata(1, -1, "", TS)))
    load.add(k, gr.encode_offset_commit_value(OffsetAndMetadata(2, -1, "", TS)))
    load.add(gr.offset_commit_key("g", "t", 1), gr.encode_offset_commit_value(OffsetAndMetadata(9, -1, "", TS)))
    load.add(gr.offset_commit_key("g", "t", 1), None)
    load.add(gr.group_metadata_key("h"), gr.encode_group_metadata_value(_group([], None, 3), {}))
    load.add(gr.group_metadata_key("h"), None)
    load.add(b"\x00", b"junk")                        # undecodable: skipped
    assert load.offsets == {"g": {("t", 0): OffsetAndMetadata(2, -1, "", TS)}}
    assert load.classic == {"h": None} and load.group_ids() == {"g"} and load.skipped == 1


# ---- a coordinator on a real log ----------------------------------------------------------------------------------
def _config(tmp_path, **extra):
    props = {"log.dirs": str(tmp_path / "logs"), "offsets.topic.num.partitions": "5",
             "group.initial.rebalance.delay.ms": "10", "group.min.session.timeout.ms": "10", **extra}
    return BrokerConfig(props)


def _open(tmp_path, **extra):
    config = _config(tmp_path, **extra)
    replicas = open_replicas(config)
    replicas.startup()
    return replicas, GroupCoordinator(config, replicas=replicas)


async def _loaded(gc):
    gc.start()
    await asyncio.wait_for(gc._load_task, 5)


def _sub(*topics):
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


async def _form_group(gc, group, instance=None):
    r = gc.join_group(group, "", instance, "cid", "/127.0.0.1", 5000, 5000, "consumer", [("range", _sub("t"))])
    if not r.done():
        r = await asyncio.wait_for(r, 5)
    else:
        r = r.result()
        if r.error == 79:
            r = await asyncio.wait_for(gc.join_group(group, r.member_id, instance, "cid", "/127.0.0.1", 5000, 5000,
                                                     "consumer", [("range", _sub("t"))]), 5)
    assert r.error == 0
    s = await asyncio.wait_for(gc.sync_group(group, r.generation_id, r.member_id, instance, "consumer", "range",
                                             {r.member_id: b"ASSIGNMENT"}), 5)
    assert s.error == 0
    return r


async def test_groups_and_offsets_survive_a_reload(tmp_path):
    replicas, gc = _open(tmp_path)
    await _loaded(gc)
    assert replicas.topics.get("__consumer_offsets").configs == {
        "cleanup.policy": "compact", "segment.bytes": "104857600", "compression.type": "producer"}
    r = await _form_group(gc, "g1", instance="inst-1")
    assert gc.commit_offsets("g1", r.generation_id, r.member_id, None,
                             {("t", 0): (10, 3, "m0"), ("t", 1): (20, -1, None)}) == {("t", 0): 0, ("t", 1): 0}
    assert gc.commit_offsets("simple", -1, "", None, {("t", 0): (5, -1, None)}) == {("t", 0): 0}
    assert gc.commit_offsets("gone", -1, "", None, {("t", 0): (6, -1, None)}) == {("t", 0): 0}
    assert gc.delete_groups(["gone"]) == {"gone": 0}
    assert gc.delete_offsets("simple", [("t", 1)]) == (0, {("t", 1): 0})
    # Records landed in the group's partition, in Kafka's format.
    p = gms.partition_for("g1", 5)
    part = replicas.get("__consumer_offsets", p)
    keys = [gr.decode_key(rec.key) for mv in part.log.read(0, 1 << 20) for rec in iter_all_records(mv)]
    assert gr.RecordKey(2, "g1") in keys and gr.RecordKey(1, "g1", "t", 0) in keys
    gc.stop()
    replicas.shutdown()

    replicas, gc = _open(tmp_path)
    gc.start()
    # Until the partition is loaded, the group's APIs say so.
    assert gc.fetch_offsets("g1", None)[0] == 14
    assert gc.describe_group("g1").error == 14
    await asyncio.wait_for(gc._load_task, 5)
    g = gc.groups["g1"]
    assert (g.state, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id) == \
        (STABLE, r.generation_id, "consumer", "range", r.member_id)
    member = g.members[r.member_id]
    assert (member.group_instance_id, member.assignment, member.session_timeout_ms) == ("inst-1", b"ASSIGNMENT", 5000)
    assert g.static_members == {"inst-1": r.member_id} and g.subscribed_topics == {"t"}
    assert gc.fetch_offsets("g1", None) == (0, {("t", 0): OffsetAndMetadata(10, 3, "m0", g.offsets[("t", 0)]
                                                                           .commit_timestamp),
                                                ("t", 1): OffsetAndMetadata(20, -1, "", g.offsets[("t", 1)]
                                                                            .commit_timestamp)})
    # The member carries on with its generation, as if nothing happened.
    assert gc.heartbeat("g1", r.member_id, "inst-1", r.generation_id) == 0
    assert gc.groups["simple"].state == EMPTY and set(gc.groups["simple"].offsets) == {("t", 0)}
    assert "gone" not in gc.groups and gc.fetch_offsets("gone", [("t", 0)]) == (0, {("t", 0): None})
    gc.stop()
    replicas.shutdown()


async def test_loaded_members_expire_unless_they_heartbeat(tmp_path):
    replicas, gc = _open(tmp_path)
    await _loaded(gc)
    r = await _form_group(gc, "g")
    gc.stop()
    replicas.shutdown()
    replicas, gc = _open(tmp_path)
    await _loaded(gc)
    assert gc.groups["g"].state == STABLE
    gc.groups["g"].members[r.member_id].session_timeout_ms = 50
    gc._schedule_heartbeat(gc.groups["g"], gc.groups["g"].members[r.member_id])
    await asyncio.sleep(0.2)
    # Session expired -> rebalance -> Empty (persisted, so it stays Empty after another reload).
    for _ in range(50):
        if gc.groups["g"].state == EMPTY:
            break
        await asyncio.sleep(0.05)
    assert gc.groups["g"].state == EMPTY and gc.groups["g"].generation_id == r.generation_id + 1
    gc.stop()
    replicas.shutdown()
    replicas, gc = _open(tmp_path)
    await _loaded(gc)
    assert gc.groups["g"].state == EMPTY and gc.groups["g"].generation_id == r.generation_id + 1
    gc.stop()
    replicas.shutdown()


async def test_retention_writes_tombstones(tmp_path):
    now = [TS]
    config = _config(tmp_path, **{"offsets.retention.minutes": "1"})
    replicas = open_replicas(config)
    replicas.startup()
    gc = GroupCoordinator(config, clock=lambda: now[0], replicas=replicas)
    await _loaded(gc)
    assert gc.commit_offsets("s", -1, "", None, {("t", 0): (1, -1, None)}) == {("t", 0): 0}
    now[0] += 61_000
    assert gc.cleanup_expired_offsets() == 1 and "s" not in gc.groups
    part = replicas.get("__consumer_offsets", gms.partition_for("s", 5))
    recs = [(gr.decode_key(r.key), r.value) for mv in part.log.read(0, 1 << 20) for r in iter_all_records(mv)]
    assert recs[-2:] == [(gr.RecordKey(1, "s", "t", 0), None), (gr.RecordKey(2, "s"), None)]
    gc.stop()
    replicas.shutdown()
    replicas = open_replicas(config)
    replicas.startup()
    gc = GroupCoordinator(config, clock=lambda: now[0], replicas=replicas)
    await _loaded(gc)
    assert "s" not in gc.groups
    gc.stop()
    replicas.shutdown()


async def test_store_failure_fails_the_commit_and_changes_nothing(tmp_path):
    replicas, gc = _open(tmp_path)
    await _loaded(gc)

    def broken(topic, p, batch):
        raise OSError(f"append to {topic}-{p} failed with error 19: not enough replicas")
    gc.store.internal.append = broken
    assert gc.commit_offsets("s", -1, "", None, {("t", 0): (1, -1, None)}) == {("t", 0): 15}
    assert not gc.groups["s"].offsets
    gc.stop()
    replicas.shutdown()


async def test_load_applies_transactional_offsets_by_their_markers(tmp_path):
    """Offsets a transaction committed (TxnOffsetCommit) count once its COMMIT marker is in the partition; an
    aborted transaction's do not; an open transaction's stay pending (OffsetFetch with require_stable answers
    UNSTABLE_OFFSET_COMMIT for them) until its marker arrives."""
    replicas, gc = _open(tmp_path)
    gc.store.ensure_topic()
    p = gc.store.partition_for("g")
    part = replicas.get("__consumer_offsets", p)
    for pid, tp in ((7, ("t", 0)), (8, ("t", 1)), (9, ("t", 2))):
        assert gc.store.store_offsets("g", {tp: OffsetAndMetadata(pid * 10)}, (pid, 0)) == 0
    assert part.log.append_marker(7, 0, 0, True, 0).error_code == 0
    assert part.log.append_marker(8, 0, 0, False, 0).error_code == 0
    await _loaded(gc)
    assert {tp: om.offset for tp, om in gc.groups["g"].offsets.items()} == {("t", 0): 70}
    assert gc.has_pending_txn_offsets("g", ("t", 2)) and not gc.has_pending_txn_offsets("g", ("t", 1))
    gc.complete_transaction(9, p, commit=True)
    assert {tp: om.offset for tp, om in gc.groups["g"].offsets.items()} == {("t", 0): 70, ("t", 2): 90}
    assert not gc.has_pending_txn_offsets("g", ("t", 2))
    gc.stop()
    replicas.shutdown()
