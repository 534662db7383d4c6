"""KIP-848 consumer groups in-process: joining, epochs, server-side assignment, revoke-before-assign reconciliation,
leaving and fencing, static members, offset commit/fetch epoch checks, describe, and reload from __consumer_offsets."""
from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from broker.groups.consumer import state as cgs
from broker.config import BrokerConfig
from broker.groups.consumer.assignors import range_assign, uniform_assign
from broker.groups.classic.group_coordinator import GroupCoordinator
from tests.unit.replica_harness import open_replicas

T1, T2 = uuid.UUID(int=101), uuid.UUID(int=202)


class Topics:
    def __init__(self, **parts):
        self.infos = {name: SimpleNamespace(name=name, uuid=uuid.UUID(int=i + 101 * (i + 1)), partitions=n)
                      for i, (name, n) in enumerate(parts.items())}

    def get(self, name):
        return self.infos.get(name)

    def by_id(self, tid):
        return next((t for t in self.infos.values() if t.uuid == tid), None)

    def topics(self):
        return list(self.infos.values())


def coordinator(topics=None, **cfg):
    gc = GroupCoordinator({"group.consumer.heartbeat.interval.ms": "100", **cfg})
    gc.topics = topics or Topics(t=12)
    return gc


class Client:
    """A KIP-848 consumer as the coordinator sees it: it revokes what is no longer assigned and takes what is."""

    def __init__(self, gc, member_id, topics=("t",), group="g", instance=None):
        self.gc, self.member_id, self.topics, self.group, self.instance = gc, member_id, list(topics), group, instance
        self.epoch = 0
        self.owned: dict = {}

    def heartbeat(self, full=False):
        join = self.epoch == 0
        owned = [(t, sorted(ps)) for t, ps in self.owned.items()]
        r = self.gc.consumer.heartbeat(self.group, self.member_id, self.epoch, self.instance, None,
                                       30000 if join or full else -1, self.topics if join or full else None, None,
                                       None, owned, "cid", "/127.0.0.1", 1)
        if r.error == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = {t: set(ps) for t, ps in r.assignment.items()}
        return r

    def parts(self, gc_topics):
        return {(gc_topics.by_id(t).name, p) for t, ps in self.owned.items() for p in ps}


def converge(clients, rounds=20):
    for _ in range(rounds):
        for c in clients:
            assert c.heartbeat().error == 0
    return clients


async def test_three_members_share_twelve_partitions_revoking_before_assigning():
    gc = coordinator()
    a = Client(gc, "a")
    r = a.heartbeat()
    assert (r.error, r.member_epoch, r.heartbeat_interval_ms) == (0, 1, 100)
    assert len(a.parts(gc.topics)) == 12
    b, c = Client(gc, "b"), Client(gc, "c")
    assert b.heartbeat().member_epoch == 2
    # b's target partitions are still owned by a: b waits (UNRELEASED) with none of them.
    g = gc.consumer.groups["g"]
    assert g.members["b"].state == cgs.UNRELEASED_PARTITIONS and not b.owned
    # a must revoke first: same epoch, smaller assignment, state UNREVOKED until its heartbeat drops them.
    ra = a.heartbeat()
    assert ra.member_epoch == 1 and len(a.parts(gc.topics)) == 6
    assert gc.consumer.groups["g"].members["a"].state == cgs.UNREVOKED_PARTITIONS
    assert a.heartbeat().member_epoch == 2              # revoked -> moves to the new epoch
    assert b.heartbeat().member_epoch == 2 and len(b.parts(gc.topics)) == 6
    c.heartbeat()
    converge([a, b, c])
    sets = [x.parts(gc.topics) for x in (a, b, c)]
    assert sorted(len(s) for s in sets) == [4, 4, 4]
    assert set().union(*sets) == {("t", p) for p in range(12)} and sum(map(len, sets)) == 12
    g = gc.consumer.groups["g"]
    assert g.state() == cgs.GROUP_STABLE and g.group_epoch == g.assignment_epoch == 3
    assert all(m.member_epoch == 3 for m in g.members.values())
    # Stickiness: a kept partitions it had.
    # c leaves; its partitions go to a and b, nobody else's move.
    before = {x.member_id: x.parts(gc.topics) for x in (a, b)}
    r = gc.consumer.heartbeat("g", "c", -1, None, None, -1, None, None, None, None)
    assert (r.error, r.member_epoch) == (0, -1)
    converge([a, b])
    assert before["a"] <= a.parts(gc.topics) and before["b"] <= b.parts(gc.topics)
    assert a.parts(gc.topics) | b.parts(gc.topics) == {("t", p) for p in range(12)}
    assert len(a.parts(gc.topics)) == len(b.parts(gc.topics)) == 6
    gc.stop()


async def test_heartbeat_validation_and_errors():
    gc = coordinator()
    hb = gc.consumer.heartbeat
    assert hb("g", "", 0, None, None, 30000, ["t"], None, None, [], version=1).error == 42     # v1 needs an id
    assert hb("g", "m", 0, None, None, -1, ["t"], None, None, []).error == 42                  # no rebalance timeout
    assert hb("g", "m", 0, None, None, 30000, None, None, None, []).error == 42               # no subscription
    assert hb("g", "m", 0, None, None, 30000, ["t"], None, None, None).error == 42           # owned must be []
    assert hb("g", "m", 0, None, None, 30000, ["t"], None, "sticky", []).error == 112         # UNSUPPORTED_ASSIGNOR
    assert hb("g", "m", 0, None, None, 30000, None, "(", None, []).error == 128               # bad regex
    assert hb("g", "m", 3, None, None, -1, None, None, None, None).error == 69                # no such group
    r = hb("g", "", 0, None, None, 30000, ["t"], None, "range", [], version=0)                # v0: server names it
    assert r.error == 0 and len(r.member_id) == 36
    assert hb("g", "other", 5, None, None, -1, None, None, None, None).error == 25           # UNKNOWN_MEMBER_ID
    assert hb("g", r.member_id, 7, None, None, -1, None, None, None, None).error == 110      # FENCED_MEMBER_EPOCH
    # The first response was lost: retrying the join with epoch 0 is accepted.
    again = hb("g", r.member_id, 0, None, None, 30000, ["t"], None, None, [])
    assert again.error == 0 and again.member_epoch == r.member_epoch
    # A classic group with members is not a consumer group.
    gc.groups["classic"] = SimpleNamespace(members={"x": 1}, state="Stable", offsets={})
    assert hb("classic", "m", 0, None, None, 30000, ["t"], None, None, []).error == 69
    del gc.groups["classic"]
    gc.stop()


async def test_static_member_leaves_temporarily_and_rejoins_with_its_partitions():
    gc = coordinator()
    a = Client(gc, "a1", instance="ia")
    b = Client(gc, "b1", instance="ib")
    a.heartbeat()
    b.heartbeat()
    converge([a, b])
    epoch = gc.consumer.groups["g"].group_epoch
    parts = a.parts(gc.topics)
    # Another process with the same instance id while a1 is active: UNRELEASED_INSTANCE_ID.
    assert gc.consumer.heartbeat("g", "a2", 0, "ia", None, 30000, ["t"], None, None, []).error == 111
    r = gc.consumer.heartbeat("g", "a1", -2, "ia", None, -1, None, None, None, None)
    assert (r.error, r.member_epoch) == (0, -2)
    a2 = Client(gc, "a2", instance="ia")
    assert a2.heartbeat().error == 0
    assert a2.parts(gc.topics) == parts                          # same partitions, no rebalance
    assert gc.consumer.groups["g"].group_epoch == epoch and "a1" not in gc.consumer.groups["g"].members
    # The old incarnation is fenced.
    assert gc.consumer.heartbeat("g", "a1", a.epoch, "ia", None, -1, None, None, None, None).error == 82
    gc.stop()


async def test_session_timeout_fences_a_silent_member():
    gc = coordinator(**{"group.consumer.session.timeout.ms": "100"})
    a, b = Client(gc, "a"), Client(gc, "b")
    a.heartbeat()
    b.heartbeat()
    for _ in range(10):
        await asyncio.sleep(0.03)
        a.heartbeat()
    assert set(gc.consumer.groups["g"].members) == {"a"}
    converge([a])
    assert len(a.parts(gc.topics)) == 12
    assert b.heartbeat().error == 25          # b was fenced: UNKNOWN_MEMBER_ID, it rejoins with epoch 0
    gc.stop()


async def test_offset_commit_and_fetch_check_member_epochs():
    gc = coordinator()
    a = Client(gc, "a")
    a.heartbeat()
    offsets = {("t", 0): (5, -1, None)}
    assert gc.commit_offsets("g", a.epoch, "a", None, offsets) == {("t", 0): 0}
    assert gc.commit_offsets("g", a.epoch + 1, "a", None, offsets) == {("t", 0): 113}    # STALE_MEMBER_EPOCH
    assert gc.commit_offsets("g", a.epoch, "zz", None, offsets) == {("t", 0): 25}        # UNKNOWN_MEMBER_ID
    assert gc.commit_offsets("g", -1, "", None, offsets) == {("t", 0): 25}               # group not empty
    assert gc.commit_offsets("g", a.epoch, "a", None, offsets, api_version=8) == {("t", 0): 35}
    # A group that does not exist: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before (Kafka's compatibility rule)
    assert gc.commit_offsets("nope", 3, "m", None, offsets, api_version=9) == {("t", 0): 69}
    assert gc.commit_offsets("nope", 3, "m", None, offsets, api_version=8) == {("t", 0): 22}
    assert gc.fetch_offsets("g", [("t", 0)], member_id="a", member_epoch=a.epoch)[1][("t", 0)].offset == 5
    assert gc.fetch_offsets("g", [("t", 0)], member_id="a", member_epoch=a.epoch + 1)[0] == 113
    assert gc.fetch_offsets("g", [("t", 0)], member_id="x", member_epoch=1)[0] == 25
    assert gc.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5                     # admin: epoch -1
    assert gc.delete_offsets("g", [("t", 0)]) == (0, {("t", 0): 86})                      # subscribed
    assert gc.delete_groups(["g"]) == {"g": 68}                                            # NON_EMPTY_GROUP
    assert [(o.group_id, o.group_type, o.protocol_type) for o in gc.list_groups()] == [("g", "consumer", "consumer")]
    assert gc.describe_group("g").error == 69                    # not a classic group
    assert gc.heartbeat("g", "a", None, 1) == 25
    assert gc.sync_group("g", 1, "a", None, None, None, {}).result().error == 25
    assert gc.join_group("g", "", None, "c", "/h", 1000, 10000, "consumer", [("range", b"")]).result().error == 23
    gc.consumer.heartbeat("g", "a", -1, None, None, -1, None, None, None, None)
    assert gc.commit_offsets("g", -1, "", None, {("t", 1): (7, -1, None)}) == {("t", 1): 0}   # empty: admin commits
    assert gc.delete_groups(["g"]) == {"g": 0} and "g" not in gc.consumer.groups
    gc.stop()


async def test_describe():
    gc = coordinator()
    a = Client(gc, "a")
    a.heartbeat()
    [d] = gc.consumer.describe(["g"], True)
    assert (d["error_code"], d["group_state"], d["group_epoch"], d["assignment_epoch"], d["assignor_name"]) == \
        (0, "Stable", 1, 1, "uniform")
    m = d["members"][0]
    assert m["member_id"] == "a" and m["member_epoch"] == 1 and m["subscribed_topic_names"] == ["t"]
    assert m["assignment"]["topic_partitions"][0]["topic_name"] == "t"
    assert len(m["assignment"]["topic_partitions"][0]["partitions"]) == 12
    assert [x["error_code"] for x in gc.consumer.describe(["nope"])] == [69]
    gc.stop()


def test_uniform_assignor_balances_and_sticks():
    subs = {m: {T1, T2} for m in "abc"}
    out = uniform_assign(subs, {T1: 7, T2: 5}, {})
    counts = sorted(sum(len(p) for p in a.values()) for a in out.values())
    assert counts == [4, 4, 4]
    seen = [(t, p) for a in out.values() for t, ps in a.items() for p in ps]
    assert len(seen) == len(set(seen)) == 12
    # A fourth member: the others only give partitions up, they take none from each other.
    subs["d"] = {T1, T2}
    out2 = uniform_assign(subs, {T1: 7, T2: 5}, out)
    for m in "abc":
        for t, ps in out2[m].items():
            assert ps <= out[m].get(t, frozenset())
    assert sorted(sum(len(p) for p in a.values()) for a in out2.values()) == [3, 3, 3, 3]
    # Heterogeneous subscriptions: only subscribers get a topic's partitions.
    out3 = uniform_assign({"a": {T1}, "b": {T1, T2}}, {T1: 4, T2: 4}, {})
    assert T2 not in out3["a"] and sum(len(p) for p in out3["a"].values()) >= 2


def test_range_assignor():
    out = range_assign({"b": {T1, T2}, "a": {T1, T2}}, {T1: 5, T2: 5}, {})
    assert out["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})}
    assert out["b"] == {T1: frozenset({3, 4}), T2: frozenset({3, 4})}


async def test_consumer_group_reloads_from_the_log(tmp_path):
    config = BrokerConfig({"log.dirs": str(tmp_path / "logs"), "offsets.topic.num.partitions": "3",
                           "group.consumer.heartbeat.interval.ms": "100"})

    def open_():
        replicas = open_replicas(config)
        replicas.startup()
        return replicas, GroupCoordinator(config, replicas=replicas)

    replicas, gc = open_()
    replicas.topics.create("t", 6, {})
    replicas.apply_topic(replicas.topics.get("t"), None)
    gc.start()
    await asyncio.wait_for(gc._load_task, 5)
    a, b = Client(gc, "a"), Client(gc, "b")
    a.heartbeat()
    b.heartbeat()
    converge([a, b])
    assert gc.commit_offsets("g", a.epoch, "a", None, {("t", 0): (42, -1, "x")}) == {("t", 0): 0}
    snapshot = {mid: (m.member_epoch, m.assigned) for mid, m in gc.consumer.groups["g"].members.items()}
    epochs = (gc.consumer.groups["g"].group_epoch, gc.consumer.groups["g"].assignment_epoch)
    gc.stop()
    replicas.shutdown()

    replicas, gc = open_()
    gc.start()
    await asyncio.wait_for(gc._load_task, 5)
    g = gc.consumer.groups["g"]
    assert (g.group_epoch, g.assignment_epoch) == epochs and g.state() == cgs.GROUP_STABLE
    assert {mid: (m.member_epoch, m.assigned) for mid, m in g.members.items()} == snapshot
    assert g.offsets[("t", 0)].offset == 42 and g.offsets[("t", 0)].metadata == "x"
    # Members carry on with their epochs (no rejoin needed).
    a.gc = b.gc = gc
    assert a.heartbeat().error == 0 and a.epoch == snapshot["a"][0]
    # Deleting the (emptied) group survives a reload too.
    for c in (a, b):
        gc.consumer.heartbeat("g", c.member_id, -1, None, None, -1, None, None, None, None)
    assert gc.delete_groups(["g"]) == {"g": 0}
    gc.stop()
    replicas.shutdown()
    replicas, gc = open_()
    gc.start()
    await asyncio.wait_for(gc._load_task, 5)
    assert "g" not in gc.consumer.groups and "g" not in gc.groups
    gc.stop()
    replicas.shutdown()


# ---- handlers at every version ------------------------------------------------------------------------------------
def _call(broker, mod, version, data):
    import io

    from kio.index import load_request_schema
    from kio.serial import entity_writer

    from broker.handlers import Request
    from protocol import kio_codec
    schema = load_request_schema(mod.API_KEY, version)
    out = io.BytesIO()
    entity_writer(schema)(out, kio_codec.to_entity(schema, data))
    req = Request(mod.API_KEY, version, 1, "cid", bytearray(out.getvalue()), 0, True, "/127.0.0.1")
    return mod.handle(broker, req)


def _decode(api_key, version, body):
    from kio.index import load_response_schema
    from kio.serial import entity_reader
    entity, n = entity_reader(load_response_schema(api_key, version))(bytes(body), 0)
    assert n == len(body)
    return entity


async def test_heartbeat_and_describe_handlers_at_every_version():
    from broker.handlers import consumer_group_describe, consumer_group_heartbeat, list_groups
    gc = coordinator()
    broker = SimpleNamespace(groups=gc)
    topic_id = gc.topics.get("t").uuid
    for v in (0, 1):
        group = f"g{v}"
        base = {"group_id": group, "member_id": "" if v == 0 else "m-1", "instance_id": None, "rack_id": None,
                "server_assignor": None, "subscribed_topic_regex": None}
        r = _decode(68, v, _call(broker, consumer_group_heartbeat, v, {
            **base, "member_epoch": 0, "rebalance_timeout": 30000, "subscribed_topic_names": ("t",),
            "topic_partitions": ()}))
        assert (r.error_code.value, r.member_epoch, r.heartbeat_interval.total_seconds()) == (0, 1, 0.1)
        assert [(tp.topic_id, tp.partitions) for tp in r.assignment.topic_partitions] == \
            [(topic_id, tuple(range(12)))]
        mid = r.member_id
        assert (len(mid) == 36) if v == 0 else (mid == "m-1")
        r = _decode(68, v, _call(broker, consumer_group_heartbeat, v, {
            **base, "member_id": mid, "member_epoch": 1, "rebalance_timeout": -1, "subscribed_topic_names": None,
            "topic_partitions": None}))
        assert (r.error_code.value, r.member_epoch, r.assignment) == (0, 1, None)   # unchanged: no assignment
        r = _decode(69, v, _call(broker, consumer_group_describe, v, {"group_ids": (group, "nope"),
                                                                       "include_authorized_operations": False}))
        g, missing = r.groups
        assert (g.group_state, g.group_epoch, g.assignor_name, len(g.members)) == ("Stable", 1, "uniform", 1)
        assert g.members[0].assignment.topic_partitions[0].topic_name == "t"
        assert missing.error_code.value == 69 and missing.error_message == "Group nope not found."
        r = _decode(68, v, _call(broker, consumer_group_heartbeat, v, {
            **base, "member_id": "", "member_epoch": 5, "rebalance_timeout": -1, "subscribed_topic_names": None,
            "topic_partitions": None}))
        assert r.error_code.value == 42 and r.member_id is None and r.error_message == "MemberId can't be empty."
    r = _decode(16, 5, _call(broker, list_groups, 5, {"states_filter": (), "types_filter": ("consumer",)}))
    assert sorted((x.group_id, x.group_type, x.group_state) for x in r.groups) == \
        [("g0", "consumer", "Stable"), ("g1", "consumer", "Stable")]
    gc._loading = {0}
    r = _decode(16, 5, _call(broker, list_groups, 5, {"states_filter": (), "types_filter": ()}))
    assert r.error_code.value == 14
    gc._loading = set()
    gc.stop()
