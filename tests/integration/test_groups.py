"""Consumer groups (classic protocol) against a real Strata broker: confluent-kafka, kafka-python and aiokafka
consumers share partitions, rebalance when members leave, commit and resume from committed offsets; static
membership rejoins without a rebalance; the admin APIs list, describe and delete groups and offsets.

The module's broker runs with group.initial.rebalance.delay.ms=300 (Kafka's default is 3000) so groups form fast.
"""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

try:
    from .helpers import admin_client, consumer, create_topic, produce_all, producer, records, wait_until
    from .rawclient import RawClient
except ImportError:  # tests/integration is not a package
    from helpers import admin_client, consumer, create_topic, produce_all, producer, records, wait_until
    from rawclient import RawClient

from conftest import BrokerProcess

pytestmark = pytest.mark.integration

FIND_COORDINATOR, OFFSET_FETCH, OFFSET_DELETE, JOIN_GROUP, HEARTBEAT = 10, 9, 47, 11, 12

# librdkafka settings that make rebalances quick without being flaky.
FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "topic.metadata.refresh.interval.ms": 2000}


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("groups-broker"),
                      {"group.initial.rebalance.delay.ms": "300", "offsets.retention.check.interval.ms": "1000"})
    b.start()
    yield b
    rc = b.stop()
    assert rc == 0, f"broker exited with {rc}:\n{b.log_text()[-3000:]}"
    assert "Traceback" not in b.log_text(), b.log_text()[-5000:]


@pytest.fixture
def group_id(request) -> str:
    return f"g-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "m") -> None:
    p = producer(bootstrap)
    for part in range(partitions):
        produce_all(p, topic, [(f"{part}".encode(), f"{tag}-{part}-{i}".encode()) for i in range(per_partition)],
                    partition=part)


class Member:
    """A confluent-kafka group consumer that records what it consumed and every assignment it was given."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf):
        self.c = consumer(bootstrap, **{"group.id": group, "enable.auto.offset.store": True, **FAST, **conf})
        self.assigned_calls = 0
        self.revoked_calls = 0
        self.messages: list = []
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, c, parts):
        self.assigned_calls += 1

    def _on_revoke(self, c, parts):
        self.revoked_calls += 1

    def poll(self, timeout: float = 0.05) -> None:
        self.messages.extend(records([self.c.poll(timeout)]))

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}

    def close(self) -> None:
        self.c.close()


def poll_until(members: list[Member], predicate, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll(0.02)
        if predicate():
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; assignments "
                         f"{[sorted(p for _, p in m.assignment()) for m in members]}")


def balanced(members: list[Member], topic: str, partitions: int) -> bool:
    sets = [m.assignment() for m in members]
    union = set().union(*sets)
    return (all(sets) and sum(len(s) for s in sets) == len(union)
            and union == {(topic, p) for p in range(partitions)})


def assert_exact_partition_split(members: list[Member], topic: str, partitions: int) -> None:
    sets = [m.assignment() for m in members]
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            assert not a & b, f"overlapping assignments {sorted(a & b)}"
    assert set().union(*sets) == {(topic, p) for p in range(partitions)}, "gap in the assignment"


# ---- confluent-kafka ---------------------------------------------------------------------------------------------
def test_three_confluent_consumers_share_twelve_partitions_and_rebalance_on_leave(gbroker, topic_name, group_id):
    create_topic(gbroker.bootstrap, topic_name, partitions=12)
    fill(gbroker.bootstrap, topic_name, 12, 5)
    members = [Member(gbroker.bootstrap, group_id, topic_name) for _ in range(3)]
    try:
        poll_until(members, lambda: balanced(members, topic_name, 12), what="3-way split of 12 partitions")
        assert_exact_partition_split(members, topic_name, 12)
        assert sorted(len(m.assignment()) for m in members) == [4, 4, 4]   # range/roundrobin split evenly

        # Every message is delivered exactly once across the group.
        poll_until(members, lambda: sum(len(m.messages) for m in members) >= 60, what="60 messages")
        seen = [(m.partition(), m.offset()) for mem in members for m in mem.messages]
        assert len(seen) == len(set(seen)) == 60

        admin = admin_client(gbroker.bootstrap)
        desc = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
        assert desc.state == ConsumerGroupState.STABLE
        assert len(desc.members) == 3
        described = {(tp.topic, tp.partition) for mem in desc.members for tp in mem.assignment.topic_partitions}
        assert described == {(topic_name, p) for p in range(12)}

        # One consumer leaves (LeaveGroup); its partitions move to the other two.
        leaving = members.pop()
        before = leaving.assignment()
        leaving.close()
        poll_until(members, lambda: balanced(members, topic_name, 12) and before <= set().union(
            *[m.assignment() for m in members]), what="2-way split after a leave")
        assert_exact_partition_split(members, topic_name, 12)
        assert sorted(len(m.assignment()) for m in members) == [6, 6]
    finally:
        for m in members:
            m.close()


def test_confluent_commit_then_restart_resumes_from_committed_offsets(gbroker, topic_name, group_id):
    create_topic(gbroker.bootstrap, topic_name, partitions=4)
    fill(gbroker.bootstrap, topic_name, 4, 10, tag="old")
    members = [Member(gbroker.bootstrap, group_id, topic_name) for _ in range(2)]
    try:
        poll_until(members, lambda: sum(len(m.messages) for m in members) >= 40, what="first 40 messages")
        for m in members:
            m.c.commit(asynchronous=False)
    finally:
        for m in members:
            m.close()

    c = consumer(gbroker.bootstrap, **{"group.id": group_id})
    try:
        committed = c.committed([TopicPartition(topic_name, p) for p in range(4)], timeout=10)
        assert sorted((tp.partition, tp.offset) for tp in committed) == [(p, 10) for p in range(4)]
    finally:
        c.close()

    fill(gbroker.bootstrap, topic_name, 4, 3, tag="new")
    members = [Member(gbroker.bootstrap, group_id, topic_name) for _ in range(2)]
    try:
        poll_until(members, lambda: sum(len(m.messages) for m in members) >= 12, what="12 new messages")
        for m in members:
            m.poll(0.3)   # nothing older may follow
        got = sorted((m.partition(), m.offset(), m.value()) for mem in members for m in mem.messages)
        assert [(p, o) for p, o, _ in got] == [(p, o) for p in range(4) for o in range(10, 13)]
        assert all(v.startswith(b"new-") for _, _, v in got)
    finally:
        for m in members:
            m.close()

    # The admin view of the same offsets (OffsetFetch through AdminClient).
    admin = admin_client(gbroker.bootstrap)
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)])[group_id].result(timeout=10)
    assert sorted((tp.partition, tp.offset) for tp in res.topic_partitions if tp.topic == topic_name) == \
        [(p, 10) for p in range(4)]


def test_confluent_static_membership_rejoins_without_rebalance(gbroker, topic_name, group_id):
    create_topic(gbroker.bootstrap, topic_name, partitions=6)
    admin = admin_client(gbroker.bootstrap)
    a = Member(gbroker.bootstrap, group_id, topic_name, **{"group.instance.id": "static-a"})
    b = Member(gbroker.bootstrap, group_id, topic_name, **{"group.instance.id": "static-b"})
    a2 = None
    try:
        poll_until([a, b], lambda: balanced([a, b], topic_name, 6), what="static members stable")
        a_parts, b_parts = a.assignment(), b.assignment()
        desc = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
        ids = {m.group_instance_id: m.member_id for m in desc.members}
        assert set(ids) == {"static-a", "static-b"}
        b_assigned, b_revoked = b.assigned_calls, b.revoked_calls

        a.close()   # a static member sends no LeaveGroup (KIP-345): the group stays Stable until its session ends
        a2 = Member(gbroker.bootstrap, group_id, topic_name, **{"group.instance.id": "static-a"})
        poll_until([a2, b], lambda: a2.assignment() == a_parts, what="static member a back with its partitions")
        for _ in range(20):   # give a rebalance, if one were triggered, time to show
            a2.poll(0.05)
            b.poll(0.05)
        assert a2.assignment() == a_parts and b.assignment() == b_parts
        assert (b.assigned_calls, b.revoked_calls) == (b_assigned, b_revoked), "member b saw a rebalance"
        desc = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
        ids2 = {m.group_instance_id: m.member_id for m in desc.members}
        assert desc.state == ConsumerGroupState.STABLE
        assert ids2["static-b"] == ids["static-b"]
        assert ids2["static-a"] != ids["static-a"] and ids2["static-a"].startswith("static-a-")

        # The replaced member id is fenced.
        with RawClient(gbroker.bootstrap) as raw:
            r = raw.request(HEARTBEAT, 4, {"group_id": group_id, "generation_id": 1, "member_id": ids["static-a"],
                                           "group_instance_id": "static-a"})
            assert r.error_code.value == 82   # FENCED_INSTANCE_ID
    finally:
        for m in (a2, b):
            if m is not None:
                m.close()


def test_admin_list_describe_delete_groups_and_offsets(gbroker, topic_name, group_id):
    create_topic(gbroker.bootstrap, topic_name, partitions=2)
    fill(gbroker.bootstrap, topic_name, 2, 4)
    admin = admin_client(gbroker.bootstrap)
    m = Member(gbroker.bootstrap, group_id, topic_name)
    try:
        poll_until([m], lambda: len(m.messages) >= 8, what="8 messages")
        m.c.commit(asynchronous=False)
        listed = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(timeout=10)
        assert group_id in {g.group_id for g in listed.valid}
        fut = admin.delete_consumer_groups([group_id], request_timeout=10)[group_id]
        with pytest.raises(KafkaException) as ei:
            fut.result(timeout=10)
        assert ei.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        with RawClient(gbroker.bootstrap) as raw:
            # OffsetDelete on a topic the group still consumes: GROUP_SUBSCRIBED_TO_TOPIC.
            r = raw.request(OFFSET_DELETE, 0, {"group_id": group_id, "topics": [
                {"name": topic_name, "partitions": [{"partition_index": 0}]}]})
            assert r.error_code.value == 0
            assert r.topics[0].partitions[0].error_code.value == 86
    finally:
        m.close()

    desc = admin.describe_consumer_groups([group_id])[group_id].result(timeout=10)
    assert desc.state == ConsumerGroupState.EMPTY and not desc.members
    with RawClient(gbroker.bootstrap) as raw:
        # FindCoordinator v4 batches keys; OffsetFetch v8 batches groups (an unknown group has offset -1).
        r = raw.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group_id, "other"]})
        assert [(c.key, c.node_id, c.port, c.error_code.value) for c in r.coordinators] == \
            [(group_id, 1, gbroker.port, 0), ("other", 1, gbroker.port, 0)]
        r = raw.request(OFFSET_FETCH, 8, {"require_stable": False, "groups": [
            {"group_id": group_id, "topics": None},
            {"group_id": "no-such-group", "topics": [{"name": topic_name, "partition_indexes": [0]}]}]})
        g1, g2 = r.groups
        assert sorted((p.partition_index, p.committed_offset) for t in g1.topics for p in t.partitions) == \
            [(0, 4), (1, 4)]
        assert [(p.partition_index, p.committed_offset) for p in g2.topics[0].partitions] == [(0, -1)]
        # Empty group: OffsetDelete removes the offset.
        r = raw.request(OFFSET_DELETE, 0, {"group_id": group_id, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0}]}]})
        assert r.topics[0].partitions[0].error_code.value == 0
        r = raw.request(OFFSET_FETCH, 8, {"require_stable": False, "groups": [{"group_id": group_id, "topics": None}]})
        assert sorted((p.partition_index, p.committed_offset) for t in r.groups[0].topics for p in t.partitions) == \
            [(1, 4)]

    admin.delete_consumer_groups([group_id], request_timeout=10)[group_id].result(timeout=10)
    assert group_id not in {g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid}
    fut = admin.describe_consumer_groups([group_id])[group_id]
    try:
        gone = fut.result(timeout=10)
        assert gone.state in (ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)
    except KafkaException as e:   # DescribeGroups v6: GROUP_ID_NOT_FOUND
        assert e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


# ---- kafka-python ------------------------------------------------------------------------------------------------
def test_kafka_python_group_commit_and_resume(gbroker, topic_name, group_id):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    create_topic(gbroker.bootstrap, topic_name, partitions=3)
    fill(gbroker.bootstrap, topic_name, 3, 5, tag="old")

    def kp():
        return KafkaConsumer(topic_name, bootstrap_servers=gbroker.bootstrap, group_id=group_id,
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                             heartbeat_interval_ms=300, session_timeout_ms=6000)

    def drain(c, n):
        out = []
        deadline = time.monotonic() + 30
        while len(out) < n:
            assert time.monotonic() < deadline, f"got {len(out)}/{n}"
            for recs in c.poll(timeout_ms=200).values():
                out.extend(recs)
        return out

    # Two consumers in threads (kafka-python joins inside poll) share the 3 partitions, then commit.
    consumers = [kp(), kp()]
    got: dict[int, list] = {0: [], 1: []}
    errors: list = []

    def run(i):
        try:
            c = consumers[i]
            deadline = time.monotonic() + 40
            while (sum(len(v) for v in got.values()) < 15 or not all(k.assignment() for k in consumers)) \
                    and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=100).values():
                    got[i].extend(recs)
            c.commit()
        except Exception as e:   # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        a0, a1 = consumers[0].assignment(), consumers[1].assignment()
        assert a0 and a1 and not a0 & a1 and a0 | a1 == {KTP(topic_name, p) for p in range(3)}
        offsets = [(r.partition, r.offset) for v in got.values() for r in v]
        assert len(offsets) == len(set(offsets)) == 15
        assert consumers[0].committed(KTP(topic_name, 1)) == 5
    finally:
        for c in consumers:
            c.close()

    fill(gbroker.bootstrap, topic_name, 3, 2, tag="new")
    c = kp()
    try:
        got = drain(c, 6)
        got += [r for recs in c.poll(timeout_ms=300).values() for r in recs]
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in range(3) for o in (5, 6)]
        c.commit()
    finally:
        c.close()

    from kafka import KafkaAdminClient
    from kafka.errors import NoError
    admin = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap)
    try:
        offsets = admin.list_group_offsets({group_id: None})[group_id]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 7, 1: 7, 2: 7}
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group_id]["group_state"] == "Empty" and listed[group_id]["protocol_type"] == "consumer"
        desc = admin.describe_groups([group_id])[group_id]
        assert desc["group_state"] == "Empty" and desc["members"] == []
        # OffsetDelete (the group is Empty), then DeleteGroups.
        assert set(admin.delete_group_offsets(group_id, [KTP(topic_name, 0)]).values()) == {NoError}
        offsets = admin.list_group_offsets({group_id: None})[group_id]
        assert sorted(tp.partition for tp in offsets) == [1, 2]
        assert admin.delete_groups([group_id]) == {group_id: "OK"}
        assert group_id not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


# ---- aiokafka ----------------------------------------------------------------------------------------------------
async def test_aiokafka_two_consumers_share_partitions_commit_and_resume(gbroker, topic_name, group_id):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    create_topic(gbroker.bootstrap, topic_name, partitions=4)
    fill(gbroker.bootstrap, topic_name, 4, 5, tag="old")

    def make():
        return AIOKafkaConsumer(topic_name, bootstrap_servers=gbroker.bootstrap, group_id=group_id,
                                enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                heartbeat_interval_ms=300, session_timeout_ms=6000)

    async def consume_until(consumers, total, timeout=40):
        got = {id(c): [] for c in consumers}
        deadline = time.monotonic() + timeout
        while sum(len(v) for v in got.values()) < total or not all(c.assignment() for c in consumers):
            assert time.monotonic() < deadline, f"got {sum(len(v) for v in got.values())}/{total}"
            batches = await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
            for c, batch in zip(consumers, batches):
                for recs in batch.values():
                    got[id(c)].extend(recs)
        return got

    consumers = [make(), make()]
    await asyncio.gather(*(c.start() for c in consumers))
    try:
        got = await consume_until(consumers, 20)
        a1, a2 = consumers[0].assignment(), consumers[1].assignment()
        assert a1 and a2 and not a1 & a2 and a1 | a2 == {ATP(topic_name, p) for p in range(4)}
        offsets = [(r.partition, r.offset) for v in got.values() for r in v]
        assert len(offsets) == len(set(offsets)) == 20
        await asyncio.gather(*(c.commit() for c in consumers))
    finally:
        await asyncio.gather(*(c.stop() for c in consumers))

    fill(gbroker.bootstrap, topic_name, 4, 1, tag="new")
    c = make()
    await c.start()
    try:
        got = await consume_until([c], 4)
        recs = got[id(c)]
        assert sorted((r.partition, r.offset) for r in recs) == [(p, 5) for p in range(4)]
        assert await c.committed(ATP(topic_name, 0)) == 5
    finally:
        await c.stop()
