"""A misbehaving group member cannot stall other groups (issue: consumer groups, bad input).

A raw client joins a classic group, becomes its leader and then never sends SyncGroup, and a second raw client's
JoinGroup parks behind it: that group is stuck, as Kafka's would be, until the first member's rebalance timeout.
Meanwhile a healthy group of confluent-kafka consumers on the same broker forms, consumes every record and commits,
the admin API describes both groups, and the stuck group recovers once the silent member is dropped.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupState, TopicPartition

try:
    from .helpers import admin_client, consumer, create_topic, produce_all, producer, records
    from .rawclient import RawClient
except ImportError:  # tests/integration is not a package
    from helpers import admin_client, consumer, create_topic, produce_all, producer, records
    from rawclient import RawClient

pytestmark = pytest.mark.integration

JOIN_GROUP = 11
MEMBER_ID_REQUIRED, NONE = 79, 0
STUCK_REBALANCE_MS = 4000


def join(client: RawClient, group: str, member_id: str = "", timeout: float | None = None, send_only=False):
    body = {"group_id": group, "session_timeout": 30000, "rebalance_timeout": STUCK_REBALANCE_MS,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"}],
            "reason": None}
    if send_only:
        return client.send(JOIN_GROUP, 9, body)
    return client.request(JOIN_GROUP, 9, body, timeout=timeout)


def join_as_member(client: RawClient, group: str):
    first = join(client, group)
    assert first.error_code == MEMBER_ID_REQUIRED      # KIP-394: the first join only hands out a member id
    resp = join(client, group, first.member_id, timeout=15)
    assert resp.error_code == NONE, resp
    return resp


def test_silent_leader_stalls_only_its_own_group(make_broker):
    b = make_broker({"group.initial.rebalance.delay.ms": "200"})
    stuck, healthy = f"stuck-{uuid.uuid4().hex[:6]}", f"healthy-{uuid.uuid4().hex[:6]}"
    topic = f"t-{uuid.uuid4().hex[:6]}"
    create_topic(b.bootstrap, topic, partitions=4)
    p = producer(b.bootstrap)
    for part in range(4):
        produce_all(p, topic, [(None, f"{part}-{i}".encode()) for i in range(10)], partition=part)

    silent, waiting = RawClient(b.bootstrap), RawClient(b.bootstrap)
    members = []
    try:
        x = join_as_member(silent, group=stuck)             # leader of generation 1, then never syncs or heartbeats
        assert x.leader == x.member_id
        first = join(waiting, stuck)
        assert first.error_code == MEMBER_ID_REQUIRED
        corr = join(waiting, stuck, first.member_id, send_only=True)   # parks until the silent leader rejoins

        # The healthy group on the same broker forms, reads everything and commits while the other one is stuck.
        conf = {"group.id": healthy, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                "enable.auto.commit": False}
        members = [consumer(b.bootstrap, **conf) for _ in range(2)]
        for c in members:
            c.subscribe([topic])
        seen = set()
        deadline = time.monotonic() + 30
        while len(seen) < 40 and time.monotonic() < deadline:
            for c in members:
                for m in records([c.poll(0.05)]):
                    seen.add((m.partition(), m.offset()))
        assert len(seen) == 40, f"healthy group consumed {len(seen)}/40 records while another group was stuck"
        members[0].commit(offsets=[TopicPartition(topic, part, 10) for part in range(4)], asynchronous=False)
        committed = members[0].committed([TopicPartition(topic, part) for part in range(4)], timeout=10)
        assert [tp.offset for tp in committed] == [10, 10, 10, 10]

        admin = admin_client(b.bootstrap)
        desc = admin.describe_consumer_groups([healthy, stuck])
        assert desc[healthy].result(timeout=10).state == ConsumerGroupState.STABLE
        assert desc[stuck].result(timeout=10).state == ConsumerGroupState.PREPARING_REBALANCING

        # The stuck group is released by the silent member's rebalance timeout: the waiting member's parked join
        # is answered and it leads the next generation alone.
        resp = waiting.recv(JOIN_GROUP, 9, corr, timeout=STUCK_REBALANCE_MS / 1000 + 15)
        assert resp.error_code == NONE, resp
        assert resp.leader == resp.member_id == first.member_id
        assert resp.generation_id == x.generation_id + 1
        assert [m.member_id for m in resp.members] == [first.member_id]
    finally:
        for c in members:
            c.close()
        silent.close()
        waiting.close()
    assert b.alive()
    assert "Traceback" not in b.log_text(), b.log_text()[-4000:]
