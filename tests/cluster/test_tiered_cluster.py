"""Tiered storage on the cluster (KIP-405's follower path): only leaders copy; a new leader continues after the
highest offset already tiered; a replica added later starts from the leader's local log start, taking the history
below it from the remote tier; consumers read the whole log across both tiers from whichever broker leads."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import consume_all

SEGMENT_BYTES = 4096
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1"}


@pytest.fixture
def tiered_cluster(tmp_path):
    c = Cluster(tmp_path, 3, overrides={
        "remote.log.storage.system.enable": "true", "remote.log.storage.manager.store.url": f"file://{tmp_path}/remote",
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "remote.log.metadata.topic.num.partitions": "3"}).start()
    yield c
    stop_and_check(c)


def tiered_end(cluster, topic: str) -> int:
    """ListOffsets LATEST_TIERED (-5, KIP-1005) from the leader: the highest offset in the remote tier."""
    from tests.integration.rawclient import RawClient
    with RawClient(cluster.brokers[cluster.leader(topic)].bootstrap, timeout=40) as c:
        resp = c.request(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -5}]}]})
    [p] = resp.topics[0].partitions
    return p.offset if p.error_code == 0 else -1


def produce(cluster, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0, "batch.size": 1000,
                  "enable.idempotence": True})
    for i in range(start, start + n):
        p.produce(topic, f"{i:06d}".encode() * 20)
        p.poll(0)
    assert p.flush(30) == 0


def wait_for(cond, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_tiering_follows_leadership_and_a_new_replica_starts_from_the_remote_tier(tiered_cluster, topic_name):
    cluster = tiered_cluster
    ids = sorted(cluster.brokers)
    admin = cluster.admin()
    for f in admin.create_topics([NewTopic(topic_name, num_partitions=1, replica_assignment=[[ids[0], ids[1]]],
                                           config=TIERED)]).values():
        f.result(timeout=30)
    cluster.wait_for_isr(topic_name, 2)
    produce(cluster, topic_name, 0, 300)
    wait_for(lambda: tiered_end(cluster, topic_name) > 100, "the first leader tiers closed segments")
    first = tiered_end(cluster, topic_name)
    follower = next(i for i in (ids[0], ids[1]) if i != cluster.leader(topic_name))
    follower_dir = cluster.brokers[follower].data_dir / "logs" / f"{topic_name}-0"
    # the follower learns what the leader tiered from __remote_log_metadata and drops those local segments too
    wait_for(lambda: len(list(follower_dir.glob("*.log"))) <= 3, "the follower applies local retention")

    old_leader = cluster.leader(topic_name)
    cluster.brokers[old_leader].kill9()
    wait_for(lambda: cluster.leader(topic_name) not in (-1, old_leader), "leadership moves")
    produce(cluster, topic_name, 300, 300)
    wait_for(lambda: tiered_end(cluster, topic_name) > first + 100, "the new leader continues tiering")
    cluster.brokers[old_leader].start()
    cluster.wait_for_isr(topic_name, 2)

    from kafka import KafkaAdminClient, TopicPartition as KTP
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    leader = cluster.leader(topic_name)
    assert kadmin.alter_partition_reassignments({KTP(topic_name, 0): [leader, ids[2]]}).get(KTP(topic_name, 0)) \
        is None
    wait_for(lambda: sorted(cluster.partition(topic_name).isrs) == sorted([leader, ids[2]]) and
             not kadmin.list_partition_reassignments(), "the new replica joins and the move completes")
    kadmin.close()
    new_replica = cluster.brokers[ids[2]].log_text()
    assert "built from the remote tier" in new_replica                 # it did not copy the tiered history
    import re
    restart = re.search(r"restarts at offset \d+ \(log start 0, (\d+) leader epoch\(s\), (\d+) producer\(s\)\)",
                        new_replica)
    assert restart and int(restart.group(1)) >= 1 and int(restart.group(2)) >= 1   # epochs and producer state

    values = [m.value() for m in consume_all(cluster.bootstrap, topic_name, 600)]
    assert values == [f"{i:06d}".encode() * 20 for i in range(600)]     # both tiers, in order, once each

    # The new replica can lead: move leadership to it and read everything again
    cluster.brokers[leader].kill9()
    wait_for(lambda: cluster.leader(topic_name) == ids[2], "the bootstrapped replica leads")
    values = [m.value() for m in consume_all(cluster.bootstrap, topic_name, 600)]
    assert values == [f"{i:06d}".encode() * 20 for i in range(600)]
