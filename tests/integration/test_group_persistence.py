"""Group state survives broker restarts through __consumer_offsets: committed offsets after kill -9 and after a clean
shutdown, a static member that carries on in its generation without a rebalance, DescribeGroups after a restart,
and a deleted group that stays deleted. Each test runs a private broker (make_broker)."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition

try:
    from .helpers import admin_client, consumer, create_topic, produce_all, producer, records, wait_until
except ImportError:  # tests/integration is not a package
    from helpers import admin_client, consumer, create_topic, produce_all, producer, records, wait_until

pytestmark = pytest.mark.integration

BROKER = {"group.initial.rebalance.delay.ms": "100", "offsets.topic.num.partitions": "10"}
FAST = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 300, "topic.metadata.refresh.interval.ms": 2000,
        "enable.auto.offset.store": True}


def fill(bootstrap, topic, partitions, per_partition, tag):
    p = producer(bootstrap)
    for part in range(partitions):
        produce_all(p, topic, [(None, f"{tag}-{part}-{i}".encode()) for i in range(per_partition)], partition=part)


def drain(c, count, timeout=30.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)}/{count} messages"
        out.extend(records([c.poll(0.1)]))
    return out


def committed(bootstrap, group, topic, partitions):
    c = consumer(bootstrap, **{"group.id": group})
    try:
        return sorted((tp.partition, tp.offset) for tp in
                      c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15))
    finally:
        c.close()


@pytest.mark.parametrize("crash", [True, False], ids=["kill9", "clean"])
def test_committed_offsets_survive_restart_and_consumer_resumes(make_broker, crash):
    b = make_broker(BROKER)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=3)
    fill(b.bootstrap, topic, 3, 10, "old")
    c = consumer(b.bootstrap, **{"group.id": group, **FAST})
    c.subscribe([topic])
    try:
        drain(c, 30)
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert committed(b.bootstrap, group, topic, 3) == [(p, 10) for p in range(3)]

    if crash:
        b.kill9()
        b.start()
    else:
        b.restart()
    assert committed(b.bootstrap, group, topic, 3) == [(p, 10) for p in range(3)]

    fill(b.bootstrap, topic, 3, 2, "new")
    c = consumer(b.bootstrap, **{"group.id": group, **FAST})
    c.subscribe([topic])
    try:
        got = drain(c, 6)
        extra = [m for m in c.consume(num_messages=10, timeout=0.5) if not m.error()]
        assert not extra, f"unexpected messages at {[(m.partition(), m.offset()) for m in extra]}"
        assert sorted((m.partition(), m.offset()) for m in got) == [(p, o) for p in range(3) for o in (10, 11)]
        assert all(m.value().startswith(b"new-") for m in got)
    finally:
        c.close()
    assert "Traceback" not in b.log_text()


def test_static_member_keeps_its_generation_across_a_kill9(make_broker):
    b = make_broker(BROKER)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=4)
    calls = {"assign": 0, "revoke": 0, "lost": 0}
    c = consumer(b.bootstrap, **{"group.id": group, "group.instance.id": "inst-1", **FAST})
    c.subscribe([topic], on_assign=lambda c_, p: calls.__setitem__("assign", calls["assign"] + 1),
                on_revoke=lambda c_, p: calls.__setitem__("revoke", calls["revoke"] + 1),
                on_lost=lambda c_, p: calls.__setitem__("lost", calls["lost"] + 1))
    admin = admin_client(b.bootstrap)
    try:
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 4:
            assert time.monotonic() < deadline, "no assignment"
            c.poll(0.1)
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert desc.state == ConsumerGroupState.STABLE
        member_id = desc.members[0].member_id
        before = dict(calls)

        b.kill9()
        b.start()
        admin = admin_client(b.bootstrap)

        # The group is back, Stable, with the same member; the member heartbeats on in its generation.
        def described():
            try:
                return admin.describe_consumer_groups([group])[group].result(timeout=5)
            except KafkaException:
                return None
        desc = wait_until(described, timeout=15, what="DescribeGroups after restart")
        assert desc.state == ConsumerGroupState.STABLE
        assert [(m.member_id, m.group_instance_id) for m in desc.members] == [(member_id, "inst-1")]
        assert {(tp.topic, tp.partition) for tp in desc.members[0].assignment.topic_partitions} == \
            {(topic, p) for p in range(4)}
        end = time.monotonic() + 3      # several heartbeat intervals against the restarted broker
        while time.monotonic() < end:
            c.poll(0.1)
        assert len(c.assignment()) == 4
        assert calls == before, f"the member saw a rebalance after the restart: {before} -> {calls}"
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert desc.state == ConsumerGroupState.STABLE and desc.members[0].member_id == member_id
    finally:
        c.close()


def test_deleted_group_stays_deleted_after_restart(make_broker):
    b = make_broker(BROKER)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    keep, drop = f"keep-{uuid.uuid4().hex[:8]}", f"drop-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=2)
    fill(b.bootstrap, topic, 2, 5, "m")
    for group in (keep, drop):
        c = consumer(b.bootstrap, **{"group.id": group, **FAST})
        c.subscribe([topic])
        try:
            drain(c, 10)
            c.commit(asynchronous=False)
        finally:
            c.close()
    admin = admin_client(b.bootstrap)
    admin.delete_consumer_groups([drop], request_timeout=10)[drop].result(timeout=15)
    b.kill9()
    b.start()
    admin = admin_client(b.bootstrap)
    listed = wait_until(lambda: admin.list_consumer_groups().result(timeout=10), timeout=15, what="ListGroups")
    ids = {g.group_id for g in listed.valid}
    assert keep in ids and drop not in ids
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(drop, [TopicPartition(topic, 0),
                                                                                 TopicPartition(topic, 1)])])
    assert [tp.offset for tp in res[drop].result(timeout=10).topic_partitions] == [-1001, -1001]
    assert committed(b.bootstrap, keep, topic, 2) == [(0, 5), (1, 5)]
