"""Replica state that must survive failover, on three real broker processes (issue 22): records deleted with
DeleteRecords stay deleted when the leader dies (fault 5), a new replica whose log must start in the middle of a
batch catches up instead of stopping its fetcher (fault 4), and an internal topic a client asks for before the
brokers created it gets its own settings (fault 8)."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import consume_all, create
from tests.integration.rawclient import RawClient


_AFTER_FAILOVER = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.OFFSET_NOT_AVAILABLE, KafkaError._TIMED_OUT,
                   KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT}


def _earliest(bootstrap: str, topic: str) -> int:
    """The partition's log start offset from its leader, retrying what is retriable after a failover (a client
    that still names the old leader gets NOT_LEADER_OR_FOLLOWER; a new leader answers OFFSET_NOT_AVAILABLE until its
    followers have fetched from it; librdkafka fails a query in flight to the dead broker with _DESTROY_BROKER or
    _TRANSPORT once metadata drops it)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "earliest"})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                low, _ = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
                return low
            except KafkaException as e:
                if e.args[0].code() not in _AFTER_FAILOVER or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def _produce_one_batch(bootstrap: str, topic: str, n: int) -> None:
    """n records in one batch (one produce request with a long linger)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1000, "batch.num.messages": n + 1})
    for i in range(n):
        p.produce(topic, str(i).encode())
    assert p.flush(30) == 0


def test_deleted_records_stay_deleted_when_the_leader_dies(cluster, topic_name):
    """DeleteRecords to 50 on an RF=3 partition is answered once every replica's log starts at 50; kill -9 of the
    leader then leaves a new leader whose log also starts at 50 (it used to start at 0 again)."""
    create(cluster, topic_name)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce(topic_name, str(i).encode())
    assert p.flush(30) == 0
    tp = TopicPartition(topic_name, 0, 50)
    admin = cluster.admin()
    result = admin.delete_records([tp])[tp].result(timeout=30)
    assert result.low_watermark == 50                     # every replica's log start, not only the leader's
    leader = cluster.leader(topic_name)
    cluster.brokers[leader].kill9()
    deadline = time.monotonic() + 60
    while cluster.leader(topic_name) in (-1, leader):
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.2)
    assert _earliest(cluster.bootstrap, topic_name) == 50
    assert [int(m.value()) for m in consume_all(cluster.bootstrap, topic_name, 50)] == list(range(50, 100))
    cluster.brokers[leader].start()                       # the old leader comes back as a follower
    cluster.wait_for_isr(topic_name, 3)
    new_leader = cluster.leader(topic_name)
    cluster.brokers[new_leader].kill9()                   # and may lead again: its log starts at 50 too
    deadline = time.monotonic() + 60
    while cluster.leader(topic_name) in (-1, new_leader):
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.2)
    assert _earliest(cluster.bootstrap, topic_name) == 50
    cluster.brokers[new_leader].start()
    cluster.wait_for_isr(topic_name, 3)


def test_a_new_replica_whose_log_starts_inside_a_batch_catches_up(cluster, topic_name):
    """A partition on brokers 1 and 2 holds one batch of 100 records and DeleteRecords moved its log start to 50,
    the middle of that batch. A reassignment adds broker 3: its empty replica starts at 50, and the leader's first
    batch from there starts at 0. Kafka starts the new log at the batch's first offset; Strata used to fail the append
    and end the fetcher silently, so broker 3 never caught up, nor replicated anything else from that leader."""
    from kafka import KafkaAdminClient, TopicPartition as KTP
    admin = cluster.admin()
    for f in admin.create_topics([NewTopic(topic_name, num_partitions=1, replica_assignment=[[1, 2]])]).values():
        f.result(timeout=30)
    other = topic_name + "-other"                         # led by broker 1, followed by 3 through the same fetcher
    for f in admin.create_topics([NewTopic(other, num_partitions=1, replica_assignment=[[1, 3]])]).values():
        f.result(timeout=30)
    cluster.wait_for_isr(topic_name, 2)
    cluster.wait_for_isr(other, 2)
    _produce_one_batch(cluster.bootstrap, topic_name, 100)
    tp = TopicPartition(topic_name, 0, 50)
    assert admin.delete_records([tp])[tp].result(timeout=30).low_watermark == 50
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        assert kadmin.alter_partition_reassignments({KTP(topic_name, 0): [1, 2, 3]}).get(KTP(topic_name, 0)) is None
        deadline = time.monotonic() + 60
        while sorted(cluster.partition(topic_name).isrs) != [1, 2, 3] or kadmin.list_partition_reassignments():
            assert time.monotonic() < deadline, f"broker 3 did not catch up\n{cluster.logs()}"
            time.sleep(0.2)
    finally:
        kadmin.close()
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(other, str(i).encode())
    assert p.flush(30) == 0
    assert [int(m.value()) for m in consume_all(cluster.brokers[3].bootstrap, other, 10)] == list(range(10))
    assert "starting the log there" in cluster.brokers[3].log_text()


def test_an_internal_topic_asked_for_early_is_created_with_its_own_settings(tmp_path):
    """A client asks for __consumer_offsets (auto-creation allowed) while only two of three brokers run: the
    brokers wait for offsets.topic.replication.factor brokers, however long that takes (Kafka never creates it with
    fewer replicas), and then create it with its own settings. The client's request used to create it first, as an
    ordinary topic: num.partitions (1) and no compaction; and a broker up for a session timeout used to create it
    with the brokers it had, leaving it under-replicated for good."""
    cluster = Cluster(tmp_path, 3)
    try:
        for i in (1, 2):
            cluster.brokers[i].start()
        cluster.wait_for_brokers(2)

        def ask(raw):
            return raw.metadata(["__consumer_offsets"], auto_create=True).topics[0]

        with RawClient(cluster.brokers[2].bootstrap) as raw:
            waited = time.monotonic() + 2 * 3.0 + 1      # two session timeouts (3 s in these clusters)
            while time.monotonic() < waited:
                t = ask(raw)
                assert t.error_code != 0 and not t.partitions, "created with fewer replicas than configured"
                time.sleep(0.2)
            cluster.brokers[3].start()
            deadline = time.monotonic() + 60
            while True:
                t = ask(raw)
                if t.error_code == 0 and t.partitions:
                    break
                assert time.monotonic() < deadline, cluster.logs()
                time.sleep(0.05)
        assert len(t.partitions) == 3                     # offsets.topic.num.partitions, not num.partitions
        admin = cluster.admin()
        res = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
        configs = admin.describe_configs([res])[res].result(timeout=15)
        assert configs["cleanup.policy"].value == "compact"
        assert {len(p.replica_nodes) for p in t.partitions} == {3}        # offsets.topic.replication.factor
        cluster.wait_for_brokers(3)
    finally:
        stop_and_check(cluster)
