"""Issue 26, "bad input at scale": random *sequences* of well-formed requests, not only single frames.

Hypothesis drives one real broker with random orders of group requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups) from three member connections, mixed with admin
requests (CreateTopics, CreatePartitions, DeleteTopics, DescribeConfigs, IncrementalAlterConfigs) on a fourth, over
two groups and two topics per example. The broker's classic-group and admin state machines see stale member ids,
wrong generations, static members replaced, syncs without assignments, groups and topics deleted under their users.

After every step: every response decodes and carries the request's correlation id, every error code is one Kafka can
return for that API (UNKNOWN_SERVER_ERROR never), the broker process is alive. After every example: the broker's log
has no traceback / internal error / "request from ... failed" line. At the end a confluent-kafka consumer group still
works.

JoinGroup and SyncGroup may legitimately block (waiting for the other members or for the leader's assignment), so a
member's requests are pipelined on its connection: a blocked request stays pending while other members act, and
responses are then read in order. At the end of an example every known member leaves (from the admin connection),
which completes every blocked request.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import re
import struct
import time
import uuid

import pytest
from confluent_kafka import TopicPartition
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

try:
    from .helpers import consumer, create_topic, produce_all, producer, records, wait_until
    from .rawclient import ConnectionClosed, RawClient
except ImportError:  # tests/integration is not a package
    from helpers import consumer, create_topic, produce_all, producer, records, wait_until
    from rawclient import ConnectionClosed, RawClient

from conftest import BrokerProcess

pytestmark = pytest.mark.integration

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 15, 16, 19, 20, 32
CREATE_PARTITIONS, DELETE_GROUPS, INCREMENTAL_ALTER_CONFIGS = 37, 42, 44

VERSIONS = {JOIN_GROUP: 5, SYNC_GROUP: 5, HEARTBEAT: 4, LEAVE_GROUP: 4, OFFSET_COMMIT: 8, OFFSET_FETCH: 8,
            DESCRIBE_GROUPS: 5, LIST_GROUPS: 4, DELETE_GROUPS: 2, CREATE_TOPICS: 7, CREATE_PARTITIONS: 3,
            DELETE_TOPICS: 6, DESCRIBE_CONFIGS: 4, INCREMENTAL_ALTER_CONFIGS: 1}

# Error codes Kafka can return for each API (no authorizer configured, so no *_AUTHORIZATION_FAILED).
# 7 REQUEST_TIMED_OUT, 14/15/16 COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE / NOT_COORDINATOR, 24 INVALID_GROUP_ID.
COORD = {0, 14, 15, 16, 24}
ALLOWED = {
    # 22 ILLEGAL_GENERATION 23 INCONSISTENT_GROUP_PROTOCOL 25 UNKNOWN_MEMBER_ID 26 INVALID_SESSION_TIMEOUT
    # 27 REBALANCE_IN_PROGRESS 79 MEMBER_ID_REQUIRED 81 GROUP_MAX_SIZE_REACHED 82 FENCED_INSTANCE_ID
    JOIN_GROUP: COORD | {22, 23, 25, 26, 27, 79, 81, 82},
    SYNC_GROUP: COORD | {22, 23, 25, 27, 82},
    HEARTBEAT: COORD | {22, 25, 27, 82},
    LEAVE_GROUP: COORD | {25, 82},
    # 3 UNKNOWN_TOPIC_OR_PARTITION 28 OFFSET_METADATA_TOO_LARGE 69 GROUP_ID_NOT_FOUND 110 STALE_MEMBER_EPOCH
    OFFSET_COMMIT: COORD | {3, 22, 25, 27, 28, 69, 82, 110},
    OFFSET_FETCH: COORD | {3, 69, 88},
    DESCRIBE_GROUPS: COORD | {69},
    LIST_GROUPS: COORD,
    # 68 NON_EMPTY_GROUP 69 GROUP_ID_NOT_FOUND
    DELETE_GROUPS: COORD | {68, 69},
    # 17 INVALID_TOPIC_EXCEPTION 36 TOPIC_ALREADY_EXISTS 37 INVALID_PARTITIONS 38 INVALID_REPLICATION_FACTOR
    # 39 INVALID_REPLICA_ASSIGNMENT 40 INVALID_CONFIG 41 NOT_CONTROLLER 42 INVALID_REQUEST 44 POLICY_VIOLATION
    # 89 THROTTLING_QUOTA_EXCEEDED
    CREATE_TOPICS: {0, 7, 17, 36, 37, 38, 39, 40, 41, 42, 44, 89},
    CREATE_PARTITIONS: {0, 3, 7, 37, 39, 41, 42, 44, 89},
    # 73 TOPIC_DELETION_DISABLED 100 UNKNOWN_TOPIC_ID
    DELETE_TOPICS: {0, 3, 7, 41, 42, 73, 89, 100},
    DESCRIBE_CONFIGS: {0, 3, 40, 42},
    INCREMENTAL_ALTER_CONFIGS: {0, 3, 40, 42, 44},
}
NAMES = {v: k for k, v in globals().items() if isinstance(v, int) and k.isupper() and v in VERSIONS}
BLOCKING = {JOIN_GROUP, SYNC_GROUP}
SESSION_MS, REBALANCE_MS = 6000, 1000
BAD_LOG = re.compile(r"Traceback|internal error|request from .* failed", re.IGNORECASE)

EXAMPLES = 100
STATS: collections.Counter = collections.Counter()     # (api name, error code) -> count, over the module
MEMBERS = 3                     # member connections 0..2; connection 3 is the admin connection
ADMIN = MEMBERS


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory):
    """A module broker (not the session one): group.initial.rebalance.delay.ms=0 so a lone JoinGroup answers at once."""
    b = BrokerProcess(tmp_path_factory.mktemp("sequences-broker"), {"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    rc = b.stop()
    assert rc == 0, f"broker exited with {rc}:\n{b.log_text()[-3000:]}"
    bad = [line for line in b.log_text().splitlines() if BAD_LOG.search(line)]
    assert not bad, "\n".join(bad[:20])


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0 with one topic."""
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def error_codes(entity) -> list[int]:
    """Every `error_code` anywhere in a decoded response."""
    out = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name == "error_code":
            out.append(int(value))
        elif isinstance(value, tuple):
            for v in value:
                if dataclasses.is_dataclass(v):
                    out += error_codes(v)
        elif dataclasses.is_dataclass(value):
            out += error_codes(value)
    return out


OPS = ["join", "join", "join", "sync", "sync", "heartbeat", "leave", "commit", "fetch", "describe", "list",
       "delete_groups", "create_topic", "create_topic", "create_partitions", "delete_topic", "describe_configs",
       "alter_configs"]
STEP = st.tuples(st.sampled_from(OPS), st.integers(0, MEMBERS - 1), st.integers(0, 1), st.integers(0, 1),
                 st.integers(0, 7))
_serial = itertools.count()


class Run:
    """One example: four connections, two groups, two topics, and what the members learned from the broker."""

    def __init__(self, b: BrokerProcess):
        self.b = b
        n = next(_serial)
        tag = uuid.uuid4().hex[:6]
        self.groups = [f"seq-{tag}-{n}-g{i}" for i in range(2)]
        self.topics = [f"seq-{tag}-{n}-t{i}" for i in range(2)]
        self.conns = [RawClient(b.bootstrap, timeout=15) for _ in range(MEMBERS + 1)]
        self.pending: list[list[tuple[int, int, str]]] = [[] for _ in self.conns]
        self.member: dict[tuple[int, int], dict] = {}    # (client, group) -> member_id, generation, instance
        self.stale: list[str] = []
        self.join_resp: dict[tuple[int, int], object] = {}
        self.steps = 0

    # ---- plumbing -----------------------------------------------------------------------------------------
    def send(self, c: int, api: int, body: dict, what: str) -> None:
        corr = self.conns[c].send(api, VERSIONS[api], body)
        self.pending[c].append((api, corr, what))
        self.steps += 1

    def drain(self, c: int, block_wait: float) -> None:
        """Read conn c's responses in order; a blocked JoinGroup/SyncGroup at the head may stay pending."""
        while self.pending[c]:
            api, corr, what = self.pending[c][0]
            try:
                resp = self.conns[c].recv(api, VERSIONS[api], corr,
                                          timeout=block_wait if api in BLOCKING else 10)
            except TimeoutError:
                assert api in BLOCKING, f"no answer to {what} within 10 s"
                assert self.b.alive(), self.b.log_text()[-3000:]
                return
            except ConnectionClosed:
                raise AssertionError(f"broker closed the connection on the well-formed {what}\n"
                                     + self.b.log_text()[-3000:])
            self.pending[c].pop(0)
            self.check(api, resp, what)
            self.learn(c, api, resp, what)

    def check(self, api: int, resp, what: str) -> None:
        codes = error_codes(resp)
        note(f"  <- {what}: errors {codes}")
        STATS.update((NAMES[api], e) for e in codes)
        STATS["responses"] += 1
        bad = [e for e in codes if e not in ALLOWED[api]]
        assert not bad, f"{NAMES[api]} answered error codes {bad} (allowed {sorted(ALLOWED[api])}) to {what}: {resp}"
        assert self.b.alive(), self.b.log_text()[-3000:]

    def learn(self, c: int, api: int, resp, what: str) -> None:
        if api != JOIN_GROUP:
            return
        g = int(what.split(" g")[1].split()[0])
        err = int(resp.error_code)
        if err == 79:       # MEMBER_ID_REQUIRED: rejoin with the assigned id, like a real client
            assert resp.member_id, f"MEMBER_ID_REQUIRED without a member id: {resp}"
            inst = self.member.get((c, g), {}).get("instance")
            self.member[(c, g)] = {"member_id": resp.member_id, "generation": -1, "instance": inst}
            self.join(c, g, inst, resp.member_id, "range")
        elif err == 0:
            assert resp.member_id and resp.generation_id >= 0, f"bad JoinGroup success {resp}"
            prev = self.member.get((c, g), {})
            self.member[(c, g)] = {"member_id": resp.member_id, "generation": int(resp.generation_id),
                                   "instance": prev.get("instance")}
            self.join_resp[(c, g)] = resp
        elif err in (25, 82):   # UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID: forget it
            if (c, g) in self.member:
                self.stale.append(self.member.pop((c, g))["member_id"])

    def settle(self, last: int) -> None:
        for c in range(len(self.conns)):
            self.drain(c, 0.5 if c == last else 0.02)

    # ---- operations ---------------------------------------------------------------------------------------
    def join(self, c: int, g: int, inst: str | None, member_id: str, proto: str) -> None:
        self.member.setdefault((c, g), {"member_id": member_id, "generation": -1, "instance": inst})["instance"] = inst
        self.send(c, JOIN_GROUP, {
            "group_id": self.groups[g], "session_timeout": SESSION_MS, "rebalance_timeout": REBALANCE_MS,
            "member_id": member_id, "group_instance_id": inst, "protocol_type": "consumer",
            "protocols": [{"name": proto, "metadata": subscription(self.topics)}]},
            f"JoinGroup g{g} member={member_id!r} instance={inst!r} protocol={proto}")

    def step(self, op: str, c: int, g: int, t: int, v: int) -> None:
        if op in ("sync", "heartbeat") and not v & 2:     # mostly from a member: else only UNKNOWN_MEMBER_ID
            c = next((cc for (cc, gg), m in self.member.items() if gg == g and m["generation"] >= 0), c)
        group, topic = self.groups[g], self.topics[t]
        me = self.member.get((c, g))
        known = me["member_id"] if me else ""
        gen = me["generation"] if me else -1
        inst = me["instance"] if me else None
        stale = self.stale[v % len(self.stale)] if self.stale else f"stale-{v}"
        wrong = v % 3 == 0
        note(f"step {op} client={c} g{g} t{t} v={v}")
        if op == "join":
            inst = f"inst-{c}" if v & 1 else None
            member_id = ["", known, stale, known][(v >> 1) & 3]
            self.join(c, g, inst, member_id, "roundrobin" if v == 7 else "range")
        elif op == "sync":
            assigns = []
            jr = self.join_resp.get((c, g))
            if v & 4 and jr is not None and jr.leader == jr.member_id:
                assigns = [{"member_id": m.member_id, "assignment": assignment(topic, [i])}
                           for i, m in enumerate(jr.members)]
            self.send(c, SYNC_GROUP, {
                "group_id": group, "generation_id": gen + 7 if wrong else gen, "member_id": known or stale,
                "group_instance_id": inst, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": assigns}, f"SyncGroup g{g} gen={gen + 7 if wrong else gen} {len(assigns)} assignments")
        elif op == "heartbeat":
            member_id = stale if v & 1 else known
            self.send(c, HEARTBEAT, {"group_id": group, "generation_id": gen + 1 if wrong else gen,
                                     "member_id": member_id, "group_instance_id": inst},
                      f"Heartbeat g{g} member={member_id!r}")
        elif op == "leave":
            member_id = stale if v & 1 and not inst else known
            self.send(c, LEAVE_GROUP, {"group_id": group, "members": [
                {"member_id": member_id, "group_instance_id": inst}]}, f"LeaveGroup g{g} member={member_id!r}")
            if me is not None and member_id == known:
                self.stale.append(self.member.pop((c, g))["member_id"])
        elif op == "commit":
            simple = v & 1 or me is None
            self.send(c, OFFSET_COMMIT, {
                "group_id": group, "generation_id_or_member_epoch": -1 if simple else gen,
                "member_id": "" if simple else known, "group_instance_id": None if simple else inst,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "committed_offset": 10 * v + p, "committed_leader_epoch": -1,
                     "committed_metadata": "m"} for p in range(1 + v % 3)]}]},
                f"OffsetCommit g{g} {'simple' if simple else f'gen={gen}'} {topic}")
        elif op == "fetch":
            self.send(ADMIN, OFFSET_FETCH, {"groups": [
                {"group_id": group, "topics": None if v & 1 else [{"name": topic, "partition_indexes": [0, 1]}]}],
                "require_stable": False}, f"OffsetFetch g{g}")
        elif op == "describe":
            self.send(ADMIN, DESCRIBE_GROUPS, {"groups": self.groups, "include_authorized_operations": bool(v & 1)},
                      "DescribeGroups")
        elif op == "list":
            self.send(ADMIN, LIST_GROUPS, {"states_filter": ["Stable"] if v & 1 else []}, "ListGroups")
        elif op == "delete_groups":
            self.send(ADMIN, DELETE_GROUPS, {"groups_names": [group]}, f"DeleteGroups g{g}")
        elif op == "create_topic":
            self.send(ADMIN, CREATE_TOPICS, {"topics": [
                {"name": topic, "num_partitions": 1 + v % 3, "replication_factor": 1, "assignments": [],
                 "configs": [{"name": "retention.ms", "value": "3600000"}] if v & 4 else []}],
                "timeout": 10000, "validate_only": v == 3}, f"CreateTopics t{t} partitions={1 + v % 3}")
        elif op == "create_partitions":
            count = [4, 2, 1, 3][v & 3]
            self.send(ADMIN, CREATE_PARTITIONS, {"topics": [{"name": topic, "count": count, "assignments": None}],
                                                 "timeout": 10000, "validate_only": bool(v & 4)},
                      f"CreatePartitions t{t} count={count}")
        elif op == "delete_topic":
            self.send(ADMIN, DELETE_TOPICS, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                             "timeout": 10000}, f"DeleteTopics t{t}")
        elif op == "describe_configs":
            res = {"resource_type": 2, "resource_name": topic, "configuration_keys": ["retention.ms"] if v & 1 else None}
            if v & 2:
                res = {"resource_type": 4, "resource_name": "1", "configuration_keys": None}
            self.send(ADMIN, DESCRIBE_CONFIGS, {"resources": [res], "include_synonyms": bool(v & 4),
                                                "include_documentation": False}, f"DescribeConfigs t{t}")
        elif op == "alter_configs":
            cfg = {"name": "retention.ms", "config_operation": 1 if v & 1 else 0, "value": None if v & 1 else
                   str(60000 * (v + 1))}
            self.send(ADMIN, INCREMENTAL_ALTER_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": topic, "configs": [cfg]}], "validate_only": bool(v & 4)},
                f"IncrementalAlterConfigs t{t} {cfg}")
        self.settle(ADMIN if self.pending[ADMIN] else c)

    def finish(self) -> None:
        """Every known member leaves (this completes blocked joins/syncs); then every response is read."""
        for g, group in enumerate(self.groups):
            members = [{"member_id": m["member_id"], "group_instance_id": m["instance"]}
                       for (c, gg), m in self.member.items() if gg == g and m["member_id"]]
            if members:
                self.send(ADMIN, LEAVE_GROUP, {"group_id": group, "members": members}, f"LeaveGroup g{g} (cleanup)")
                self.drain(ADMIN, 10)
        deadline = time.monotonic() + 3 * SESSION_MS / 1000
        while any(self.pending) and time.monotonic() < deadline:
            for c in range(len(self.conns)):
                self.drain(c, 0.2)
        left = [p for p in self.pending if p]
        assert not left, f"requests never answered: {left}"

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(steps=st.lists(STEP, min_size=4, max_size=30))
def test_random_group_and_admin_request_sequences(sbroker, steps):
    run = Run(sbroker)
    try:
        run.step("create_topic", 0, 0, 0, 1)        # t0 exists (2 partitions), so partition and config steps act
        for op, c, g, t, v in steps:
            run.step(op, c, g, t, v)
        run.finish()
    finally:
        run.close()
    assert sbroker.alive(), sbroker.log_text()[-3000:]
    bad = [line for line in sbroker.log_text().splitlines() if BAD_LOG.search(line)]
    assert not bad, "broker log:\n" + "\n".join(bad[:20])


def test_consumer_group_still_works_after_the_sequences(sbroker):
    """Runs after the hypothesis test (file order): a real confluent-kafka group round trip on the same broker."""
    topic, group = f"seq-after-{uuid.uuid4().hex[:6]}", f"seq-after-g-{uuid.uuid4().hex[:6]}"
    create_topic(sbroker.bootstrap, topic, partitions=2)
    produce_all(producer(sbroker.bootstrap), topic, [(b"k", b"after-sequences")], partition=1)
    c = consumer(sbroker.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest",
                                       "session.timeout.ms": 6000, "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = []
        wait_until(lambda: got.extend(records(c.consume(10, 0.5))) or got, what="the record via the group")
        assert got[0].value() == b"after-sequences"
        c.commit(message=got[0], asynchronous=False)
        [tp] = c.committed([TopicPartition(topic, 1)], timeout=10)
        assert tp.offset == got[0].offset() + 1
    finally:
        c.close()
    bad = [line for line in sbroker.log_text().splitlines() if BAD_LOG.search(line)]
    assert not bad, "\n".join(bad[:20])
    print(f"\n{STATS.pop('responses', 0)} sequence responses checked; (api, error code) counts:",
          dict(sorted(STATS.items())))
