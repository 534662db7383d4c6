"""Transactions against a real Strata broker, with confluent-kafka (librdkafka) and kafka-python: commits and aborts
across partitions as read_committed and read_uncommitted consumers see them, a consume-transform-produce loop with
send_offsets_to_transaction, fencing of a zombie producer, the coordinator aborting a timed-out transaction, and the
last stable offset in ListOffsets; a restart (kill -9) in the middle of transactions keeps all of it."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

try:
    from .helpers import create_topic, wait_until
except ImportError:  # tests/integration is not a package
    from helpers import create_topic, wait_until

pytestmark = pytest.mark.integration


def txn_producer(bootstrap: str, tid: str, **conf) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "transactional.id": tid,
                  "linger.ms": 5, **conf})
    p.init_transactions(30)
    return p


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None,
             idle: float = 2.0, timeout: float = 30) -> list:
    """Every record of the topic as a consumer with `isolation.level` reads it: until `expect` records arrived, or
    no record came for `idle` seconds."""
    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "r-" + uuid.uuid4().hex,
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if (expect is None or len(out) >= expect) and time.monotonic() - last > idle:
                    break
                continue
            if m.error():
                continue
            out.append((m.partition(), m.offset(), m.key(), m.value()))
            last = time.monotonic()
    finally:
        c.close()
    return out


def values(records) -> list[bytes]:
    return sorted(r[3] for r in records)


def test_commit_and_abort_across_partitions(broker):
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(broker.bootstrap, topic, partitions=3)
    p = txn_producer(broker.bootstrap, "tx-" + topic)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, key=b"%d" % i, value=b"c1-%02d" % i, partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(12):
        p.produce(topic, key=b"%d" % i, value=b"ab-%02d" % i, partition=i % 3)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"c2", partition=1)
    p.commit_transaction(30)
    committed = [b"c1-%02d" % i for i in range(30)] + [b"c2"]
    rc = read_all(broker.bootstrap, topic, 3, "read_committed", expect=len(committed))
    assert values(rc) == sorted(committed)
    ru = read_all(broker.bootstrap, topic, 3, "read_uncommitted", expect=len(committed) + 12)
    assert values(ru) == sorted(committed + [b"ab-%02d" % i for i in range(12)])
    # offsets are the same for both: read_committed skips the aborted records and the markers, it does not renumber
    assert {r[1] for r in rc} <= {r[1] for r in ru}


def test_open_transaction_holds_back_read_committed(broker):
    """A read_committed consumer stops at the last stable offset: records of an open transaction, and everything
    after them, wait for the commit; ListOffsets for latest answers the LSO to it, the high watermark otherwise."""
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(broker.bootstrap, topic)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(10)
    p = txn_producer(broker.bootstrap, "tx-" + topic)
    p.begin_transaction()
    p.produce(topic, value=b"in-txn", partition=0)
    p.flush(10)
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(10)

    def latest(isolation):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "group.id": "x",
                      "isolation.level": isolation})
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        finally:
            c.close()

    assert latest("read_uncommitted") == 3
    assert latest("read_committed") == 1
    assert values(read_all(broker.bootstrap, topic, 1, "read_committed", idle=1.5)) == [b"before"]
    p.commit_transaction(30)
    assert values(read_all(broker.bootstrap, topic, 1, "read_committed", expect=3)) == [b"after", b"before",
                                                                                        b"in-txn"]
    assert latest("read_committed") == 4               # past the COMMIT marker


def test_consume_transform_produce_exactly_once(broker):
    """The loop Kafka Streams and Flink run: read with read_committed, write the output and the consumed offsets
    in one transaction; an aborted round is redone from the committed offsets, so the output holds each input
    exactly once and the group's committed offset is the end of the input."""
    src, dst = "in-" + uuid.uuid4().hex[:8], "out-" + uuid.uuid4().hex[:8]
    create_topic(broker.bootstrap, src, partitions=2)
    create_topic(broker.bootstrap, dst, partitions=2)
    feed = Producer({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"})
    n = 200
    for i in range(n):
        feed.produce(src, key=b"%d" % i, value=b"%d" % i, partition=i % 2)
    feed.flush(10)
    group = "ctp-" + uuid.uuid4().hex[:6]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([src])
    p = txn_producer(broker.bootstrap, "ctp-" + group)
    done, rounds, aborted_once = 0, 0, False
    deadline = time.monotonic() + 90
    while done < n and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(25, 1.0) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, key=m.key(), value=b"x" + m.value(), partition=m.partition())
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                                      30)
        rounds += 1
        if rounds == 3 and not aborted_once:
            aborted_once = True
            p.abort_transaction(30)
            # rewind to what the group committed, as a real application does after an abort
            committed = consumer.committed(consumer.assignment(), timeout=10)
            for tp in committed:
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            continue
        p.commit_transaction(30)
        done += len(msgs)
    consumer.close()
    assert aborted_once and done == n
    out = read_all(broker.bootstrap, dst, 2, "read_committed", expect=n)
    assert sorted(int(r[3][1:]) for r in out) == list(range(n))
    check = Consumer({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "group.id": group})
    committed = check.committed([TopicPartition(src, 0), TopicPartition(src, 1)], timeout=10)
    check.close()
    assert sorted(tp.offset for tp in committed) == [n // 2, n // 2]


def test_new_instance_fences_the_zombie(broker):
    """A second producer with the same transactional.id bumps the epoch: the first one's open transaction is aborted
    and its next operation fails as fenced."""
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(broker.bootstrap, topic)
    tid = "tx-" + topic
    zombie = txn_producer(broker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(10)
    fresh = txn_producer(broker.bootstrap, tid)           # fences the zombie, aborts its transaction
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh", partition=0)
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        zombie.produce(topic, value=b"late", partition=0)
        zombie.commit_transaction(10)
    assert e.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert values(read_all(broker.bootstrap, topic, 1, "read_committed", expect=1)) == [b"fresh"]


def test_coordinator_aborts_a_timed_out_transaction(make_broker):
    from tests.conftest import free_port
    port = free_port()
    b = make_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300", "metrics.port": str(port)})
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(b.bootstrap, topic)
    p = txn_producer(b.bootstrap, "slow", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(topic, value=b"never", partition=0)
    p.flush(10)
    plain = Producer({"bootstrap.servers": b.bootstrap, "broker.address.family": "v4"})
    plain.produce(topic, value=b"later", partition=0)
    plain.flush(10)
    # the open transaction holds read_committed consumers back until the coordinator aborts it
    got = read_all(b.bootstrap, topic, 1, "read_committed", expect=1, idle=0, timeout=30)
    assert values(got) == [b"later"]
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert "timed out" in b.log_text()
    ok = txn_producer(b.bootstrap, "quick")
    ok.begin_transaction()
    ok.produce(topic, value=b"quick", partition=0)
    ok.commit_transaction(30)
    ok.begin_transaction()
    ok.produce(topic, value=b"dropped", partition=0)
    ok.flush(10)                      # sent, so the partition is in the transaction and the abort needs markers
    ok.abort_transaction(30)

    def scraped() -> dict:
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("strata_transaction")}
    m = wait_until(lambda: (lambda m: m if m.get('strata_transactions_completed_total{result="abort"}') == 2
                            else None)(scraped()), what="transaction metrics")
    assert m['strata_transactions_completed_total{result="commit"}'] == 1
    assert m["strata_transactions_timed_out_aborted_total"] == 1
    assert m["strata_transaction_marker_latency_seconds_count"] == 3
    assert m['strata_transactions_open{state="Ongoing"}'] == 0


def test_kafka_python_transactional_producer(broker):
    kafka = pytest.importorskip("kafka")
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(broker.bootstrap, topic, partitions=2)
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-" + topic)
    p.init_transactions()
    p.begin_transaction()
    for i in range(10):
        p.send(topic, value=b"kp-%d" % i, partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, value=b"kp-aborted", partition=0)
    p.flush()
    p.abort_transaction()
    p.close()
    assert values(read_all(broker.bootstrap, topic, 2, "read_committed", expect=10)) == \
        sorted(b"kp-%d" % i for i in range(10))
    kc = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", consumer_timeout_ms=3000, enable_auto_commit=False)
    kc.assign([kafka.TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)])
    got = sorted(m.value for m in kc)
    kc.close()
    assert got == sorted(b"kp-%d" % i for i in range(10))


def test_kill_9_in_the_middle_of_transactions(make_broker):
    """A transaction committed before the crash stays committed, one open at the crash is aborted by the restarted
    coordinator when it times out (its producer is gone), and the producer state rebuilt from the log holds
    read_committed back until then."""
    b = make_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"})
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(b.bootstrap, topic, partitions=2)
    p = txn_producer(b.bootstrap, "crash-" + topic, **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, value=b"ok-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=b"open-%d" % i, partition=i % 2)
    p.flush(10)
    b.kill9()
    b.start()
    plain = Producer({"bootstrap.servers": b.bootstrap, "broker.address.family": "v4"})
    plain.produce(topic, value=b"after-restart", partition=0)
    plain.flush(30)
    got = read_all(b.bootstrap, topic, 2, "read_committed", expect=21, idle=0, timeout=60)
    assert values(got) == sorted([b"ok-%d" % i for i in range(20)] + [b"after-restart"])
    # a new producer instance with the same id starts cleanly
    again = txn_producer(b.bootstrap, "crash-" + topic)
    again.begin_transaction()
    again.produce(topic, value=b"new", partition=1)
    again.commit_transaction(30)
    assert b"new" in values(read_all(b.bootstrap, topic, 2, "read_committed", expect=22))
