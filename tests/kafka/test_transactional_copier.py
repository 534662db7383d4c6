"""Kafka's own `TransactionalMessageCopier`, as Kafka's transactions system test runs it: one copier per input
partition reads it (read_committed, offsets committed in its transactions), writes every record to an output topic in
transactions of 100 with random aborts, while brokers leading its partitions or coordinating its transactions are
killed with SIGKILL and restarted. Afterwards the output topic, read committed, must hold every input record exactly
once. The same run on three Apache Kafka brokers proves the expectation right."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.kafka.failover import Lines, create_topics, leader, three_brokers, wait_for_isr
from tests.integration.rawclient import RawClient

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
PARTITIONS = 3
MESSAGES = 15000


def coordinator_of(cluster, tid: str, timeout: float = 60) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for b in cluster.brokers.values():
            if not b.alive():
                continue
            try:
                with RawClient(b.bootstrap) as raw:
                    c = raw.request(10, 4, {"key_type": 1, "coordinator_keys": [tid]}).coordinators[0]
                if c.error_code == 0 and c.node_id in cluster.brokers:
                    return c.node_id
            except Exception:
                pass
        time.sleep(0.2)
    return None


def read_committed(bootstrap: str, topic: str, expected: int, timeout: float = 120,
                   where: dict | None = None) -> list[bytes]:
    """The topic's values, read committed; `where` collects each value's [(partition, offset)]."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-" + uuid.uuid4().hex,
                  "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    deadline = time.monotonic() + timeout
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        msgs = [m for m in c.consume(1000, 0.5) if m.error() is None]
        got = [m.value() for m in msgs]
        if where is not None:
            for m in msgs:
                where.setdefault(m.value(), []).append((m.partition(), m.offset()))
        out += got
        if got:
            idle_since = time.monotonic()
        elif len(out) >= expected and time.monotonic() - idle_since > 3:
            break
    c.close()
    return out


def processed(copier: Lines) -> int:
    done = [e.get("totalProcessed", 0) for e in copier.events if isinstance(e, dict)]
    return max(done, default=0)


def wait_for_progress(copiers: list[Lines], n: int, timeout: float = 180) -> None:
    """Until each copier still running has copied `n` records (so a kill lands in the middle of its work)."""
    deadline = time.monotonic() + timeout
    while any(c.proc.poll() is None and processed(c) < n for c in copiers):
        assert time.monotonic() < deadline, [c.tail() for c in copiers]
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("system", ["strata", "kafka"])
def test_copier_output_holds_every_input_record_once(kafka_jars, system, tmp_path):
    src, dst = "copier-in", "copier-out"
    with three_brokers(system, tmp_path) as cluster:
        create_topics(cluster, {src: PARTITIONS, dst: PARTITIONS}, {"min.insync.replicas": "2"})
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 20})
        for i in range(MESSAGES):
            p.produce(src, value=b"%d" % i, partition=i % PARTITIONS)
        assert p.flush(60) == 0
        copiers = [Lines(tmp_path / f"copier-{i}.stderr", COPIER, "--input-topic", src, "--input-partition", str(i),
                         "--output-topic", dst, "--broker-list", cluster.bootstrap, "--transactional-id",
                         f"copier-{i}", "--consumer-group", "copier-group", "--transaction-size", "100",
                         "--transaction-timeout", "30000", "--max-messages", "-1", "--enable-random-aborts")
                   for i in range(PARTITIONS)]
        killed = []
        try:
            for n, pick in enumerate((lambda: leader(cluster, dst, 0), lambda: coordinator_of(cluster, "copier-1"),
                                      lambda: leader(cluster, src, 2))):
                wait_for_progress(copiers, (n + 1) * MESSAGES // PARTITIONS // 5)
                victim = pick()
                if victim is None or not any(c.proc.poll() is None for c in copiers):
                    continue
                killed.append(victim)
                cluster.brokers[victim].kill9()
                time.sleep(3)
                cluster.brokers[victim].start()
                wait_for_isr(cluster, [src, dst])
            for c in copiers:
                rc = c.wait_exit(600)
                assert rc == 0, f"copier exited {rc}\n{c.tail()}"
        finally:
            for c in copiers:
                c.stop()
        where: dict = {}
        out = read_committed(cluster.bootstrap, dst, MESSAGES, where=where)
        print(f"{system}: killed {killed}, {len(out)} records read committed from {dst}; aborted transactions "
              f"seen by the copiers: {sum(1 for c in copiers for e in c.events if 'abort' in str(e).lower())}")
        twice = sorted((v for v, at in where.items() if len(at) > 1), key=lambda v: where[v])
        assert not twice, f"{len(twice)} records copied twice, e.g. (partition, offset) of each copy: " + \
            ", ".join(f"{v.decode()} at {where[v]}" for v in twice[:: max(1, len(twice) // 20)])
        missing = set(b"%d" % i for i in range(MESSAGES)) - set(out)
        assert not missing, f"{len(missing)} input records missing from the output, e.g. {sorted(missing)[:5]}"
        assert len(out) == MESSAGES
