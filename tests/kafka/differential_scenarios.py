"""The machinery of the differential protocol tests (tests/kafka/test_differential.py): each scenario sends the same
raw requests to a broker and returns a normalized result; the test runs it against Apache Kafka and against Strata
and compares the two. The scenarios themselves are in differential_data.py (produce, fetch, offsets),
differential_groups.py (consumer groups) and test_differential.py (topics, configs, coordinators, versions).

A scenario is a function of a `Side` (one broker, with names unique to the scenario) registered with `@scenario`.
Its result keeps what a client reads (error codes as names, offsets, watermarks, counts, states) and leaves out what
legitimately differs between two brokers (ids, timestamps, throttle times, host names, free-text error messages):
`norm` does that for a whole response. `expect` names the error codes Kafka's result must contain (what the
scenario is about), so a scenario that stops exercising what its name says (both brokers answering something else,
say UNKNOWN_TOPIC_OR_PARTITION) fails too.
"""
from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from protocol.record_batch import build_batch
from tests.integration.rawclient import ConnectionClosed, RawClient

# API keys and the versions the scenarios use (the highest both brokers support unless a scenario says otherwise).
PRODUCE, FETCH, LIST_OFFSETS, METADATA = (0, 11), (1, 12), (2, 9), (3, 12)
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = (8, 9), (9, 9), (10, 4)
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = (11, 9), (12, 4), (13, 5), (14, 5)
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS = (15, 5), (16, 5), (18, 4)
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = (19, 7), (20, 6), (21, 2), (22, 5)
OFFSET_FOR_LEADER_EPOCH = (23, 4)
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, DELETE_GROUPS = (32, 4), (33, 2), (37, 3), (42, 2)
INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE = (44, 1), (47, 0)
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = (68, 0), (69, 0)

# Response fields two correct brokers answer differently: ids, times, addresses, free text.
VOLATILE = {"throttle_time", "topic_id", "producer_id", "member_id", "leader", "cluster_id", "controller_id",
            "node_id", "host", "port", "rack", "error_message", "log_append_time", "timestamp", "session_id",
            "client_id", "client_host", "topic_authorized_operations", "authorized_operations", "brokers",
            "documentation", "config_source", "is_sensitive", "synonyms", "config_type", "read_only",
            "is_default", "endpoints", "supported_features", "finalized_features", "finalized_features_epoch",
            "zk_migration_ready", "api_keys"}


RETRIABLE_COORDINATOR = {"COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR",
                         "CONCURRENT_TRANSACTIONS"}


def err(code) -> str:
    """An error code as its Kafka name (NONE for 0), so a difference reads as one."""
    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"UNKNOWN_CODE_{int(code)}"


def norm(entity, drop: set[str] = frozenset(), keep: set[str] = frozenset()):
    """A kio entity (or tuple of them) as plain data: error codes as names, VOLATILE and `drop` fields left out
    (except those in `keep`), timedeltas as milliseconds, enums as names."""
    skip = (VOLATILE | set(drop)) - set(keep)
    if is_dataclass(entity):
        out = {}
        for f in fields(entity):
            if f.name in skip:
                continue
            v = getattr(entity, f.name)
            out[f.name] = err(v) if f.name == "error_code" else norm(v, drop, keep)
        return out
    if isinstance(entity, (tuple, list)):
        return [norm(x, drop, keep) for x in entity]
    if isinstance(entity, datetime.timedelta):
        return int(entity.total_seconds() * 1000)
    if isinstance(entity, Enum):
        return entity.name
    if isinstance(entity, (bytes, bytearray, memoryview)):
        return bytes(entity)
    if isinstance(entity, uuid.UUID):
        return "uuid"
    return entity


class Side:
    """One broker for one scenario run: a raw connection, helpers for the requests scenarios share, and names
    unique to the scenario (the same names on both brokers, so results compare as they are)."""

    def __init__(self, kind: str, bootstrap: str, tag: str):
        self.kind = kind                # "kafka" or "strata", for messages only: scenarios do not branch on it
        self.bootstrap = bootstrap
        self.tag = tag
        self._conns: list[RawClient] = []
        self._c: RawClient | None = None

    # ---- connections and requests ------------------------------------------------------------------------------
    @property
    def c(self) -> RawClient:
        if self._c is None:
            self._c = self.connect()
        return self._c

    def connect(self) -> RawClient:
        conn = RawClient(self.bootstrap, timeout=30)
        self._conns.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._conns:
            conn.close()

    def req(self, api: tuple[int, int], body: dict | bytes, version: int | None = None):
        key, v = api
        return self.c.request(key, v if version is None else version, body)

    def name(self, suffix: str = "") -> str:
        return self.tag + suffix

    def group(self, suffix: str = "") -> str:
        return "g-" + self.tag + suffix

    # ---- topics --------------------------------------------------------------------------------------------------
    def create_topics(self, topics: list[dict], validate_only: bool = False, version: int | None = None):
        full = [{"num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": [], **t}
                for t in topics]
        for t in full:
            if isinstance(t["configs"], dict):
                t["configs"] = [{"name": k, "value": v} for k, v in t["configs"].items()]
        return self.req(CREATE_TOPICS, {"topics": full, "timeout": 30000, "validate_only": validate_only},
                        version)

    def create(self, suffix: str = "", partitions: int = 1, **configs) -> str:
        """A topic of this scenario, ready: its partitions have a leader that accepts requests."""
        name = self.name(suffix)
        r = self.create_topics([{"name": name, "num_partitions": partitions,
                                 "configs": {k.replace("_", "."): str(v) for k, v in configs.items()}}])
        assert r.topics[0].error_code == 0, (self.kind, r)
        self.wait_topic(name, partitions)
        return name

    def metadata(self, names: list[str] | None, auto_create: bool = False):
        return self.req(METADATA, {"topics": None if names is None else
                                   [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names],
                                   "allow_auto_topic_creation": auto_create,
                                   "include_topic_authorized_operations": False})

    def topic_id(self, name: str) -> uuid.UUID:
        return self.metadata([name]).topics[0].topic_id

    def wait_topic(self, name: str, partitions: int, timeout: float = 30) -> None:
        """Until Metadata shows `partitions` partitions with a leader and ListOffsets on each answers (Kafka's
        CreateTopics answers before its broker has loaded the new partitions)."""
        deadline = time.monotonic() + timeout
        while True:
            t = self.metadata([name]).topics[0]
            if t.error_code == 0 and len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions):
                r = self.list_offsets(name, list(range(partitions)), -1)
                if all(p.error_code == 0 for p in r.topics[0].partitions):
                    return
            assert time.monotonic() < deadline, f"{self.kind}: {name} not ready: {t}"
            time.sleep(0.05)

    def delete_topic(self, name: str) -> None:
        r = self.req(DELETE_TOPICS, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}], "timeout": 30000})
        assert r.responses[0].error_code == 0, (self.kind, r)
        self.wait_gone(name)

    def wait_gone(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.metadata([name]).topics[0].error_code == 0:
            assert time.monotonic() < deadline, f"{self.kind}: {name} still listed after its deletion"
            time.sleep(0.05)
        # Kafka's broker drops a deleted partition's log when it applies the metadata: until then a Produce can
        # still find it. Wait until one is refused.
        while self.produce(name, 0, build_batch([(b"k", b"probe")])).error_code == 0:
            assert time.monotonic() < deadline, f"{self.kind}: {name} still takes produce after its deletion"
            time.sleep(0.05)

    # ---- data ----------------------------------------------------------------------------------------------------
    def produce_body(self, topic: str, partition: int, records, acks: int = -1) -> dict:
        return {"acks": acks, "timeout": 30000, "transactional_id": None,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}

    def produce(self, topic: str, partition: int, records, acks: int = -1, version: int | None = None):
        """-> the single partition response."""
        r = self.req(PRODUCE, self.produce_body(topic, partition, records, acks), version)
        return r.responses[0].partition_responses[0]

    def seed(self, topic: str, n: int = 3, partition: int = 0) -> None:
        p = self.produce(topic, partition, build_batch([(b"k", b"v%d" % i) for i in range(n)]))
        assert p.error_code == 0, (self.kind, p)

    def fetch(self, topic, partition: int, offset: int, version: int | None = None, current_leader_epoch: int = -1,
              last_fetched_epoch: int = -1, log_start_offset: int = -1, isolation_level: int = 0):
        v = FETCH[1] if version is None else version
        key = {"topic_id": topic} if v >= 13 else {"topic": topic}
        return self.c.request(FETCH[0], v, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation_level,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{**key, "partitions": [{"partition": partition, "fetch_offset": offset,
                                               "current_leader_epoch": current_leader_epoch,
                                               "last_fetched_epoch": last_fetched_epoch,
                                               "log_start_offset": log_start_offset,
                                               "partition_max_bytes": 1 << 20}]}]})

    def list_offsets(self, topic: str, partitions: list[int], timestamp: int, current_leader_epoch: int = -1,
                     version: int | None = None, isolation_level: int = 0):
        return self.req(LIST_OFFSETS, {"replica_id": -1, "isolation_level": isolation_level, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": current_leader_epoch,
                                            "timestamp": timestamp, "max_num_offsets": 1} for p in partitions]}]},
            version)

    def delete_records(self, topic: str, partition: int, offset: int):
        r = self.req(DELETE_RECORDS, {"topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "offset": offset}]}], "timeout": 30000})
        return r.topics[0].partitions[0]

    def init_producer_id(self, transactional_id: str | None = None, producer_id: int = -1, producer_epoch: int = -1,
                         retry: bool = True, timeout: float = 30):
        """With `retry`, until the answer is not a retriable coordinator error (a fresh Kafka answers
        COORDINATOR_NOT_AVAILABLE while its producer id block or transaction log is on its way)."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.req(INIT_PRODUCER_ID, {"transactional_id": transactional_id, "transaction_timeout": 60000,
                                            "producer_id": producer_id, "producer_epoch": producer_epoch})
            if not retry or err(r.error_code) not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                return r
            time.sleep(0.1)

    def closed_after(self, raw: bytes, timeout: float = 5.0) -> bool:
        """Send raw frame bytes on a new connection: True when the broker closes it without an answer."""
        conn = self.connect()
        conn.send_bytes(raw)
        try:
            conn.recv_frame(timeout=timeout)
            return False
        except ConnectionClosed:
            return True


@dataclass
class Scenario:
    name: str
    run: Callable[[Side], Any]
    expect: tuple[str, ...] = ()  # error names Kafka's result must contain
    xfail: str | None = None      # why Strata deliberately answers differently (docs/kafka-compatibility.md)


SCENARIOS: list[Scenario] = []


def scenario(name: str, expect: tuple[str, ...] = (), xfail: str | None = None):
    def register(fn: Callable[[Side], Any]):
        assert all(s.name != name for s in SCENARIOS), name
        SCENARIOS.append(Scenario(name, fn, expect, xfail))
        return fn
    return register


def batch(n: int = 1, **kw) -> bytes:
    return build_batch([(b"k", b"v%d" % i) for i in range(n)], **kw)


def coordinator(s: Side, key_type: int, *keys: str, version: int | None = None):
    """FindCoordinator, repeated while the coordinator is on its way (Kafka creates __consumer_offsets, or
    __transaction_state, on the first request)."""
    deadline = time.monotonic() + 30
    while True:
        r = s.req(FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": list(keys)}, version)
        errors = [err(c.error_code) for c in r.coordinators]
        if not set(errors) & RETRIABLE_COORDINATOR or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if key_type == 0:
        # Kafka names the coordinator before it has loaded the group's __consumer_offsets partition.
        while time.monotonic() < deadline and any(
                err(g.error_code) in RETRIABLE_COORDINATOR for g in s.req(DESCRIBE_GROUPS, {
                    "groups": list(keys), "include_authorized_operations": False}).groups):
            time.sleep(0.1)
    return [(c.key, err(c.error_code), c.node_id >= 0) for c in r.coordinators]



# ---- result shapes -------------------------------------------------------------------------------------------------

def fetch_part(r) -> dict:
    """A Fetch response's single partition: what a consumer acts on, and the offsets of the records it got."""
    from tests.integration.rawclient import decode_batches
    assert len(r.responses) == 1 and len(r.responses[0].partitions) == 1, r
    p = r.responses[0].partitions[0]
    return {"top": err(r.error_code), "error_code": err(p.error_code), "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
            "diverging_epoch": norm(getattr(p, "diverging_epoch", None)),
            "current_leader": norm(getattr(p, "current_leader", None)),
            "preferred_read_replica": p.preferred_read_replica,
            "offsets": [x.offset for x in decode_batches(p.records or b"")]}


def produce_part(p) -> dict:
    return {"error_code": err(p.error_code), "base_offset": p.base_offset, "log_start_offset": p.log_start_offset,
            "record_errors": [e.batch_index for e in p.record_errors]}


def offsets_parts(r) -> list:
    return [(p.partition_index, err(p.error_code), p.offset, getattr(p, "leader_epoch", None)) for t in r.topics
            for p in t.partitions]
