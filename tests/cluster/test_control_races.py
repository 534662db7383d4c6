"""Two control-plane events at once on three real broker processes (issue 22), ten rounds each under an idempotent
acks=all producer: two brokers killed within one session timeout, a controlled shutdown while another broker is being
fenced, and a reassignment while the controller or the leader dies. After the rounds every acknowledged record is read
back once, in order, at its acknowledged offset, and every replica of the partition holds the same records at the
same offsets. The rounds' choices come from a seed the test prints (STRATA_RACE_SEED replays one)."""
from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.cluster.helpers import AckedProducer, create, read_back_once_in_order, replica_contents

pytestmark = pytest.mark.slow
ROUNDS = 10
SESSION_TIMEOUT = 3.0           # broker.session.timeout.ms of the test cluster (tests/cluster/conftest.py)


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("STRATA_RACE_SEED", random.randrange(1 << 30)))
    print(f"STRATA_RACE_SEED={seed}")
    return random.Random(seed)


def _controller(cluster) -> int:
    return cluster.admin().list_topics(timeout=10).controller_id


def _restart(cluster, brokers) -> None:
    for b in brokers:
        if not cluster.brokers[b].alive():
            cluster.brokers[b].start()


def _same_replicas(cluster, topic: str, replicas) -> None:
    cluster.stop()
    copies = replica_contents(cluster, topic)
    first = copies[replicas[0]]
    assert first, "the partition is empty"
    for r in replicas[1:]:
        assert copies[r] == first, f"replica on broker {r} differs from broker {replicas[0]}'s"


def _rounds(cluster, topic_name, one_round) -> None:
    """An RF=3 topic under an idempotent acks=all producer; ROUNDS times: `one_round()` returns the brokers it took
    down, which are started again; then the ISR is whole again and more records are acknowledged. Finally the checks
    of the module's docstring."""
    create(cluster, topic_name)
    with AckedProducer(cluster.bootstrap, topic_name) as prod:
        prod.wait_for_more(200)
        for _ in range(ROUNDS):
            _restart(cluster, one_round())
            cluster.wait_for_isr(topic_name, 3)
            prod.wait_for_more(100)
    read_back_once_in_order(cluster, topic_name, prod)
    _same_replicas(cluster, topic_name, sorted(cluster.brokers))


def _any_broker(cluster, topic_name, rng) -> int:
    """The leader, the controller or any broker: the one whose loss changes the most, often."""
    return rng.choice([cluster.leader(topic_name), _controller(cluster), rng.choice(list(cluster.brokers))])


def test_two_brokers_killed_within_a_session_timeout(cluster, topic_name, rng):
    def one_round():
        first = _any_broker(cluster, topic_name, rng)
        second = rng.choice([b for b in cluster.brokers if b != first])
        cluster.brokers[first].kill9()
        time.sleep(rng.uniform(0.0, SESSION_TIMEOUT * 0.8))       # the first is not fenced yet when the second dies
        cluster.brokers[second].kill9()
        time.sleep(rng.uniform(0.5, SESSION_TIMEOUT * 1.5))
        return first, second
    _rounds(cluster, topic_name, one_round)


def test_controlled_shutdown_while_another_broker_is_fenced(cluster, topic_name, rng):
    def one_round():
        killed = _any_broker(cluster, topic_name, rng)
        leaving = rng.choice([b for b in cluster.brokers if b != killed])
        cluster.brokers[killed].kill9()
        # the session of the killed broker runs out while the other one's controlled shutdown is handled
        time.sleep(rng.uniform(SESSION_TIMEOUT * 0.5, SESSION_TIMEOUT * 1.2))
        cluster.brokers[leaving].proc.send_signal(signal.SIGTERM)
        assert cluster.brokers[leaving].stop(timeout=60) == 0
        return killed, leaving
    _rounds(cluster, topic_name, one_round)


def test_reassignment_while_the_controller_or_the_leader_dies(cluster, topic_name, rng):
    from confluent_kafka.admin import NewTopic
    from kafka import KafkaAdminClient, TopicPartition as KTP
    admin = cluster.admin()
    for f in admin.create_topics([NewTopic(topic_name, num_partitions=1, replica_assignment=[[1, 2]])]).values():
        f.result(timeout=30)
    cluster.wait_for_isr(topic_name, 2)
    target = [1, 2]
    with AckedProducer(cluster.bootstrap, topic_name) as prod:
        prod.wait_for_more(200)
        for _ in range(ROUNDS):
            target = rng.sample([b for b in cluster.brokers if b not in target] + [rng.choice(target)], 2)
            victim = rng.choice([_controller(cluster), cluster.leader(topic_name)])
            kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
            try:
                kadmin.alter_partition_reassignments({KTP(topic_name, 0): target})
            except Exception as e:                 # the controller may die before it answers: ask again below
                print(f"reassignment to {target} not answered: {e}")
            finally:
                kadmin.close()
            time.sleep(rng.uniform(0.0, 0.5))
            cluster.brokers[victim].kill9()
            time.sleep(rng.uniform(0.5, SESSION_TIMEOUT * 1.5))
            _restart(cluster, (victim,))
            cluster.wait_for_brokers(3)
            deadline = time.monotonic() + 90
            while True:
                part = cluster.partition(topic_name)
                if sorted(part.replicas) == sorted(target) and sorted(part.isrs) == sorted(target):
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"reassignment to {target} did not complete: {part.replicas} "
                                         f"{part.isrs}\n{cluster.logs()}")
                kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
                try:
                    if not kadmin.list_partition_reassignments():      # lost with the controller: start it again
                        kadmin.alter_partition_reassignments({KTP(topic_name, 0): target})
                except Exception:
                    pass
                finally:
                    kadmin.close()
                time.sleep(0.5)
            prod.wait_for_more(100)
    read_back_once_in_order(cluster, topic_name, prod)
    _same_replicas(cluster, topic_name, sorted(target))
