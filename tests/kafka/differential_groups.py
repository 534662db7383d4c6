"""Differential scenarios (see test_differential.py) of consumer groups: the classic protocol (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit/Fetch/Delete, DescribeGroups, ListGroups, DeleteGroups) and KIP-848's
ConsumerGroupHeartbeat / ConsumerGroupDescribe."""
from __future__ import annotations

import time
import uuid

from differential_scenarios import (CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS,
                                    DESCRIBE_GROUPS, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS, OFFSET_COMMIT,
                                    OFFSET_DELETE, OFFSET_FETCH, SYNC_GROUP, Side, coordinator, err, norm, scenario)

# ---- classic groups --------------------------------------------------------------------------------------------------

def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0 (Kafka's group coordinator parses the metadata of "consumer" groups)."""
    import struct
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


PROTOCOLS = [{"name": "range", "metadata": subscription("some-topic")}]


def join(s: Side, group: str, member_id: str = "", protocol_type: str = "consumer", session_ms: int = 30000,
         protocols=PROTOCOLS):
    return s.req(JOIN_GROUP, {"group_id": group, "session_timeout": session_ms, "rebalance_timeout": 30000,
                              "member_id": member_id, "group_instance_id": None, "protocol_type": protocol_type,
                              "protocols": protocols, "reason": None})


def joined(r) -> tuple:
    return (err(r.error_code), r.generation_id, r.protocol_type, r.protocol_name, len(r.members),
            r.leader == r.member_id and bool(r.member_id))


def member(s: Side, group: str) -> tuple[str, int]:
    """A stable one-member group: (member id, generation)."""
    coordinator(s, 0, group)
    r = join(s, group)
    assert err(r.error_code) == "MEMBER_ID_REQUIRED", (s.kind, r)
    r = join(s, group, r.member_id)
    assert r.error_code == 0, (s.kind, r)
    sync = sync_group(s, group, r.generation_id, r.member_id, [{"member_id": r.member_id, "assignment": b"a"}])
    assert sync.error_code == 0, (s.kind, sync)
    return r.member_id, r.generation_id


def sync_group(s: Side, group: str, generation: int, member_id: str, assignments=()):
    return s.req(SYNC_GROUP, {"group_id": group, "generation_id": generation, "member_id": member_id,
                              "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                              "assignments": list(assignments)})


def heartbeat(s: Side, group: str, generation: int, member_id: str) -> str:
    return err(s.req(HEARTBEAT, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                 "group_instance_id": None}).error_code)


def commit(s: Side, group: str, generation: int, member_id: str, topic: str, *partitions: int, offset: int = 1):
    r = s.req(OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                              "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                  {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                                   "committed_metadata": "m"} for p in partitions]}]})
    return sorted((t.name, p.partition_index, err(p.error_code)) for t in r.topics for p in t.partitions)


def fetch_offsets(s: Side, group: str, topic: str | None = None, *partitions: int):
    r = s.req(OFFSET_FETCH, {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics":
                                         None if topic is None else [{"name": topic,
                                                                      "partition_indexes": list(partitions)}]}],
                             "require_stable": False})
    return norm(r.groups)


@scenario("join-group-errors",
          expect=("INCONSISTENT_GROUP_PROTOCOL", "INVALID_GROUP_ID", "INVALID_SESSION_TIMEOUT", "UNKNOWN_MEMBER_ID"))
def _(s: Side):
    """An unknown member id, an empty group id, a session timeout below group.min.session.timeout.ms, and a
    protocol type other than the group's."""
    g = s.group()
    coordinator(s, 0, g)
    out = [joined(join(s, g, "unknown-member")), joined(join(s, "")), joined(join(s, g, session_ms=1))]
    member(s, g)
    out.append(joined(join(s, g, protocol_type="connect")))
    return out


@scenario("join-group-member-id-required-then-joined", expect=("MEMBER_ID_REQUIRED",))
def _(s: Side):
    g = s.group()
    coordinator(s, 0, g)
    first = join(s, g)
    second = join(s, g, first.member_id)
    return [joined(first), bool(first.member_id), joined(second), second.member_id == first.member_id]


@scenario("sync-group-bad-generation-and-member", expect=("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"))
def _(s: Side):
    g = s.group()
    m, gen = member(s, g)
    return [err(sync_group(s, g, gen + 1, m).error_code), err(sync_group(s, g, gen, "stranger").error_code),
            norm(sync_group(s, g, gen, m))]


@scenario("heartbeat-bad-generation-member-and-group", expect=("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"))
def _(s: Side):
    g = s.group()
    m, gen = member(s, g)
    coordinator(s, 0, s.group("-none"))
    return [heartbeat(s, g, gen, m), heartbeat(s, g, gen + 1, m), heartbeat(s, g, gen, "stranger"),
            heartbeat(s, s.group("-none"), 1, "stranger")]


@scenario("offset-commit-bad-generation-and-member", expect=("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"))
def _(s: Side):
    t = s.create()
    g = s.group()
    m, gen = member(s, g)
    return [commit(s, g, gen + 1, m, t, 0), commit(s, g, gen, "stranger", t, 0), commit(s, g, gen, m, t, 0),
            commit(s, g, -1, "", t, 0)]


@scenario("offset-commit-unknown-topic-and-partitions", expect=("UNKNOWN_TOPIC_OR_PARTITION",))
def _(s: Side):
    """Standalone commits (generation -1): to a topic that does not exist and to a partition it lacks."""
    t = s.create()
    g = s.group()
    coordinator(s, 0, g)
    return [commit(s, g, -1, "", s.name("-missing"), 0), commit(s, g, -1, "", t, 0, 3),
            fetch_offsets(s, g, t, 0, 3)]


@scenario("offset-fetch-unknown")
def _(s: Side):
    t = s.create()
    g = s.group()
    coordinator(s, 0, g)
    return [fetch_offsets(s, g, t, 0), fetch_offsets(s, g, s.name("-missing"), 0), fetch_offsets(s, g)]


@scenario("leave-group-unknown-member", expect=("UNKNOWN_MEMBER_ID",))
def _(s: Side):
    g = s.group()
    m, _ = member(s, g)
    def leave(group, *ids):
        r = s.req(LEAVE_GROUP, {"group_id": group, "members": [{"member_id": i, "group_instance_id": None,
                                                                 "reason": None} for i in ids]})
        return err(r.error_code), [err(x.error_code) for x in r.members]
    coordinator(s, 0, s.group("-none"))
    return [leave(g, "stranger"), leave(g, m, "stranger"), leave(s.group("-none"), "stranger")]


def describe_groups(s: Side, *groups: str):
    r = s.req(DESCRIBE_GROUPS, {"groups": list(groups), "include_authorized_operations": False})
    return sorted(norm(r.groups), key=lambda g: g["group_id"])       # Kafka answers in coordinator shard order


@scenario("describe-groups-unknown-and-stable")
def _(s: Side):
    g = s.group()
    member(s, g)
    coordinator(s, 0, s.group("-none"))
    return describe_groups(s, s.group("-none"), g)


@scenario("delete-groups-non-empty-and-unknown", expect=("GROUP_ID_NOT_FOUND", "NON_EMPTY_GROUP"))
def _(s: Side):
    g = s.group()
    m, _ = member(s, g)
    coordinator(s, 0, s.group("-none"))
    r = s.req(DELETE_GROUPS, {"groups_names": [g, s.group("-none")]})
    s.req(LEAVE_GROUP, {"group_id": g, "members": [{"member_id": m, "group_instance_id": None, "reason": None}]})
    after = s.req(DELETE_GROUPS, {"groups_names": [g]})
    return [sorted((x.group_id, err(x.error_code)) for x in r.results), norm(after.results), describe_groups(s, g)]


@scenario("offset-delete-subscribed-and-unknown", expect=("GROUP_ID_NOT_FOUND",))
def _(s: Side):
    t = s.create()
    g = s.group()
    coordinator(s, 0, g)
    commit(s, g, -1, "", t, 0)
    def delete(group):
        r = s.req(OFFSET_DELETE, {"group_id": group, "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]})
        return norm(r)
    return [delete(g), delete(s.group("-none")), fetch_offsets(s, g, t, 0)]


@scenario("list-groups-states")
def _(s: Side):
    g = s.group()
    member(s, g)
    r = s.req(LIST_GROUPS, {"states_filter": ["Stable"], "types_filter": []})
    return [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in r.groups if x.group_id == g]


# ---- consumer groups (KIP-848) -------------------------------------------------------------------------------------

def cgh(s: Side, group: str, member_id: str, epoch: int, topics=None, regex_ok: bool = False):
    r = s.req(CONSUMER_GROUP_HEARTBEAT, {
        "group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout": 30000, "subscribed_topic_names": topics, "server_assignor": None,
        "topic_partitions": None if epoch > 0 and topics is None else []})
    return r


def cg(r) -> tuple:
    parts = None if r.assignment is None else sorted(p for tp in r.assignment.topic_partitions for p in tp.partitions)
    return err(r.error_code), r.member_epoch, parts


def cg_member(s: Side, group: str, topic: str, joined: list | None = None) -> tuple[str, int]:
    """A KIP-848 member joined to `group` (its join response appended to `joined`)."""
    coordinator(s, 0, group)
    mid = uuid.uuid4().hex[:22]
    r = cgh(s, group, mid, 0, [topic])
    assert r.error_code == 0, (s.kind, r)
    if joined is not None:
        joined.append(r)
    return mid, r.member_epoch


@scenario("consumer-group-heartbeat-join-and-fenced-epoch", expect=("FENCED_MEMBER_EPOCH",))
def _(s: Side):
    t = s.create(partitions=2)
    g = s.group()
    mid, epoch = cg_member(s, g, t)
    return [epoch, cg(cgh(s, g, mid, epoch + 5)), cg(cgh(s, g, mid, epoch))[0]]


@scenario("consumer-group-heartbeat-unknown-member", expect=("GROUP_ID_NOT_FOUND", "UNKNOWN_MEMBER_ID"))
def _(s: Side):
    t = s.create()
    g = s.group()
    cg_member(s, g, t)
    return [cg(cgh(s, g, "stranger-member-id-xyz", 1)), cg(cgh(s, s.group("-none"), "stranger-member-id-xyz", 1))]


@scenario("consumer-group-heartbeat-bad-subscription", expect=("INVALID_REQUEST",))
def _(s: Side):
    """Joining (epoch 0) needs subscribed topic names, and a member id; a negative epoch other than -1 / -2 is
    not an epoch."""
    g = s.group()
    coordinator(s, 0, g)
    return [cg(cgh(s, g, uuid.uuid4().hex[:22], 0, None)), cg(cgh(s, g, "", 0, ["x"])),
            cg(cgh(s, g, uuid.uuid4().hex[:22], -7, ["x"])), cg(cgh(s, "", uuid.uuid4().hex[:22], 0, ["x"]))]


@scenario("consumer-group-heartbeat-classic-group-in-use", expect=("GROUP_ID_NOT_FOUND",))
def _(s: Side):
    """A KIP-848 member joining a classic group that has members."""
    t = s.create()
    g = s.group()
    member(s, g)
    return cg(cgh(s, g, uuid.uuid4().hex[:22], 0, [t]))


@scenario("consumer-group-describe-unknown-and-classic", expect=("GROUP_ID_NOT_FOUND",))
def _(s: Side):
    g = s.group()
    member(s, g)
    coordinator(s, 0, s.group("-none"))
    r = s.req(CONSUMER_GROUP_DESCRIBE, {"group_ids": [s.group("-none"), g], "include_authorized_operations": False})
    return sorted((x.group_id, err(x.error_code), x.group_state) for x in r.groups)


# ---- more of the groups --------------------------------------------------------------------------------------------

@scenario("offset-commit-and-fetch-round-trip")
def _(s: Side):
    """What a consumer committed comes back as it was: offset, leader epoch and metadata (null becomes "")."""
    t = s.create(partitions=2)
    g = s.group()
    coordinator(s, 0, g)
    r = s.req(OFFSET_COMMIT, {"group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
                              "group_instance_id": None, "topics": [{"name": t, "partitions": [
                                  {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": 3,
                                   "committed_metadata": "meta"},
                                  {"partition_index": 1, "committed_offset": 0, "committed_leader_epoch": -1,
                                   "committed_metadata": None}]}]})
    return [sorted((p.partition_index, err(p.error_code)) for x in r.topics for p in x.partitions),
            fetch_offsets(s, g, t, 0, 1), fetch_offsets(s, g)]


@scenario("static-member-fenced-instance-id", expect=("FENCED_INSTANCE_ID",))
def _(s: Side):
    """Static membership (KIP-345): a rejoin under the same instance id replaces the member, and the old member id
    is then FENCED_INSTANCE_ID."""
    g = s.group()
    coordinator(s, 0, g)

    def join_static(member_id=""):
        return s.req(JOIN_GROUP, {"group_id": g, "session_timeout": 30000, "rebalance_timeout": 30000,
                                  "member_id": member_id, "group_instance_id": "instance-1",
                                  "protocol_type": "consumer", "protocols": PROTOCOLS, "reason": None})
    first = join_static()
    sync = sync_group_static(s, g, first.generation_id, first.member_id, [{"member_id": first.member_id,
                                                                           "assignment": b"a"}])
    second = join_static()
    hb = s.req(HEARTBEAT, {"group_id": g, "generation_id": first.generation_id, "member_id": first.member_id,
                           "group_instance_id": "instance-1"})
    return [joined(first), err(sync.error_code), joined(second)[:4], second.member_id != first.member_id,
            err(hb.error_code)]


def sync_group_static(s: Side, group: str, generation: int, member_id: str, assignments):
    return s.req(SYNC_GROUP, {"group_id": group, "generation_id": generation, "member_id": member_id,
                              "group_instance_id": "instance-1", "protocol_type": "consumer",
                              "protocol_name": "range", "assignments": list(assignments)})


@scenario("consumer-group-heartbeat-leave-and-describe")
def _(s: Side):
    """A KIP-848 member gets its partitions, leaves (epoch -1), and the group is then empty."""
    t = s.create(partitions=2)
    g = s.group()
    joined: list = []
    mid, epoch = cg_member(s, g, t, joined)
    deadline = time.monotonic() + 30
    got = cg(joined[0])
    while got[2] is None and time.monotonic() < deadline:     # the assignment may come with a later heartbeat
        time.sleep(0.2)
        got = cg(cgh(s, g, mid, got[1]))
    described = s.req(CONSUMER_GROUP_DESCRIBE, {"group_ids": [g], "include_authorized_operations": False}).groups[0]
    left = cgh(s, g, mid, -1)
    after = s.req(CONSUMER_GROUP_DESCRIBE, {"group_ids": [g], "include_authorized_operations": False}).groups[0]
    return [got[0], got[2], (err(described.error_code), described.group_state, len(described.members),
                             described.assignor_name),
            cg(left), (err(after.error_code), after.group_state, len(after.members))]
