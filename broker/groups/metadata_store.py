"""Group state in `__consumer_offsets` (Kafka's GroupMetadataManager persistence: append path and start-up loader);
the record formats themselves are broker/groups/records.py.

The group -> partition mapping is Kafka's `Utils.abs(groupId.hashCode()) % partitions` with Java's String.hashCode
(UTF-16 code units, int32 wrap-around) and Kafka's Utils.abs (Math.abs, except Integer.MIN_VALUE -> 0).

`GroupMetadataStore` appends batches through replication.internal_topics (one batch per coordinator operation, as
Kafka) and reads partitions back at start-up; `PartitionLoad` folds one partition's records into the latest state per
key (tombstones delete).
"""
from __future__ import annotations

import logging
import re
import struct
import time
from collections.abc import Mapping

from broker.groups.classic.group_metadata import EMPTY, STABLE, GroupMetadata, MemberMetadata
from broker.config import setting
from broker.groups.records import (
    CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA, GROUP_METADATA, OFFSET_COMMIT, OFFSET_COMMIT_V0,
    CorruptGroupRecord, GroupMetadataValue, OffsetAndMetadata, RecordKey, decode_consumer_group_value,
    decode_group_metadata_value, decode_key, decode_offset_commit_value, encode_group_metadata_value,
    encode_offset_commit_value, group_metadata_key, offset_commit_key,
)
from protocol.record_batch import TRANSACTIONAL_BIT
from protocol.records import CONTROL_COMMIT, build_records_batch
from protocol.errors import ErrorCode

log = logging.getLogger("strata.groups.store")

OFFSETS_TOPIC = "__consumer_offsets"

STORE_DEFAULTS: dict[str, str] = {
    "offsets.topic.num.partitions": "50",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.load.buffer.size": "5242880",
    "offsets.topic.compression.codec": "0",
}

# ---- error codes (the append errors Kafka maps, and what it maps them to) -----------------------------------------

_UNAVAILABLE = {ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append}
_MOVED = {ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error}
_TOO_BIG = {ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size}


def map_group_error(code: int) -> int:
    """GroupMetadataManager.storeGroup's mapping of a failed append."""
    if code in _UNAVAILABLE:
        return ErrorCode.coordinator_not_available
    if code in _MOVED:
        return ErrorCode.not_coordinator
    if code == ErrorCode.request_timed_out:
        return ErrorCode.rebalance_in_progress
    if code in _TOO_BIG:
        return ErrorCode.unknown_server_error
    return code


def map_offsets_error(code: int) -> int:
    """GroupMetadataManager.storeOffsets' mapping of a failed append."""
    if code in _UNAVAILABLE:
        return ErrorCode.coordinator_not_available
    if code in _MOVED:
        return ErrorCode.not_coordinator
    if code in _TOO_BIG:
        return ErrorCode.invalid_commit_offset_size
    return code


def map_operation_error(code: int) -> int:
    """GroupCoordinatorService's mapping for the KIP-848 APIs (ConsumerGroupHeartbeat and friends)."""
    if code in _UNAVAILABLE or code == ErrorCode.request_timed_out:
        return ErrorCode.coordinator_not_available
    if code in _MOVED:
        return ErrorCode.not_coordinator
    if code in _TOO_BIG:
        return ErrorCode.unknown_server_error
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


# ---- the store ------------------------------------------------------------------------------------------------------
def _setting(config, key: str) -> int:
    return int(setting(config, key, STORE_DEFAULTS))


_ERROR_IN_MESSAGE = re.compile(r"failed with error (-?\d+)")


class GroupMetadataStore:
    """Appends coordinator records to `__consumer_offsets` and reads them back. Synchronous: ReplicaManager appends
    to the local log (page cache) before returning, which is when Kafka answers a single-replica coordinator."""

    def __init__(self, internal, config=None, clock=None):
        self.internal = internal          # replication.internal_topics.InternalTopics
        self.num_partitions = _setting(config, "offsets.topic.num.partitions")
        self.segment_bytes = _setting(config, "offsets.topic.segment.bytes")
        self.load_buffer_size = max(_setting(config, "offsets.load.buffer.size"), 1)
        self.codec = _setting(config, "offsets.topic.compression.codec")
        self._clock = clock or (lambda: int(time.time() * 1000))

    def topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes), "compression.type": "producer"}

    def ensure_topic(self) -> None:
        # An existing topic keeps its partition count (Kafka reads it from the topic, not the config).
        self.num_partitions = self.internal.ensure(OFFSETS_TOPIC, self.num_partitions, self.topic_configs())

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None,
               **verification) -> int:
        """Append `records` as one batch to the group's partition; returns ErrorCode.none or the raw Kafka error of the failed
        append (callers map it with map_group_error / map_offsets_error / map_operation_error)."""
        if not records:
            return ErrorCode.none
        p = self.partition_for(group_id)
        try:
            max_bytes = self.internal.max_message_bytes(OFFSETS_TOPIC, p)
        except KeyError:
            return ErrorCode.unknown_topic_or_partition
        if producer is None:
            batch = build_records_batch(records, self.codec, timestamp_ms=self._clock())
        else:                # a transactional offset commit: the producer's batch, in its transaction
            batch = build_records_batch(records, self.codec, timestamp_ms=self._clock(), producer_id=producer[0],
                                        producer_epoch=producer[1], base_sequence=0, attributes=TRANSACTIONAL_BIT)
        if len(batch) > max_bytes:
            log.warning("group %s: batch of %d bytes exceeds max.message.bytes of %s-%d", group_id, len(batch),
                        OFFSETS_TOPIC, p)
            return ErrorCode.message_too_large
        try:
            if producer is None:
                self.internal.append(OFFSETS_TOPIC, p, batch)
            else:
                self.internal.append(OFFSETS_TOPIC, p, batch, coordinator_origin=True, **verification)
        except KeyError:
            return ErrorCode.unknown_topic_or_partition
        except OSError as e:
            code = getattr(e, "error_code", None)
            if code is None:
                m = _ERROR_IN_MESSAGE.search(str(e))
                code = int(m.group(1)) if m else ErrorCode.kafka_storage_error
            log.error("group %s: append to %s-%d failed: %s", group_id, OFFSETS_TOPIC, p, e)
            return code
        except Exception:
            log.exception("group %s: append to %s-%d failed", group_id, OFFSETS_TOPIC, p)
            return ErrorCode.unknown_server_error
        return ErrorCode.none

    def store_group(self, group, assignment: Mapping[str, bytes]) -> int:
        """A classic group's GroupMetadataValue, or its tombstone once Dead; the client-facing error."""
        value = None if group.state == "Dead" else encode_group_metadata_value(group, assignment)
        err = self.append(group.group_id, [(group_metadata_key(group.group_id), value)])
        return map_group_error(err) if err != ErrorCode.none else ErrorCode.none

    def store_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata | None],
                      producer: tuple[int, int] | None = None, **verification) -> int:
        """Offset commits (None: tombstone) in one batch, in `producer`'s (id, epoch) transaction when given; the
        client-facing error."""
        if not offsets:
            return ErrorCode.none
        err = self.append(group_id, [
            (offset_commit_key(group_id, t, p), None if om is None else encode_offset_commit_value(om))
            for (t, p), om in offsets.items()], producer, **verification)
        return map_offsets_error(err) if err != ErrorCode.none else ErrorCode.none

    def read_partition(self, p: int):
        """Yield lists of (batch header, records) for partition p from its log start to its current end, one list per
        read of offsets.load.buffer.size bytes (Kafka's doLoadGroupsAndOffsets), transaction markers included."""
        yield from self.internal.read(OFFSETS_TOPIC, p, self.load_buffer_size, by_batch=True)


class PartitionLoad:
    """The latest state per key of one __consumer_offsets partition, folded record by record."""

    def __init__(self):
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.classic: dict[str, GroupMetadataValue | None] = {}
        self.consumer: dict[str, list[tuple[RecordKey, object]]] = {}   # consumer-group records in log order
        self.kind: dict[str, str] = {}       # group -> "classic" | "consumer": whichever was (re)created last
        # transactional offset commits whose marker is not read yet: producer id -> group -> {tp: offsets}
        self.txn_pending: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        self.skipped = 0

    def add_batch(self, h, records) -> None:
        """One batch of the partition: a transactional batch's offsets wait for its marker, which applies them
        (COMMIT) or drops them (ABORT); anything else folds record by record."""
        if h.is_control:
            pending = self.txn_pending.pop(h.producer_id, None)
            marker = records[0].key if records else None
            if pending and marker is not None and len(marker) >= 4 and marker[3] == CONTROL_COMMIT:
                for group_id, offsets in pending.items():
                    self.offsets.setdefault(group_id, {}).update(offsets)
            return
        if h.is_transactional:
            for r in records:
                try:
                    k = decode_key(r.key) if r.key is not None else None
                    if k is not None and k.type in (OFFSET_COMMIT_V0, OFFSET_COMMIT) and r.value is not None:
                        self.txn_pending.setdefault(h.producer_id, {}).setdefault(k.group, {})[
                            (k.topic, k.partition)] = decode_offset_commit_value(r.value)
                except (CorruptGroupRecord, struct.error, UnicodeDecodeError) as e:
                    self.skipped += 1
                    log.warning("skipping an undecodable transactional %s record: %s", OFFSETS_TOPIC, e)
            return
        for r in records:
            self.add(r.key, r.value)

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
async def load_groups(coordinator, partitions: list[int]) -> None:
    """Read these partitions of __consumer_offsets and install their groups in `coordinator` (a GroupCoordinator);
    each partition leaves the loading set when done, so its groups become available one partition at a time while
    the broker already serves requests (Kafka's scheduleLoadGroupAndOffsets)."""
    import asyncio
    t0 = time.monotonic()
    store = coordinator.store
    for p in partitions:
        if p not in coordinator._loading:
            continue                        # resigned meanwhile
        load = PartitionLoad()
        try:
            for chunk in store.read_partition(p):
                for h, records in chunk:
                    load.add_batch(h, records)
                await asyncio.sleep(0)    # let requests for already-loaded partitions through between reads
            install_partition(coordinator, load)
            coordinator.install_pending_txn_offsets(load.txn_pending)
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
