"""Group state in `__consumer_offsets`, in Kafka's own record formats (GroupMetadataManager / CoordinatorRecordSerde).

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

The group -> partition mapping is Kafka's `Utils.abs(groupId.hashCode()) % partitions` with Java's String.hashCode
(UTF-16 code units, int32 wrap-around) and Kafka's Utils.abs (Math.abs, except Integer.MIN_VALUE -> 0).

`GroupMetadataStore` appends batches through ReplicaManager.append_internal (one batch per coordinator operation, as
Kafka) and reads partitions back at start-up; `PartitionLoad` folds one partition's records into the latest state per
key (tombstones delete).
"""
from __future__ import annotations

import logging
import re
import struct
import time
import uuid
from dataclasses import dataclass, field
from collections.abc import Mapping

from protocol.record_batch import CONTROL_BIT, iter_batches
from protocol.records import build_records_batch, iter_records

log = logging.getLogger("strata.groups.store")

OFFSETS_TOPIC = "__consumer_offsets"

STORE_DEFAULTS: dict[str, str] = {
    "offsets.topic.num.partitions": "50",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.load.buffer.size": "5242880",
    "offsets.topic.compression.codec": "0",
}

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

# ---- error codes (the append errors Kafka maps, and what it maps them to) -----------------------------------------
NONE = 0
UNKNOWN_SERVER_ERROR = -1
INVALID_FETCH_SIZE = 4
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
KAFKA_STORAGE_ERROR = 56

_UNAVAILABLE = {UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND}
_MOVED = {NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR}
_TOO_BIG = {MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE}


def map_group_error(code: int) -> int:
    """GroupMetadataManager.storeGroup's mapping of a failed append."""
    if code in _UNAVAILABLE:
        return COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return NOT_COORDINATOR
    if code == REQUEST_TIMED_OUT:
        return REBALANCE_IN_PROGRESS
    if code in _TOO_BIG:
        return UNKNOWN_SERVER_ERROR
    return code


def map_offsets_error(code: int) -> int:
    """GroupMetadataManager.storeOffsets' mapping of a failed append."""
    if code in _UNAVAILABLE:
        return COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return NOT_COORDINATOR
    if code in _TOO_BIG:
        return INVALID_COMMIT_OFFSET_SIZE
    return code


def map_operation_error(code: int) -> int:
    """GroupCoordinatorService's mapping for the KIP-848 APIs (ConsumerGroupHeartbeat and friends)."""
    if code in _UNAVAILABLE or code == REQUEST_TIMED_OUT:
        return COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return NOT_COORDINATOR
    if code in _TOO_BIG:
        return UNKNOWN_SERVER_ERROR
    return code


# ---- partitioning ---------------------------------------------------------------------------------------------------
def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, wrapped to a signed int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """org.apache.kafka.common.utils.Utils.abs: Math.abs, except Integer.MIN_VALUE maps to 0."""
    return 0 if n == -2**31 else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    return kafka_abs(java_string_hash(group_id)) % num_partitions


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


Assignment = dict   # {topic id (uuid.UUID): frozenset of partition indexes}


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
        while v >= 0x80:
            self.b.append((v & 0x7F) | 0x80)
            v >>= 7
        self.b.append(v)

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

    def uuid(self, u: uuid.UUID):
        self.b += u.bytes

    def no_tags(self):
        self.uvarint(0)


class CorruptGroupRecord(ValueError):
    pass


class _In:
    __slots__ = ("b", "p")

    def __init__(self, data):
        self.b = bytes(data)
        self.p = 0

    def _take(self, n):
        if n < 0 or self.p + n > len(self.b):
            raise CorruptGroupRecord(f"record field of {n} bytes runs past the end ({len(self.b)} bytes)")
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def _unpack(self, fmt, n):
        return struct.unpack(fmt, self._take(n))[0]

    def i8(self): return self._unpack(">b", 1)
    def i16(self): return self._unpack(">h", 2)
    def i32(self): return self._unpack(">i", 4)
    def i64(self): return self._unpack(">q", 8)

    def uvarint(self):
        v = shift = 0
        while True:
            b = self._take(1)[0]
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7
            if shift > 35:
                raise CorruptGroupRecord("unsigned varint longer than 5 bytes")

    def string(self, nullable=False):
        n = self.i16()
        if n < 0:
            if nullable:
                return None
            raise CorruptGroupRecord("null string in a non-nullable field")
        return self._take(n).decode("utf-8")

    def bytes_(self):
        n = self.i32()
        return b"" if n < 0 else self._take(n)

    def cstring(self, nullable=False):
        n = self.uvarint() - 1
        if n < 0:
            if nullable:
                return None
            raise CorruptGroupRecord("null compact string in a non-nullable field")
        return self._take(n).decode("utf-8")

    def cbytes(self):
        n = self.uvarint() - 1
        return b"" if n < 0 else self._take(n)

    def carray_len(self):
        return max(self.uvarint() - 1, 0)

    def uuid(self):
        return uuid.UUID(bytes=self._take(16))

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out

    def version(self, lo: int, hi: int, what: str) -> int:
        v = self.i16()
        if not lo <= v <= hi:
            raise CorruptGroupRecord(f"unknown {what} version {v}")
        return v


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


# ---- the store ------------------------------------------------------------------------------------------------------
def _setting(config, key: str) -> int:
    value = config.get(key) if config is not None else None
    return int(value) if value not in (None, "") else int(STORE_DEFAULTS[key])


_ERROR_IN_MESSAGE = re.compile(r"failed with error (-?\d+)")


class GroupMetadataStore:
    """Appends coordinator records to `__consumer_offsets` and reads them back. Synchronous: ReplicaManager appends
    to the local log (page cache) before returning, which is when Kafka answers a single-replica coordinator."""

    def __init__(self, replicas, config=None, clock=None):
        self.replicas = replicas
        self.num_partitions = _setting(config, "offsets.topic.num.partitions")
        self.segment_bytes = _setting(config, "offsets.topic.segment.bytes")
        self.load_buffer_size = max(_setting(config, "offsets.load.buffer.size"), 1)
        self.codec = _setting(config, "offsets.topic.compression.codec")
        self._clock = clock or (lambda: int(time.time() * 1000))

    def ensure_topic(self) -> None:
        info = self.replicas.ensure_internal_topic(OFFSETS_TOPIC, self.num_partitions, {
            "cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes), "compression.type": "producer"})
        # An existing topic keeps its partition count (Kafka reads it from the topic, not the config).
        self.num_partitions = info.partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append `records` as one batch to the group's partition; returns NONE or the raw Kafka error of the failed
        append (callers map it with map_group_error / map_offsets_error / map_operation_error)."""
        if not records:
            return NONE
        p = self.partition_for(group_id)
        part = self.replicas.get(OFFSETS_TOPIC, p)
        if part is None:
            return UNKNOWN_TOPIC_OR_PARTITION
        batch = build_records_batch(records, self.codec, timestamp_ms=self._clock())
        if len(batch) > part.log.config.max_message_bytes:
            log.warning("group %s: batch of %d bytes exceeds max.message.bytes of %s-%d", group_id, len(batch),
                        OFFSETS_TOPIC, p)
            return MESSAGE_TOO_LARGE
        try:
            self.replicas.append_internal(OFFSETS_TOPIC, p, batch)
        except KeyError:
            return UNKNOWN_TOPIC_OR_PARTITION
        except OSError as e:
            code = getattr(e, "error_code", None)
            if code is None:
                m = _ERROR_IN_MESSAGE.search(str(e))
                code = int(m.group(1)) if m else KAFKA_STORAGE_ERROR
            log.error("group %s: append to %s-%d failed: %s", group_id, OFFSETS_TOPIC, p, e)
            return code
        except Exception:
            log.exception("group %s: append to %s-%d failed", group_id, OFFSETS_TOPIC, p)
            return UNKNOWN_SERVER_ERROR
        return NONE

    def store_group(self, group, assignment: Mapping[str, bytes]) -> int:
        """A classic group's GroupMetadataValue, or its tombstone once Dead; the client-facing error."""
        value = None if group.state == "Dead" else encode_group_metadata_value(group, assignment)
        err = self.append(group.group_id, [(group_metadata_key(group.group_id), value)])
        return map_group_error(err) if err != NONE else NONE

    def store_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata | None]) -> int:
        """Offset commits (None: tombstone) in one batch; the client-facing error."""
        if not offsets:
            return NONE
        err = self.append(group_id, [
            (offset_commit_key(group_id, t, p), None if om is None else encode_offset_commit_value(om))
            for (t, p), om in offsets.items()])
        return map_offsets_error(err) if err != NONE else NONE

    def read_partition(self, p: int):
        """Yield lists of (key, value) for partition p from its log start to its current end, one list per read of
        offsets.load.buffer.size bytes (Kafka's doLoadGroupsAndOffsets). Control batches are skipped."""
        part = self.replicas.get(OFFSETS_TOPIC, p)
        if part is None:
            return
        plog = part.log
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            try:
                views = plog.read(offset, self.load_buffer_size)
            except Exception as e:   # log start moved under us (retention/cleaner): carry on from the new start
                if plog.log_start_offset > offset:
                    offset = plog.log_start_offset
                    continue
                raise CorruptGroupRecord(f"reading {OFFSETS_TOPIC}-{p} at {offset}: {e}") from e
            chunk: list[tuple[bytes | None, bytes | None]] = []
            nxt = offset
            for mv in views:
                for pos, h in iter_batches(mv):
                    nxt = max(nxt, h.last_offset + 1)
                    if h.attributes & CONTROL_BIT:
                        continue
                    for rec in iter_records(mv[pos:pos + h.size]):
                        if rec.offset >= offset:
                            chunk.append((rec.key, rec.value))
            if nxt <= offset:
                break
            offset = nxt
            yield chunk


class PartitionLoad:
    """The latest state per key of one __consumer_offsets partition, folded record by record."""

    def __init__(self):
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.classic: dict[str, GroupMetadataValue | None] = {}
        self.consumer: dict[str, list[tuple[RecordKey, object]]] = {}   # consumer-group records in log order
        self.kind: dict[str, str] = {}       # group -> "classic" | "consumer": whichever was (re)created last
        self.skipped = 0

    def add(self, key, value) -> None:
        if key is None:
            self.skipped += 1
            return
        try:
            k = decode_key(key)
            if k is None:
                self.skipped += 1
                return
            g = k.group
            if k.type in (OFFSET_COMMIT_V0, OFFSET_COMMIT):
                if value is None:
                    offsets = self.offsets.get(g)
                    if offsets is not None:
                        offsets.pop((k.topic, k.partition), None)
                        if not offsets:
                            del self.offsets[g]
                else:
                    self.offsets.setdefault(g, {})[(k.topic, k.partition)] = decode_offset_commit_value(value)
            elif k.type == GROUP_METADATA:
                v = None if value is None else decode_group_metadata_value(value)
                self.classic[g] = v
                if v is not None:
                    self.kind[g] = "classic"
            elif k.type == CONSUMER_GROUP_PARTITION_METADATA:
                return
            else:
                v = None if value is None else decode_consumer_group_value(k.type, value)
                self.consumer.setdefault(g, []).append((k, v))
                if k.type == CONSUMER_GROUP_METADATA and v is not None:
                    self.kind[g] = "consumer"
        except (CorruptGroupRecord, struct.error, UnicodeDecodeError) as e:
            self.skipped += 1
            log.warning("skipping an undecodable %s record: %s", OFFSETS_TOPIC, e)

    def group_ids(self) -> set[str]:
        return set(self.offsets) | {g for g, v in self.classic.items() if v is not None} | set(self.consumer)


# ---- loading --------------------------------------------------------------------------------------------------------
async def load_groups(coordinator) -> None:
    """Read every partition of __consumer_offsets still marked loading in `coordinator` (a GroupCoordinator) and
    install its groups; each partition leaves the loading set when done, so its groups become available one
    partition at a time while the broker already serves requests (Kafka's scheduleLoadGroupAndOffsets)."""
    import asyncio
    t0 = time.monotonic()
    store = coordinator.store
    for p in sorted(coordinator._loading):
        load = PartitionLoad()
        try:
            for chunk in store.read_partition(p):
                for key, value in chunk:
                    load.add(key, value)
                await asyncio.sleep(0)    # let requests for already-loaded partitions through between reads
            install_partition(coordinator, load)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed; its groups start empty", OFFSETS_TOPIC, p)
        finally:
            coordinator._loading.discard(p)
    log.info("loaded %d classic and %d consumer groups from %s in %.2fs", len(coordinator.groups),
             len(coordinator.consumer.groups), OFFSETS_TOPIC, time.monotonic() - t0)


def install_partition(coordinator, load: PartitionLoad) -> None:
    for group_id in load.group_ids():
        offsets = load.offsets.get(group_id, {})
        if load.kind.get(group_id) == "consumer" and coordinator.consumer.install_loaded(
                group_id, load.consumer.get(group_id, []), offsets):
            continue
        value = load.classic.get(group_id)
        if value is not None or offsets:
            install_classic(coordinator, group_id, value, offsets)


def install_classic(coordinator, group_id: str, value: GroupMetadataValue | None, offsets: dict) -> None:
    """Kafka's GroupMetadata.loadGroup: Stable with the persisted members and generation (each member on a fresh
    session timeout, so it expires unless it heartbeats), or Empty; offsets alone make a simple Empty group."""
    from broker.group_coordinator import EMPTY, STABLE, GroupMetadata, MemberMetadata
    now = coordinator.now_ms()
    members = value.members if value is not None else []
    group = GroupMetadata(group_id, STABLE if members else EMPTY, now)
    if value is not None:
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        if value.current_state_timestamp >= 0:
            group.state_timestamp_ms = value.current_state_timestamp
        for m in members:
            member = MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                                    m.session_timeout, value.protocol_type, [(value.protocol or "", m.subscription)])
            member.assignment = m.assignment
            group.add(member, None)
        group.protocol_type = value.protocol_type or None
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        group.subscribed_topics = group.compute_subscribed_topics()
    group.offsets = dict(offsets)
    coordinator.groups[group_id] = group
    for member in group.members.values():
        coordinator._schedule_heartbeat(group, member)
    log.info("loaded group %s (%s, generation %d, %d members, %d offsets)", group_id, group.state,
             group.generation_id, group.size(), len(group.offsets))
