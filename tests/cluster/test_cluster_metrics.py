"""Cluster metrics on three broker processes: a group's lag reported by its coordinator for a partition another
broker holds (the end offset comes from the leader), and ISR shrinks and expansions counted by the leader when a
follower is killed with kill -9 and comes back."""
from __future__ import annotations

import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from broker.groups.metadata_store import partition_for
from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import create
from tests.conftest import free_port


def scrape(b) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.overrides['metrics.port']}/metrics", timeout=10).read()
    return {s: float(v) for s, v in (line.rsplit(" ", 1) for line in text.decode().splitlines()
                                     if line and not line.startswith("#"))}


def test_lag_from_the_coordinator_and_isr_changes_from_the_leader(tmp_path, topic_name):
    # the leader, not the controller's fencing, must shrink the ISR: a lag time well below the session timeout
    c = Cluster(tmp_path, 3, overrides={"replica.lag.time.max.ms": "1500", "broker.session.timeout.ms": "60000"})
    for b in c.brokers.values():
        b.overrides["metrics.port"] = str(free_port())
    c.start()
    try:
        # lag: the group's coordinator does not host the partition
        group = f"g-{topic_name}"
        c.wait_for_isr("__consumer_offsets", 3, partition_for(group, 3))
        coordinator = c.leader("__consumer_offsets", partition_for(group, 3))
        holder = next(i for i in c.brokers if i != coordinator)
        lagging = topic_name + "-rf1"
        admin = c.admin()                                # kept while its futures are pending
        for f in admin.create_topics([NewTopic(lagging, num_partitions=1, replica_assignment=[[holder]])]).values():
            f.result(timeout=30)
        c.wait_for_isr(lagging, 1)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(30):
            p.produce(lagging, str(i).encode())
        assert p.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(lagging, 0, 10)], asynchronous=False)
        consumer.close()
        series = f'kafka_consumergroup_lag{{consumergroup="{group}",partition="0",topic="{lagging}"}}'
        m = scrape(c.brokers[coordinator])
        assert f'kafka_log_log_size{{partition="0",topic="{lagging}"}}' not in m      # not hosted there
        assert m[series] == 20
        assert m[f'kafka_consumergroup_lag_sum{{consumergroup="{group}",topic="{lagging}"}}'] == 20
        assert m['kafka_server_group_coordinator_metrics_classic_group_count{state="Empty"}'] == 1
        for i in c.brokers:                              # every group is reported once, by its coordinator
            if i != coordinator:
                others = scrape(c.brokers[i])
                assert not any(f'consumergroup="{group}"' in s for s in others), i
                assert others['kafka_server_group_coordinator_metrics_group_count{protocol="classic"}'] == 0

        # ISR: kill -9 a follower (not the controller, whose AlterPartition answers would stop), keep producing
        create(c, topic_name)
        leader = c.leader(topic_name)
        controller = c.admin().list_topics(timeout=10).controller_id
        follower = next(i for i in c.brokers if i not in (leader, controller))
        rm = "kafka_server_replicamanager_"
        before = scrape(c.brokers[leader])
        assert before[rm + "isr_shrinks_total"] == before[rm + "under_replicated_partitions"] == 0
        c.brokers[follower].kill9()
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "1"})
        deadline = time.monotonic() + 60
        while True:
            p.produce(topic_name, b"after the kill")
            p.flush(10)
            m = scrape(c.brokers[leader])
            if m[rm + "under_replicated_partitions"] >= 1 and len(c.partition(topic_name).isrs) == 2:
                break
            assert time.monotonic() < deadline, "the leader did not shrink the ISR"
            time.sleep(0.2)
        # every partition the leader now leads under-replicated (this topic's, and any other that had an append
        # the follower had not fetched) was shrunk by the leader, once: the controller fences no one for 60 s
        m = scrape(c.brokers[leader])
        assert m[rm + "isr_shrinks_total"] == m[rm + "under_replicated_partitions"] >= 1
        assert m[rm + "failed_isr_updates_total"] == 0
        shrinks, expands = m[rm + "isr_shrinks_total"], m[rm + "isr_expands_total"]
        c.brokers[follower].start()
        c.wait_for_isr(topic_name, 3)
        deadline = time.monotonic() + 30
        while scrape(c.brokers[leader])[rm + "isr_expands_total"] == expands:
            assert time.monotonic() < deadline, "the leader did not count the ISR expansion"
            time.sleep(0.1)
        assert scrape(c.brokers[leader])[rm + "isr_shrinks_total"] == shrinks
    finally:
        stop_and_check(c)
