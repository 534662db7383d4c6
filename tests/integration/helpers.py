"""Shared helpers for the client-library integration tests (confluent-kafka, kafka-python, aiokafka, kcat, admin).

Everything here talks to a real broker process started by the fixtures in tests/conftest.py.
"""
from __future__ import annotations

import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Kafka's record batch v2 header: baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1) crc(4)
# attributes(2) lastOffsetDelta(4) baseTimestamp(8) maxTimestamp(8) producerId(8) producerEpoch(2)
# baseSequence(4) recordsCount(4) = 61 bytes.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _BATCH_HEADER.size
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}



def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll until `predicate` is truthy and return its value. The default timeout is generous on purpose: it only
    costs time when the test is already failing, and a loaded 2-core CI host is much slower than a laptop."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value {last!r})")


# ---- confluent-kafka ---------------------------------------------------------------------------------------------
def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None,
                 admin: AdminClient | None = None) -> None:
    admin = admin or admin_client(bootstrap)
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=10)[name]
    fut.result(timeout=15)
    # metadata must show every partition before producers are pointed at it
    wait_until(lambda: name in (md := admin.list_topics(name, timeout=5)).topics
               and md.topics[name].error is None and len(md.topics[name].partitions) == partitions,
               what=f"topic {name} in metadata")


def producer(bootstrap: str, **conf) -> Producer:
    base = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 5}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(base)


def produce_all(p: Producer, topic: str, messages, partition: int | None = None, timeout: float = 30) -> list:
    """Produce (key, value[, headers[, timestamp]]) tuples; return the delivered Message objects in send order.
    Raises if any delivery failed."""
    delivered: list = [None] * len(messages)

    def cb_for(i):
        def cb(err, msg):
            delivered[i] = (err, msg)
        return cb

    for i, m in enumerate(messages):
        kw = {"key": m[0], "value": m[1], "on_delivery": cb_for(i)}
        if len(m) > 2 and m[2] is not None:
            kw["headers"] = m[2]
        if len(m) > 3 and m[3] is not None:
            kw["timestamp"] = m[3]
        if partition is not None:
            kw["partition"] = partition
        while True:
            try:
                p.produce(topic, **kw)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} messages still queued after {timeout}s"
    errors = [(i, d[0]) for i, d in enumerate(delivered) if d is None or d[0] is not None]
    assert not errors, f"delivery failed: {errors[:5]}"
    return [d[1] for d in delivered]


def consumer(bootstrap: str, **conf) -> Consumer:
    base = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "strata-tests-unused",
            "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100}
    base.update(conf)
    return Consumer(base)


def consume(bootstrap: str, topic: str, count: int, partition: int = 0, offset: int = 0, timeout: float = 30,
            partitions: list[int] | None = None, **conf) -> list:
    """Assign topic/partition(s) at `offset` and return exactly `count` messages (fails on error or timeout).
    Afterwards polls briefly to make sure nothing beyond `count` arrives."""
    c = consumer(bootstrap, **conf)
    try:
        parts = partitions if partitions is not None else [partition]
        c.assign([TopicPartition(topic, p, offset) for p in parts])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, f"got {len(out)}/{count} messages from {topic} in {timeout}s"
            batch = c.consume(num_messages=min(1000, count - len(out)), timeout=0.5)
            out.extend(records(batch))
        extra = [m for m in c.consume(num_messages=10, timeout=0.3) if not m.error()]
        assert not extra, f"unexpected extra messages at offsets {[m.offset() for m in extra]}"
        return out
    finally:
        c.close()


def records(messages) -> list:
    """The records among polled confluent-kafka messages (an iterable such as consume()'s list, or [poll()]):
    None and partition-EOF events are dropped, any other error raises KafkaException."""
    out = []
    for m in messages:
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(m.error())
        out.append(m)
    return out


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


# ---- on-disk log ------------------------------------------------------------------------------------------------
def segment_path(broker, topic: str, partition: int = 0, base_offset: int = 0) -> Path:
    return Path(broker.data_dir) / "logs" / f"{topic}-{partition}" / f"{base_offset:020d}.log"


def read_batches(path: Path) -> list[dict]:
    """Parse the record-batch headers of a raw segment file (stops at the first incomplete/zero batch)."""
    data = Path(path).read_bytes()
    out = []
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        (base_offset, batch_length, _epoch, magic, _crc, attributes, last_delta, base_ts, max_ts, pid, pepoch,
         base_seq, count) = _BATCH_HEADER.unpack_from(data, pos)
        if batch_length <= 0 or pos + 12 + batch_length > len(data):
            break
        out.append({"pos": pos, "base_offset": base_offset, "batch_length": batch_length, "magic": magic,
                    "attributes": attributes, "codec": attributes & 0x07, "last_offset_delta": last_delta,
                    "base_timestamp": base_ts, "max_timestamp": max_ts, "producer_id": pid,
                    "producer_epoch": pepoch, "base_sequence": base_seq, "records_count": count,
                    "raw_attr_bytes": data[pos + 21:pos + 23]})
        pos += 12 + batch_length
    return out


def stored_batches(broker, topic: str, partition: int = 0, min_records: int = 1, timeout: float = 10) -> list[dict]:
    """Batches of the first segment once at least `min_records` records are on disk (appends may sit in the page
    cache; reading the file sees them)."""
    path = segment_path(broker, topic, partition)

    def ready():
        if not path.exists():
            return None
        b = read_batches(path)
        return b if sum(x["records_count"] for x in b) >= min_records else None

    return wait_until(ready, timeout=timeout, what=f"{min_records} records in {path}")
