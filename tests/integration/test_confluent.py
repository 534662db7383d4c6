"""confluent-kafka (librdkafka 2.x) against a real Strata broker: produce/consume round trips, compression codecs,
record fields, large messages, many partitions, the idempotent producer, ListOffsets and Fetch long-polling.

Consumers here use manual assignment with auto-commit off; groups are covered in test_groups.py.
"""
from __future__ import annotations

import os
import threading
import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, TopicPartition

try:
    from .helpers import (CODEC_IDS, consume, consumer, create_topic, produce_all, producer, stored_batches,
                          watermarks)
    from .rawclient import RawClient
except ImportError:  # tests/integration is not a package
    from helpers import (CODEC_IDS, consume, consumer, create_topic, produce_all, producer, stored_batches,
                         watermarks)
    from rawclient import RawClient
from protocol.record_batch import build_batch

pytestmark = pytest.mark.integration


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_each_codec(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name)
    n = 300
    msgs = [(f"key-{i}".encode(), (f"value-{i:05d}|" * 20).encode()) for i in range(n)]
    p = producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 50})
    delivered = produce_all(p, topic_name, msgs, partition=0)
    assert [d.offset() for d in delivered] == list(range(n))

    got = consume(broker.bootstrap, topic_name, n)
    assert [m.offset() for m in got] == list(range(n))
    assert [(m.key(), m.value()) for m in got] == msgs
    assert watermarks(broker.bootstrap, topic_name) == (0, n)

    batches = stored_batches(broker, topic_name, min_records=n)
    assert sum(b["records_count"] for b in batches) == n
    # the broker keeps the producer's compression (compression.type=producer); for lz4 this also checks that
    # librdkafka enabled its LZ4 feature, which it only does when ApiVersions lists FindCoordinator
    assert {b["codec"] for b in batches} == {CODEC_IDS[codec]}


def test_keys_null_keys_tombstones_headers_and_timestamps(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    ts0 = now_ms() - 3_600_000  # an hour ago: explicit CreateTime, well inside retention
    msgs = [
        (b"k1", b"v1", [("h", b"1"), ("h", b"2"), ("other", b"x")], ts0),   # duplicate header keys, kept in order
        (None, b"no-key", None, ts0 + 1),                                    # null key
        (b"tomb", None, None, ts0 + 2),                                      # tombstone: null value
        (b"k4", b"", [("null-header", None), ("empty", b"")], ts0 + 3),       # empty value, null header value
        (b"", b"empty-key", [("\u00fcnicode-\u00e9", "caf\u00e9".encode())], ts0 + 4),
        (b"\x00\xff binary", bytes(range(256)), None, ts0 - 10),              # timestamps need not be monotonic
    ]
    p = producer(broker.bootstrap)
    produce_all(p, topic_name, msgs, partition=0)

    got = consume(broker.bootstrap, topic_name, len(msgs))
    assert [m.offset() for m in got] == list(range(len(msgs)))
    assert [m.key() for m in got] == [b"k1", None, b"tomb", b"k4", b"", b"\x00\xff binary"]
    assert [m.value() for m in got] == [b"v1", b"no-key", None, b"", b"empty-key", bytes(range(256))]
    assert got[0].headers() == [("h", b"1"), ("h", b"2"), ("other", b"x")]
    assert got[1].headers() is None
    assert got[3].headers() == [("null-header", None), ("empty", b"")]
    assert got[4].headers() == [("\u00fcnicode-\u00e9", "caf\u00e9".encode())]
    assert [m.timestamp() for m in got] == [(TIMESTAMP_CREATE_TIME, t[3]) for t in msgs]


def test_log_append_time_topic_overrides_producer_timestamps(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    old = now_ms() - 3_600_000
    before = now_ms()
    p = producer(broker.bootstrap, **{"linger.ms": 20})
    delivered = produce_all(p, topic_name, [(b"k%d" % i, b"v%d" % i, None, old + i) for i in range(5)],
                            partition=0)
    after = now_ms()
    # the delivery reports carry the broker's append time (one per stored batch), not the producer's timestamps
    assert {d.timestamp()[0] for d in delivered} == {TIMESTAMP_LOG_APPEND_TIME}
    for d in delivered:
        assert before - 1000 <= d.timestamp()[1] <= after + 1000

    got = consume(broker.bootstrap, topic_name, 5)
    assert [(m.key(), m.value()) for m in got] == [(b"k%d" % i, b"v%d" % i) for i in range(5)]
    assert [m.timestamp() for m in got] == [d.timestamp() for d in delivered]


@pytest.mark.slow
def test_one_mib_message_round_trip_and_oversized_rejected(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    big = os.urandom(1_000_000)
    p = producer(broker.bootstrap, **{"message.max.bytes": 1_100_000})
    d = produce_all(p, topic_name, [(b"big", big), (b"small", b"after")], partition=0)
    assert [m.offset() for m in d] == [0, 1]

    # a 2 MiB value passes the producer's own limit but not the broker's max.message.bytes (1048588)
    p2 = producer(broker.bootstrap, **{"message.max.bytes": 3_000_000, "linger.ms": 0})
    results = []
    p2.produce(topic_name, key=b"huge", value=os.urandom(2 * 1024 * 1024), partition=0,
               on_delivery=lambda err, msg: results.append(err))
    assert p2.flush(30) == 0
    assert len(results) == 1 and results[0] is not None
    assert results[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, results[0]

    # the rejected batch took no offset: the next message gets offset 2
    d = produce_all(p, topic_name, [(b"next", b"after-reject")], partition=0)
    assert d[0].offset() == 2

    got = consume(broker.bootstrap, topic_name, 3)
    assert [(m.offset(), m.key()) for m in got] == [(0, b"big"), (1, b"small"), (2, b"next")]
    assert got[0].value() == big
    assert got[2].value() == b"after-reject"


def test_many_partitions_keep_per_partition_order(broker, topic_name):
    parts, per = 32, 40
    create_topic(broker.bootstrap, topic_name, partitions=parts)
    p = producer(broker.bootstrap, **{"linger.ms": 20})
    for part in range(parts):
        for i in range(per):
            p.produce(topic_name, key=f"p{part}".encode(), value=f"{part}:{i}".encode(), partition=part)
        p.poll(0)
    assert p.flush(30) == 0

    got = consume(broker.bootstrap, topic_name, parts * per, partitions=list(range(parts)))
    by_part: dict[int, list] = {}
    for m in got:
        assert m.topic() == topic_name
        by_part.setdefault(m.partition(), []).append(m)
    assert sorted(by_part) == list(range(parts))
    for part, ms in by_part.items():
        assert [m.offset() for m in ms] == list(range(per)), part
        assert [m.value() for m in ms] == [f"{part}:{i}".encode() for i in range(per)], part
        assert {m.key() for m in ms} == {f"p{part}".encode()}
    for part in (0, 17, 31):
        assert watermarks(broker.bootstrap, topic_name, part) == (0, per)


@pytest.mark.slow
def test_idempotent_producer_many_messages_exactly_once_in_order(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    n = 20_000
    p = producer(broker.bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                      "batch.num.messages": 300, "max.in.flight.requests.per.connection": 5})
    for i in range(n):
        while True:
            try:
                p.produce(topic_name, value=b"%d" % i, partition=i % 2)
                break
            except BufferError:
                p.poll(0.05)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0

    for part in (0, 1):
        expected = [b"%d" % i for i in range(part, n, 2)]
        got = consume(broker.bootstrap, topic_name, len(expected), partition=part, timeout=60)
        assert [m.offset() for m in got] == list(range(len(expected)))
        assert [m.value() for m in got] == expected
        assert watermarks(broker.bootstrap, topic_name, part) == (0, len(expected))

        # on disk: every batch carries the producer id, one epoch, and gap-free sequence numbers from 0
        batches = stored_batches(broker, topic_name, part, min_records=len(expected))
        assert len({(b["producer_id"], b["producer_epoch"]) for b in batches}) == 1
        assert batches[0]["producer_id"] >= 0
        seq = 0
        for b in batches:
            assert b["base_sequence"] == seq, (b, seq)
            seq += b["records_count"]
        assert seq == len(expected)


def test_offsets_for_times_and_watermarks(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    base = now_ms() - 600_000
    n = 10
    p = producer(broker.bootstrap, **{"linger.ms": 0})
    for i in range(n):  # one batch per message so the time index has several entries
        produce_all(p, topic_name, [(None, b"m%d" % i, None, base + i * 1000)], partition=0)

    assert watermarks(broker.bootstrap, topic_name) == (0, n)
    c = consumer(broker.bootstrap)
    try:
        def lookup(ts):
            [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=10)
            assert tp.error is None
            return tp.offset

        assert lookup(base - 5000) == 0
        assert lookup(base) == 0
        assert lookup(base + 1) == 1
        assert lookup(base + 3500) == 4
        assert lookup(base + 9000) == 9
        assert lookup(base + 9001) == -1  # later than every record: OFFSET_END
    finally:
        c.close()

    # seeking to the offset found by timestamp returns that record
    got = consume(broker.bootstrap, topic_name, 6, offset=4)
    assert [(m.offset(), m.value(), m.timestamp()[1]) for m in got] == [
        (i, b"m%d" % i, base + i * 1000) for i in range(4, 10)]


def test_fetch_beyond_high_watermark_resets_to_latest(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    produce_all(producer(broker.bootstrap), topic_name, [(None, b"old%d" % i) for i in range(5)], partition=0)
    c = consumer(broker.bootstrap, **{"auto.offset.reset": "latest"})
    try:
        c.assign([TopicPartition(topic_name, 0, 100)])  # OFFSET_OUT_OF_RANGE -> reset to the end (5)
        # the first fetch gets OFFSET_OUT_OF_RANGE and librdkafka resets to END (= 5) within a round trip or two
        assert c.poll(1.5) is None
        produce_all(producer(broker.bootstrap), topic_name, [(None, b"new")], partition=0)
        deadline = time.monotonic() + 10
        m = None
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.5)
        assert m is not None and m.error() is None, m and m.error()
        assert (m.offset(), m.value()) == (5, b"new")
    finally:
        c.close()


def test_long_poll_fetch_wakes_up_on_produce(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    c = consumer(broker.bootstrap, **{"fetch.wait.max.ms": 30_000, "fetch.min.bytes": 1})
    c.assign([TopicPartition(topic_name, 0, 0)])
    received: list = []
    stop = threading.Event()

    def poll():
        while not stop.is_set() and not received:
            m = c.poll(0.2)
            if m is not None and not m.error():
                received.append((time.monotonic(), m))

    t = threading.Thread(target=poll)
    t.start()
    try:
        time.sleep(1.5)  # the consumer's Fetch is now parked on the broker (nothing to read)
        assert not received
        p = producer(broker.bootstrap, **{"linger.ms": 0})
        p.produce(topic_name, key=b"late", value=b"woke-up", partition=0)
        assert p.flush(10) == 0
        acked = time.monotonic()
        t.join(25)
        assert received, "the parked fetch never returned the new record"
        latency = received[0][0] - acked
        # without a wake-up the record would only arrive when the 30 s fetch.wait.max.ms expires
        assert latency < 15, f"record arrived {latency:.2f}s after the produce ack"
        m = received[0][1]
        assert (m.offset(), m.key(), m.value()) == (0, b"late", b"woke-up")
    finally:
        stop.set()
        t.join(5)
        c.close()


def test_consume_from_middle_of_a_batch(broker, topic_name):
    """librdkafka decides its own batching (under load it may send every record alone), so the batch is built here:
    one 10-record batch, then confluent-kafka starts consuming inside it and must skip the records before."""
    create_topic(broker.bootstrap, topic_name)
    n = 10
    with RawClient(broker.bootstrap) as raw:
        resp = raw.produce(topic_name, 0, build_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)]))
    assert (resp.error_code, resp.base_offset) == (0, 0), resp
    batches = stored_batches(broker, topic_name, min_records=n)
    assert [(b["base_offset"], b["records_count"]) for b in batches] == [(0, n)]
    for start in (n // 2, n - 1):
        got = consume(broker.bootstrap, topic_name, n - start, offset=start)
        assert [(m.offset(), m.key(), m.value()) for m in got] == [
            (i, b"k%d" % i, b"v%d" % i) for i in range(start, n)]
