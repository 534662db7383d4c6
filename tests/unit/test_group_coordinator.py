"""The classic group coordinator in-process: state machine, rebalances, static membership, sessions, offsets, admin
operations, the persistence hooks, and every group handler at every decodable version."""
from __future__ import annotations

import asyncio
import io
import struct
from types import SimpleNamespace

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.groups.classic import group_coordinator as gcm
from broker.groups.classic.group_metadata import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE, parse_subscription_topics
from broker.groups.classic.group_coordinator import GroupCoordinator
from broker.handlers import Request
from protocol import kio_codec

NONE = 0
OFFSET_METADATA_TOO_LARGE = 12
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NOT_COORDINATOR = 16
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86


def sub(*topics: str, version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription: version, topics, null user data."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


PROTOS = [("range", sub("t")), ("roundrobin", sub("t"))]


def make(**overrides) -> GroupCoordinator:
    cfg = {"group.initial.rebalance.delay.ms": "30", "group.min.session.timeout.ms": "10"}
    cfg.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return GroupCoordinator(cfg)


def join(gc, group="g", member_id="", instance=None, protocols=PROTOS, session=2000, rebalance=2000, v4=True,
         skip=False, ptype="consumer", client="client"):
    return gc.join_group(group, member_id, instance, client, "/127.0.0.1", rebalance, session, ptype, protocols,
                         require_known_member_id=v4, supports_skip_assignment=skip)


def join_new(gc, group="g", **kw):
    """KIP-394 two-step join: returns the parked future of the second JoinGroup."""
    first = join(gc, group, **kw)
    assert first.done() and first.result().error == MEMBER_ID_REQUIRED
    mid = first.result().member_id
    assert mid.startswith(kw.get("client", "client") + "-")
    return join(gc, group, member_id=mid, **kw)


async def form(gc, group="g", n=2, **kw):
    """n dynamic members join; returns their JoinResults once the generation forms."""
    futs = [join_new(gc, group, **kw) for _ in range(n)]
    return list(await asyncio.wait_for(asyncio.gather(*futs), 5))


async def stabilize(gc, results, group="g", assignment=None):
    """Everyone syncs, the leader with `assignment` (default: member id bytes); returns SyncResults by member."""
    leader = next(r for r in results if r.members)
    gen = leader.generation_id
    assignment = assignment or {m[0]: m[0].encode() for m in leader.members}
    futs = {}
    for r in results:
        if r is leader:
            continue
        futs[r.member_id] = gc.sync_group(group, gen, r.member_id, None, "consumer", leader.protocol_name, {})
    futs[leader.member_id] = gc.sync_group(group, gen, leader.member_id, None, "consumer", leader.protocol_name,
                                           assignment)
    out = {}
    for mid, f in futs.items():
        out[mid] = await asyncio.wait_for(f, 5)
    assert gc.groups[group].state == STABLE
    return out


# ---- joining and syncing -----------------------------------------------------------------------------------------
async def test_member_id_required_then_first_generation():
    gc = make()
    fut = join_new(gc, client="rdkafka")
    assert not fut.done()                      # parked for group.initial.rebalance.delay.ms
    assert gc.groups["g"].state == PREPARING_REBALANCE
    r = await asyncio.wait_for(fut, 2)
    assert r.error == NONE and r.generation_id == 1 and r.leader == r.member_id
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert r.members == [(r.member_id, None, sub("t"))]
    assert gc.groups["g"].state == COMPLETING_REBALANCE


async def test_join_before_v4_needs_no_member_id_round_trip():
    gc = make()
    r = await asyncio.wait_for(join(gc, v4=False), 2)
    assert r.error == NONE and r.member_id.startswith("client-") and r.generation_id == 1


async def test_three_members_one_generation_leader_assigns_followers_wait():
    gc = make()
    results = await form(gc, n=3)
    assert {r.generation_id for r in results} == {1}
    leader = results[0]
    assert {r.leader for r in results} == {leader.member_id}          # the first joiner leads
    assert len(leader.members) == 3 and all(r.members == [] for r in results[1:])
    # Followers sync first and park until the leader's assignment arrives.
    f1 = gc.sync_group("g", 1, results[1].member_id, None, "consumer", "range", {})
    f2 = gc.sync_group("g", 1, results[2].member_id, None, "consumer", "range", {})
    await asyncio.sleep(0.01)
    assert not f1.done() and not f2.done()
    assignment = {results[0].member_id: b"A", results[1].member_id: b"B"}   # the third gets an empty one
    fl = gc.sync_group("g", 1, leader.member_id, None, "consumer", "range", assignment)
    assert (await fl).assignment == b"A"
    assert (await f1).assignment == b"B" and (await f1).protocol_name == "range"
    assert (await f2).error == NONE and (await f2).assignment == b""
    assert gc.groups["g"].state == STABLE
    # A late SyncGroup in Stable just returns the member's assignment.
    late = gc.sync_group("g", 1, results[1].member_id, None, None, None, {})
    assert late.result().assignment == b"B"


async def test_sync_errors():
    gc = make()
    results = await form(gc, n=1)
    mid = results[0].member_id
    assert gc.sync_group("g", 2, mid, None, None, None, {}).result().error == ILLEGAL_GENERATION
    assert gc.sync_group("g", 1, "nobody", None, None, None, {}).result().error == UNKNOWN_MEMBER_ID
    assert gc.sync_group("nope", 1, mid, None, None, None, {}).result().error == UNKNOWN_MEMBER_ID
    assert gc.sync_group("g", 1, mid, None, "connect", None, {}).result().error == INCONSISTENT_GROUP_PROTOCOL
    assert gc.sync_group("g", 1, mid, None, None, "roundrobin", {}).result().error == INCONSISTENT_GROUP_PROTOCOL
    assert gc.sync_group("", 1, mid, None, None, None, {}).result().error == INVALID_GROUP_ID


async def test_protocol_selection_uses_common_protocols_and_votes():
    gc = make()
    a = join_new(gc, protocols=[("range", b"1"), ("roundrobin", b"1"), ("sticky", b"1")])
    b = join_new(gc, protocols=[("roundrobin", b"2"), ("range", b"2")])
    c = join_new(gc, protocols=[("roundrobin", b"3"), ("range", b"3")])
    results = await asyncio.gather(a, b, c)
    # range and roundrobin are common; roundrobin has two first-choice votes to range's one.
    assert {r.protocol_name for r in results} == {"roundrobin"}
    assert results[0].members == [(r.member_id, None, m) for r, m in zip(results, (b"1", b"2", b"3"))]

    gc2 = make()
    x = join_new(gc2, group="h", protocols=[("range", b""), ("roundrobin", b"")])
    y = join_new(gc2, group="h", protocols=[("roundrobin", b"")])   # only roundrobin is common
    assert {r.protocol_name for r in await asyncio.gather(x, y)} == {"roundrobin"}


async def test_inconsistent_protocols_are_rejected():
    gc = make()
    fut = join_new(gc, protocols=[("range", b"")])
    assert join(gc, ptype="connect").result().error == INCONSISTENT_GROUP_PROTOCOL
    assert join(gc, protocols=[("sticky", b"")]).result().error == INCONSISTENT_GROUP_PROTOCOL
    assert join(gc, group="empty-type", ptype="").result().error == INCONSISTENT_GROUP_PROTOCOL
    assert join(gc, group="no-protocols", protocols=[]).result().error == INCONSISTENT_GROUP_PROTOCOL
    await fut


async def test_join_validation():
    gc = make(group_max_session_timeout_ms=5000)
    assert join(gc, session=5).result().error == INVALID_SESSION_TIMEOUT
    assert join(gc, session=6000).result().error == INVALID_SESSION_TIMEOUT
    assert join(gc, group="").result().error == INVALID_GROUP_ID
    assert join(gc, member_id="ghost").result().error == UNKNOWN_MEMBER_ID     # known id, unknown group
    assert "g" not in gc.groups


async def test_group_max_size():
    gc = make(group_max_size=2)
    results = await form(gc, n=2)
    await stabilize(gc, results)
    r = join(gc).result()
    assert r.error == GROUP_MAX_SIZE_REACHED and r.member_id == ""


async def test_initial_delay_extends_while_members_keep_arriving():
    gc = make(group_initial_rebalance_delay_ms=200)
    first = join_new(gc)
    await asyncio.sleep(0.1)
    second = join_new(gc)                   # arrives inside the first delay: the delay is extended
    await asyncio.sleep(0.15)
    assert not first.done()                 # 250 ms > 200 ms, but the extension runs to 400 ms
    r1, r2 = await asyncio.wait_for(asyncio.gather(first, second), 2)
    assert r1.generation_id == r2.generation_id == 1 and len(r1.members) == 2


# ---- rebalances and sessions ------------------------------------------------------------------------------------
async def test_heartbeat_errors_and_rebalance_signal():
    gc = make()
    results = await form(gc, n=2)
    a, b = results
    assert gc.heartbeat("g", a.member_id, None, 1) == NONE     # CompletingRebalance: fine
    await stabilize(gc, results)
    assert gc.heartbeat("g", a.member_id, None, 1) == NONE
    assert gc.heartbeat("g", a.member_id, None, 0) == ILLEGAL_GENERATION
    assert gc.heartbeat("g", "ghost", None, 1) == UNKNOWN_MEMBER_ID
    assert gc.heartbeat("nope", a.member_id, None, 1) == UNKNOWN_MEMBER_ID
    assert gc.heartbeat("", a.member_id, None, 1) == INVALID_GROUP_ID
    newcomer = join_new(gc)                                      # a join starts a rebalance
    assert gc.groups["g"].state == PREPARING_REBALANCE
    assert gc.heartbeat("g", b.member_id, None, 1) == REBALANCE_IN_PROGRESS
    # A SyncGroup now is told to rejoin; everyone rejoins and generation 2 forms.
    assert gc.sync_group("g", 1, b.member_id, None, None, None, {}).result().error == REBALANCE_IN_PROGRESS
    ra = join(gc, member_id=a.member_id)
    rb = join(gc, member_id=b.member_id)
    rs = await asyncio.wait_for(asyncio.gather(ra, rb, newcomer), 2)
    assert {r.generation_id for r in rs} == {2} and rs[0].leader == a.member_id and len(rs[0].members) == 3


async def test_session_timeout_removes_a_silent_member():
    gc = make()
    results = await form(gc, n=2, session=150, rebalance=400)
    await stabilize(gc, results)
    a, b = results
    for _ in range(8):                       # a heartbeats, b stays silent
        await asyncio.sleep(0.04)
        gc.heartbeat("g", a.member_id, None, 1)
    group = gc.groups["g"]
    assert not group.has(b.member_id) and group.state == PREPARING_REBALANCE
    assert gc.heartbeat("g", a.member_id, None, 1) == REBALANCE_IN_PROGRESS
    r = await asyncio.wait_for(join(gc, member_id=a.member_id, session=150, rebalance=400), 2)
    assert r.generation_id == 2 and [m[0] for m in r.members] == [a.member_id]


async def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout():
    gc = make()
    results = await form(gc, n=2, session=5000, rebalance=150)
    await stabilize(gc, results)
    a, b = results
    # b rejoins with a new subscription (a rebalance); a never rejoins
    fut = join(gc, member_id=b.member_id, session=5000, rebalance=150, protocols=[("range", sub("t", "u"))])
    await asyncio.sleep(0.05)
    assert not fut.done()                   # waiting for a
    r = await asyncio.wait_for(fut, 2)
    assert r.generation_id == 2 and r.leader == b.member_id and [m[0] for m in r.members] == [b.member_id]
    assert gc.heartbeat("g", a.member_id, None, 1) == UNKNOWN_MEMBER_ID


async def test_member_that_never_syncs_is_removed():
    gc = make()
    results = await form(gc, n=2, rebalance=150)
    leader, follower = results
    gc.sync_group("g", 1, leader.member_id, None, None, None, {leader.member_id: b"x", follower.member_id: b"y"})
    assert gc.groups["g"].state == STABLE
    await asyncio.sleep(0.25)               # the follower never sent SyncGroup
    assert not gc.groups["g"].has(follower.member_id)
    assert gc.groups["g"].state == PREPARING_REBALANCE


async def test_pending_member_expires_and_unblocks_the_rebalance():
    gc = make()
    results = await form(gc, n=1, session=100)
    await stabilize(gc, results)
    orphan = join(gc, session=100)          # gets MEMBER_ID_REQUIRED and never comes back
    assert orphan.result().error == MEMBER_ID_REQUIRED
    group = gc.groups["g"]
    assert group.is_pending_member(orphan.result().member_id)
    rejoin = join(gc, member_id=results[0].member_id, session=100)   # the leader rejoins: rebalance
    await asyncio.sleep(0.03)
    assert not rejoin.done()                # waits for the pending member
    r = await asyncio.wait_for(rejoin, 2)
    assert r.generation_id == 2 and not group.pending_members


async def test_stable_follower_rejoining_with_same_metadata_gets_current_generation_leader_rebalances():
    gc = make()
    results = await form(gc, n=2)
    await stabilize(gc, results)
    leader, follower = results
    r = join(gc, member_id=follower.member_id).result()
    assert r.error == NONE and r.generation_id == 1 and r.members == [] and r.leader == leader.member_id
    assert gc.groups["g"].state == STABLE
    fut = join(gc, member_id=leader.member_id)
    assert gc.groups["g"].state == PREPARING_REBALANCE and not fut.done()
    other = join(gc, member_id=follower.member_id)
    assert (await fut).generation_id == (await other).generation_id == 2


async def test_leave_group_single_batch_and_last_member():
    gc = make()
    results = await form(gc, n=3, instance=None)
    await stabilize(gc, results)
    a, b, c = results
    err, errs = gc.leave_group("g", [(c.member_id, None, "bye"), ("ghost", None, None)])
    assert (err, errs) == (NONE, [NONE, UNKNOWN_MEMBER_ID])
    assert gc.groups["g"].state == PREPARING_REBALANCE
    assert gc.leave_group("nope", [("x", None, None)]) == (NONE, [UNKNOWN_MEMBER_ID])
    assert gc.leave_group("", [("x", None, None)])[0] == INVALID_GROUP_ID
    # The leader leaves while the others have not rejoined: b rejoins and becomes leader.
    rb = join(gc, member_id=b.member_id)
    assert gc.leave_group("g", [(a.member_id, None, None)]) == (NONE, [NONE])
    r = await asyncio.wait_for(rb, 2)
    assert r.leader == b.member_id and r.generation_id == 2
    assert gc.leave_group("g", [(b.member_id, None, None)]) == (NONE, [NONE])
    group = gc.groups["g"]
    assert group.state == EMPTY and group.generation_id == 3 and not group.members


# ---- static membership --------------------------------------------------------------------------------------------
async def static_group(gc, skip=False, **kw):
    a = join(gc, instance="ia", client="ca", skip=skip, **kw)
    b = join(gc, instance="ib", client="cb", skip=skip, **kw)
    ra, rb = await asyncio.wait_for(asyncio.gather(a, b), 2)
    assert ra.member_id.startswith("ia-") and rb.member_id.startswith("ib-")   # no MEMBER_ID_REQUIRED round trip
    futs = [gc.sync_group("g", 1, rb.member_id, "ib", None, None, {}),
            gc.sync_group("g", 1, ra.member_id, "ia", None, None, {ra.member_id: b"A", rb.member_id: b"B"})]
    await asyncio.gather(*futs)
    return ra, rb


async def test_static_member_rejoin_replaces_old_id_without_rebalance():
    gc = make()
    ra, rb = await static_group(gc)
    r = join(gc, instance="ia").result()     # restarted with the same group.instance.id, unknown member id
    assert r.error == NONE and r.generation_id == 1 and r.member_id != ra.member_id
    assert r.leader == ra.member_id and r.members == []     # the old leader id: no trivial reassignment
    group = gc.groups["g"]
    assert group.state == STABLE and group.static_members["ia"] == r.member_id
    assert gc.sync_group("g", 1, r.member_id, "ia", None, None, {}).result().assignment == b"A"
    assert gc.heartbeat("g", r.member_id, "ia", 1) == NONE
    assert gc.heartbeat("g", rb.member_id, "ib", 1) == NONE  # b never sees a rebalance
    # The old incarnation is fenced everywhere.
    assert gc.heartbeat("g", ra.member_id, "ia", 1) == FENCED_INSTANCE_ID
    assert join(gc, member_id=ra.member_id, instance="ia").result().error == FENCED_INSTANCE_ID
    assert gc.sync_group("g", 1, ra.member_id, "ia", None, None, {}).result().error == FENCED_INSTANCE_ID
    assert gc.commit_offsets("g", 1, ra.member_id, "ia", {("t", 0): (1, -1, None)}) == {("t", 0): FENCED_INSTANCE_ID}
    assert gc.leave_group("g", [(ra.member_id, "ia", None)]) == (NONE, [FENCED_INSTANCE_ID])
    # Administrative removal by instance id (member id left empty).
    assert gc.leave_group("g", [("", "ia", "admin"), ("", "nobody", None)]) == (NONE, [NONE, UNKNOWN_MEMBER_ID])
    assert "ia" not in group.static_members and group.state == PREPARING_REBALANCE


async def test_static_leader_rejoin_v9_is_told_to_skip_assignment():
    gc = make()
    ra, rb = await static_group(gc, skip=True)
    r = join(gc, instance="ia", skip=True).result()
    assert r.error == NONE and r.leader == r.member_id and r.skip_assignment
    assert {m[0] for m in r.members} == {r.member_id, rb.member_id}
    assert gc.groups["g"].state == STABLE


async def test_static_member_rejoin_with_other_protocols_rebalances():
    gc = make()
    ra, rb = await static_group(gc)
    fut = join(gc, instance="ib", protocols=[("roundrobin", sub("t"))])   # range is no longer common
    assert gc.groups["g"].state == PREPARING_REBALANCE and not fut.done()


async def test_static_member_parked_join_is_fenced_by_its_replacement():
    gc = make()
    ra, rb = await static_group(gc)
    parked = join(gc, member_id=ra.member_id, instance="ia")   # leader rejoin: rebalance, parked
    assert not parked.done()
    replacement = join(gc, instance="ia")
    assert parked.result().error == FENCED_INSTANCE_ID
    rb2 = join(gc, member_id=rb.member_id, instance="ib")
    r, _ = await asyncio.wait_for(asyncio.gather(replacement, rb2), 2)
    assert r.error == NONE and r.generation_id == 2


async def test_static_member_that_does_not_rejoin_is_kept():
    gc = make()
    ra, rb = await static_group(gc, session=5000, rebalance=100)
    fut = join(gc, member_id=ra.member_id, instance="ia", session=5000, rebalance=100)
    r = await asyncio.wait_for(fut, 2)
    assert r.generation_id == 2 and gc.groups["g"].has(rb.member_id)   # not removed: it is static


# ---- offsets ------------------------------------------------------------------------------------------------------
async def test_commit_and_fetch_with_generation_checks():
    gc = make()
    results = await form(gc, n=2)
    a, b = results
    # CompletingRebalance: REBALANCE_IN_PROGRESS
    assert gc.commit_offsets("g", 1, a.member_id, None, {("t", 0): (5, 2, "m")}) == {("t", 0): REBALANCE_IN_PROGRESS}
    await stabilize(gc, results)
    assert gc.commit_offsets("g", 1, a.member_id, None, {("t", 0): (5, 2, "meta"), ("t", 1): (7, -1, None)}) == \
        {("t", 0): NONE, ("t", 1): NONE}
    assert gc.commit_offsets("g", 0, a.member_id, None, {("t", 0): (9, -1, None)}) == {("t", 0): ILLEGAL_GENERATION}
    assert gc.commit_offsets("g", 1, "ghost", None, {("t", 0): (9, -1, None)}) == {("t", 0): UNKNOWN_MEMBER_ID}
    # generation -1 with members present: only an Empty group takes simple commits
    assert gc.commit_offsets("g", -1, "", None, {("t", 0): (9, -1, None)}) == {("t", 0): UNKNOWN_MEMBER_ID}
    # unknown group with a generation: from an older generation of a group that is gone
    assert gc.commit_offsets("gone", 3, "m", None, {("t", 0): (9, -1, None)}) == {("t", 0): ILLEGAL_GENERATION}
    err, got = gc.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2), ("u", 0)])
    assert err == NONE
    assert (got[("t", 0)].offset, got[("t", 0)].leader_epoch, got[("t", 0)].metadata) == (5, 2, "meta")
    assert (got[("t", 1)].offset, got[("t", 1)].metadata) == (7, "")
    assert got[("t", 2)] is None and got[("u", 0)] is None
    assert sorted(gc.fetch_offsets("g", None)[1]) == [("t", 0), ("t", 1)]
    assert gc.fetch_offsets("unknown", [("t", 0)]) == (NONE, {("t", 0): None})
    # PreparingRebalance still accepts commits from current members
    join_new(gc)
    assert gc.commit_offsets("g", 1, b.member_id, None, {("t", 2): (1, -1, None)}) == {("t", 2): NONE}


async def test_simple_commits_without_group_management_and_metadata_limit():
    gc = make(offset_metadata_max_bytes=10)
    res = gc.commit_offsets("simple", -1, "", None, {("t", 0): (3, -1, "x" * 10), ("t", 1): (4, -1, "x" * 11)})
    assert res == {("t", 0): NONE, ("t", 1): OFFSET_METADATA_TOO_LARGE}
    group = gc.groups["simple"]
    assert group.state == EMPTY and group.protocol_type is None and list(group.offsets) == [("t", 0)]
    assert gc.fetch_offsets("simple", None)[1][("t", 0)].offset == 3
    assert gc.commit_offsets("", -1, "", None, {("t", 0): (1, -1, None)}) == {("t", 0): NONE}   # "" is allowed
    assert [g.group_id for g in gc.list_groups()] == ["simple", ""]


async def test_offset_retention():
    now = [1_000_000]
    gc = GroupCoordinator({"offsets.retention.minutes": "1"}, clock=lambda: now[0])
    gc.commit_offsets("simple", -1, "", None, {("t", 0): (1, -1, None)})
    gc.commit_offsets("simple", -1, "", None, {("t", 1): (1, -1, None)}, retention_ms=1000)   # v2-4 retention
    now[0] += 1000
    assert gc.cleanup_expired_offsets() == 1 and list(gc.groups["simple"].offsets) == [("t", 0)]
    now[0] += 59_000
    assert gc.cleanup_expired_offsets() == 1
    assert "simple" not in gc.groups          # Empty without offsets: Dead and gone


async def test_consumer_group_offsets_expire_after_it_becomes_empty():
    now = [1_000_000]
    gc = GroupCoordinator({"offsets.retention.minutes": "1", "group.initial.rebalance.delay.ms": "10",
                           "group.min.session.timeout.ms": "10"}, clock=lambda: now[0])
    results = await form(gc, n=1)
    await stabilize(gc, results)
    gc.commit_offsets("g", 1, results[0].member_id, None, {("t", 0): (1, -1, None), ("other", 0): (2, -1, None)})
    now[0] += 120_000
    # Stable: only offsets of topics nobody subscribes to expire.
    assert gc.cleanup_expired_offsets() == 1 and list(gc.groups["g"].offsets) == [("t", 0)]
    gc.leave_group("g", [(results[0].member_id, None, None)])
    assert gc.groups["g"].state == EMPTY
    now[0] += 30_000
    assert gc.cleanup_expired_offsets() == 0   # retention counts from when the group became Empty
    now[0] += 30_000
    assert gc.cleanup_expired_offsets() == 1 and "g" not in gc.groups


# ---- admin --------------------------------------------------------------------------------------------------------
async def test_list_describe_delete_groups():
    gc = make()
    results = await form(gc, n=2)
    assert [(g.group_id, g.state, g.protocol_type, g.group_type) for g in gc.list_groups()] == \
        [("g", COMPLETING_REBALANCE, "consumer", "classic")]
    d = gc.describe_group("g")
    assert d.state == COMPLETING_REBALANCE and d.protocol_name == "" and all(m.metadata == b"" for m in d.members)
    await stabilize(gc, results)
    gc.commit_offsets("simple", -1, "", None, {("t", 0): (1, -1, None)})
    d = gc.describe_group("g")
    assert (d.error, d.state, d.protocol_type, d.protocol_name) == (NONE, STABLE, "consumer", "range")
    assert [(m.client_id, m.client_host, m.metadata, m.assignment) for m in d.members] == \
        [("client", "/127.0.0.1", sub("t"), r.member_id.encode()) for r in results]
    assert [g.group_id for g in gc.list_groups(states=["stable"])] == ["g"]
    assert [g.group_id for g in gc.list_groups(states=["Empty"])] == ["simple"]
    assert [g.group_id for g in gc.list_groups(types=["CLASSIC"])] == ["g", "simple"]
    assert gc.list_groups(types=["consumer"]) == []
    assert gc.describe_group("missing").error == GROUP_ID_NOT_FOUND
    assert gc.delete_groups(["g", "simple", "missing"]) == {"g": NON_EMPTY_GROUP, "simple": NONE,
                                                            "missing": GROUP_ID_NOT_FOUND}
    assert "simple" not in gc.groups and gc.fetch_offsets("simple", [("t", 0)])[1] == {("t", 0): None}


async def test_offset_delete():
    gc = make()
    results = await form(gc, n=1)
    await stabilize(gc, results)
    mid = results[0].member_id
    gc.commit_offsets("g", 1, mid, None, {("t", 0): (1, -1, None), ("u", 0): (2, -1, None)})
    err, errs = gc.delete_offsets("g", [("t", 0), ("u", 0), ("u", 1)])
    assert err == NONE and errs == {("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): NONE, ("u", 1): NONE}
    assert list(gc.groups["g"].offsets) == [("t", 0)]
    gc.leave_group("g", [(mid, None, None)])
    assert gc.delete_offsets("g", [("t", 0)]) == (NONE, {("t", 0): NONE})
    assert gc.delete_offsets("missing", [("t", 0)]) == (GROUP_ID_NOT_FOUND, {})
    # a non-consumer group with members cannot delete offsets at all
    fut = join_new(gc, group="connect", ptype="connect", protocols=[("v1", b"")])
    await fut
    assert gc.delete_offsets("connect", [("t", 0)]) == (NON_EMPTY_GROUP, {})


async def test_deleted_topics_lose_their_offsets():
    gc = make()
    gc.commit_offsets("a", -1, "", None, {("t", 0): (1, -1, None), ("u", 0): (1, -1, None)})
    gc.commit_offsets("b", -1, "", None, {("t", 1): (1, -1, None)})
    assert gc.on_topics_deleted(["t"]) == 2
    assert list(gc.groups["a"].offsets) == [("u", 0)] and "b" not in gc.groups


def test_parse_subscription_topics():
    assert parse_subscription_topics(sub("a", "b", version=3)) == {"a", "b"}
    assert parse_subscription_topics(b"\x00") is None
    assert parse_subscription_topics(struct.pack(">hih", 0, 1, 10) + b"abc") is None


# ---- persistence hooks and shutdown -------------------------------------------------------------------------------
class Recording(GroupCoordinator):
    def __init__(self, *a, fail_groups=0, fail_offsets=0, **kw):
        super().__init__(*a, **kw)
        self.stored_groups, self.stored_offsets = [], []
        self.fail_groups, self.fail_offsets = fail_groups, fail_offsets

    def _store_group(self, group, assignment=None):
        self.stored_groups.append((group.group_id, group.state, group.generation_id, dict(assignment or {})))
        return self.fail_groups

    def _store_offsets(self, group_id, offsets):
        self.stored_offsets.append((group_id, {tp: (om.offset if om else None) for tp, om in offsets.items()}))
        return self.fail_offsets


async def test_state_changes_go_through_the_store_hooks():
    gc = Recording({"group.initial.rebalance.delay.ms": "10", "group.min.session.timeout.ms": "10"})
    results = await form(gc, n=1)
    await stabilize(gc, results, assignment={results[0].member_id: b"A"})
    mid = results[0].member_id
    gc.commit_offsets("g", 1, mid, None, {("t", 0): (4, -1, None)})
    gc.leave_group("g", [(mid, None, None)])
    gc.delete_offsets("g", [("t", 0)])
    gc.commit_offsets("g", -1, "", None, {("t", 1): (5, -1, None)})
    gc.delete_groups(["g"])
    assert gc.stored_groups == [("g", COMPLETING_REBALANCE, 1, {mid: b"A"}),   # the leader's assignment
                                ("g", EMPTY, 2, {}),                            # emptied
                                ("g", "Dead", 2, {})]                           # deleted: tombstone
    assert gc.stored_offsets == [("g", {("t", 0): 4}), ("g", {("t", 0): None}), ("g", {("t", 1): 5}),
                                 ("g", {("t", 1): None})]


async def test_store_failures_reach_the_client():
    gc = Recording({"group.initial.rebalance.delay.ms": "10", "group.min.session.timeout.ms": "10"},
                   fail_groups=15, fail_offsets=15)
    results = await form(gc, n=1)
    mid = results[0].member_id
    r = await gc.sync_group("g", 1, mid, None, None, None, {mid: b"A"})
    assert r.error == 15 and gc.groups["g"].state == PREPARING_REBALANCE
    assert gc.commit_offsets("s", -1, "", None, {("t", 0): (1, -1, None)}) == {("t", 0): 15}
    assert not gc.groups["s"].offsets


async def test_stop_answers_parked_requests():
    gc = make(group_initial_rebalance_delay_ms=5000)
    gc.start()
    fut = join_new(gc)
    gc.stop()
    assert fut.result().error == NOT_COORDINATOR
    assert join(gc).result().error == NOT_COORDINATOR
    assert gc.heartbeat("g", "x", None, 1) == NOT_COORDINATOR


def test_defaults_follow_kafka():
    gc = GroupCoordinator(SimpleNamespace(get=lambda key: ""))   # BrokerConfig.get answers "" for unknown keys
    assert gc.initial_rebalance_delay_ms == 3000
    assert (gc.min_session_timeout_ms, gc.max_session_timeout_ms) == (6000, 1800000)
    assert gc.max_metadata_size == 4096 and gc.offsets_retention_ms == 7 * 24 * 3600 * 1000


# ---- handlers at every version ------------------------------------------------------------------------------------
HANDLERS = ["find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group", "offset_commit",
            "offset_fetch", "list_groups", "describe_groups", "delete_groups", "offset_delete"]


def _encode_request(api_key, version, data) -> bytes:
    schema = load_request_schema(api_key, version)
    out = io.BytesIO()
    entity_writer(schema)(out, kio_codec.to_entity(schema, data))
    return out.getvalue()


def _call(broker, mod, version, data):
    raw = _encode_request(mod.API_KEY, version, data)
    req = Request(mod.API_KEY, version, 1, "cid", bytearray(raw), 0, kio_codec.is_flexible(mod.API_KEY, version))
    return mod.handle(broker, req)


def _decode_response(api_key, version, body):
    body = b"".join(body) if isinstance(body, list) else bytes(body)
    entity, n = entity_reader(load_response_schema(api_key, version))(body, 0)
    assert n == len(body)
    return entity


@pytest.fixture
def fake_broker():
    from metadata.image import MetadataImage
    from metadata.metadata_cache import MetadataCache
    from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
    tid, oid = "a" * 32, "b" * 32
    image = MetadataImage().apply([
        RegisterBrokerRecord(7, "inc", None, [("PLAINTEXT", "host.example", 9093)]),
        TopicRecord("t", tid), *(PartitionRecord(tid, p, [7], [7], 7) for p in range(3)),
        TopicRecord("__consumer_offsets", oid), *(PartitionRecord(oid, p, [7], [7], 7) for p in range(50))])
    return SimpleNamespace(groups=make(group_initial_rebalance_delay_ms=5), node_id=7, topics=MetadataCache(image),
                           config=SimpleNamespace(advertised=("host.example", 9093)))


def test_advertised_and_decodable_versions():
    import importlib
    ranges = {}
    for name in HANDLERS:
        mod = importlib.import_module(f"broker.handlers.{name}")
        ranges[name] = (mod.API_KEY, mod.VERSIONS, mod.DECODABLE)
        for v in range(mod.DECODABLE[0], mod.DECODABLE[1] + 1):
            load_request_schema(mod.API_KEY, v)
    assert ranges["offset_commit"] == (8, (0, 9), (2, 9))     # min 0 for librdkafka 2.0.2's feature checks
    assert ranges["offset_fetch"] == (9, (0, 9), (1, 9))
    assert ranges["find_coordinator"][1] == (0, 6) and ranges["join_group"][1] == (0, 9)


async def test_every_group_handler_at_every_version(fake_broker):
    from broker.handlers import (delete_groups, describe_groups, find_coordinator, heartbeat, join_group,
                                 leave_group, list_groups, offset_commit, offset_delete, offset_fetch, sync_group)
    b = fake_broker
    for v in range(*_span(find_coordinator)):
        r = _decode_response(10, v, _call(b, find_coordinator, v, {"key": "g", "key_type": 0,
                                                                   "coordinator_keys": ("g", "h")}))
        if v >= 4:
            assert [(c.key, c.node_id, c.host, c.port) for c in r.coordinators] == \
                [("g", 7, "host.example", 9093), ("h", 7, "host.example", 9093)]
        else:
            assert (r.error_code.value, r.node_id, r.host, r.port) == (0, 7, "host.example", 9093)
    r = _decode_response(10, 3, _call(b, find_coordinator, 3, {"key": "g", "key_type": 5}))
    assert r.error_code.value == 42

    for v in range(*_span(join_group)):
        group = f"g{v}"
        data = {"group_id": group, "session_timeout": 1000, "rebalance_timeout": 1000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": ({"name": "range", "metadata": sub("t")},), "reason": None}
        res = _call(b, join_group, v, data)
        if v >= 4:
            r = _decode_response(11, v, res)
            assert r.error_code.value == MEMBER_ID_REQUIRED
            res = _call(b, join_group, v, {**data, "member_id": r.member_id})
        r = _decode_response(11, v, await res)
        assert r.error_code.value == 0 and r.generation_id == 1 and r.leader == r.member_id
        assert r.protocol_name == "range" and r.members[0].metadata == sub("t")
        mid = r.member_id
        sv = min(v, 5)
        r = _decode_response(14, sv, _call(b, sync_group, sv, {
            "group_id": group, "generation_id": 1, "member_id": mid, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": ({"member_id": mid, "assignment": b"ASSIGN"},)}))
        assert r.error_code.value == 0 and r.assignment == b"ASSIGN"
        hv = min(v, 4)
        r = _decode_response(12, hv, _call(b, heartbeat, hv, {"group_id": group, "generation_id": 1,
                                                             "member_id": mid, "group_instance_id": None}))
        assert r.error_code.value == 0
        for ov in range(*_span(offset_commit)):
            r = _decode_response(8, ov, _call(b, offset_commit, ov, {
                "group_id": group, "generation_id_or_member_epoch": 1, "member_id": mid, "group_instance_id": None,
                "retention_time": -1, "topics": ({"name": "t", "partitions": (
                    {"partition_index": 0, "committed_offset": 10 + ov, "committed_leader_epoch": 3,
                     "committed_metadata": "md"},
                    {"partition_index": 9, "committed_offset": 1, "committed_leader_epoch": -1,
                     "committed_metadata": None})},)}))
            assert [(p.partition_index, p.error_code.value) for p in r.topics[0].partitions] == [(0, 0), (9, 3)]
        for fv in range(*_span(offset_fetch)):
            if fv >= 8:
                r = _decode_response(9, fv, _call(b, offset_fetch, fv, {"require_stable": False, "groups": (
                    {"group_id": group, "topics": None},
                    {"group_id": "nobody", "topics": ({"name": "t", "partition_indexes": (1,)},)})}))
                parts = r.groups[0].topics[0].partitions
                assert r.groups[1].topics[0].partitions[0].committed_offset == -1
            else:
                r = _decode_response(9, fv, _call(b, offset_fetch, fv, {
                    "group_id": group, "topics": ({"name": "t", "partition_indexes": (0, 1)},)}))
                parts = r.topics[0].partitions
                assert parts[1].committed_offset == -1
            assert parts[0].committed_offset == 19 and parts[0].metadata == "md"
            if fv >= 5:
                assert parts[0].committed_leader_epoch == 3
        lv = min(v, 5)
        members = {"members": ({"member_id": mid, "group_instance_id": None, "reason": "done"},)} if lv >= 3 \
            else {"member_id": mid}
        r = _decode_response(13, lv, _call(b, leave_group, lv, {"group_id": group, **members}))
        assert r.error_code.value == 0
        assert b.groups.groups[group].state == EMPTY

    for v in range(*_span(list_groups)):
        r = _decode_response(16, v, _call(b, list_groups, v, {"states_filter": ("Empty",), "types_filter": ()}))
        assert {g.group_id for g in r.groups} == {f"g{j}" for j in range(10)}
    for v in range(*_span(describe_groups)):
        r = _decode_response(15, v, _call(b, describe_groups, v, {"groups": ("g0", "missing"),
                                                                  "include_authorized_operations": True}))
        assert r.groups[0].group_state == "Empty" and r.groups[0].protocol_type == "consumer"
        assert r.groups[1].group_state == "Dead"
        assert r.groups[1].error_code.value == (GROUP_ID_NOT_FOUND if v >= 6 else 0)
    r = _decode_response(47, 0, _call(b, offset_delete, 0, {"group_id": "g0", "topics": (
        {"name": "t", "partitions": ({"partition_index": 0}, {"partition_index": 7})},)}))
    assert [(p.partition_index, p.error_code.value) for p in r.topics[0].partitions] == [(0, 0), (7, 3)]
    r = _decode_response(47, 0, _call(b, offset_delete, 0, {"group_id": "nope", "topics": ()}))
    assert r.error_code.value == GROUP_ID_NOT_FOUND
    for v in range(*_span(delete_groups)):
        r = _decode_response(42, v, _call(b, delete_groups, v, {"groups_names": (f"g{v}", "missing")}))
        assert [(x.group_id, x.error_code.value) for x in r.results] == [(f"g{v}", 0), ("missing", 69)]


def _span(mod):
    return mod.DECODABLE[0], mod.DECODABLE[1] + 1


def test_module_constants_match_kafka():
    assert gcm.GROUP_DEFAULTS["group.initial.rebalance.delay.ms"] == "3000"
    assert gcm.GROUP_DEFAULTS["offset.metadata.max.bytes"] == "4096"
