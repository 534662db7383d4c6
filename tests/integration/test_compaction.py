"""Log compaction against a real broker: confluent-kafka producers and consumers, kill -9 while cleaning, and the
null-key rule of compacted topics. Private brokers run the cleaner with a short backoff."""
from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from helpers import consumer, create_topic, producer, records, wait_until, watermarks

pytestmark = [pytest.mark.integration]

FAST_CLEANER = {"log.cleaner.backoff.ms": "100"}


def log_bytes(b, topic: str) -> int:
    """Bytes of the partition's .log files; a segment the cleaner deletes between listing and stat counts as 0."""
    d = Path(b.data_dir) / "logs" / f"{topic}-0"
    total = 0
    for p in d.glob("*.log"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def produce_updates(b, topic: str, n: int, keys: int, seed: int, expected: dict) -> int:
    """n updates over `keys` keys, batched and lz4-compressed by an idempotent producer; fills `expected` with each
    key's last value. Returns the bytes of keys and values sent."""
    rnd = random.Random(seed)
    p = producer(b.bootstrap, **{"compression.type": "lz4", "linger.ms": 20, "batch.size": 65536,
                                 "enable.idempotence": True, "queue.buffering.max.messages": 200_000})
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    sent = 0
    for i in range(n):
        key = b"key-%04d" % rnd.randrange(keys)
        value = b"%s=%d:" % (key, i) + rnd.randbytes(24).hex().encode()
        expected[key] = value
        sent += len(key) + len(value)
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:5]
    return sent


def read_to_end(bootstrap: str, topic: str, timeout: float = 30) -> list:
    """Every message from offset 0 up to the high watermark (compaction leaves gaps)."""
    _lo, hi = watermarks(bootstrap, topic)
    c = consumer(bootstrap)
    out = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while not out or out[-1].offset() < hi - 1:
            assert time.monotonic() < deadline, f"read {len(out)} messages, up to {out[-1].offset() if out else None}"
            out.extend(records(c.consume(num_messages=5000, timeout=0.5)))
    finally:
        c.close()
    offsets = [m.offset() for m in out]
    assert offsets == sorted(set(offsets)), "offsets must increase"
    return out


def check_latest(messages, expected: dict) -> None:
    seen = {}
    for m in messages:
        seen[m.key()] = m.value()
    assert seen == expected


def assert_no_traceback(b) -> None:
    text = b.log_text()
    assert "Traceback" not in text, text[text.index("Traceback") - 300:][:4000]


def test_compaction_keeps_each_keys_latest_value(make_broker, topic_name):
    b = make_broker(FAST_CLEANER)
    create_topic(b.bootstrap, topic_name, config={"cleanup.policy": "compact", "segment.bytes": "262144"})
    expected: dict = {}
    sent = produce_updates(b, topic_name, 100_000, 1000, seed=1, expected=expected)
    assert len(expected) == 1000
    wait_until(lambda: log_bytes(b, topic_name) < sent / 4, timeout=30, interval=0.2,
               what=f"compaction to shrink the log below {sent // 4} bytes")
    messages = read_to_end(b.bootstrap, topic_name)
    check_latest(messages, expected)
    assert len(messages) < 100_000 / 4
    assert watermarks(b.bootstrap, topic_name) == (0, 100_000)
    assert re.search(rf"cleaned log {re.escape(topic_name)}-0 up to offset \d+", b.log_text())
    assert_no_traceback(b)


def test_kill_9_while_cleaning_leaves_a_readable_log(make_broker, topic_name):
    b = make_broker(FAST_CLEANER)
    # min.compaction.lag.ms holds cleaning back until the round is produced; small segments make a pass several
    # swaps long, so the kill lands before, inside or after one
    create_topic(b.bootstrap, topic_name, config={"cleanup.policy": "compact", "segment.bytes": "65536",
                                                   "min.compaction.lag.ms": "1500"})
    expected: dict = {}
    total = 0
    rnd = random.Random(5)
    begun = re.compile(rf"beginning cleaning of log {re.escape(topic_name)}-0")
    d = Path(b.data_dir) / "logs" / f"{topic_name}-0"
    interrupted = []
    for round_ in range(3):
        n = 40_000
        seen = len(begun.findall(b.log_text()))
        produce_updates(b, topic_name, n, 1000, seed=10 + round_, expected=expected)
        total += n
        wait_until(lambda: len(begun.findall(b.log_text())) > seen, timeout=20, what="a cleaning pass to begin")
        time.sleep(rnd.uniform(0, 0.1))
        b.kill9()
        interrupted.append(sorted(p.name for p in d.iterdir() if p.name.endswith((".cleaned", ".swap"))))
        # Recovery alone must complete or discard the interrupted pass: start once with the cleaner off, so a new
        # pass cannot write fresh .cleaned files before the directory is checked.
        b.overrides["log.cleaner.enable"] = "false"
        b.start()
        assert not [p for p in d.iterdir() if p.name.endswith((".cleaned", ".swap"))]
        messages = read_to_end(b.bootstrap, topic_name)
        check_latest(messages, expected)
        assert watermarks(b.bootstrap, topic_name)[1] == total
        assert b.stop() == 0
        b.overrides["log.cleaner.enable"] = "true"
        b.start()
    print("cleaner files found after each kill -9:", interrupted)
    # it keeps cleaning after the restarts
    wait_until(lambda: len(read_to_end(b.bootstrap, topic_name)) < total / 3, timeout=20, interval=0.3,
               what="compaction after restarts")
    check_latest(read_to_end(b.bootstrap, topic_name), expected)
    assert_no_traceback(b)


def test_null_key_to_compacted_topic_is_invalid_record(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    results = {}

    def cb(name):
        def on_delivery(err, msg):
            results[name] = err
        return on_delivery

    for codec in ("none", "lz4"):
        p = producer(broker.bootstrap, **{"compression.type": codec, "retries": 0})
        p.produce(topic_name, value=b"no key", partition=0, on_delivery=cb(f"null-{codec}"))
        p.flush(15)
        p.produce(topic_name, key=b"k", value=b"keyed", partition=0, on_delivery=cb(f"keyed-{codec}"))
        p.flush(15)
    for codec in ("none", "lz4"):
        err = results[f"null-{codec}"]
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
        assert results[f"keyed-{codec}"] is None
    # a topic that is not compacted takes null keys
    other = topic_name + "-plain"
    create_topic(broker.bootstrap, other)
    p = producer(broker.bootstrap)
    p.produce(other, value=b"no key", partition=0, on_delivery=cb("plain"))
    p.flush(15)
    assert results["plain"] is None
    assert watermarks(broker.bootstrap, topic_name) == (0, 2)


def test_keyless_records_get_per_record_errors(broker, topic_name):
    """KIP-467: the partition answers INVALID_RECORD with one record_errors entry per keyless record (its index in
    the batch) and Kafka's processRecordErrors message; nothing of the batch is appended."""
    from protocol.record_batch import build_batch
    from rawclient import RawClient

    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    why = f"Compacted topic cannot accept message without key in topic partition {topic_name}-0."
    with RawClient(broker.bootstrap, timeout=10) as c:
        for version in (8, 9):            # classic and flexible encodings
            p = c.produce(topic_name, 0, build_batch([(b"k", b"a"), (None, b"b"), (b"k", b"c"), (None, b"d")]),
                          version=version)
            assert p.error_code == 87, p
            assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [(1, why), (3, why)]
            assert p.error_message == (
                "One or more records have been rejected due to 2 record errors in total, and only showing the first "
                f"three errors at most: [RecordError(batchIndex=1, message='{why}'), "
                f"RecordError(batchIndex=3, message='{why}')]")
        ok = c.produce(topic_name, 0, build_batch([(b"k", b"keyed")]))
        assert ok.error_code == 0 and ok.base_offset == 0        # the refused batches left nothing behind


def test_keyless_record_fails_for_kafka_python(broker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, acks="all")
    try:
        with pytest.raises(InvalidRecordError):
            p.send(topic_name, value=b"no key", partition=0).get(timeout=15)
        assert p.send(topic_name, key=b"k", value=b"keyed", partition=0).get(timeout=15).offset == 0
    finally:
        p.close()
