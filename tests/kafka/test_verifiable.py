"""Kafka's own system-test clients on three Strata brokers: `VerifiableProducer` (acks=all, idempotent) writes while
the leader of a partition is killed with SIGKILL and restarted, round after round; then `VerifiableConsumer` reads
the topic back, in a classic group and in a KIP-848 (group.protocol=consumer) group. Every acknowledged record
(`producer_send_success`: partition, offset, key, value) is read exactly once, at its offset, with its key and value,
in order per partition, and the log holds nothing else: what Kafka's replication guarantees (acks=all,
min.insync.replicas=2, RF=3) and its system tests check with these same two programs. The same run on three Apache
Kafka brokers proves the expectation, and this file's reading of the tools' output, right."""
from __future__ import annotations

from collections import defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.kafka.failover import Lines, create_topics, leader, three_brokers, wait_for_isr

PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
PARTITIONS = 3
KILL_ROUNDS = 3


class Producer(Lines):
    def acked(self) -> int:
        return sum(1 for e in list(self.events) if isinstance(e, dict) and e["name"] == "producer_send_success")

    def acked_on(self, partition: int) -> int:
        return sum(1 for e in list(self.events) if isinstance(e, dict)
                   and e["name"] == "producer_send_success" and e["partition"] == partition)

    def wait_for_more(self, n: int, partition: int | None = None, timeout: float = 180) -> None:
        count = self.acked if partition is None else (lambda: self.acked_on(partition))
        target = count() + n
        where = "" if partition is None else f" on partition {partition}"
        self.wait_for(lambda: count() >= target, timeout, f"{n} more acknowledged records{where}")


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def consume(tmp_path, bootstrap: str, topic: str, group: str, total: int, protocol: str) -> Lines:
    """VerifiableConsumer in a new group, from the earliest offset, committing after each poll, until it has
    consumed `total` records (then it exits by itself)."""
    c = Lines(tmp_path / f"{group}.stderr", CONSUMER, "--topic", topic, "--bootstrap-server", bootstrap,
              "--group-id", group, "--group-protocol", protocol, "--reset-policy", "earliest",
              "--max-messages", str(total), "--verbose")
    rc = c.wait_exit(240)
    assert rc == 0, f"VerifiableConsumer exited {rc}\n{c.tail()}"
    return c


def check_read_back(acked: list[dict], consumer: Lines, hw: dict[int, int]) -> None:
    records = consumer.of("record_data")
    by_partition: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        by_partition[r["partition"]].append(r)
    for p, rs in by_partition.items():
        offsets = [r["offset"] for r in rs]
        assert offsets == sorted(set(offsets)), f"partition {p}: read twice or out of order"
    read = {(r["partition"], r["offset"]): r for r in records}
    lost = [a for a in acked if (a["partition"], a["offset"]) not in read]
    assert lost == [], f"{len(lost)} acknowledged records not read, first {lost[:5]}\n{consumer.tail()}"
    wrong = [(a, read[a["partition"], a["offset"]]) for a in acked
             if (read[a["partition"], a["offset"]]["value"], read[a["partition"], a["offset"]]["key"])
             != (a["value"], a["key"])]
    assert wrong == [], f"{len(wrong)} offsets hold another record than acknowledged there, first {wrong[:3]}"
    values = [r["value"] for r in records]
    assert len(values) == len(set(values)), "a record is in the log twice (idempotence)"
    assert len(records) == len(acked) == sum(hw.values())          # nothing in the log but what was acknowledged
    for p, rs in by_partition.items():                              # the producer's order kept per partition
        seq = [int(r["value"]) for r in rs]
        assert seq == sorted(seq), f"partition {p}: values out of the order they were sent in"
    # The group's last commit for each partition is its high watermark, accepted by the coordinator.
    last = {}
    for e in consumer.of("offsets_committed"):
        assert e["success"], e
        last.update({o["partition"]: o["offset"] for o in e["offsets"]})
    assert last == {p: n for p, n in hw.items() if n > 0}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("system", ["strata", "kafka"])
def test_acknowledged_records_survive_leader_kill9(kafka_jars, system, tmp_path, topic_name):
    with three_brokers(system, tmp_path) as cluster:
        create_topics(cluster, {topic_name: PARTITIONS}, {"min.insync.replicas": "2"})
        config = tmp_path / "producer.properties"
        # VerifiableProducer sets retries=0 unless its config file says otherwise (Kafka's system tests set it).
        config.write_text("enable.idempotence=true\nacks=all\nretries=2147483647\n"
                          "max.in.flight.requests.per.connection=5\ndelivery.timeout.ms=180000\n")
        # Keys 0..59 over and over: each partition gets records all the time (a null key sticks to one a while).
        producer = Producer(tmp_path / "producer.stderr", PRODUCER, "--topic", topic_name, "--bootstrap-server",
                            cluster.bootstrap, "--throughput", "150", "--acks", "-1", "--producer.config",
                            str(config), "--repeating-keys", "60", "--max-messages", "-1")
        killed = []                                             # (partition, its leader, acked before the kill)
        try:
            producer.wait_for_more(300)
            for r in range(KILL_ROUNDS):
                p = r % PARTITIONS
                lead = leader(cluster, topic_name, p)
                killed.append((p, lead, producer.acked()))
                cluster.brokers[lead].kill9()
                producer.wait_for_more(100, partition=p)        # a new leader of p takes acks=all writes
                cluster.brokers[lead].start()
                wait_for_isr(cluster, [topic_name])             # the returning broker catches up and rejoins
                producer.wait_for_more(100)
        finally:
            producer.stop()
        sent = producer.of("tool_data")
        assert sent and sent[-1]["sent"] == sent[-1]["acked"], (sent, producer.of("producer_send_error")[:5])
        assert producer.of("producer_send_error") == []
        acked = producer.of("producer_send_success")
        assert len({a["partition"] for a in acked}) == PARTITIONS

        hw = high_watermarks(cluster.bootstrap, topic_name)
        print(f"{system}: acknowledged {len(acked)}, high watermarks {hw}, "
              f"kill -9 of (partition, leader, acked by then) {killed}")
        for protocol in ("classic", "consumer"):
            consumer = consume(tmp_path, cluster.bootstrap, topic_name, f"verify-{protocol}", sum(hw.values()),
                               protocol)
            check_read_back(acked, consumer, hw)
