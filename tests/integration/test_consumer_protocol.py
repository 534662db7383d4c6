"""KIP-848 consumer groups (group.protocol=consumer) with confluent-kafka: three consumers share twelve partitions
through the server-side assignor without overlap or gap, one leaves and its partitions move to the others, and
commits made with member epochs resume exactly after a kill -9 of the broker; live members keep their epochs and
partitions across a kill -9 (their state is persisted in __consumer_offsets).

Needs "consumer_group_heartbeat" and "consumer_group_describe" in broker/handlers/__init__.py _MODULES."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import TopicPartition

try:
    from .helpers import admin_client, consumer, create_topic, produce_all, producer, records, wait_until
except ImportError:  # tests/integration is not a package
    from helpers import admin_client, consumer, create_topic, produce_all, producer, records, wait_until

from broker.handlers import load_handlers

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(68 not in load_handlers(), reason="ConsumerGroupHeartbeat is not in broker/handlers "
                                                                   "_MODULES")]

BROKER = {"group.consumer.heartbeat.interval.ms": "300", "offsets.topic.num.partitions": "10"}


def fill(bootstrap, topic, partitions, per_partition, tag):
    p = producer(bootstrap)
    for part in range(partitions):
        produce_all(p, topic, [(None, f"{tag}-{part}-{i}".encode()) for i in range(per_partition)], partition=part)


class Member:
    def __init__(self, bootstrap, group, topic):
        self.c = consumer(bootstrap, **{"group.id": group, "group.protocol": "consumer",
                                        "enable.auto.offset.store": True})
        self.messages = []
        self.c.subscribe([topic])

    def poll(self, timeout=0.02):
        self.messages.extend(records([self.c.poll(timeout)]))

    def assignment(self):
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}


def poll_until(members, predicate, timeout=40, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}; assignments "
                         f"{[sorted(p for _, p in m.assignment()) for m in members]}")


def exact_split(members, topic, partitions) -> bool:
    """Every partition owned by exactly one member, and the uniform assignor's final balance reached: while a
    member still holds partitions it is revoking, its successor waits, so [6, 4, 2] covers all twelve too."""
    sets = [m.assignment() for m in members]
    sizes = [len(s) for s in sets]
    return all(sets) and sum(sizes) == partitions and max(sizes) - min(sizes) <= 1 and \
        set().union(*sets) == {(topic, p) for p in range(partitions)}


def test_consumer_protocol_share_leave_and_resume_after_kill9(make_broker):
    b = make_broker(BROKER)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=12)
    members = [Member(b.bootstrap, group, topic) for _ in range(3)]
    try:
        poll_until(members, lambda: exact_split(members, topic, 12), what="3-way split of 12 partitions")
        assert sorted(len(m.assignment()) for m in members) == [4, 4, 4]
        # Produced once the split is final: with no commits yet, a partition that moved would be read again.
        fill(b.bootstrap, topic, 12, 5, "old")
        poll_until(members, lambda: sum(len(m.messages) for m in members) >= 60, what="60 messages")
        seen = [(m.partition(), m.offset()) for mem in members for m in mem.messages]
        assert len(seen) == len(set(seen)) == 60

        admin = admin_client(b.bootstrap)
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert len(desc.members) == 3
        assert {(tp.topic, tp.partition) for m in desc.members for tp in m.assignment.topic_partitions} == \
            {(topic, p) for p in range(12)}

        for m in members:
            m.c.commit(asynchronous=False)
        leaving = members.pop()
        moved = leaving.assignment()
        leaving.c.close()
        poll_until(members, lambda: exact_split(members, topic, 12) and moved <= members[0].assignment()
                   | members[1].assignment(), what="2-way split after a leave")
        assert sorted(len(m.assignment()) for m in members) == [6, 6]
        fill(b.bootstrap, topic, 12, 1, "mid")
        poll_until(members, lambda: sum(len(m.messages) for m in members) >= 72 - len(leaving.messages),
                   what="the 12 messages produced after the leave")
        for m in members:
            m.c.commit(asynchronous=False)
    finally:
        for m in members:
            m.c.close()

    b.kill9()
    b.start()
    c = consumer(b.bootstrap, **{"group.id": group})
    try:
        got = wait_until(lambda: c.committed([TopicPartition(topic, p) for p in range(12)], timeout=10),
                         timeout=20, what="committed offsets after restart")
        assert sorted((tp.partition, tp.offset) for tp in got) == [(p, 6) for p in range(12)]
    finally:
        c.close()

    fill(b.bootstrap, topic, 12, 2, "new")
    m = Member(b.bootstrap, group, topic)
    try:
        poll_until([m], lambda: len(m.messages) >= 24, what="24 new messages")
        for _ in range(10):
            m.poll(0.05)
        got = sorted((x.partition(), x.offset()) for x in m.messages)
        assert got == [(p, o) for p in range(12) for o in (6, 7)]
        m.c.commit(asynchronous=False)
        committed = m.c.committed([TopicPartition(topic, p) for p in range(12)], timeout=10)
        assert sorted((tp.partition, tp.offset) for tp in committed) == [(p, 8) for p in range(12)]
    finally:
        m.c.close()
    assert "Traceback" not in b.log_text()


def test_consumer_protocol_members_carry_on_across_kill9(make_broker):
    b = make_broker(BROKER)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=6)
    members = [Member(b.bootstrap, group, topic) for _ in range(2)]
    try:
        poll_until(members, lambda: exact_split(members, topic, 6), what="2-way split")
        before = [m.assignment() for m in members]
        b.kill9()
        b.start()
        fill(b.bootstrap, topic, 6, 3, "x")
        poll_until(members, lambda: sum(len(m.messages) for m in members) >= 18, what="18 messages after restart")
        for _ in range(20):
            for m in members:
                m.poll(0.05)
        assert [m.assignment() for m in members] == before
        seen = [(x.partition(), x.offset()) for m in members for x in m.messages]
        assert len(seen) == len(set(seen)) == 18
    finally:
        for m in members:
            m.c.close()
    assert "joins the consumer group" not in b.log_text().split("loaded consumer group")[-1]
