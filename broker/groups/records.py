"""The record formats of `__consumer_offsets`: Kafka's coordinator record keys and values (its generated *Key/*Value
classes and GroupCoordinatorRecordSerde), byte for byte, so a log written by Kafka loads here and the other way round.

Every record's key starts with an int16 that is the record type (the "key version" of the pre-KIP-848 format):

    0, 1  OffsetCommitKey               group, topic, partition            value OffsetCommitValue v0-4
    2     GroupMetadataKey              group                              value GroupMetadataValue v0-4
    3     ConsumerGroupMetadataKey      group                              value ConsumerGroupMetadataValue v0
    4     ConsumerGroupPartitionMetadataKey (read and ignored; never written, as Kafka 4.1+)
    5     ConsumerGroupMemberMetadataKey  group, member                    value ConsumerGroupMemberMetadataValue v0
    6     ConsumerGroupTargetAssignmentMetadataKey  group                  value ...TargetAssignmentMetadataValue v0
    7     ConsumerGroupTargetAssignmentMemberKey    group, member          value ...TargetAssignmentMemberValue v0
    8     ConsumerGroupCurrentMemberAssignmentKey   group, member          value ...CurrentMemberAssignmentValue v0

Keys are never flexible (int16-length strings). Values start with their own int16 version; OffsetCommitValue and
GroupMetadataValue are flexible from v4 (compact strings/arrays, tagged fields), the consumer-group values from v0.
A null value is a tombstone. What Kafka 3.x/4.x writes, and so what this module writes:

    offset commit      key v1, value v3 (offset, leaderEpoch, metadata, commitTimestamp), or v1 (offset, metadata,
                       commitTimestamp, expireTimestamp) when OffsetCommit v2-4 carried an explicit retention time
    group metadata     key v2, value v3 (protocolType, generation, protocol, leader, currentStateTimestamp, members
                       with groupInstanceId, rebalanceTimeout, sessionTimeout, subscription, assignment)

Appending and loading these records is broker/groups/metadata_store.py.
"""
from __future__ import annotations

import struct
from uuid import UUID
from dataclasses import dataclass, field
from collections.abc import Mapping

from protocol.message_reader import MessageReader
from protocol.wire import uvarint

# ---- record types ---------------------------------------------------------------------------------------------------
OFFSET_COMMIT_V0 = 0
OFFSET_COMMIT = 1
GROUP_METADATA = 2
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
_CONSUMER_GROUP_TYPES = range(3, 9)
_MEMBER_KEYED = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                 CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)

# ---- record values --------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int | None = None   # only from OffsetCommit v2-4 with an explicit retention_time


@dataclass(slots=True)
class MemberMetadataValue:
    """One member in GroupMetadataValue."""
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadataValue] = field(default_factory=list)


@dataclass(slots=True)
class ConsumerMemberValue:
    """ConsumerGroupMemberMetadataValue (the member's subscription and identity)."""
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None


Assignment = dict   # {topic id (UUID): frozenset of partition indexes}


@dataclass(slots=True)
class CurrentAssignmentValue:
    """ConsumerGroupCurrentMemberAssignmentValue: where the member is in its reconciliation."""
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class RecordKey:
    type: int
    group: str
    topic: str | None = None      # offset commits
    partition: int = -1           # offset commits
    member: str | None = None     # member-keyed consumer-group records


# ---- primitive encoding -------------------------------------------------------------------------------------------
class _Out:
    __slots__ = ("b",)

    def __init__(self):
        self.b = bytearray()

    def i8(self, v): self.b += struct.pack(">b", v)
    def i16(self, v): self.b += struct.pack(">h", v)
    def i32(self, v): self.b += struct.pack(">i", v)
    def i64(self, v): self.b += struct.pack(">q", v)

    def uvarint(self, v):
        self.b += uvarint(v)

    def string(self, s):          # int16 length; -1 = null
        if s is None:
            self.i16(-1)
            return
        data = s.encode("utf-8")
        self.i16(len(data))
        self.b += data

    def bytes_(self, data):       # int32 length
        self.i32(len(data))
        self.b += data

    def cstring(self, s):         # compact: uvarint(length + 1); 0 = null
        if s is None:
            self.uvarint(0)
            return
        data = s.encode("utf-8")
        self.uvarint(len(data) + 1)
        self.b += data

    def cbytes(self, data):
        self.uvarint(len(data) + 1)
        self.b += data

    def uuid(self, u: UUID):
        self.b += u.bytes

    def no_tags(self):
        self.uvarint(0)


class CorruptGroupRecord(ValueError):
    pass


class _In(MessageReader):
    __slots__ = ()
    error = CorruptGroupRecord


# ---- keys -----------------------------------------------------------------------------------------------------------
def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    o = _Out()
    o.i16(OFFSET_COMMIT)
    o.string(group)
    o.string(topic)
    o.i32(partition)
    return bytes(o.b)


def group_metadata_key(group: str) -> bytes:
    o = _Out()
    o.i16(GROUP_METADATA)
    o.string(group)
    return bytes(o.b)


def consumer_group_key(record_type: int, group: str, member: str | None = None) -> bytes:
    o = _Out()
    o.i16(record_type)
    o.string(group)
    if record_type in _MEMBER_KEYED:
        o.string(member)
    return bytes(o.b)


def decode_key(data) -> RecordKey | None:
    """The key of any __consumer_offsets record; None for record types this broker does not use (share and streams
    groups, regular expressions, ...)."""
    r = _In(data)
    t = r.i16()
    if t in (OFFSET_COMMIT_V0, OFFSET_COMMIT):
        return RecordKey(t, r.string(), r.string(), r.i32())
    if t == GROUP_METADATA or t in (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
                                    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA):
        return RecordKey(t, r.string())
    if t in _MEMBER_KEYED:
        return RecordKey(t, r.string(), member=r.string())
    return None


# ---- OffsetCommitValue ----------------------------------------------------------------------------------------------
def encode_offset_commit_value(om: OffsetAndMetadata) -> bytes:
    """v3, or v1 when the commit carries an explicit expire timestamp (MetadataVersion.offsetCommitValueVersion)."""
    o = _Out()
    if om.expire_timestamp is not None:
        o.i16(1)
        o.i64(om.offset)
        o.string(om.metadata or "")
        o.i64(om.commit_timestamp)
        o.i64(om.expire_timestamp)
    else:
        o.i16(3)
        o.i64(om.offset)
        o.i32(om.leader_epoch)
        o.string(om.metadata or "")
        o.i64(om.commit_timestamp)
    return bytes(o.b)


def decode_offset_commit_value(data) -> OffsetAndMetadata:
    r = _In(data)
    v = r.version(0, 4, "OffsetCommitValue")
    offset = r.i64()
    leader_epoch = r.i32() if v >= 3 else -1
    metadata = r.cstring() if v >= 4 else r.string()
    commit_ts = r.i64()
    expire = r.i64() if v == 1 else -1
    if v >= 4:
        r.tags()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire if expire != -1 else None)


# ---- GroupMetadataValue ---------------------------------------------------------------------------------------------
GROUP_METADATA_VALUE_VERSION = 3


def encode_group_metadata_value(group, assignment: Mapping[str, bytes]) -> bytes:
    """v3 of a classic group (duck-typed: GroupMetadata and its MemberMetadata)."""
    o = _Out()
    o.i16(GROUP_METADATA_VALUE_VERSION)
    o.string(group.protocol_type or "")
    o.i32(group.generation_id)
    o.string(group.protocol_name)
    o.string(group.leader_id)
    o.i64(group.state_timestamp_ms if group.state_timestamp_ms is not None else -1)
    members = list(group.members.values())
    o.i32(len(members))
    for m in members:
        o.string(m.member_id)
        o.string(m.group_instance_id)
        o.string(m.client_id)
        o.string(m.client_host)
        o.i32(m.rebalance_timeout_ms)
        o.i32(m.session_timeout_ms)
        o.bytes_(bytes(m.metadata(group.protocol_name)))
        o.bytes_(bytes(assignment.get(m.member_id, b"")))
    return bytes(o.b)


def decode_group_metadata_value(data) -> GroupMetadataValue:
    r = _In(data)
    v = r.version(0, 4, "GroupMetadataValue")
    flex = v >= 4
    s = r.cstring if flex else r.string
    protocol_type = s()
    generation = r.i32()
    protocol = s(nullable=True)
    leader = s(nullable=True)
    state_ts = r.i64() if v >= 2 else -1
    members = []
    for _ in range(r.carray_len() if flex else r.i32()):
        member_id = s()
        instance = s(nullable=True) if v >= 3 else None
        client_id = s()
        client_host = s()
        rebalance = r.i32() if v >= 1 else -1
        session = r.i32()
        subscription = r.cbytes() if flex else r.bytes_()
        assignment = r.cbytes() if flex else r.bytes_()
        if flex:
            r.tags()
        members.append(MemberMetadataValue(member_id, instance, client_id, client_host,
                                           rebalance if rebalance >= 0 else session, session, subscription,
                                           assignment))
    if flex:
        r.tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)


# ---- consumer-group (KIP-848) values: all flexible, version 0 ------------------------------------------------------
def _write_assignment(o: _Out, assignment: Assignment) -> None:
    items = sorted(assignment.items(), key=lambda kv: str(kv[0]))
    o.uvarint(len(items) + 1)
    for topic_id, parts in items:
        o.uuid(topic_id)
        parts = sorted(parts)
        o.uvarint(len(parts) + 1)
        for p in parts:
            o.i32(p)
        o.no_tags()


def _read_assignment(r: _In) -> Assignment:
    out = {}
    for _ in range(r.carray_len()):
        topic_id = r.uuid()
        parts = frozenset(r.i32() for _ in range(r.carray_len()))
        r.tags()
        if parts:
            out[topic_id] = parts
    return out


def encode_consumer_group_epoch(epoch: int) -> bytes:
    o = _Out()
    o.i16(0)
    o.i32(epoch)
    o.no_tags()
    return bytes(o.b)


def encode_consumer_member(m: ConsumerMemberValue) -> bytes:
    o = _Out()
    o.i16(0)
    o.cstring(m.instance_id)
    o.cstring(m.rack_id)
    o.cstring(m.client_id)
    o.cstring(m.client_host)
    o.uvarint(len(m.subscribed_topic_names) + 1)
    for t in m.subscribed_topic_names:
        o.cstring(t)
    o.cstring(m.subscribed_topic_regex)
    o.i32(m.rebalance_timeout_ms)
    o.cstring(m.server_assignor)
    o.no_tags()
    return bytes(o.b)


def encode_target_assignment_epoch(epoch: int) -> bytes:
    return encode_consumer_group_epoch(epoch)   # same layout: int32 + tagged fields


def encode_target_assignment_member(assignment: Assignment) -> bytes:
    o = _Out()
    o.i16(0)
    _write_assignment(o, assignment)
    o.no_tags()
    return bytes(o.b)


def encode_current_assignment(a: CurrentAssignmentValue) -> bytes:
    o = _Out()
    o.i16(0)
    o.i32(a.member_epoch)
    o.i32(a.previous_member_epoch)
    o.i8(a.state)
    _write_assignment(o, a.assigned)
    _write_assignment(o, a.pending_revocation)
    o.no_tags()
    return bytes(o.b)


def decode_consumer_group_value(record_type: int, data):
    """Decode the value of a consumer-group record (types 3, 5-8); None for type 4, which is not used."""
    r = _In(data)
    r.version(0, 0, f"consumer group record type {record_type} value")
    if record_type in (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA):
        epoch = r.i32()
        r.tags()
        return epoch
    if record_type == CONSUMER_GROUP_MEMBER_METADATA:
        instance, rack = r.cstring(nullable=True), r.cstring(nullable=True)
        client_id, client_host = r.cstring(), r.cstring()
        topics = tuple(r.cstring() for _ in range(r.carray_len()))
        regex = r.cstring(nullable=True)
        rebalance = r.i32()
        assignor = r.cstring(nullable=True)
        r.tags()
        return ConsumerMemberValue(instance, rack, client_id, client_host, topics, regex, rebalance, assignor)
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        a = _read_assignment(r)
        r.tags()
        return a
    if record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        assigned = _read_assignment(r)
        pending = _read_assignment(r)
        r.tags()
        return CurrentAssignmentValue(epoch, previous, state, assigned, pending)
    return None
