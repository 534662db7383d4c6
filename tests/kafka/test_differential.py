"""Differential protocol tests: one list of scenarios (raw requests, see differential_scenarios.py) run against a real
Apache Kafka broker (4.1, KRaft) and against Strata, comparing error codes and the fields a client reads.

Each scenario is one test. Strata's result must equal Kafka's; where a scenario states Kafka's answer (`expect`),
Kafka's must be that too. Where Strata deliberately answers otherwise the scenario is xfail(strict=True) on exactly
that comparison (StrataDiffers), and docs/kafka-compatibility.md lists the difference.

The scenarios of topics, configs, coordinators, producer ids and API versions are in this file; produce, fetch and
offsets in differential_data.py, consumer groups in differential_groups.py.
"""
from __future__ import annotations

import struct
import time
import uuid

import pytest

import differential_data  # noqa: F401  (registers its scenarios)
import differential_groups  # noqa: F401
import differential_transactions  # noqa: F401
from differential_scenarios import (ALTER_CONFIGS, API_VERSIONS, CREATE_PARTITIONS, DELETE_TOPICS, DESCRIBE_CONFIGS,
                                    INCREMENTAL_ALTER_CONFIGS, METADATA, OFFSET_FOR_LEADER_EPOCH, SCENARIOS,
                                    Scenario, Side, coordinator, err, norm, scenario)
from tests.integration.rawclient import encode_header, frame

pytestmark = pytest.mark.integration


# ---- CreateTopics --------------------------------------------------------------------------------------------------

def created(r) -> list:
    return [(t.name, err(t.error_code), t.num_partitions, t.replication_factor) for t in r.topics]


def create_one(s: Side, **topic) -> list:
    return created(s.create_topics([{"name": s.name(), **topic}]))


@scenario("create-topics-unknown-config", expect=("INVALID_CONFIG", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    return create_one(s, configs={"no.such.config": "1"}) + [err(s.metadata([s.name()]).topics[0].error_code)]


@scenario("create-topics-bad-config-value", expect=("INVALID_CONFIG",))
def _(s: Side):
    return [create_one(s, configs={"retention.ms": "soon"}), create_one(s, configs={"cleanup.policy": "shred"}),
            create_one(s, configs={"min.insync.replicas": "0"}), create_one(s, configs={"retention.ms": None})]


@scenario("create-topics-invalid-partitions", expect=("INVALID_PARTITIONS",))
def _(s: Side):
    return [create_one(s, num_partitions=0), create_one(s, num_partitions=-2)]


@scenario("create-topics-invalid-replication-factor", expect=("INVALID_REPLICATION_FACTOR",))
def _(s: Side):
    return [create_one(s, replication_factor=0), create_one(s, replication_factor=3),
            create_one(s, replication_factor=-2)]


def assignment(*replicas: list[int]) -> list[dict]:
    return [{"partition_index": i, "broker_ids": r} for i, r in enumerate(replicas)]


@scenario("create-topics-invalid-assignments", expect=("INVALID_REPLICA_ASSIGNMENT", "INVALID_REQUEST"))
def _(s: Side):
    """Manual assignments: a duplicate replica, an unknown broker, partitions of different replica counts, an index
    that skips one, and assignments given together with a partition count."""
    def one(assignments, partitions=-1):
        return create_one(s, num_partitions=partitions, replication_factor=-1, assignments=assignments)
    gap = [{"partition_index": 0, "broker_ids": [1]}, {"partition_index": 2, "broker_ids": [1]}]
    return [one(assignment([1, 1])), one(assignment([7])), one(assignment([1], [1, 1])), one(gap),
            one(assignment([1]), partitions=1), one(assignment([]))]


@scenario("create-topics-invalid-names", expect=("INVALID_TOPIC_EXCEPTION",))
def _(s: Side):
    return [created(s.create_topics([{"name": n}])) for n in ("a" * 250, "bad name!", "t/x", ".", "..", "")]


@scenario("create-topics-existing-and-colliding", expect=("INVALID_TOPIC_EXCEPTION", "TOPIC_ALREADY_EXISTS"))
def _(s: Side):
    """A name that exists, and one that differs only by '.' and '_' (their metric names would collide)."""
    s.create("-x.y")
    return [create_one(s, name=s.name("-x.y")), create_one(s, name=s.name("-x_y"))]


@scenario("create-topics-duplicate-in-one-request", expect=("INVALID_REQUEST",))
def _(s: Side):
    return created(s.create_topics([{"name": s.name()}, {"name": s.name()}]))


@scenario("create-topics-validate-only", expect=("INVALID_PARTITIONS", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    r = s.create_topics([{"name": s.name(), "num_partitions": 3}], validate_only=True)
    bad = s.create_topics([{"name": s.name("-bad"), "num_partitions": 0}], validate_only=True)
    return [created(r), created(bad), err(s.metadata([s.name()]).topics[0].error_code)]


# ---- Metadata ------------------------------------------------------------------------------------------------------

def md_topics(r) -> list:
    return [(t.name, err(t.error_code), t.is_internal, [(p.partition_index, err(p.error_code), p.leader_id,
                                                         p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes))
                                                        for p in t.partitions]) for t in r.topics]


@scenario("metadata-missing-topic-no-auto-create", expect=("UNKNOWN_TOPIC_OR_PARTITION",))
def _(s: Side):
    return [md_topics(s.metadata([s.name()], auto_create=False)), md_topics(s.metadata([s.name()]))]


@scenario("metadata-missing-topic-auto-create")
def _(s: Side):
    """allow_auto_topic_creation with auto.create.topics.enable (true on both): the topic is created with
    num.partitions (1); the first answer may still say LEADER_NOT_AVAILABLE on the way."""
    first = s.metadata([s.name()], auto_create=True).topics[0]
    s.wait_topic(s.name(), 1)
    return [err(first.error_code) in ("NONE", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION"),
            md_topics(s.metadata([s.name()]))]


@scenario("metadata-invalid-and-unknown-ids", expect=("INVALID_TOPIC_EXCEPTION", "UNKNOWN_TOPIC_ID"))
def _(s: Side):
    by_id = s.req(METADATA, {"topics": [{"name": None, "topic_id": uuid.uuid4()}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    return [md_topics(s.metadata(["bad name!"], auto_create=True)), md_topics(s.metadata([".."], auto_create=True)),
            md_topics(by_id)]


@scenario("metadata-internal-and-double-underscore-topics")
def _(s: Side):
    """is_internal is Kafka's set of internal topics (__consumer_offsets among them), not every name starting '__'."""
    s.metadata(["__consumer_offsets"], auto_create=True)
    t = s.create_topics([{"name": "__" + s.name()}])
    s.wait_topic("__" + s.name(), 1)
    return [created(t), [(x.name, x.is_internal) for x in s.metadata(["__" + s.name(), "__consumer_offsets"]).topics]]


# ---- DeleteTopics / CreatePartitions ---------------------------------------------------------------------------------

@scenario("delete-topics-missing-name-and-id", expect=("UNKNOWN_TOPIC_ID", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    r = s.req(DELETE_TOPICS, {"topics": [{"name": s.name("-missing"), "topic_id": uuid.UUID(int=0)},
                                         {"name": None, "topic_id": uuid.uuid4()}], "timeout": 30000})
    return sorted((x.name or "", err(x.error_code)) for x in r.responses)     # Kafka's order varies


def partitions_result(r) -> list:
    return [(x.name, err(x.error_code)) for x in r.results]


def create_partitions(s: Side, topic: str, count: int, assignments=None, validate_only: bool = False):
    return partitions_result(s.req(CREATE_PARTITIONS, {"topics": [{"name": topic, "count": count,
                                                                   "assignments": assignments}],
                                                       "timeout": 30000, "validate_only": validate_only}))


@scenario("create-partitions-decrease-and-same", expect=("INVALID_PARTITIONS", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    t = s.create(partitions=2)
    return [create_partitions(s, t, 1), create_partitions(s, t, 2), create_partitions(s, s.name("-missing"), 3),
            create_partitions(s, t, 3, validate_only=True), len(s.metadata([t]).topics[0].partitions)]


@scenario("create-partitions-bad-assignments", expect=("INVALID_REPLICA_ASSIGNMENT",))
def _(s: Side):
    t = s.create(partitions=1)
    return [create_partitions(s, t, 3, [{"broker_ids": [1]}]),                     # one assignment for two new
            create_partitions(s, t, 2, [{"broker_ids": [9]}]),                     # unknown broker
            create_partitions(s, t, 2, [{"broker_ids": [1, 1]}]),                  # duplicate replica
            create_partitions(s, t, 2, [{"broker_ids": [1]}]),
            len(s.metadata([t]).topics[0].partitions)]


# ---- configs -------------------------------------------------------------------------------------------------------

TOPIC, BROKER = 2, 4


def describe_configs(s: Side, rtype: int, name: str, keys=None):
    r = s.req(DESCRIBE_CONFIGS, {"resources": [{"resource_type": rtype, "resource_name": name,
                                                "configuration_keys": keys}],
                                 "include_synonyms": False, "include_documentation": False})
    return [(x.resource_type, x.resource_name, err(x.error_code), sorted((c.name, c.value) for c in x.configs))
            for x in r.results]


@scenario("describe-configs-unknown-resources", expect=("INVALID_REQUEST", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    t = s.create()
    return [describe_configs(s, TOPIC, s.name("-missing")), describe_configs(s, BROKER, "99"),
            describe_configs(s, 99, "x"), describe_configs(s, TOPIC, t, ["no.such.key"]),
            describe_configs(s, TOPIC, t, ["retention.ms", "cleanup.policy"])]


def alter(s: Side, rtype: int, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False):
    r = s.req(INCREMENTAL_ALTER_CONFIGS, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": validate_only})
    return [(x.resource_type, x.resource_name, err(x.error_code)) for x in r.responses]


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@scenario("incremental-alter-configs-bad-value",
          expect=("INVALID_CONFIG", "INVALID_REQUEST", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    t = s.create()
    return [alter(s, TOPIC, t, ("retention.ms", SET, "soon")),
            alter(s, TOPIC, t, ("no.such.config", SET, "1")),
            alter(s, TOPIC, t, ("retention.ms", APPEND, "5")),              # APPEND to a non-list config
            alter(s, TOPIC, t, ("retention.ms", SET, "1000"), ("retention.ms", DELETE, None)),  # the key twice
            alter(s, TOPIC, s.name("-missing"), ("retention.ms", SET, "1000")),
            alter(s, TOPIC, t, ("retention.ms", SET, "1000"), validate_only=True),
            describe_configs(s, TOPIC, t, ["retention.ms"])]


@scenario("incremental-alter-configs-unknown-op", expect=("UNKNOWN_SERVER_ERROR",), xfail=(
    "Kafka answers an unknown config operation with UNKNOWN_SERVER_ERROR (OpType.forId gives null, then an "
    "exception); Strata answers INVALID_REQUEST"))
def _(s: Side):
    t = s.create()
    return [alter(s, TOPIC, t, ("retention.ms", 7, "1000")), describe_configs(s, TOPIC, t, ["retention.ms"])]


def describe_until(s: Side, topic: str, key: str, value: str, timeout: float = 10):
    """DescribeConfigs of one topic config until it shows `value` (or the time is up: the last answer): Kafka's
    broker applies an altered config from its metadata log a moment after IncrementalAlterConfigs answers."""
    deadline = time.monotonic() + timeout
    while True:
        got = describe_configs(s, TOPIC, topic, [key])
        if got[0][3] == [(key, value)] or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@scenario("incremental-alter-configs-list-ops")
def _(s: Side):
    t = s.create()
    return [alter(s, TOPIC, t, ("cleanup.policy", APPEND, "compact")),
            describe_until(s, t, "cleanup.policy", "delete,compact"),
            alter(s, TOPIC, t, ("cleanup.policy", SUBTRACT, "delete")),
            describe_until(s, t, "cleanup.policy", "compact"),
            alter(s, TOPIC, t, ("cleanup.policy", DELETE, None)),
            describe_until(s, t, "cleanup.policy", "delete")]


@scenario("alter-configs-legacy-bad-value", expect=("INVALID_CONFIG",))
def _(s: Side):
    t = s.create()
    r = s.req(ALTER_CONFIGS, {"resources": [{"resource_type": TOPIC, "resource_name": t, "configs": [
        {"name": "retention.ms", "value": "soon"}]}], "validate_only": False})
    return [(x.resource_name, err(x.error_code)) for x in r.responses]


# ---- ApiVersions, FindCoordinator, InitProducerId, OffsetForLeaderEpoch ----------------------------------------------

@scenario("api-versions-unsupported-version", expect=("UNSUPPORTED_VERSION",))
def _(s: Side):
    """A newer ApiVersions than the broker knows: UNSUPPORTED_VERSION in a v0 body listing ApiVersions' own range
    (KIP-511), so the client retries with a version from it."""
    conn = s.connect()
    conn.send_bytes(frame(struct.pack(">hhi", API_VERSIONS[0], 99, 7) + struct.pack(">h", 3) + b"abc" + b"\x00"
                          + b"\x04new\x041.0\x00"))
    raw = conn.recv_frame()
    corr, code, n = struct.unpack(">ihi", raw[:10])
    keys = [struct.unpack(">hhh", raw[10 + 6 * i:16 + 6 * i]) for i in range(n)]
    return [corr, err(code), keys, len(raw) == 10 + 6 * n]


@scenario("unsupported-version-of-other-api")
def _(s: Side):
    """A version of Metadata the broker does not have: the connection is closed (only ApiVersions answers one)."""
    raw = frame(encode_header(METADATA[0], 99, 1, flexible=True) + b"\x01\x00\x00")
    return s.closed_after(raw)


@scenario("find-coordinator-key-types", expect=("INVALID_REQUEST",))
def _(s: Side):
    return [coordinator(s, 0, s.group(), s.group("-2")), coordinator(s, 5, s.group())]


@scenario("find-coordinator-transaction")
def _(s: Side):
    return coordinator(s, 1, s.name("-txn"))


@scenario("init-producer-id-transactional")
def _(s: Side):
    coordinator(s, 1, s.name("-txn"))
    r = s.init_producer_id(s.name("-txn"), timeout=5)
    return [err(r.error_code), r.producer_id >= 0, r.producer_epoch]


def leader_epochs(s: Side, topic: str, *parts: tuple[int, int, int]):
    """OffsetForLeaderEpoch as a consumer sends it (replica -1): (partition, current_leader_epoch, leader_epoch)."""
    r = s.req(OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": p, "current_leader_epoch": cur, "leader_epoch": e} for p, cur, e in parts]}]})
    return [(p.partition, err(p.error_code), p.leader_epoch, p.end_offset) for t in r.topics for p in t.partitions]


@scenario("offset-for-leader-epoch",
          expect=("FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "UNKNOWN_TOPIC_OR_PARTITION"))
def _(s: Side):
    t = s.create(partitions=2)
    s.seed(t, 3)
    epoch = s.metadata([t]).topics[0].partitions[0].leader_epoch
    return [leader_epochs(s, t, (0, epoch, epoch), (1, epoch, epoch), (0, -1, epoch)),
            leader_epochs(s, t, (0, epoch + 1, epoch), (0, -2, epoch)),            # unknown / fenced current
            leader_epochs(s, t, (0, epoch, epoch + 3), (0, epoch, -1)),            # requested epoch unknown
            leader_epochs(s, t, (5, epoch, epoch)), leader_epochs(s, s.name("-missing"), (0, -1, 0))]


# ---- the test ------------------------------------------------------------------------------------------------------

class StrataDiffers(AssertionError):
    """Strata's result is not Kafka's (the only failure an xfail scenario may have)."""


def _params():
    for sc in SCENARIOS:
        marks = [pytest.mark.xfail(strict=True, raises=StrataDiffers, reason=sc.xfail)] if sc.xfail else []
        yield pytest.param(sc, id=sc.name, marks=marks)


def run_on(sc: Scenario, kind: str, bootstrap: str, tag: str):
    side = Side(kind, bootstrap, tag)
    try:
        return sc.run(side)
    finally:
        side.close()


@pytest.mark.parametrize("sc", list(_params()))
def test_scenario(sc: Scenario, apache_kafka, strata, topic_name):
    tag = topic_name[:100]
    kafka = run_on(sc, "kafka", apache_kafka.bootstrap, tag)
    missing = [e for e in sc.expect or () if repr(e) not in repr(kafka)]
    assert not missing, f"Apache Kafka did not answer {missing}: the scenario tests something else now:\n{kafka!r}"
    ours = run_on(sc, "strata", strata.bootstrap, tag)
    if ours != kafka:
        raise StrataDiffers(f"Strata answered differently from Apache Kafka\n  kafka : {kafka!r}\n  strata: {ours!r}")


def test_enough_scenarios():
    assert len(SCENARIOS) >= 52, len(SCENARIOS)
