"""Differential scenarios (see test_differential.py) of the data path: Produce (bad records, acks, idempotence),
Fetch (offsets out of range, leader epochs), ListOffsets, DeleteRecords, and topics that were deleted."""
from __future__ import annotations

import struct
import time
import uuid
import zlib

from differential_scenarios import (DELETE_TOPICS, METADATA, PRODUCE, Side, batch, coordinator, err, fetch_part, norm,
                                    offsets_parts, produce_part, scenario)
from protocol.record_batch import build_batch

# ---- Produce -------------------------------------------------------------------------------------------------------

@scenario("produce-missing-topic", expect=("UNKNOWN_TOPIC_OR_PARTITION",))
def _(s: Side):
    return produce_part(s.produce(s.name("-missing"), 0, batch()))


@scenario("produce-missing-partition", expect=("UNKNOWN_TOPIC_OR_PARTITION",))
def _(s: Side):
    t = s.create(partitions=2)
    return [produce_part(s.produce(t, p, batch())) for p in (2, -1)]


def _bad_crc() -> bytes:
    b = bytearray(batch(2))
    b[-3] ^= 0xFF
    return bytes(b)


def _with_magic(magic: int) -> bytes:
    b = bytearray(batch(1))
    b[16] = magic                       # outside the CRC, which starts at the attributes
    return bytes(b)


def _message_set(magic: int) -> bytes:
    """A one-message v0/v1 MessageSet (the pre-0.11 format)."""
    body = bytes([magic, 0]) + (struct.pack(">q", 0) if magic == 1 else b"") + struct.pack(">i", -1) \
        + struct.pack(">i", 5) + b"hello"
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


@scenario("produce-bad-crc", expect=("CORRUPT_MESSAGE",))
def _(s: Side):
    t = s.create()
    return [produce_part(s.produce(t, 0, _bad_crc())), fetch_part(s.fetch(t, 0, 0))]


@scenario("produce-bad-magic-3", expect=("CORRUPT_MESSAGE",))
def _(s: Side):
    t = s.create()
    return [produce_part(s.produce(t, 0, _with_magic(3))), fetch_part(s.fetch(t, 0, 0))]


@scenario("produce-legacy-message-sets-and-batch-count", expect=("INVALID_RECORD",))
def _(s: Side):
    """Produce v3+ carries exactly one magic 2 batch per partition: magic 0/1 message sets, no batch at all and two
    batches are refused, and nothing is appended."""
    t = s.create()
    return [produce_part(s.produce(t, 0, records)) for records in
            (_message_set(1), _message_set(0), b"", batch(1) + batch(1))] + [fetch_part(s.fetch(t, 0, 0))]


@scenario("produce-too-large-for-topic", expect=("MESSAGE_TOO_LARGE",))
def _(s: Side):
    t = s.create(max_message_bytes=2000)
    big = build_batch([(b"k", b"x" * 3000)])
    return [produce_part(s.produce(t, 0, big)), produce_part(s.produce(t, 0, batch()))]


@scenario("produce-too-large-for-broker", expect=("MESSAGE_TOO_LARGE",))
def _(s: Side):
    """message.max.bytes (1048588 on both) limits a batch on a topic without its own max.message.bytes."""
    t = s.create()
    big = build_batch([(b"k", b"x" * (1 << 20))])
    return [produce_part(s.produce(t, 0, big)), produce_part(s.produce(t, 0, batch()))]


@scenario("produce-acks-0")
def _(s: Side):
    """No answer to an acks=0 produce: the next answer on the connection is the next request's."""
    t = s.create()
    s.c.send(PRODUCE[0], PRODUCE[1], s.produce_body(t, 0, batch(2), acks=0), corr=100)
    corr = s.c.send(METADATA[0], METADATA[1], {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)}],
                                                "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False}, corr=101)
    first = struct.unpack(">i", s.c.recv_frame()[:4])[0]
    return {"first_answer": "metadata" if first == corr else first, "fetched": fetch_part(s.fetch(t, 0, 0))}


@scenario("produce-acks-1")
def _(s: Side):
    t = s.create()
    return [produce_part(s.produce(t, 0, batch(2), acks=1)), produce_part(s.produce(t, 0, batch(1), acks=1))]


@scenario("produce-acks-all")
def _(s: Side):
    t = s.create()
    return [produce_part(s.produce(t, 0, batch(2), acks=-1)), produce_part(s.produce(t, 0, batch(1), acks=-1))]


@scenario("produce-invalid-acks-2", expect=("INVALID_REQUIRED_ACKS",))
def _(s: Side):
    t = s.create()
    return [produce_part(s.produce(t, 0, batch(), acks=2)), produce_part(s.produce(t, 0, batch(), acks=-2)),
            fetch_part(s.fetch(t, 0, 0))]


# ---- idempotent Produce --------------------------------------------------------------------------------------------

def _producer(s: Side) -> tuple[int, int]:
    r = s.init_producer_id()
    assert r.error_code == 0 and r.producer_id >= 0, (s.kind, r)
    return r.producer_id, r.producer_epoch


def _idem(pid: int, epoch: int, seq: int, n: int = 1) -> bytes:
    return build_batch([(b"k", b"s%d" % (seq + i)) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq)


@scenario("idempotent-duplicate-sequence")
def _(s: Side):
    t = s.create()
    pid, epoch = _producer(s)
    out = [produce_part(s.produce(t, 0, _idem(pid, epoch, 0, 3))),
           produce_part(s.produce(t, 0, _idem(pid, epoch, 3, 2))),
           produce_part(s.produce(t, 0, _idem(pid, epoch, 0, 3))),     # retry of an older batch
           produce_part(s.produce(t, 0, _idem(pid, epoch, 3, 2)))]     # retry of the last one
    return out + [fetch_part(s.fetch(t, 0, 0))]


@scenario("idempotent-out-of-order-sequence", expect=("OUT_OF_ORDER_SEQUENCE_NUMBER",))
def _(s: Side):
    t = s.create()
    pid, epoch = _producer(s)
    return [produce_part(s.produce(t, 0, _idem(pid, epoch, 0, 2))),
            produce_part(s.produce(t, 0, _idem(pid, epoch, 5, 1))),     # gap
            produce_part(s.produce(t, 0, _idem(pid, epoch, 1, 2))),     # overlaps the last batch
            fetch_part(s.fetch(t, 0, 0))]


@scenario("idempotent-unknown-producer-id")
def _(s: Side):
    """A producer id the partition has no state for (never handed out, or its state expired): any first sequence
    at any epoch is taken."""
    t = s.create()
    return [produce_part(s.produce(t, 0, _idem(987654321, 0, 7))),
            produce_part(s.produce(t, 0, _idem(987654322, 3, 0))),
            fetch_part(s.fetch(t, 0, 0))]


@scenario("idempotent-bad-epoch", expect=("INVALID_PRODUCER_EPOCH", "OUT_OF_ORDER_SEQUENCE_NUMBER"))
def _(s: Side):
    """An idempotent producer bumps its epoch itself (KIP-360: sequence 0 of epoch + 1); the older epoch is fenced
    then, and a newer epoch must start at sequence 0."""
    t = s.create()
    pid, epoch = _producer(s)
    return [produce_part(s.produce(t, 0, _idem(pid, epoch, 0, 2))),
            produce_part(s.produce(t, 0, _idem(pid, epoch + 1, 3))),           # new epoch, not from 0
            produce_part(s.produce(t, 0, _idem(pid, epoch + 1, 0))),           # new epoch from 0
            produce_part(s.produce(t, 0, _idem(pid, epoch, 2))),               # the old epoch: fenced
            produce_part(s.produce(t, 0, _idem(pid, epoch + 1, 1))),
            fetch_part(s.fetch(t, 0, 0))]


@scenario("init-producer-id-idempotent")
def _(s: Side):
    """Without a transactional id every InitProducerId gets a new producer id at epoch 0, also when it names its
    current id and epoch (Kafka bumps an idempotent producer's epoch only in the producer)."""
    first = s.init_producer_id()
    again = s.init_producer_id(None, first.producer_id, first.producer_epoch)
    return [(err(first.error_code), first.producer_id >= 0, first.producer_epoch),
            (err(again.error_code), again.producer_id >= 0, again.producer_id != first.producer_id,
             again.producer_epoch)]


# ---- Fetch ---------------------------------------------------------------------------------------------------------

@scenario("fetch-offset-above-hwm", expect=("OFFSET_OUT_OF_RANGE",))
def _(s: Side):
    t = s.create()
    s.seed(t, 3)
    return [fetch_part(s.fetch(t, 0, o)) for o in (3, 4, 1000, -1)]


@scenario("fetch-below-log-start-after-delete-records", expect=("OFFSET_OUT_OF_RANGE",))
def _(s: Side):
    t = s.create()
    s.seed(t, 5)
    d = s.delete_records(t, 0, 3)
    return [(err(d.error_code), d.low_watermark)] + [fetch_part(s.fetch(t, 0, o)) for o in (0, 2, 3)]


@scenario("fetch-leader-epoch-unknown-and-fenced", expect=("UNKNOWN_LEADER_EPOCH",))
def _(s: Side):
    """current_leader_epoch above the leader's is UNKNOWN_LEADER_EPOCH; in Fetch every negative epoch skips the
    check (ListOffsets and OffsetForLeaderEpoch skip it for -1 only)."""
    t = s.create()
    s.seed(t, 2)
    epoch = s.metadata([t]).topics[0].partitions[0].leader_epoch
    return [epoch] + [fetch_part(s.fetch(t, 0, 0, current_leader_epoch=e)) for e in (epoch + 1, -2, epoch, -1)]


@scenario("fetch-diverging-last-fetched-epoch", expect=("OFFSET_OUT_OF_RANGE",))
def _(s: Side):
    """last_fetched_epoch (v12+): the current epoch is fine; one the leader's epoch history does not have yet is
    OFFSET_OUT_OF_RANGE (no end offset for it)."""
    t = s.create()
    s.seed(t, 3)
    epoch = s.metadata([t]).topics[0].partitions[0].leader_epoch
    return [fetch_part(s.fetch(t, 0, 3, last_fetched_epoch=e, current_leader_epoch=epoch)) for e in
            (epoch, epoch + 1)]


@scenario("fetch-missing-topic-and-partition", expect=("UNKNOWN_TOPIC_ID", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    t = s.create()
    return [fetch_part(s.fetch(s.name("-missing"), 0, 0)), fetch_part(s.fetch(t, 4, 0)),
            fetch_part(s.fetch(uuid.uuid4(), 0, 0, version=13))]


@scenario("fetch-by-topic-id", expect=("UNKNOWN_TOPIC_OR_PARTITION",))
def _(s: Side):
    t = s.create(partitions=2)
    s.seed(t, 2)
    tid = s.topic_id(t)
    return [fetch_part(s.fetch(tid, 0, 0, version=13)), fetch_part(s.fetch(tid, 2, 0, version=13))]


# ---- ListOffsets ---------------------------------------------------------------------------------------------------

@scenario("list-offsets-leader-epoch-unknown-and-fenced", expect=("FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"))
def _(s: Side):
    t = s.create()
    s.seed(t, 2)
    epoch = s.metadata([t]).topics[0].partitions[0].leader_epoch
    return [offsets_parts(s.list_offsets(t, [0], -1, current_leader_epoch=e)) for e in (epoch + 1, -2, epoch, -1)]


@scenario("list-offsets-special-and-bad-timestamps", expect=("UNSUPPORTED_VERSION",))
def _(s: Side):
    """-1 latest, -2 earliest, -3 max timestamp (v7+), -4 earliest local (v8+), -5 latest tiered (v9+); any other
    negative timestamp, or one older than its version, is UNSUPPORTED_VERSION; a time after every record finds
    nothing."""
    t = s.create()
    s.seed(t, 3)
    future = int(time.time() * 1000) + 3600_000
    return [offsets_parts(s.list_offsets(t, [0], ts)) for ts in (-1, -2, -3, -4, -5, -6, -100, future, 0)] + \
        [offsets_parts(s.list_offsets(t, [0], ts, version=v)) for ts, v in ((-3, 6), (-3, 7), (-4, 7), (-5, 8),
                                                                            (-2, 1))]


@scenario("list-offsets-missing-topic-and-partition", expect=("UNKNOWN_TOPIC_OR_PARTITION",))
def _(s: Side):
    t = s.create()
    return [offsets_parts(s.list_offsets(s.name("-missing"), [0], -1)), offsets_parts(s.list_offsets(t, [3], -1))]


@scenario("list-offsets-after-delete-records")
def _(s: Side):
    t = s.create()
    s.seed(t, 4)
    s.delete_records(t, 0, 2)
    return [offsets_parts(s.list_offsets(t, [0], ts)) for ts in (-2, -1, -4, 0)]


# ---- DeleteRecords -------------------------------------------------------------------------------------------------

@scenario("delete-records-beyond-hwm", expect=("OFFSET_OUT_OF_RANGE",))
def _(s: Side):
    t = s.create()
    s.seed(t, 3)
    out = [(err(d.error_code), d.low_watermark) for d in (s.delete_records(t, 0, 4), s.delete_records(t, 0, 3),
                                                          s.delete_records(t, 0, 1))]
    return out + [fetch_part(s.fetch(t, 0, 3))]


@scenario("delete-records-high-watermark-and-bad-offsets",
          expect=("OFFSET_OUT_OF_RANGE", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    """-1 means the high watermark; other negative offsets are out of range; a missing partition is unknown."""
    t = s.create()
    s.seed(t, 3)
    return [(err(d.error_code), d.low_watermark) for d in (s.delete_records(t, 0, -1), s.delete_records(t, 0, -2),
                                                           s.delete_records(t, 5, 0),
                                                           s.delete_records(s.name("-missing"), 0, 0))]


# ---- deleted topics ------------------------------------------------------------------------------------------------

@scenario("deleted-topic-by-name", expect=("UNKNOWN_TOPIC_OR_PARTITION",))
def _(s: Side):
    t = s.create()
    s.seed(t, 2)
    s.delete_topic(t)
    return [produce_part(s.produce(t, 0, batch())), fetch_part(s.fetch(t, 0, 0)),
            offsets_parts(s.list_offsets(t, [0], -1)), norm(s.metadata([t]).topics)]


@scenario("deleted-topic-by-id", expect=("UNKNOWN_TOPIC_ID",))
def _(s: Side):
    t = s.create()
    s.seed(t, 2)
    tid = s.topic_id(t)
    s.delete_topic(t)
    again = s.req(DELETE_TOPICS, {"topics": [{"name": None, "topic_id": tid}], "timeout": 30000})
    md = s.req(METADATA, {"topics": [{"name": None, "topic_id": tid}], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return [fetch_part(s.fetch(tid, 0, 0, version=13)), norm(again.responses), norm(md.topics)]


@scenario("deleted-topic-recreated", expect=("UNKNOWN_TOPIC_ID",))
def _(s: Side):
    """A topic deleted and created again under its name starts empty, with a new topic id."""
    t = s.create()
    s.seed(t, 3)
    old = s.topic_id(t)
    s.delete_topic(t)
    s.create()
    return [s.topic_id(t) != old, fetch_part(s.fetch(t, 0, 0)), fetch_part(s.fetch(old, 0, 0, version=13))]


# ---- more of the data path -----------------------------------------------------------------------------------------

@scenario("produce-timestamp-out-of-range", expect=("INVALID_TIMESTAMP",))
def _(s: Side):
    """CreateTime more than log.message.timestamp.after.max.ms (1 hour) ahead is INVALID_TIMESTAMP; any time in
    the past passes (log.message.timestamp.before.max.ms is unbounded); LogAppendTime topics take any."""
    t = s.create()
    now = int(time.time() * 1000)
    ahead = build_batch([(b"k", b"v")], timestamp_ms=now + 2 * 3600_000)
    out = [produce_part(s.produce(t, 0, ahead)),
           produce_part(s.produce(t, 0, build_batch([(b"k", b"v")], timestamp_ms=now - 10 * 86400_000))),
           # two batches, the second ahead: one batch per partition (v3+) is checked first, INVALID_RECORD
           produce_part(s.produce(t, 0, build_batch([(b"k", b"v")], timestamp_ms=now) +
                                  build_batch([(b"k", b"v")], base_offset=1, timestamp_ms=now + 2 * 3600_000)))]
    t2 = s.create("-append", message_timestamp_type="LogAppendTime")
    return out + [produce_part(s.produce(t2, 0, ahead))]


@scenario("produce-transactional-batch-without-transaction", expect=("TRANSACTIONAL_ID_AUTHORIZATION_FAILED",))
def _(s: Side):
    """A batch flagged transactional from an idempotent producer that began no transaction."""
    t = s.create()
    r = s.init_producer_id()
    txn = build_batch([(b"k", b"v")], producer_id=r.producer_id, producer_epoch=r.producer_epoch, base_sequence=0,
                      attributes=0x10)
    return [produce_part(s.produce(t, 0, txn)), fetch_part(s.fetch(t, 0, 0))]


@scenario("produce-to-internal-topic", expect=("INVALID_TOPIC_EXCEPTION",))
def _(s: Side):
    """Clients may not write to __consumer_offsets."""
    s.metadata(["__consumer_offsets"], auto_create=True)
    deadline = time.monotonic() + 30
    while s.metadata(["__consumer_offsets"]).topics[0].error_code and time.monotonic() < deadline:
        time.sleep(0.1)
    return produce_part(s.produce("__consumer_offsets", 0, batch()))


def _fetch_session(s: Side, topic: str, session_id: int, epoch: int, offset: int = 0):
    r = s.c.request(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "current_leader_epoch": -1,
                                                   "last_fetched_epoch": -1, "log_start_offset": -1,
                                                   "partition_max_bytes": 1 << 20}]}]})
    return r


@scenario("fetch-session-errors", expect=("FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH"))
def _(s: Side):
    """A full fetch (epoch 0) opens a session; the next epoch continues it; a wrong epoch is
    INVALID_FETCH_SESSION_EPOCH, an unknown session FETCH_SESSION_ID_NOT_FOUND; -1 closes it."""
    t = s.create()
    s.seed(t, 2)
    first = _fetch_session(s, t, 0, 0)
    sid = first.session_id
    nxt = _fetch_session(s, t, sid, 1, 2)
    wrong = _fetch_session(s, t, sid, 5, 2)
    unknown = _fetch_session(s, t, (sid ^ 0x5A5A5A) & 0x7FFFFFFF or 1, 1)
    closed = _fetch_session(s, t, sid, -1)
    after = _fetch_session(s, t, sid, 2, 2)
    return [(err(first.error_code), sid != 0, fetch_part(first)), (err(nxt.error_code), nxt.session_id == sid),
            err(wrong.error_code), err(unknown.error_code), (err(closed.error_code), closed.session_id),
            err(after.error_code)]


@scenario("fetch-returns-one-batch-over-max-bytes")
def _(s: Side):
    """KIP-74: the first batch comes whole even when it is larger than max_bytes and partition_max_bytes."""
    t = s.create()
    s.produce(t, 0, build_batch([(b"k", b"x" * 5000)]))
    r = s.c.request(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 100, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                                "last_fetched_epoch": -1, "log_start_offset": -1,
                                                "partition_max_bytes": 100}]}]})
    return fetch_part(r)


@scenario("fetch-and-list-offsets-read-committed")
def _(s: Side):
    """Without transactions the last stable offset is the high watermark."""
    t = s.create()
    s.seed(t, 3)
    return [fetch_part(s.fetch(t, 0, 0, isolation_level=1)),
            offsets_parts(s.list_offsets(t, [0], -1, isolation_level=1))]


@scenario("produce-transactional-batch-outside-a-transaction", expect=("TRANSACTION_ABORTABLE",))
def _(s: Side):
    """A transactional producer's batch to a partition it never added to a transaction (KIP-890 verification)."""
    t = s.create()
    txn_id = s.name("-txn")
    coordinator(s, 1, txn_id)
    r = s.init_producer_id(txn_id, timeout=5)
    body = s.produce_body(t, 0, build_batch([(b"k", b"v")], producer_id=r.producer_id,
                                            producer_epoch=r.producer_epoch, base_sequence=0, attributes=0x10))
    body["transactional_id"] = txn_id
    p = s.req(PRODUCE, body).responses[0].partition_responses[0]
    return [err(r.error_code), produce_part(p), fetch_part(s.fetch(t, 0, 0))]
