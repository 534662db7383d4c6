"""Remote log metadata (KIP-405): the segment state machine, Kafka's metadata records, and the topic-based
RemoteLogMetadataManager that keeps them in the internal topic `__remote_log_metadata`.

Every change to a remote segment is an event appended (key null) to one partition of `__remote_log_metadata`,
chosen by Kafka's RemoteLogMetadataTopicPartitioner, so all events of one user partition are in one metadata
partition, in order. The in-memory view (RemoteLogMetadataCache per user partition) is what lookups use; at start-up
it is rebuilt by replaying the topic from its start. The topic is never compacted or expired (retention.ms=-1).

Record values are byte-compatible with Kafka's TopicBasedRemoteLogMetadataManager (RemoteLogMetadataSerde): a frame
of three unsigned varints (frame version 1, apiKey, message version 0) followed by the message in Kafka's flexible
("tagged fields") encoding, the schemas of storage/src/main/resources/message/*.json:

  apiKey 0 RemoteLogSegmentMetadataRecord v0:
      RemoteLogSegmentId { TopicIdPartition { Name compact-string, Id uuid, Partition int32, tags },
                           Id uuid, tags }
      StartOffset int64, EndOffset int64, BrokerId int32, MaxTimestampMs int64, EventTimestampMs int64,
      SegmentLeaderEpochs compact-array of { LeaderEpoch int32, Offset int64, tags },
      SegmentSizeInBytes int32, CustomMetadata compact-nullable-bytes, RemoteLogSegmentState int8,
      tags (tag 0: TxnIndexEmpty bool, default false: absent in records of Kafka before KIP-1058)
  apiKey 1 RemoteLogSegmentMetadataUpdateRecord v0:
      RemoteLogSegmentId, BrokerId int32, EventTimestampMs int64, CustomMetadata, RemoteLogSegmentState int8, tags
  apiKey 2 RemotePartitionDeleteMetadataRecord v0:
      TopicIdPartition, BrokerId int32, EventTimestampMs int64, RemotePartitionDeleteState int8, tags

A uuid is 16 bytes (most significant half first); compact lengths are unsigned varints of length+1 (0 = null).
"""
from __future__ import annotations

import asyncio
import base64
import bisect
import itertools
import logging
import struct
import time
import uuid
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Callable, Iterable, Iterator, Protocol

from protocol.message_reader import MessageReader
from protocol.wire import uvarint

log = logging.getLogger("strata.remote_log_metadata")

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY, SEGMENT_UPDATE_API_KEY, PARTITION_DELETE_API_KEY = 0, 1, 2


class RemoteLogSegmentState(IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


# Kafka's RemoteLogSegmentState.isValidTransition: self-transitions are allowed (idempotent retries), a copy that
# never finished may go straight to deletion.
_VALID_NEXT = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                                                 RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                  RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                                                   RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
}


def is_valid_transition(src: RemoteLogSegmentState, dst: RemoteLogSegmentState) -> bool:
    return dst in _VALID_NEXT[src]


class RemotePartitionDeleteState(IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


class RemoteStorageException(Exception):
    """Kafka's RemoteStorageException: a remote-tier operation failed. `retriable` as in ObjectStoreError."""

    def __init__(self, message: str, *, retriable: bool = True):
        super().__init__(message)
        self.retriable = retriable


class RemoteResourceNotFoundException(RemoteStorageException):
    def __init__(self, message: str):
        super().__init__(message, retriable=False)


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes without padding (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """Hashed once: it is in the key of every chunk, index and read of the remote tier, looked up many times per Fetch
    (the generated __hash__ hashes the fields, and UUID's hash is Python code: a tenth of a remote Fetch's loop time)."""
    topic_id: uuid.UUID
    topic: str
    partition: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic_id, self.topic, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return TopicIdPartition, (self.topic_id, self.topic, self.partition)   # str hashes differ between processes

    def __str__(self) -> str:
        return f"{kafka_uuid(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    tip: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, tip: TopicIdPartition) -> "RemoteLogSegmentId":
        """A fresh id for every copy attempt, so a retried copy never collides with a half-written one."""
        return cls(tip, uuid.uuid4())

    def __str__(self) -> str:
        return f"RemoteLogSegmentId({self.tip}, {kafka_uuid(self.id)})"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int                    # inclusive
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]   # (epoch, start offset) ascending
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False      # KIP-1058; false (Kafka's default) says the segment may have aborted txns

    @property
    def tip(self) -> TopicIdPartition:
        return self.segment_id.tip

    def with_update(self, u: "RemoteLogSegmentMetadataUpdate") -> "RemoteLogSegmentMetadata":
        return replace(self, state=u.state, event_timestamp_ms=u.event_timestamp_ms, broker_id=u.broker_id,
                       custom_metadata=u.custom_metadata if u.custom_metadata is not None else self.custom_metadata)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    tip: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


# ---- serde (Kafka's flexible-version message encoding) -----------------------------------------------------------
_I8, _I32, _I64 = struct.Struct(">b"), struct.Struct(">i"), struct.Struct(">q")


def _string(s: str) -> bytes:
    b = s.encode()
    return uvarint(len(b) + 1) + b


def _nullable_bytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else uvarint(len(b) + 1) + b


def _tip(t: TopicIdPartition) -> bytes:
    return _string(t.topic) + t.topic_id.bytes + _I32.pack(t.partition) + b"\x00"


def _read_tip(r: MessageReader) -> TopicIdPartition:
    name, tid, part = r.cstring(), r.uuid(), r.i32()
    r.tags()
    return TopicIdPartition(tid, name, part)


def _segment_id(s: RemoteLogSegmentId) -> bytes:
    return _tip(s.tip) + s.id.bytes + b"\x00"


def _read_segment_id(r: MessageReader) -> RemoteLogSegmentId:
    tip = _read_tip(r)
    sid = r.uuid()
    r.tags()
    return RemoteLogSegmentId(tip, sid)


def _frame(api_key: int) -> bytes:
    return uvarint(FRAME_VERSION) + uvarint(api_key) + uvarint(0)


def serialize(event) -> bytes:
    """One metadata event -> a `__remote_log_metadata` record value (Kafka's RemoteLogMetadataSerde)."""
    if isinstance(event, RemoteLogSegmentMetadata):
        out = bytearray(_frame(SEGMENT_METADATA_API_KEY))
        out += _segment_id(event.segment_id)
        out += _I64.pack(event.start_offset) + _I64.pack(event.end_offset) + _I32.pack(event.broker_id)
        out += _I64.pack(event.max_timestamp_ms) + _I64.pack(event.event_timestamp_ms)
        out += uvarint(len(event.segment_leader_epochs) + 1)
        for epoch, offset in event.segment_leader_epochs:
            out += _I32.pack(epoch) + _I64.pack(offset) + b"\x00"
        out += _I32.pack(event.segment_size_in_bytes) + _nullable_bytes(event.custom_metadata)
        out += _I8.pack(int(event.state))
        # tag 0, TxnIndexEmpty: written only when true, as Kafka writes a tagged field only when not its default
        out += b"\x01\x00\x01\x01" if event.txn_index_empty else b"\x00"
        return bytes(out)
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return (_frame(SEGMENT_UPDATE_API_KEY) + _segment_id(event.segment_id) + _I32.pack(event.broker_id)
                + _I64.pack(event.event_timestamp_ms) + _nullable_bytes(event.custom_metadata)
                + _I8.pack(int(event.state)) + b"\x00")
    if isinstance(event, RemotePartitionDeleteMetadata):
        return (_frame(PARTITION_DELETE_API_KEY) + _tip(event.tip) + _I32.pack(event.broker_id)
                + _I64.pack(event.event_timestamp_ms) + _I8.pack(int(event.state)) + b"\x00")
    raise TypeError(f"not a remote log metadata event: {event!r}")


def deserialize(data) -> RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata:
    """Inverse of `serialize`; unknown tagged fields are skipped, as Kafka does. ValueError on anything else."""
    r = MessageReader(data)
    try:
        frame, api_key, version = r.uvarint(), r.uvarint(), r.uvarint()
        if frame != FRAME_VERSION:
            raise ValueError(f"unknown metadata frame version {frame}")
        if version > 1:
            raise ValueError(f"unsupported version {version} of metadata record {api_key}")
        if api_key == SEGMENT_METADATA_API_KEY:
            sid = _read_segment_id(r)
            start, end, broker, max_ts, event_ts = r.i64(), r.i64(), r.i32(), r.i64(), r.i64()
            epochs = []
            for _ in range(r.uvarint() - 1):
                epochs.append((r.i32(), r.i64()))
                r.tags()
            size, custom, state = r.i32(), r.cbytes(nullable=True), RemoteLogSegmentState(r.i8())
            tags = r.tags()
            txn_empty = tags[0] != b"\x00" if 0 in tags else False     # absent: Kafka's default (KIP-1058)
            return RemoteLogSegmentMetadata(sid, start, end, max_ts, broker, event_ts, size, tuple(epochs), state,
                                            custom, txn_empty)
        if api_key == SEGMENT_UPDATE_API_KEY:
            sid = _read_segment_id(r)
            broker, event_ts, custom, state = r.i32(), r.i64(), r.cbytes(nullable=True), RemoteLogSegmentState(r.i8())
            r.tags()
            return RemoteLogSegmentMetadataUpdate(sid, event_ts, custom, state, broker)
        if api_key == PARTITION_DELETE_API_KEY:
            tip = _read_tip(r)
            broker, event_ts, state = r.i32(), r.i64(), RemotePartitionDeleteState(r.i8())
            r.tags()
            return RemotePartitionDeleteMetadata(tip, state, event_ts, broker)
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt remote log metadata record: {e}") from None
    raise ValueError(f"unknown remote log metadata apiKey {api_key}")


# ---- partitioner (Kafka's RemoteLogMetadataTopicPartitioner) ---------------------------------------------------
def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (signed 32-bit result)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    tail = length & ~3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _java_long_hash(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return (v ^ (v >> 32)) & 0xFFFFFFFF


def metadata_partition(tip: TopicIdPartition, num_partitions: int) -> int:
    """toPositive(murmur2(int32 BE of Objects.hash(topicId.lsb, topicId.msb, partition))) % numPartitions."""
    b = tip.topic_id.bytes
    msb, lsb = int.from_bytes(b[:8], "big"), int.from_bytes(b[8:], "big")
    h = 1
    for part in (_java_long_hash(lsb), _java_long_hash(msb), tip.partition & 0xFFFFFFFF):
        h = (31 * h + part) & 0xFFFFFFFF
    return (murmur2(h.to_bytes(4, "big")) & 0x7FFFFFFF) % num_partitions


# ---- in-memory view ---------------------------------------------------------------------------------------------
@dataclass
class _EpochState:
    """Kafka's RemoteLogLeaderEpochState: finished segments by the offset where this epoch starts in them."""
    offsets: list[int] = field(default_factory=list)             # sorted
    ids: list[uuid.UUID] = field(default_factory=list)           # parallel to offsets
    unreferenced: set[uuid.UUID] = field(default_factory=set)    # started / being deleted
    highest_log_offset: int | None = None

    def put(self, offset: int, sid: uuid.UUID) -> None:
        i = bisect.bisect_left(self.offsets, offset)
        if i < len(self.offsets) and self.offsets[i] == offset:
            self.ids[i] = sid
        else:
            self.offsets.insert(i, offset)
            self.ids.insert(i, sid)

    def finished(self, offset: int, sid: uuid.UUID, end: int) -> None:
        """A segment holding this epoch's records [offset, end] was copied (Kafka's
        handleSegmentWithCopySegmentFinishedState). A new leader, whose segments roll at other offsets than its
        predecessor's, tiers a segment overlapping the ones tiered before, e.g. [50, 249] over [0, 99] and
        [100, 199]: the entries from its start on that it covers to their end are dropped (unreferenced), so that the
        segment holding an offset is the one that goes on furthest ([50, 249] for 100, not [100, 199], which ends
        before 200)."""
        while self.offsets and self.offsets[-1] >= offset and self.highest_log_offset is not None \
                and self.highest_log_offset <= end:
            self.offsets.pop()
            self.unreferenced.add(self.ids.pop())
        self.put(offset, sid)
        self.unreferenced.discard(sid)
        self.highest_log_offset = end if self.highest_log_offset is None else max(self.highest_log_offset, end)

    def remove(self, offset: int, sid: uuid.UUID) -> None:
        i = bisect.bisect_left(self.offsets, offset)
        if i < len(self.offsets) and self.offsets[i] == offset and self.ids[i] == sid:
            del self.offsets[i], self.ids[i]

    def floor(self, offset: int) -> uuid.UUID | None:
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.ids[i] if i >= 0 else None


_CACHE_VERSIONS = itertools.count()


class RemoteLogMetadataCache:
    """All remote segments of one user partition (Kafka's RemoteLogMetadataCache)."""

    def __init__(self, tip: TopicIdPartition):
        self.tip = tip
        self.segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, _EpochState] = {}
        self.version = next(_CACHE_VERSIONS)    # new at any change of the segments, unique among caches (for memos)

    def _epoch(self, epoch: int) -> _EpochState:
        st = self.epochs.get(epoch)
        if st is None:
            st = self.epochs[epoch] = _EpochState()
        return st

    def add_copy_in_progress(self, md: RemoteLogSegmentMetadata) -> None:
        if md.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new remote segment must be COPY_SEGMENT_STARTED, not {md.state.name}")
        if md.segment_id.id in self.segments:
            raise ValueError(f"{md.segment_id} already exists")
        self.segments[md.segment_id.id] = md
        self.version = next(_CACHE_VERSIONS)
        for epoch, _ in md.segment_leader_epochs:
            self._epoch(epoch).unreferenced.add(md.segment_id.id)

    def update(self, u: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        sid = u.segment_id.id
        old = self.segments.get(sid)
        if old is None:
            raise KeyError(f"no remote segment {u.segment_id}")
        if not is_valid_transition(old.state, u.state):
            raise ValueError(f"invalid state transition {old.state.name} -> {u.state.name} for {u.segment_id}")
        new = old.with_update(u)
        self.version = next(_CACHE_VERSIONS)
        S = RemoteLogSegmentState
        if u.state == S.COPY_SEGMENT_FINISHED:
            for i, (epoch, start) in enumerate(new.segment_leader_epochs):
                end = (new.segment_leader_epochs[i + 1][1] - 1 if i + 1 < len(new.segment_leader_epochs)
                       else new.end_offset)
                self._epoch(epoch).finished(start, sid, end)
        elif u.state == S.DELETE_SEGMENT_STARTED:
            for epoch, start in new.segment_leader_epochs:
                st = self._epoch(epoch)
                st.remove(start, sid)
                st.unreferenced.add(sid)
        if u.state == S.DELETE_SEGMENT_FINISHED:
            del self.segments[sid]
            for epoch, _ in new.segment_leader_epochs:
                st = self.epochs.get(epoch)
                if st is not None:
                    st.unreferenced.discard(sid)
        else:
            self.segments[sid] = new
        return new

    def segment_for(self, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """Kafka's remoteLogSegmentMetadata(epoch, offset): the finished segment holding `offset` in `epoch`."""
        st = self.epochs.get(epoch)
        sid = st.floor(offset) if st is not None else None
        if sid is None:
            return None
        md = self.segments[sid]
        epochs = md.segment_leader_epochs
        end = md.end_offset
        for i, (e, _) in enumerate(epochs):
            if e == epoch and i + 1 < len(epochs):
                end = epochs[i + 1][1] - 1
        return md if offset <= end else None

    def highest_offset_for_epoch(self, epoch: int) -> int | None:
        st = self.epochs.get(epoch)
        return st.highest_log_offset if st is not None else None

    def list_segments(self, epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """All segments (any state but DELETE_SEGMENT_FINISHED) by start offset; with `epoch`, those holding
        records of that epoch."""
        segs = self.segments.values()
        if epoch is not None:
            segs = [s for s in segs if any(e == epoch for e, _ in s.segment_leader_epochs)]
        return sorted(segs, key=lambda s: (s.start_offset, s.end_offset, s.event_timestamp_ms))

    def remote_log_size(self, epoch: int | None = None) -> int:
        return sum(s.segment_size_in_bytes for s in self.list_segments(epoch)
                   if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


# ---- the manager ------------------------------------------------------------------------------------------------
class InternalTopic(Protocol):
    """How the metadata manager writes and replays `__remote_log_metadata` without holding its logs
    (replication.internal_topics.InternalTopics provides it)."""

    def ensure(self, name: str, partitions: int, configs: dict[str, str]) -> int: ...

    def append(self, name: str, partition: int, batch: bytes) -> int: ...

    def publish(self, name: str, partition: int, batch: bytes) -> "asyncio.Future[int] | None":
        """None when committed already, else a future completing with 0 when committed or an error code."""

    def read(self, name: str, partition: int, chunk_bytes: int = ..., start: int = ...,
             committed_only: bool = ...) -> Iterator[list]: ...


class TopicBasedRemoteLogMetadataManager:
    """RemoteLogMetadataManager over the internal topic `__remote_log_metadata`.

    Writes append to the topic through the InternalTopic interface and then apply the event to this broker's
    in-memory view; `committed()` waits until they are committed, as Kafka's RLMM waits for its consumer to read
    them back. Other brokers' events are applied once committed (`catch_up`).
    """

    def __init__(self, internal: InternalTopic, *, broker_id: int, num_partitions: int = 50, retention_ms: int = -1,
                 time_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.internal = internal
        self.broker_id = broker_id
        self.num_partitions = num_partitions
        self.retention_ms = retention_ms
        self._time_ms = time_ms
        self.caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._next: dict[int, int] = {}           # metadata partition -> next offset to read (catch_up)
        self.partition_deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
        self.events_loaded = 0
        self._uncommitted: dict[TopicIdPartition, "asyncio.Future[int]"] = {}   # newest write not yet committed

    # ---- lifecycle ----
    def topic_configs(self) -> dict[str, str]:
        return {"retention.ms": str(self.retention_ms), "retention.bytes": "-1", "cleanup.policy": "delete",
                "remote.storage.enable": "false"}

    def start(self) -> None:
        """Create the topic if needed, then rebuild the view by replaying every metadata partition."""
        partitions = self.internal.ensure(REMOTE_LOG_METADATA_TOPIC, self.num_partitions, self.topic_configs())
        if partitions != self.num_partitions:
            log.warning("%s has %d partitions, remote.log.metadata.topic.num.partitions is %d; using %d",
                        REMOTE_LOG_METADATA_TOPIC, partitions, self.num_partitions, partitions)
            self.num_partitions = partitions
        t0 = time.monotonic()
        n = bad = 0
        for p in range(self.num_partitions):
            done, skipped = self._replay(p)
            n, bad = n + done, bad + skipped
        self.events_loaded = n
        log.info("remote log metadata: replayed %d event(s) (%d skipped) for %d partition(s) in %.2fs", n, bad,
                 len(self.caches), time.monotonic() - t0)

    def _replay(self, p: int, only: TopicIdPartition | None = None, start: int = 0,
                skip_own: bool = False, committed_only: bool = False) -> tuple[int, int]:
        n = bad = 0
        nxt = start
        for chunk in self.internal.read(REMOTE_LOG_METADATA_TOPIC, p, start=start, committed_only=committed_only):
            for r in chunk:
                nxt = r.offset + 1
                if r.value is None:
                    continue
                try:
                    ev = deserialize(bytes(r.value))
                    if only is not None and (ev.tip if hasattr(ev, "tip") else ev.segment_id.tip) != only:
                        continue
                    if skip_own and ev.broker_id == self.broker_id:
                        continue                  # this broker applied its own events when it wrote them
                    self._apply(ev)
                    n += 1
                except (ValueError, KeyError) as e:
                    bad += 1
                    log.error("skipping remote log metadata event in %s-%d: %s", REMOTE_LOG_METADATA_TOPIC, p, e)
        if only is None:
            self._next[p] = max(self._next.get(p, 0), nxt)
        return n, bad

    def catch_up(self) -> int:
        """Apply the committed events other brokers wrote since the last read of this broker's replicas of the
        metadata partitions (Kafka's RLMM consumes the topic continuously, below the high watermark): a follower
        drops local segments on what it applies, so never on an event a new leader may truncate. Returns how many."""
        n = 0
        for p in range(self.num_partitions):
            done, _ = self._replay(p, start=self._next.get(p, 0), skip_own=True, committed_only=True)
            n += done
        return n

    def reload(self, tip: TopicIdPartition) -> None:
        """Rebuild one partition's view from this broker's replica of its metadata partition: a broker that
        becomes leader learns what the previous leader tiered (Kafka's RLMM follows the topic continuously)."""
        self.caches.pop(tip, None)
        self.partition_deletes.pop(tip, None)
        n, _ = self._replay(metadata_partition(tip, self.num_partitions), tip)
        log.info("remote log metadata of %s reloaded: %d event(s)", tip, n)

    # ---- writes ----
    def _publish(self, tip: TopicIdPartition, event) -> None:
        from protocol.record_batch import build_batch
        p = metadata_partition(tip, self.num_partitions)
        pending = self.internal.publish(REMOTE_LOG_METADATA_TOPIC, p,
                                        build_batch([(None, serialize(event))], timestamp_ms=self._time_ms()))
        if pending is not None:
            self._uncommitted[tip] = pending      # the newest: one partition's events commit in order
        else:
            self._uncommitted.pop(tip, None)

    async def committed(self, tip: TopicIdPartition, timeout_s: float) -> None:
        """Wait until every event written for `tip` is committed in `__remote_log_metadata`, as Kafka's RLMM waits
        (up to remote.log.metadata.consume.wait.ms) for its consumer to read back what it produced with acks=all.
        The copy of a segment counts only then: an uncommitted event dies with a leader of its metadata partition,
        and the local segment must outlive it. Raises RemoteStorageException when it is not committed in time."""
        pending = self._uncommitted.get(tip)
        if pending is None:
            return
        try:
            err = await asyncio.wait_for(asyncio.shield(pending), timeout_s)
        except asyncio.TimeoutError:
            raise RemoteStorageException(f"remote log metadata of {tip} not committed in {timeout_s:g}s") from None
        if self._uncommitted.get(tip) is pending:
            del self._uncommitted[tip]
        if err:
            raise RemoteStorageException(f"remote log metadata of {tip} was not committed (error {err}): the "
                                         f"broker stopped leading {REMOTE_LOG_METADATA_TOPIC}-"
                                         f"{metadata_partition(tip, self.num_partitions)} first")

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        if md.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new remote segment must be COPY_SEGMENT_STARTED, not {md.state.name}")
        cache = self.caches.get(md.tip)
        if cache is not None and md.segment_id.id in cache.segments:
            raise ValueError(f"{md.segment_id} already exists")
        self._publish(md.tip, md)
        self._apply(md)

    def update_remote_log_segment_metadata(self, u: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        if u.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("an update cannot move a segment to COPY_SEGMENT_STARTED")
        cache = self.caches.get(u.segment_id.tip)
        old = cache.segments.get(u.segment_id.id) if cache is not None else None
        if old is None:
            raise KeyError(f"no remote segment {u.segment_id}")
        if not is_valid_transition(old.state, u.state):
            raise ValueError(f"invalid state transition {old.state.name} -> {u.state.name} for {u.segment_id}")
        self._publish(u.segment_id.tip, u)
        return self._apply(u)

    def update_state(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadata:
        return self.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, self._time_ms(), None, state, self.broker_id))

    def put_remote_partition_delete_metadata(self, tip: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        ev = RemotePartitionDeleteMetadata(tip, state, self._time_ms(), self.broker_id)
        self._publish(tip, ev)
        self._apply(ev)

    def _apply(self, ev):
        if isinstance(ev, RemoteLogSegmentMetadata):
            cache = self.caches.get(ev.tip)
            if cache is None:
                cache = self.caches[ev.tip] = RemoteLogMetadataCache(ev.tip)
            cache.add_copy_in_progress(ev)
            return ev
        if isinstance(ev, RemoteLogSegmentMetadataUpdate):
            cache = self.caches.get(ev.segment_id.tip)
            if cache is None:
                raise KeyError(f"no remote segments for {ev.segment_id.tip}")
            return cache.update(ev)
        if isinstance(ev, RemotePartitionDeleteMetadata):
            prev = self.partition_deletes.get(ev.tip)
            if prev is not None and ev.state < prev.state:
                raise ValueError(f"invalid partition delete transition {prev.state.name} -> {ev.state.name}")
            if ev.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self.partition_deletes.pop(ev.tip, None)
                self.caches.pop(ev.tip, None)
            else:
                self.partition_deletes[ev.tip] = ev
            return ev
        raise TypeError(ev)

    # ---- reads ----
    def remote_log_segment_metadata(self, tip: TopicIdPartition, epoch: int, offset: int):
        cache = self.caches.get(tip)
        return cache.segment_for(epoch, offset) if cache is not None else None

    def highest_offset_for_epoch(self, tip: TopicIdPartition, epoch: int) -> int | None:
        cache = self.caches.get(tip)
        return cache.highest_offset_for_epoch(epoch) if cache is not None else None

    def segments_version(self, tip: TopicIdPartition) -> int | None:
        """A value that changes whenever `tip`'s segments or their states change, never seen before (None: it has
        none), for what is computed from them and kept (RemoteLogReader's aborted-transaction walks)."""
        cache = self.caches.get(tip)
        return cache.version if cache is not None else None

    def list_remote_log_segments(self, tip: TopicIdPartition, epoch: int | None = None):
        cache = self.caches.get(tip)
        return cache.list_segments(epoch) if cache is not None else []

    def remote_log_size(self, tip: TopicIdPartition, epoch: int | None = None) -> int:
        cache = self.caches.get(tip)
        return cache.remote_log_size(epoch) if cache is not None else 0

    def pending_partition_deletes(self) -> list[TopicIdPartition]:
        return list(self.partition_deletes)

    def known_partitions(self) -> Iterable[TopicIdPartition]:
        return list(self.caches)
