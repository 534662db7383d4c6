"""Remote reads at object-store latency, end to end (issue 27): a real broker whose remote store (the local-filesystem
store) sits behind the fault wrapper's latency and bandwidth cap, and Fetch requests for many partitions that are all
below their local log start.

What a consumer sees:
- one Fetch of many remote partitions is answered with data for all of them (Kafka up to 4.1 answered one remote
  partition per Fetch, KAFKA-14915), within the request's byte limits: `partition_max_bytes` per partition and
  `max_bytes` for the response, whole batches only, the first batch of the response excepted (KAFKA-20019's
  accounting reserves a remote partition's budget before its read ends);
- a remote read slower than `remote.fetch.max.wait.ms` does not hold the local partitions of the same Fetch back;
- a catch-up consumer of every partition reads every record once, in order, while GETs fail and come back short.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from conftest import BrokerProcess
from protocol.record_batch import build_batch
from test_tiered_storage import Store, metric, tiered_overrides

try:
    from .helpers import consumer, wait_until
    from .rawclient import RawClient, decode_batches
except ImportError:  # tests/integration is not a package
    from helpers import consumer, wait_until
    from rawclient import RawClient, decode_batches

pytestmark = pytest.mark.integration

FETCH, LIST_OFFSETS = 1, 2
EARLIEST_LOCAL = -4
PARTITIONS = 12
BATCHES = 13                              # per partition: 3 segments tiered, the 13th batch active
RECORDS = 8                               # per batch
VALUE = 1000                              # bytes per record: a batch is ~8.3 KB

def value(p: int, offset: int) -> bytes:
    return f"p{p}-{offset}".encode().ljust(VALUE, b".")


BATCH = len(build_batch([(None, value(0, j)) for j in range(RECORDS)], timestamp_ms=1 << 40))     # bytes of each batch
SEGMENT_BYTES = 4 * BATCH + 100                                                # -> 4 batches per segment
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1"}
LATENCY = "get_latency_ms=20,get_jitter_ms=10,get_bandwidth_mb_s=80,seed=5"


def broker(tmp, faults: str, **extra) -> BrokerProcess:
    """A tiered broker on the local-filesystem store behind the fault wrapper's `faults`."""
    store = Store(f"file://{tmp}/objects", {"fsync": "false", "faults": faults})
    return BrokerProcess(tmp, tiered_overrides(store, **extra)).start()


def fill(b, topic: str, partitions: int = PARTITIONS, **configs) -> None:
    """`partitions` partitions of BATCHES batches of RECORDS records, all but the active segment tiered."""
    now = int(time.time() * 1000)
    with RawClient(b.bootstrap, timeout=30) as c:
        res = c.create_topic(topic, partitions, {**TIERED, **configs})
        assert res.error_code == 0, res
        for p in range(partitions):
            for i in range(BATCHES):
                base = i * RECORDS
                batch = build_batch([(None, value(p, base + j)) for j in range(RECORDS)], timestamp_ms=now)
                r = c.produce(topic, p, batch, acks=1)
                assert r.error_code == 0 and r.base_offset == base, r

    def offloaded():
        with RawClient(b.bootstrap, timeout=30) as c:
            resp = c.request(LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                "timestamp": EARLIEST_LOCAL} for p in range(partitions)]}]})
        return all(p.offset >= (BATCHES - 1) * RECORDS for p in resp.topics[0].partitions)
    wait_until(offloaded, timeout=60, interval=0.2, what=f"{topic} offloaded")


def fetch(c: RawClient, topics: dict[str, dict[int, int]], max_bytes: int, partition_max_bytes: int,
          max_wait_ms: int = 100):
    """One Fetch v12 of {topic: {partition: offset}} -> {(topic, partition): (error, batches bytes)}."""
    body = {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": t, "partitions": [{"partition": p, "fetch_offset": o,
                                                    "partition_max_bytes": partition_max_bytes}
                                                   for p, o in parts.items()]} for t, parts in topics.items()]}
    resp = c.request(FETCH, 12, body, timeout=60)
    assert resp.error_code == 0, resp
    return {(t.topic, p.partition_index): (p.error_code, bytes(p.records or b""))
            for t in resp.responses for p in t.partitions}


def check(topic: str, part: int, offset: int, data: bytes) -> int:
    """The records in `data` are partition `part`'s from `offset` on, in order; -> the next offset."""
    for r in decode_batches(data):
        if r.offset < offset:
            continue
        assert r.offset == offset, (topic, part, r.offset, offset)
        assert bytes(r.value) == value(part, offset), (topic, part, offset)
        offset += 1
    return offset


@pytest.fixture(scope="module")
def slow_broker(tmp_path_factory):
    """A tiered broker whose store answers each GET in 20-30 ms at 80 MB/s, waiting up to 10 s for remote reads
    (so that a Fetch's answer does not depend on this machine's speed)."""
    b = broker(tmp_path_factory.mktemp("latency"), LATENCY, **{"remote.fetch.max.wait.ms": "10000"})
    yield b
    rc = b.stop()
    text = b.log_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text, text[text.index("Traceback") - 300:][:4000]


def test_one_fetch_answers_every_remote_partition(slow_broker, topic_name):
    """A Fetch of 12 partitions, each below its local log start, answers every one with records from the fetch
    offset, each within partition_max_bytes; fetching on from each answer reads every record once, in order."""
    fill(slow_broker, topic_name)
    offsets = {p: 0 for p in range(PARTITIONS)}
    local_start = (BATCHES - 1) * RECORDS
    with RawClient(slow_broker.bootstrap, timeout=60) as c:
        first = True
        while any(o < local_start for o in offsets.values()):
            got = fetch(c, {topic_name: {p: o for p, o in offsets.items() if o < local_start}},
                        max_bytes=50 << 20, partition_max_bytes=20_000)
            for (_, p), (err, data) in got.items():
                assert err == 0, (p, err)
                assert len(data) <= 20_000, (p, len(data))
                if first:
                    assert data, f"partition {p}: no records in the first Fetch of all {PARTITIONS} partitions"
                offsets[p] = check(topic_name, p, offsets[p], data)
            first = False
        # the tail, from the local log
        got = fetch(c, {topic_name: offsets}, max_bytes=50 << 20, partition_max_bytes=1 << 20)
        for (_, p), (err, data) in got.items():
            assert err == 0 and check(topic_name, p, offsets[p], data) == BATCHES * RECORDS, p


def test_fetch_max_bytes_bounds_a_fetch_of_remote_partitions(slow_broker, topic_name):
    """max_bytes bounds the whole response: the remote partitions read within what the earlier ones left (whole
    batches), the ones after the budget is spent answer no records; only the first partition's first batch may
    exceed the limits, as in Kafka. A second Fetch with the offsets moved on serves the rest."""
    fill(slow_broker, topic_name)
    batch = BATCH
    limit = 3 * batch + batch // 2              # three whole batches and a half
    with RawClient(slow_broker.bootstrap, timeout=60) as c:
        got = fetch(c, {topic_name: {p: 0 for p in range(PARTITIONS)}}, max_bytes=limit,
                    partition_max_bytes=2 * batch)
        sizes = [len(got[(topic_name, p)][1]) for p in range(PARTITIONS)]
        assert all(got[(topic_name, p)][0] == 0 for p in range(PARTITIONS)), got
        assert sum(sizes) <= limit, sizes
        assert all(s <= 2 * batch for s in sizes), sizes
        assert sizes[0] > 0 and sizes[1] > 0, sizes           # the first two fit: 2 + 1 batches
        assert all(s == 0 for s in sizes[2:]), sizes           # a third partition would pass max_bytes
        for p in (0, 1):
            check(topic_name, p, 0, got[(topic_name, p)][1])

        # a first batch larger than both limits is still answered whole (progress), and nothing else
        got = fetch(c, {topic_name: {p: 0 for p in range(PARTITIONS)}}, max_bytes=100, partition_max_bytes=100)
        sizes = [len(got[(topic_name, p)][1]) for p in range(PARTITIONS)]
        assert 0 < sizes[0] == batch and sum(sizes[1:]) == 0, sizes
        assert check(topic_name, 0, 0, got[(topic_name, 0)][1]) == RECORDS


def test_slow_remote_read_does_not_hold_back_local_partitions(tmp_path, topic_name):
    """remote.fetch.max.wait.ms: with every GET taking 3 s, a Fetch of a remote and a local partition answers the
    local one's records and no records (no error) for the remote one; fetching again later gets the remote records."""
    b = broker(tmp_path, "get_latency_ms=3000,seed=1", **{"remote.fetch.max.wait.ms": "200"})
    try:
        fill(b, topic_name, partitions=1)
        local = topic_name + "-local"
        with RawClient(b.bootstrap, timeout=30) as c:
            assert c.create_topic(local, 1).error_code == 0
            r = c.produce(local, 0, build_batch([(None, value(0, 0))], timestamp_ms=int(time.time() * 1000)), acks=1)
            assert r.error_code == 0, r
            # the remote partition reserves its partition_max_bytes (KAFKA-19462), which leaves room for the local one
            got = fetch(c, {topic_name: {0: 0}, local: {0: 0}}, max_bytes=1 << 20, partition_max_bytes=64 << 10,
                        max_wait_ms=0)
            assert got[(local, 0)][0] == 0 and check(local, 0, 0, got[(local, 0)][1]) == 1
            assert got[(topic_name, 0)] == (0, b""), "a 3 s remote read answered within remote.fetch.max.wait.ms"
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "the remote read never answered"
                err, data = fetch(c, {topic_name: {0: 0}}, max_bytes=1 << 20, partition_max_bytes=1 << 20)[
                    (topic_name, 0)]
                assert err == 0, err
                if data:
                    assert check(topic_name, 0, 0, data) > 0
                    break
    finally:
        rc = b.stop()
    assert rc == 0 and "Traceback" not in b.log_text(), b.log_text()[-4000:]


def test_catch_up_consumer_reads_everything_through_failing_gets(tmp_path, topic_name):
    """confluent-kafka reads all 12 remote partitions from offset 0 while the store is slow and 15% of GETs fail
    (retriable 5xx, cut bodies) or come back short: every record once, in order per partition. A failed read
    reaches the consumer as a retriable partition error at most, never as wrong or missing records."""
    faults = LATENCY + ",get_error_rate=0.05,get_cut_rate=0.05,get_short_rate=0.05"
    b = broker(tmp_path, faults)
    try:
        fill(b, topic_name)
        total = PARTITIONS * BATCHES * RECORDS
        c = consumer(b.bootstrap, **{"fetch.max.bytes": 64_000, "message.max.bytes": 64_000,
                                          "max.partition.fetch.bytes": 20_000})
        try:
            c.assign([TopicPartition(topic_name, p, 0) for p in range(PARTITIONS)])
            nxt = {p: 0 for p in range(PARTITIONS)}
            seen = 0
            deadline = time.monotonic() + 120
            while seen < total:
                assert time.monotonic() < deadline, f"read {seen}/{total}: {nxt}"
                for m in c.consume(num_messages=500, timeout=0.5):
                    if m.error() is not None:
                        assert not m.error().fatal(), m.error()
                        continue
                    p = m.partition()
                    assert m.offset() == nxt[p], (p, m.offset(), nxt[p])
                    assert m.value() == value(p, m.offset()), (p, m.offset())
                    nxt[p] += 1
                    seen += 1
            assert all(o == BATCHES * RECORDS for o in nxt.values()), nxt
            errors = metric(b, "kafka_server_brokertopicmetrics_remote_fetch_errors_total", topic_name)
            assert errors > 0, "no remote read failed: the faults were not exercised"
        finally:
            c.close()
    finally:
        rc = b.stop()
    assert rc == 0 and "Traceback" not in b.log_text(), b.log_text()[-4000:]
