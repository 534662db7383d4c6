"""Follower fetching (KIP-392) on three broker processes in racks a, b, c with replica.selector.class set to Kafka's
RackAwareReplicaSelector: the leader sends a consumer with a rack to the in-sync replica of that rack
(preferred_read_replica), followers serve consumer Fetch v11+ up to their high watermark and wake parked fetches
when it moves, and librdkafka's `client.rack` ends up reading every record from the follower in its rack."""
from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from broker.replica_selector import RACK_AWARE
from tests.cluster.conftest import Cluster, stop_and_check
from tests.conftest import BrokerProcess, free_port
from tests.integration.rawclient import RawClient, decode_batches

RACKS = {1: "a", 2: "b", 3: "c"}
BYTES_OUT = "kafka_server_brokertopicmetrics_bytes_out_total"


@pytest.fixture(scope="module")
def rack_cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("follower-fetch"), 3, overrides={"replica.selector.class": RACK_AWARE})
    for b in c.brokers.values():
        b.overrides["metrics.port"] = str(free_port())
    c.start()
    yield c
    stop_and_check(c)


def metric(b: BrokerProcess, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.overrides['metrics.port']}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def create_led_by(c: Cluster, topic: str, leader: int) -> None:
    """An RF=3 topic whose partition 0 is led by `leader` (the first replica of the assignment)."""
    replicas = [leader] + [b for b in sorted(c.brokers) if b != leader]
    admin = c.admin()
    [f] = admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])]).values()
    f.result(timeout=30)
    c.wait_for_isr(topic, 3)
    assert c.leader(topic) == leader


def produce(c: Cluster, topic: str, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, f"value-{i}".encode(), headers=[("i", str(i).encode())])
    assert p.flush(30) == 0


def fetch(raw: RawClient, topic: str, offset: int, rack: str, version: int = 12, max_wait_ms: int = 0):
    body = raw.fetch_body(topic, 0, offset, version=version, max_wait_ms=max_wait_ms)
    body["rack_id"] = rack
    [t] = raw.request(1, version, body, timeout=30).responses
    [p] = t.partitions
    return p


def wait_for_high_watermark(c: Cluster, broker: int, topic: str, hw: int) -> None:
    """Until broker `broker`'s replica knows high watermark `hw` (a follower learns it on its next fetch)."""
    deadline = time.monotonic() + 30
    with RawClient(c.brokers[broker].bootstrap) as raw:
        while fetch(raw, topic, 0, "").high_watermark < hw:
            assert time.monotonic() < deadline, f"broker {broker} did not learn high watermark {hw}"
            time.sleep(0.05)


def test_leader_names_the_replica_in_the_clients_rack(rack_cluster, topic_name):
    c = rack_cluster
    create_led_by(c, topic_name, 1)
    produce(c, topic_name, 50)
    wait_for_high_watermark(c, 2, topic_name, 50)
    with RawClient(c.brokers[1].bootstrap) as leader:
        p = fetch(leader, topic_name, 0, "b")
        assert (p.error_code, p.preferred_read_replica, p.high_watermark, p.records or b"") == (0, 2, 50, b"")
        assert fetch(leader, topic_name, 0, "c").preferred_read_replica == 3
        for rack in ("a", "", "z"):                  # the leader's own rack, no rack, a rack without replicas
            p = fetch(leader, topic_name, 0, rack)
            assert p.preferred_read_replica == -1 and len(decode_batches(p.records)) > 0
        # before v11 there is no client metadata: the leader always serves
        p = fetch(leader, topic_name, 0, "b", version=10)
        assert p.error_code == 0 and len(decode_batches(p.records)) > 0


def test_followers_serve_consumers_up_to_their_high_watermark(rack_cluster, topic_name):
    c = rack_cluster
    create_led_by(c, topic_name, 1)
    produce(c, topic_name, 30)
    wait_for_high_watermark(c, 3, topic_name, 30)
    with RawClient(c.brokers[3].bootstrap) as follower:
        p = fetch(follower, topic_name, 0, "c")
        recs = decode_batches(p.records)
        assert (p.error_code, p.preferred_read_replica, p.high_watermark) == (0, -1, 30)
        assert [(r.offset, r.value) for r in recs] == [(i, f"value-{i}".encode()) for i in range(30)]
        # Fetch v10 has no client metadata: leaders only, as in Kafka
        assert fetch(follower, topic_name, 0, "c", version=10).error_code == 6      # NOT_LEADER_OR_FOLLOWER
        # a fetch parked at the follower's high watermark wakes up when the follower learns a higher one; the
        # socket timeout (30 s) is below max_wait (60 s), so a fetch that only ends at max_wait fails the test
        body = follower.fetch_body(topic_name, 0, 30, version=12, max_wait_ms=60_000)
        body["rack_id"] = "c"
        follower.send(1, 12, body)
        produce(c, topic_name, 1, start=30)
        [t] = follower.recv(1, 12, timeout=30).responses
        assert [r.value for r in decode_batches(t.partitions[0].records)] == [b"value-30"]


def test_librdkafka_with_client_rack_reads_everything_from_the_follower_in_its_rack(rack_cluster, topic_name):
    c = rack_cluster
    create_led_by(c, topic_name, 1)
    n = 2000
    produce(c, topic_name, n)
    wait_for_high_watermark(c, 2, topic_name, n)
    before = {b: metric(c.brokers[b], BYTES_OUT) for b in c.brokers}
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"rack-b-{topic_name}", "client.rack": "b",
                         "enable.auto.commit": False, "auto.offset.reset": "error"})
    got = []
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 60
        while len(got) < n:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {n}"
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value(), m.headers()))
    finally:
        consumer.close()
    assert got == [(i, f"value-{i}".encode(), [("i", str(i).encode())]) for i in range(n)]
    served = {b: metric(c.brokers[b], BYTES_OUT) - before[b] for b in c.brokers}
    assert served[1] == 0 and served[3] == 0, served        # the leader only redirected; rack c was not asked
    assert served[2] >= sum(len(v) for _, v, _ in got), served


def test_an_unknown_replica_selector_class_fails_at_start_up(tmp_path):
    b = BrokerProcess(tmp_path, {"replica.selector.class": "com.example.NearestSelector"})
    with pytest.raises(Exception):
        b.start(timeout=20)
    assert "replica.selector.class='com.example.NearestSelector' is not a replica selector" in b.log_text()
    assert not b.alive()
