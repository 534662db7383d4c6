"""Every API the broker serves, against Kafka's authorization rules, on one real broker with SASL (PLAIN) and
Kafka's StandardAuthorizer, table-driven as Kafka's AuthorizerIntegrationTest is.

For each API the table gives a small valid request on fixture resources, the ACLs Kafka's KafkaApis / ControllerApis
check for it (AuthorizerIntegrationTest's requestKeysToAcls, narrowed to the operation actually checked), and where
the response shows a refusal (its requestKeyToError). Each API then goes through, in this order:

  a) unauthenticated on the SASL listener: after ApiVersions, the request closes the connection unanswered;
  b) a wrong password: SaslAuthenticate answers SASL_AUTHENTICATION_FAILED and the connection closes;
  c) bob, authenticated with no ACL: Kafka's refusal (the error of the first check Kafka makes);
  d) alice with every needed ALLOW, plus a DENY of one of them (each in turn): the refusal of that resource;
  e) alice with the needed ALLOWs: no refusal (Kafka's exact answer where the fixture makes it certain);
  f) admin, a super user: no refusal.

For APIs that write, the state they would change (log end offset, topics, configs, ACLs, committed offsets, SCRAM
users, transactions, group membership) is read back after a), b), c) and each d): unchanged; and after e): changed.
Every API the broker advertises, and the controller's and Strata's own unadvertised ones, must have a row; a few APIs
have more than one (another resource type, or another way Kafka allows them). The broker is also the controller of
its one-node cluster, so the controller's APIs reach the controller's own checks once authorized. Where Strata still
answers differently from Kafka, KNOWN_DIFFERENCES says how, and the API's test ends XFAIL."""
from __future__ import annotations

import ipaddress
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from protocol.record_batch import build_batch
from tests.integration.rawclient import ConnectionClosed, RawClient, encode_body, encode_header

pytestmark = pytest.mark.integration

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{PASSWORDS["admin"]}" '
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
ALICE = "User:alice"

# Kafka's enums (org.apache.kafka.common.resource / acl)
ANY = 1
TOPIC, GROUP, CLUSTER, TXN_ID = 2, 3, 4, 5
LITERAL = 3
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
DENY, ALLOW = 2, 3
KAFKA_CLUSTER = "kafka-cluster"

# the refusals (AclEntry.authorizationError), by resource type
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
REFUSAL_OF = {TOPIC: TOPIC_DENIED, GROUP: GROUP_DENIED, CLUSTER: CLUSTER_DENIED, TXN_ID: TXN_DENIED}
REFUSALS = set(REFUSAL_OF.values())
SASL_AUTHENTICATION_FAILED = 58

# other Kafka errors the allowed requests get on the fixture's state
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_MEMBER_ID, TOPIC_ALREADY_EXISTS, STALE_BROKER_EPOCH = 3, 25, 36, 77
GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, INCONSISTENT_CLUSTER_ID = 69, 79, 104
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
NOT_LEADER_OR_FOLLOWER, ILLEGAL_SASL_STATE, UNKNOWN_TOPIC_ID = 6, 34, 100

T = "mx-topic"                    # the shared topic the read-only APIs name
ZERO_UUID = uuid.UUID(int=0)


# ---- the broker and its clients ---------------------------------------------------------------------------------

class Env:
    """The broker, the authenticated connections (kept across APIs), and the admin's set-up and read-back helpers.
    `ctx` keeps what set-ups learn (topic ids, producer ids) for the request builders."""

    def __init__(self, broker):
        self.broker = broker
        self.clients: dict[str, RawClient] = {}
        self.ctx: dict[str, Any] = {}

    # connections
    def raw(self) -> RawClient:
        return RawClient(self.broker.bootstrap)

    def login(self, user: str, password: str | None = None) -> RawClient:
        c = self.raw()
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        r = c.request(36, 2, {"auth_bytes": f"\0{user}\0{password or PASSWORDS[user]}".encode()})
        assert r.error_code == 0, r
        return c

    def client(self, user: str) -> RawClient:
        if user not in self.clients:
            self.clients[user] = self.login(user)
        return self.clients[user]

    def request(self, user: str, key: int, version: int, body):
        """The response of `user`'s shared connection (a fresh one next time if this one failed)."""
        c = self.client(user)
        try:
            return send_and_receive(c, key, version, body)
        except (ConnectionClosed, TimeoutError, OSError):
            self.clients.pop(user).close()
            raise

    def admin(self, key: int, version: int, body):
        return self.request("admin", key, version, body)

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    # ACLs (the admin's CreateAcls v3 / DeleteAcls v3)
    def grant(self, acls, permission: int = ALLOW, principal: str = ALICE) -> None:
        if not acls:
            return
        r = self.admin(30, 3, {"creations": [
            {"resource_type": rt, "resource_name": name, "resource_pattern_type": LITERAL, "principal": principal,
             "host": "*", "operation": op, "permission_type": permission} for rt, name, op in acls]})
        assert [int(x.error_code) for x in r.results] == [0] * len(acls), r

    def revoke_all(self, principal: str = ALICE) -> None:
        r = self.admin(31, 3, {"filters": [{
            "resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
            "principal_filter": principal, "host_filter": None, "operation": ANY, "permission_type": ANY}]})
        assert int(r.filter_results[0].error_code) == 0, r

    def acl_list(self) -> set:
        """Every ACL but alice's (which the harness changes)."""
        r = self.admin(29, 3, {"resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
                               "principal_filter": None, "host_filter": None, "operation": ANY,
                               "permission_type": ANY})
        assert r.error_code == 0, r
        return {(res.resource_type, res.resource_name, res.pattern_type, a.principal, a.host, a.operation,
                 a.permission_type) for res in r.resources for a in res.acls if a.principal != ALICE}

    # set-up (as admin, the super user)
    def create_topic(self, name: str, partitions: int = 1) -> uuid.UUID:
        r = self.admin(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                           "assignments": [], "configs": []}],
                               "timeout": 30000, "validate_only": False})
        assert int(r.topics[0].error_code) == 0, r
        return r.topics[0].topic_id

    def produce(self, topic: str, n: int = 1) -> None:
        r = self.admin(0, 9, {"acks": -1, "timeout": 30000, "transactional_id": None, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")] * n)}]}]})
        assert int(r.responses[0].partition_responses[0].error_code) == 0, r

    def commit(self, group: str, topic: str, offset: int) -> None:
        r = self.admin(8, 9, offset_commit(group, topic, offset))
        assert int(r.topics[0].partitions[0].error_code) == 0, r

    def init_txn(self, tid: str) -> tuple[int, int]:
        """The transaction coordinator's topic is created at the first FindCoordinator for a transactional id, and
        loads; retried meanwhile, as clients do."""
        deadline = time.monotonic() + 30
        while True:
            assert self.admin(10, 6, {"key_type": 1, "coordinator_keys": [tid]}).coordinators[0].node_id >= 0 or \
                time.monotonic() < deadline
            r = self.admin(22, 5, init_producer_id(tid))
            if r.error_code not in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert r.error_code == 0, r
        return r.producer_id, r.producer_epoch

    def add_partition(self, tid: str, topic: str) -> None:
        pid, epoch = self.ctx[tid]
        r = self.admin(24, 3, add_partitions_to_txn(tid, pid, epoch, topic))
        assert int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code) == 0, r

    def add_offsets(self, tid: str, group: str) -> None:
        pid, epoch = self.ctx[tid]
        r = self.admin(25, 4, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                               "group_id": group})
        assert r.error_code == 0, r

    # read-back (as admin)
    def offsets(self, topic: str) -> tuple[int, int]:
        """(log start offset, log end offset) of partition 0."""
        out = []
        for ts in (-2, -1):
            r = self.admin(2, 9, list_offsets(topic, ts))
            p = r.topics[0].partitions[0]
            assert p.error_code == 0, r
            out.append(p.offset)
        return tuple(out)

    def topics(self) -> dict[str, int]:
        r = self.admin(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        return {t.name: len(t.partitions) for t in r.topics}

    def config(self, topic: str, name: str) -> str:
        r = self.admin(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                              "configuration_keys": [name]}],
                               "include_synonyms": False, "include_documentation": False})
        assert r.results[0].error_code == 0, r
        return {c.name: c.value for c in r.results[0].configs}[name]

    def committed(self, group: str, topic: str = T) -> int:
        r = self.admin(9, 9, offset_fetch(group, topic))
        g = r.groups[0]
        assert g.error_code == 0, r
        return g.topics[0].partitions[0].committed_offset

    def txn(self, tid: str) -> tuple | None:
        """(producer id, state) of the transactional id, None when it has none. (ListTransactions, as kio cannot
        decode DescribeTransactions' start time of -1, which Kafka answers for a transaction not started.)"""
        r = self.admin(66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
        assert r.error_code == 0, r
        found = [(s.producer_id, s.transaction_state) for s in r.transaction_states if s.transactional_id == tid]
        return found[0] if found else None

    def scram(self, user: str) -> tuple:
        r = self.admin(50, 0, {"users": [{"name": user}]})
        res = r.results[0]
        return int(res.error_code), sorted((i.mechanism, i.iterations) for i in res.credential_infos)

    def client_quota(self, client_id: str) -> tuple:
        r = self.admin(48, 1, {"components": [{"entity_type": "client-id", "match_type": 0, "match": client_id}],
                               "strict": True})
        return int(r.error_code), [(v.key, v.value) for e in r.entries for v in e.values]

    def consumer_group(self, group: str) -> tuple:
        r = self.admin(69, 1, {"group_ids": [group], "include_authorized_operations": False})
        g = r.groups[0]
        return int(g.error_code), g.group_state, g.group_epoch, sorted(m.member_id for m in g.members)

    def classic_group(self, group: str) -> tuple:
        r = self.admin(15, 5, {"groups": [group], "include_authorized_operations": False})
        g = r.groups[0]
        return int(g.error_code), g.group_state, sorted(m.member_id for m in g.members)


def send_and_receive(c: RawClient, key: int, version: int, body):
    if key == DESCRIBE_WAL_POINTERS:          # Strata's own API: no kio schema, encoded and decoded here
        corr = c.send(key, version, body)
        return decode_wal_pointers(c.recv_frame(), corr)
    return c.request(key, version, body)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One broker, also the active controller of its one-node cluster (a metadata log in a local store, so the
    controller's own APIs are answered for real), its only listener SASL_PLAINTEXT with PLAIN users admin, alice and
    bob; its own connections (registration, heartbeats, internal topics) authenticate as admin, the super user.
    The shared topic has one record."""
    from tests.conftest import BrokerProcess
    root = tmp_path_factory.mktemp("authz-matrix")
    b = BrokerProcess(root / "broker", {
        "authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "metadata.log.storage.url": f"file://{root / 'metadata'}", "broker.heartbeat.interval.ms": "500",
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": "1", "transaction.state.log.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "true"})
    b.overrides["listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{b.port}"
    b.start()
    e = Env(b)
    try:
        deadline = time.monotonic() + 30
        while True:                # until the broker has registered with its controller and is unfenced
            r = e.admin(19, 7, {"topics": [{"name": T, "num_partitions": 1, "replication_factor": 1,
                                            "assignments": [], "configs": []}], "timeout": 30000,
                                "validate_only": False})
            if r.topics[0].error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert r.topics[0].error_code == 0, r
        e.ctx["topic_id"] = r.topics[0].topic_id
        e.produce(T)
        yield e
    finally:
        e.close()
        rc = b.stop()
    log = b.log_text()
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log, log[-5000:]
    for pw in PASSWORDS.values():
        assert pw not in log, "a password in the broker's log"


# ---- request bodies shared by set-up and the table ---------------------------------------------------------------

def list_offsets(topic: str, timestamp: int = -1) -> dict:
    return {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]}


def offset_commit(group: str, topic: str, offset: int) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def offset_fetch(group: str, topic: str) -> dict:
    return {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                        "topics": [{"name": topic, "partition_indexes": [0]}]}], "require_stable": False}


def fetch(version: int, replica_id: int, topic: dict) -> dict:
    return {"replica_id": replica_id, "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{**topic, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def init_producer_id(tid: str | None) -> dict:
    return {"transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}


def add_partitions_to_txn(tid: str, pid: int, epoch: int, topic: str) -> dict:
    return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}


# a value per phase: what a refused request would have written (c, d) differs from what e) and f) write
def per_phase(phase: str, e, f, refused):
    return {"e": e, "f": f}.get(phase, refused)


DESCRIBE_WAL_POINTERS = 21332


def wal_pointers_request(topic: str) -> bytes:
    """DescribeWalPointers v0 (broker/handlers/describe_wal_pointers.py): max_bytes, [topic, [partition, offset]]."""
    name = topic.encode()
    return struct.pack(">iih", 1 << 20, 1, len(name)) + name + struct.pack(">iiq", 1, 0, 0)


@dataclass
class WalPointersResponse:
    error_code: int


def decode_wal_pointers(frame: bytes, corr: int) -> WalPointersResponse:
    got, _throttle, _n = struct.unpack_from(">iii", frame, 0)
    assert got == corr
    (n,) = struct.unpack_from(">h", frame, 12)
    _m, _partition, error = struct.unpack_from(">iih", frame, 14 + n)
    return WalPointersResponse(error)


# ---- the table ---------------------------------------------------------------------------------------------------

@dataclass
class Case:
    id: str
    key: int
    version: int
    body: Callable[[Env, str], Any]            # (env, phase) -> the request body
    acls: list                                 # [(resource type, name, operation)] alice needs, all ALLOW
    error: Callable[[Any], int]                # where the response shows a refusal
    refusal: int | None                        # bob's answer (None: the API checks nothing)
    allowed: int | None = None                 # alice's exact answer in e) (None: anything but a refusal)
    admin: int | None = None                   # the super user's exact answer in f)
    deny: dict = field(default_factory=dict)   # index in acls -> the refusal when that one is denied (default: its
    #                                            resource type's)
    setup: Callable[[Env], None] | None = None
    state: Callable[[Env], Any] | None = None  # what a refused request must not change
    writes: bool = False                       # e) changes `state`
    check: Callable[[Env, Any, str], None] | None = None   # more about the answer in c), d), e) or f)
    preauth: str = "closed"                    # a): "closed" unanswered, or "answered" (ApiVersions, SaslHandshake)


def top(r) -> int:
    return int(r.error_code)


def _setup_topic(name: str, partitions: int = 1, records: int = 0):
    def setup(env: Env) -> None:
        env.ctx[name] = env.create_topic(name, partitions)
        if records:
            env.produce(name, records)
    return setup


def _setup_commit(group: str):
    def setup(env: Env) -> None:
        env.commit(group, T, 3)
    return setup


def _setup_txn(tid: str, *, partition: bool = False, offsets_group: str | None = None):
    def setup(env: Env) -> None:
        env.ctx[tid] = env.init_txn(tid)
        if partition:
            env.add_partition(tid, T)
        if offsets_group:
            env.add_offsets(tid, offsets_group)
    return setup


def _pid(env: Env, tid: str) -> tuple[int, int]:
    return env.ctx[tid]


def _envelope(env: Env, phase: str) -> dict:
    """A CreateTopics of bob's forwarded in an Envelope: the controller must authorize bob, not the sender."""
    inner = encode_header(19, 7, 7, "forwarded") + encode_body(19, 7, {
        "topics": [{"name": "mx-envelope", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                    "configs": []}], "timeout": 30000, "validate_only": False})
    return {"request_data": inner, "request_principal": _principal_data("User", "bob"),
            "client_host_address": ipaddress.ip_address("127.0.0.1").packed}


def _principal_data(kind: str, name: str) -> bytes:
    """Kafka's DefaultKafkaPrincipalBuilder.serialize: version 0, then DefaultPrincipalData v0 (flexible: compact
    strings type and name, token_authenticated, no tagged fields)."""
    def compact(text: str) -> bytes:
        data = text.encode()
        return bytes([len(data) + 1]) + data
    return struct.pack(">h", 0) + compact(kind) + compact(name) + b"\x00" + b"\x00"


def _envelope_check(env: Env, r, phase: str) -> None:
    if phase not in "ef":
        return
    from tests.integration.rawclient import decode_response
    corr, inner = decode_response(19, 7, r.response_data)
    assert corr == 7
    assert [(t.name, int(t.error_code)) for t in inner.topics] == [("mx-envelope", TOPIC_DENIED)]
    assert "mx-envelope" not in env.topics()


def _scram_upsert(phase: str) -> dict:
    return {"deletions": [], "upsertions": [{"name": "mx-scram", "mechanism": 1,
                                             "iterations": per_phase(phase, 4096, 8192, 10000),
                                             "salt": b"mx-salt", "salted_password": bytes(32)}]}


def _quota_alter(phase: str) -> dict:
    return {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "mx-quota"}],
                         "ops": [{"key": "producer_byte_rate", "value": per_phase(phase, 1024.0, 2048.0, 4096.0),
                                  "remove": False}]}], "validate_only": False}


def _cg_heartbeat(env: Env, phase: str) -> dict:
    return {"group_id": "mx-cg-heartbeat", "member_id": f"mx-member-{phase}-{uuid.uuid4().hex[:6]}",
            "member_epoch": 0, "instance_id": None, "rack_id": None, "rebalance_timeout": 30000,
            "subscribed_topic_names": [T], "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": []}


def _listed(entries: str, key: str, name: str, refusal: int):
    """Filtering APIs (ListGroups, ListTransactions): a refusal shows as the fixture's resource left out."""
    def error(r) -> int:
        if r.error_code:
            return int(r.error_code)
        return 0 if [getattr(x, key) for x in getattr(r, entries)].count(name) == 1 else refusal
    return error


def _still_serving(env: Env, r, phase: str) -> None:
    """The refused SASL request left the authenticated connection as it was."""
    user = {"c": "bob", "d": "alice", "e": "alice", "f": "admin"}[phase]
    assert env.client(user).api_versions().error_code == 0


def _cluster_ops(r) -> int:
    """DescribeCluster (KIP-700): without DESCRIBE on the cluster, cluster_authorized_operations is 0."""
    if r.error_code:
        return int(r.error_code)
    return 0 if r.cluster_authorized_operations & (1 << DESCRIBE) else CLUSTER_DENIED


def _partition(r, topics="topics", partitions="partitions", code="error_code") -> int:
    [t] = getattr(r, topics)
    [p] = getattr(t, partitions)
    return int(getattr(p, code))


def _committed_is(offset: int):
    def check(env: Env, r, phase: str) -> None:
        if phase in "ef":
            assert r.groups[0].topics[0].partitions[0].committed_offset == offset, r
    return check


def _no_configs_without_describe_configs(env: Env, r, phase: str) -> None:
    """CreateTopics: the created topic's configs only with DESCRIBE_CONFIGS on it (ControllerApis.createTopics'
    describable names); alice has CREATE only."""
    if phase == "e":
        [t] = r.topics
        assert (t.topic_config_error_code, t.configs, t.num_partitions) == (TOPIC_DENIED, (), -1), r


def _deleted_by_id_name(env: Env, r, phase: str) -> None:
    """DeleteTopics by id (ControllerApis.deleteTopics): a refused topic the principal may describe is named, one it
    may not describe is not (its name is not leaked)."""
    [t] = r.responses
    expected = {"c": None, "d": "mx-delete-by-id", "e": "mx-delete-by-id", "f": None}[phase]
    assert t.name == expected, r


def _transaction_topics(env: Env, r, phase: str) -> None:
    """DescribeTransactions lists only the partitions of topics the principal may describe (KafkaApis
    handleDescribeTransactionsRequest): alice has DESCRIBE on the transactional id only."""
    if phase in "ef":
        [s] = r.transaction_states
        assert [(t.topic, tuple(t.partitions)) for t in s.topics] == ([] if phase == "e" else [(T, (0,))]), r


def _top_then_partition(r) -> int:
    return int(r.error_code) or _partition(r)


CASES = [
    # -- produce and consume
    Case("Produce", 0, 11,
         lambda env, ph: {"acks": -1, "timeout": 30000, "transactional_id": None, "topic_data": [
             {"name": "mx-produce", "partition_data": [{"index": 0, "records": build_batch([(b"k", ph.encode())])}]}]},
         [(TOPIC, "mx-produce", WRITE)],
         lambda r: _partition(r, "responses", "partition_responses"), TOPIC_DENIED, allowed=0, admin=0,
         setup=_setup_topic("mx-produce"), state=lambda env: env.offsets("mx-produce"), writes=True),
    Case("Produce-transactional", 0, 11,
         lambda env, ph: {"acks": -1, "timeout": 30000, "transactional_id": "mx-produce-txn", "topic_data": [
             {"name": "mx-produce-txn", "partition_data": [{"index": 0, "records": build_batch(
                 [(b"k", b"v")], producer_id=_pid(env, "mx-produce-txn")[0],
                 producer_epoch=_pid(env, "mx-produce-txn")[1], base_sequence=0, attributes=0x10)}]}]},
         [(TXN_ID, "mx-produce-txn", WRITE), (TOPIC, "mx-produce-txn", WRITE)],
         lambda r: _partition(r, "responses", "partition_responses"), TXN_DENIED,
         setup=lambda env: (_setup_topic("mx-produce-txn")(env), _setup_txn("mx-produce-txn")(env)),
         state=lambda env: env.offsets("mx-produce-txn")),
    Case("Fetch", 1, 16,
         lambda env, ph: fetch(16, -1, {"topic_id": env.ctx["topic_id"]}),
         [(TOPIC, T, READ)], lambda r: _partition(r, "responses"), TOPIC_DENIED, allowed=0, admin=0),
    Case("Fetch-follower", 1, 12,
         lambda env, ph: fetch(12, 2, {"topic": T}),      # from broker 2, which is no replica of it
         [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)], lambda r: _partition(r, "responses"), TOPIC_DENIED,
         deny={0: TOPIC_DENIED}, allowed=NOT_LEADER_OR_FOLLOWER, admin=NOT_LEADER_OR_FOLLOWER),
    Case("ListOffsets", 2, 9, lambda env, ph: list_offsets(T), [(TOPIC, T, DESCRIBE)],
         lambda r: _partition(r), TOPIC_DENIED, allowed=0, admin=0),
    Case("Metadata", 3, 12,
         lambda env, ph: {"topics": [{"name": T, "topic_id": ZERO_UUID}], "allow_auto_topic_creation": True,
                          "include_topic_authorized_operations": False},
         [(TOPIC, T, DESCRIBE)], lambda r: int(r.topics[0].error_code), TOPIC_DENIED, allowed=0, admin=0),
    Case("Metadata-all-topics", 3, 12,
         lambda env, ph: {"topics": None, "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False},
         [(TOPIC, T, DESCRIBE)], lambda r: 0 if T in [t.name for t in r.topics] else TOPIC_DENIED, TOPIC_DENIED,
         allowed=0, admin=0),      # all topics: those the principal may not describe are left out
    Case("Metadata-auto-create", 3, 12,
         lambda env, ph: {"topics": [{"name": "mx-auto-created", "topic_id": ZERO_UUID}],
                          "allow_auto_topic_creation": True, "include_topic_authorized_operations": False},
         [(TOPIC, "mx-auto-created", DESCRIBE), (TOPIC, "mx-auto-created", CREATE)],
         lambda r: int(r.topics[0].error_code), TOPIC_DENIED,
         state=lambda env: "mx-auto-created" in env.topics(), writes=True),
    Case("DescribeTopicPartitions", 75, 0,
         lambda env, ph: {"topics": [{"name": T}], "response_partition_limit": 100, "cursor": None},
         [(TOPIC, T, DESCRIBE)], lambda r: int(r.topics[0].error_code), TOPIC_DENIED, allowed=0, admin=0),
    Case("OffsetForLeaderEpoch", 23, 4,
         lambda env, ph: {"replica_id": -1, "topics": [{"topic": T, "partitions": [
             {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
         [(TOPIC, T, DESCRIBE)], lambda r: _partition(r), TOPIC_DENIED, allowed=0, admin=0),
    Case("DescribeProducers", 61, 0, lambda env, ph: {"topics": [{"name": T, "partition_indexes": [0]}]},
         [(TOPIC, T, READ)], lambda r: _partition(r), TOPIC_DENIED, allowed=0, admin=0),
    Case("DescribeWalPointers", DESCRIBE_WAL_POINTERS, 0, lambda env, ph: wal_pointers_request(T),
         [(TOPIC, T, READ)], top, TOPIC_DENIED),

    # -- groups
    Case("FindCoordinator", 10, 6, lambda env, ph: {"key_type": 0, "coordinator_keys": ["mx-find"]},
         [(GROUP, "mx-find", DESCRIBE)], lambda r: int(r.coordinators[0].error_code), GROUP_DENIED,
         allowed=0, admin=0),
    Case("FindCoordinator-transaction", 10, 6, lambda env, ph: {"key_type": 1, "coordinator_keys": ["mx-find"]},
         [(TXN_ID, "mx-find", DESCRIBE)], lambda r: int(r.coordinators[0].error_code), TXN_DENIED,
         allowed=0, admin=0),
    Case("OffsetCommit", 8, 9, lambda env, ph: offset_commit("mx-commit", T, per_phase(ph, 1, 2, 99)),
         [(GROUP, "mx-commit", READ), (TOPIC, T, READ)], lambda r: _partition(r), GROUP_DENIED,
         allowed=0, admin=0, state=lambda env: env.committed("mx-commit"), writes=True),
    Case("OffsetFetch", 9, 9, lambda env, ph: offset_fetch("mx-fetch", T),
         [(GROUP, "mx-fetch", DESCRIBE), (TOPIC, T, DESCRIBE)],
         lambda r: int(r.groups[0].error_code) or _partition(r.groups[0]), GROUP_DENIED, allowed=0, admin=0,
         setup=_setup_commit("mx-fetch"), check=_committed_is(3)),
    Case("JoinGroup", 11, 9,
         lambda env, ph: {"group_id": "mx-join", "session_timeout": 10000, "rebalance_timeout": 10000,
                          "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                          "protocols": [{"name": "range", "metadata": b""}], "reason": None},
         [(GROUP, "mx-join", READ)], top, GROUP_DENIED, allowed=MEMBER_ID_REQUIRED, admin=MEMBER_ID_REQUIRED,
         state=lambda env: env.classic_group("mx-join")),
    Case("SyncGroup", 14, 5,
         lambda env, ph: {"group_id": "mx-sync", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                          "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
         [(GROUP, "mx-sync", READ)], top, GROUP_DENIED, allowed=UNKNOWN_MEMBER_ID, admin=UNKNOWN_MEMBER_ID),
    Case("Heartbeat", 12, 4,
         lambda env, ph: {"group_id": "mx-heartbeat", "generation_id": 1, "member_id": "m",
                          "group_instance_id": None},
         [(GROUP, "mx-heartbeat", READ)], top, GROUP_DENIED, allowed=UNKNOWN_MEMBER_ID, admin=UNKNOWN_MEMBER_ID),
    Case("LeaveGroup", 13, 5,
         lambda env, ph: {"group_id": "mx-leave", "members": [
             {"member_id": "m", "group_instance_id": None, "reason": None}]},
         [(GROUP, "mx-leave", READ)], lambda r: int(r.error_code) or int(r.members[0].error_code), GROUP_DENIED,
         allowed=UNKNOWN_MEMBER_ID, admin=UNKNOWN_MEMBER_ID),      # Kafka: top level NONE, the member's error
    Case("DescribeGroups", 15, 5, lambda env, ph: {"groups": ["mx-describe"], "include_authorized_operations": False},
         [(GROUP, "mx-describe", DESCRIBE)], lambda r: int(r.groups[0].error_code), GROUP_DENIED,
         allowed=0, admin=0),
    Case("ListGroups", 16, 5, lambda env, ph: {"states_filter": [], "types_filter": []},
         [(GROUP, "mx-list-groups", DESCRIBE)], _listed("groups", "group_id", "mx-list-groups", GROUP_DENIED),
         GROUP_DENIED, allowed=0, admin=0, setup=_setup_commit("mx-list-groups")),
    Case("DeleteGroups", 42, 2, lambda env, ph: {"groups_names": ["mx-delete-group"]},
         [(GROUP, "mx-delete-group", DELETE)], lambda r: int(r.results[0].error_code), GROUP_DENIED,
         allowed=0, admin=GROUP_ID_NOT_FOUND, setup=_setup_commit("mx-delete-group"),
         state=lambda env: env.classic_group("mx-delete-group"), writes=True),
    Case("OffsetDelete", 47, 0,
         lambda env, ph: {"group_id": "mx-offset-delete", "topics": [{"name": T, "partitions": [
             {"partition_index": 0}]}]},
         [(GROUP, "mx-offset-delete", DELETE), (TOPIC, T, READ)], _top_then_partition, GROUP_DENIED, allowed=0,
         setup=_setup_commit("mx-offset-delete"), state=lambda env: env.committed("mx-offset-delete"), writes=True),
    Case("ConsumerGroupHeartbeat", 68, 1, _cg_heartbeat, [(GROUP, "mx-cg-heartbeat", READ)], top, GROUP_DENIED,
         allowed=0, admin=0, state=lambda env: env.consumer_group("mx-cg-heartbeat"), writes=True),
    Case("ConsumerGroupDescribe", 69, 1,
         lambda env, ph: {"group_ids": ["mx-cg-describe"], "include_authorized_operations": False},
         [(GROUP, "mx-cg-describe", DESCRIBE)], lambda r: int(r.groups[0].error_code), GROUP_DENIED,
         allowed=GROUP_ID_NOT_FOUND, admin=GROUP_ID_NOT_FOUND),

    # -- transactions
    Case("InitProducerId", 22, 5, lambda env, ph: init_producer_id("mx-init"), [(TXN_ID, "mx-init", WRITE)],
         top, TXN_DENIED, allowed=0, admin=0, state=lambda env: env.txn("mx-init"), writes=True),
    Case("InitProducerId-idempotent", 22, 5, lambda env, ph: init_producer_id(None),
         [(CLUSTER, KAFKA_CLUSTER, IDEMPOTENT_WRITE)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("InitProducerId-idempotent-by-topic-write", 22, 5, lambda env, ph: init_producer_id(None),
         [(TOPIC, T, WRITE)], top, CLUSTER_DENIED, allowed=0, admin=0, deny={0: CLUSTER_DENIED}),
    Case("AddPartitionsToTxn", 24, 3,
         lambda env, ph: add_partitions_to_txn("mx-add-partitions", *_pid(env, "mx-add-partitions"), T),
         [(TXN_ID, "mx-add-partitions", WRITE), (TOPIC, T, WRITE)],
         lambda r: _partition(r, "results_by_topic_v3_and_below", "results_by_partition", "partition_error_code"),
         TXN_DENIED, allowed=0, admin=0, setup=_setup_txn("mx-add-partitions"),
         state=lambda env: env.txn("mx-add-partitions"), writes=True),
    Case("AddPartitionsToTxn-broker", 24, 5,
         lambda env, ph: {"transactions": [{"transactional_id": "mx-verify", "producer_id": 1, "producer_epoch": 1,
                                            "verify_only": True, "topics": [{"name": T, "partitions": [0]}]}]},
         [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("AddOffsetsToTxn", 25, 4,
         lambda env, ph: {"transactional_id": "mx-add-offsets", "producer_id": _pid(env, "mx-add-offsets")[0],
                          "producer_epoch": _pid(env, "mx-add-offsets")[1], "group_id": "mx-add-offsets-group"},
         [(TXN_ID, "mx-add-offsets", WRITE), (GROUP, "mx-add-offsets-group", READ)], top, TXN_DENIED,
         allowed=0, admin=0, setup=_setup_txn("mx-add-offsets"), state=lambda env: env.txn("mx-add-offsets"),
         writes=True),
    Case("TxnOffsetCommit", 28, 5,
         lambda env, ph: {"transactional_id": "mx-txn-commit", "group_id": "mx-txn-commit-group",
                          "producer_id": _pid(env, "mx-txn-commit")[0],
                          "producer_epoch": _pid(env, "mx-txn-commit")[1], "generation_id": -1, "member_id": "",
                          "group_instance_id": None, "topics": [{"name": T, "partitions": [
                              {"partition_index": 0, "committed_offset": per_phase(ph, 1, 2, 99),
                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
         [(TXN_ID, "mx-txn-commit", WRITE), (GROUP, "mx-txn-commit-group", READ), (TOPIC, T, READ)],
         lambda r: _partition(r), TXN_DENIED, allowed=0, admin=0,
         setup=_setup_txn("mx-txn-commit", offsets_group="mx-txn-commit-group"),
         state=lambda env: env.committed("mx-txn-commit-group")),
    Case("EndTxn", 26, 5,
         lambda env, ph: {"transactional_id": "mx-end", "producer_id": _pid(env, "mx-end")[0],
                          "producer_epoch": _pid(env, "mx-end")[1], "committed": True},
         [(TXN_ID, "mx-end", WRITE)], top, TXN_DENIED, allowed=0, setup=_setup_txn("mx-end", partition=True),
         state=lambda env: env.txn("mx-end"), writes=True),
    Case("WriteTxnMarkers", 27, 1,
         lambda env, ph: {"markers": [{"producer_id": 83392, "producer_epoch": 1, "transaction_result": False,
                                       "topics": [{"name": "mx-markers", "partition_indexes": [0]}],
                                       "coordinator_epoch": 1}]},
         [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)],
         lambda r: _partition(r.markers[0], "topics", "partitions"), CLUSTER_DENIED, allowed=0, admin=0,
         setup=_setup_topic("mx-markers"), state=lambda env: env.offsets("mx-markers"), writes=True),
    Case("WriteTxnMarkers-by-cluster-alter", 27, 1,
         lambda env, ph: {"markers": [{"producer_id": 83393, "producer_epoch": 1, "transaction_result": False,
                                       "topics": [{"name": "mx-markers-2", "partition_indexes": [0]}],
                                       "coordinator_epoch": 1}]},
         [(CLUSTER, KAFKA_CLUSTER, ALTER)],
         lambda r: _partition(r.markers[0], "topics", "partitions"), CLUSTER_DENIED, allowed=0, admin=0,
         setup=_setup_topic("mx-markers-2"), state=lambda env: env.offsets("mx-markers-2"), writes=True),
    Case("DescribeTransactions", 65, 0, lambda env, ph: {"transactional_ids": ["mx-describe-txn"]},
         [(TXN_ID, "mx-describe-txn", DESCRIBE)], lambda r: int(r.transaction_states[0].error_code), TXN_DENIED,
         allowed=0, admin=0, setup=_setup_txn("mx-describe-txn", partition=True), check=_transaction_topics),
    Case("ListTransactions", 66, 1,
         lambda env, ph: {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
         [(TXN_ID, "mx-list-txn", DESCRIBE)],
         _listed("transaction_states", "transactional_id", "mx-list-txn", TXN_DENIED), TXN_DENIED,
         allowed=0, admin=0, setup=_setup_txn("mx-list-txn")),

    # -- topic administration
    Case("CreateTopics", 19, 7,
         lambda env, ph: {"topics": [{"name": "mx-create", "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout": 30000, "validate_only": False},
         [(TOPIC, "mx-create", CREATE)], lambda r: int(r.topics[0].error_code), TOPIC_DENIED,
         allowed=0, admin=TOPIC_ALREADY_EXISTS, check=_no_configs_without_describe_configs,
         state=lambda env: "mx-create" in env.topics(), writes=True),
    Case("CreateTopics-by-cluster-create", 19, 7,
         lambda env, ph: {"topics": [{"name": "mx-create-2", "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout": 30000, "validate_only": False},
         [(CLUSTER, KAFKA_CLUSTER, CREATE)], lambda r: int(r.topics[0].error_code), TOPIC_DENIED,
         deny={0: TOPIC_DENIED}, allowed=0, admin=TOPIC_ALREADY_EXISTS,
         state=lambda env: "mx-create-2" in env.topics(), writes=True),
    Case("DeleteTopics", 20, 6,
         lambda env, ph: {"topics": [{"name": "mx-delete", "topic_id": ZERO_UUID}], "timeout": 30000},
         [(TOPIC, "mx-delete", DELETE)], lambda r: int(r.responses[0].error_code), TOPIC_DENIED,
         allowed=0, admin=UNKNOWN_TOPIC_OR_PARTITION, setup=_setup_topic("mx-delete"),
         state=lambda env: "mx-delete" in env.topics(), writes=True),
    Case("DeleteTopics-by-id", 20, 6,
         lambda env, ph: {"topics": [{"name": None, "topic_id": env.ctx["mx-delete-by-id"]}], "timeout": 30000},
         [(TOPIC, "mx-delete-by-id", DELETE)], lambda r: int(r.responses[0].error_code), TOPIC_DENIED,
         allowed=0, admin=UNKNOWN_TOPIC_ID, setup=_setup_topic("mx-delete-by-id"), check=_deleted_by_id_name,
         state=lambda env: "mx-delete-by-id" in env.topics(), writes=True),
    Case("CreatePartitions", 37, 3,
         lambda env, ph: {"topics": [{"name": "mx-grow", "count": per_phase(ph, 2, 3, 10), "assignments": None}],
                          "timeout": 30000, "validate_only": False},
         [(TOPIC, "mx-grow", ALTER)], lambda r: int(r.results[0].error_code), TOPIC_DENIED, allowed=0, admin=0,
         setup=_setup_topic("mx-grow"), state=lambda env: env.topics()["mx-grow"], writes=True),
    Case("DeleteRecords", 21, 2,
         lambda env, ph: {"topics": [{"name": "mx-trim", "partitions": [
             {"partition_index": 0, "offset": per_phase(ph, 1, 2, 3)}]}], "timeout": 30000},
         [(TOPIC, "mx-trim", DELETE)], lambda r: _partition(r), TOPIC_DENIED, allowed=0, admin=0,
         setup=_setup_topic("mx-trim", records=3), state=lambda env: env.offsets("mx-trim"), writes=True),
    Case("DescribeConfigs", 32, 4,
         lambda env, ph: {"resources": [{"resource_type": 2, "resource_name": T, "configuration_keys": None}],
                          "include_synonyms": False, "include_documentation": False},
         [(TOPIC, T, DESCRIBE_CONFIGS)], lambda r: int(r.results[0].error_code), TOPIC_DENIED, allowed=0, admin=0),
    Case("DescribeConfigs-broker", 32, 4,
         lambda env, ph: {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                          "include_synonyms": False, "include_documentation": False},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE_CONFIGS)], lambda r: int(r.results[0].error_code), CLUSTER_DENIED,
         allowed=0, admin=0),
    Case("DescribeConfigs-group", 32, 4,
         lambda env, ph: {"resources": [{"resource_type": 32, "resource_name": "mx-group-configs",
                                         "configuration_keys": None}],
                          "include_synonyms": False, "include_documentation": False},
         [(GROUP, "mx-group-configs", DESCRIBE_CONFIGS)], lambda r: int(r.results[0].error_code), GROUP_DENIED,
         allowed=0, admin=0),
    Case("AlterConfigs", 33, 2,
         lambda env, ph: {"resources": [{"resource_type": 2, "resource_name": "mx-configs", "configs": [
             {"name": "retention.ms", "value": str(per_phase(ph, 100000, 200000, 300000))}]}],
             "validate_only": False},
         [(TOPIC, "mx-configs", ALTER_CONFIGS)], lambda r: int(r.responses[0].error_code), TOPIC_DENIED,
         allowed=0, admin=0, setup=_setup_topic("mx-configs"),
         state=lambda env: env.config("mx-configs", "retention.ms"), writes=True),
    Case("IncrementalAlterConfigs", 44, 1,
         lambda env, ph: {"resources": [{"resource_type": 2, "resource_name": "mx-configs-2", "configs": [
             {"name": "max.message.bytes", "config_operation": 0,
              "value": str(per_phase(ph, 100000, 200000, 300000))}]}], "validate_only": False},
         [(TOPIC, "mx-configs-2", ALTER_CONFIGS)], lambda r: int(r.responses[0].error_code), TOPIC_DENIED,
         allowed=0, admin=0, setup=_setup_topic("mx-configs-2"),
         state=lambda env: env.config("mx-configs-2", "max.message.bytes"), writes=True),
    Case("IncrementalAlterConfigs-broker-logger", 44, 1,
         lambda env, ph: {"resources": [{"resource_type": 8, "resource_name": "1", "configs": [
             {"name": "kafka.controller.KafkaController", "config_operation": 1, "value": None}]}],
             "validate_only": True},
         [(CLUSTER, KAFKA_CLUSTER, ALTER_CONFIGS)], lambda r: int(r.responses[0].error_code), CLUSTER_DENIED),
    Case("IncrementalAlterConfigs-group", 44, 1,
         lambda env, ph: {"resources": [{"resource_type": 32, "resource_name": "mx-group-configs-2", "configs": [
             {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}],
             "validate_only": True},
         [(GROUP, "mx-group-configs-2", ALTER_CONFIGS)], lambda r: int(r.responses[0].error_code), GROUP_DENIED,
         allowed=0, admin=0),
    Case("ElectLeaders", 43, 2,
         lambda env, ph: {"election_type": 0, "topic_partitions": [{"topic": T, "partitions": [0]}],
                          "timeout": 30000},
         [(CLUSTER, KAFKA_CLUSTER, ALTER)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("AlterPartitionReassignments", 45, 0,
         lambda env, ph: {"timeout": 30000, "topics": [{"name": T, "partitions": [
             {"partition_index": 0, "replicas": None}]}]},
         [(CLUSTER, KAFKA_CLUSTER, ALTER)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("ListPartitionReassignments", 46, 0, lambda env, ph: {"timeout": 30000, "topics": None},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("DescribeLogDirs", 35, 4, lambda env, ph: {"topics": [{"topic": T, "partitions": [0]}]},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE)], top, CLUSTER_DENIED, allowed=0, admin=0),

    # -- cluster
    Case("DescribeCluster", 60, 1,
         lambda env, ph: {"include_cluster_authorized_operations": True, "endpoint_type": 1},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE)], _cluster_ops, CLUSTER_DENIED, allowed=0, admin=0),
    Case("DescribeClientQuotas", 48, 1,
         lambda env, ph: {"components": [{"entity_type": "user", "match_type": 2, "match": None}], "strict": False},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE_CONFIGS)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("DescribeQuorum", 55, 2,
         lambda env, ph: {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE)], top, CLUSTER_DENIED),

    # -- ACLs and SCRAM credentials
    Case("DescribeAcls", 29, 3,
         lambda env, ph: {"resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
                          "principal_filter": None, "host_filter": None, "operation": ANY, "permission_type": ANY},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("CreateAcls", 30, 3,
         lambda env, ph: {"creations": [{"resource_type": TOPIC, "resource_name": "mx-acl-created",
                                         "resource_pattern_type": LITERAL, "principal": f"User:mx-{ph}",
                                         "host": "*", "operation": READ, "permission_type": ALLOW}]},
         [(CLUSTER, KAFKA_CLUSTER, ALTER)], lambda r: int(r.results[0].error_code), CLUSTER_DENIED,
         allowed=0, admin=0, state=lambda env: env.acl_list(), writes=True),
    Case("DeleteAcls", 31, 3,
         lambda env, ph: {"filters": [{"resource_type_filter": TOPIC, "resource_name_filter": "mx-acl-victim",
                                       "pattern_type_filter": LITERAL, "principal_filter": "User:mx-victim",
                                       "host_filter": None, "operation": ANY, "permission_type": ANY}]},
         [(CLUSTER, KAFKA_CLUSTER, ALTER)], lambda r: int(r.filter_results[0].error_code), CLUSTER_DENIED,
         allowed=0, admin=0,
         setup=lambda env: env.grant([(TOPIC, "mx-acl-victim", READ)], principal="User:mx-victim"),
         state=lambda env: env.acl_list(), writes=True),
    Case("DescribeUserScramCredentials", 50, 0, lambda env, ph: {"users": [{"name": "mx-scram"}]},
         [(CLUSTER, KAFKA_CLUSTER, DESCRIBE)], top, CLUSTER_DENIED, allowed=0, admin=0),
    Case("AlterUserScramCredentials", 51, 0, lambda env, ph: _scram_upsert(ph),
         [(CLUSTER, KAFKA_CLUSTER, ALTER)], lambda r: int(r.results[0].error_code), CLUSTER_DENIED,
         allowed=0, admin=0, state=lambda env: env.scram("mx-scram"), writes=True),
    Case("AlterClientQuotas", 49, 1, lambda env, ph: _quota_alter(ph),
         [(CLUSTER, KAFKA_CLUSTER, ALTER_CONFIGS)], lambda r: int(r.entries[0].error_code), CLUSTER_DENIED,
         allowed=0, admin=0, state=lambda env: env.client_quota("mx-quota"), writes=True),

    # -- between brokers and controller (not advertised to clients; CLUSTER_ACTION)
    Case("BrokerRegistration", 62, 3,
         lambda env, ph: {"broker_id": 999, "cluster_id": "not-this-cluster", "incarnation_id": uuid.uuid4(),
                          "listeners": [{"name": "SASL_PLAINTEXT", "host": "127.0.0.1", "port": 1,
                                         "security_protocol": 2}],
                          "features": [], "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
                          "previous_broker_epoch": -1},
         [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)], top, CLUSTER_DENIED,
         allowed=INCONSISTENT_CLUSTER_ID, admin=INCONSISTENT_CLUSTER_ID),
    Case("BrokerHeartbeat", 63, 1,
         lambda env, ph: {"broker_id": 999, "broker_epoch": -1, "current_metadata_offset": 0, "want_fence": False,
                          "want_shut_down": False, "offline_log_dirs": []},
         [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)], top, CLUSTER_DENIED,
         allowed=STALE_BROKER_EPOCH, admin=STALE_BROKER_EPOCH),
    Case("AlterPartition", 56, 3,
         lambda env, ph: {"broker_id": 999, "broker_epoch": -1, "topics": [{"topic_id": env.ctx["topic_id"],
                          "partitions": [{"partition_index": 0, "leader_epoch": 0, "new_isr_with_epochs": [
                              {"broker_id": 1, "broker_epoch": -1}], "leader_recovery_state": 0,
                              "partition_epoch": 0}]}]},
         [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)], top, CLUSTER_DENIED,
         allowed=STALE_BROKER_EPOCH, admin=STALE_BROKER_EPOCH),
    Case("AllocateProducerIds", 67, 0, lambda env, ph: {"broker_id": 999, "broker_epoch": -1},
         [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)], top, CLUSTER_DENIED,
         allowed=STALE_BROKER_EPOCH, admin=STALE_BROKER_EPOCH),
    Case("Envelope", 58, 0, _envelope, [(CLUSTER, KAFKA_CLUSTER, CLUSTER_ACTION)], top, CLUSTER_DENIED,
         allowed=0, admin=0, check=_envelope_check),

    # -- the APIs of the handshake: nothing to authorize
    Case("ApiVersions", 18, 3, lambda env, ph: {"client_software_name": "mx", "client_software_version": "1"},
         [], top, None, allowed=0, admin=0, preauth="answered"),
    # on an authenticated connection without connections.max.reauth.ms there is no re-authentication: Kafka's
    # KafkaChannel.maybeBeginServerReauthentication declines, and KafkaApis answers ILLEGAL_SASL_STATE
    Case("SaslHandshake", 17, 1, lambda env, ph: {"mechanism": "PLAIN"}, [], top, None,
         allowed=ILLEGAL_SASL_STATE, admin=ILLEGAL_SASL_STATE, preauth="answered", check=_still_serving),
    Case("SaslAuthenticate", 36, 2, lambda env, ph: {"auth_bytes": b"\0alice\0" + PASSWORDS["alice"].encode()}, [],
         top, None, allowed=ILLEGAL_SASL_STATE, admin=ILLEGAL_SASL_STATE, check=_still_serving),
]


# ---- the tests ---------------------------------------------------------------------------------------------------

def test_every_served_api_is_in_the_table(env):
    """ApiVersions' keys, plus the served but unadvertised ones (controller APIs, Strata's own), each have a row at a
    version the broker serves; and the table names no API the broker does not serve."""
    from broker.handlers import load_handlers
    handlers = load_handlers()
    advertised = {k.api_key: (k.min_version, k.max_version) for k in env.client("admin").api_versions().api_keys}
    unadvertised = {k for k, m in handlers.items()
                    if getattr(m, "CONTROLLER_ONLY", False) or not getattr(m, "ADVERTISED", True)}
    assert unadvertised.isdisjoint(advertised) and set(advertised) <= set(handlers)
    in_table = {c.key for c in CASES}
    assert set(advertised) | unadvertised <= in_table, f"APIs without a row: {set(advertised) - in_table}"
    assert in_table <= set(handlers)
    for c in CASES:
        low, high = handlers[c.key].VERSIONS
        assert low <= c.version <= high, c.id
        if c.key in advertised:
            assert advertised[c.key] == (low, high), c.id


def _answer(env: Env, case: Case, user: str, phase: str):
    """The response `user` gets to the case's request on the user's authenticated connection."""
    return env.request(user, case.key, case.version, case.body(env, phase))


# Where Strata still answers differently from Kafka (reported, not fixed here): the step is checked as Kafka answers,
# and the test ends XFAIL while the difference lasts, after every other step has passed; it fails once it is gone,
# so the entry is removed.
_FOLLOWER_FETCH = ("a follower fetch from a broker that is not a replica of the partition is served (and its fetch "
                   "state recorded); Kafka's Partition.followerReplicaOrThrow answers NOT_LEADER_OR_FOLLOWER "
                   "(UNKNOWN_LEADER_EPOCH when the request carries a leader epoch)")
KNOWN_DIFFERENCES = {
    ("Fetch-follower", "e"): _FOLLOWER_FETCH, ("Fetch-follower", "f"): _FOLLOWER_FETCH,
}


def _is(got, expected, message: str) -> None:
    assert got == expected, message


def _unanswered_then_closed(c: RawClient) -> None:
    assert c.wait_closed(), "the connection stayed open"
    assert c.discarded == b"", f"answered {c.discarded[:40]!r} before closing"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_authorization(env, case: Case):
    if case.setup is not None:
        case.setup(env)
    snapshot = case.state(env) if case.state is not None else None

    def unchanged(step: str) -> None:
        if case.state is not None:
            assert case.state(env) == snapshot, f"{case.id}: state changed by the refused request ({step})"

    differences = []

    def as_kafka(step: str, check: Callable[[], None]) -> None:
        known = KNOWN_DIFFERENCES.get((case.id, step))
        try:
            check()
        except AssertionError as e:
            if known is None:
                raise
            differences.append(f"{step}) {known} ({e})")
        else:
            assert known is None, f"{case.id} {step}) now answers as Kafka: remove it from KNOWN_DIFFERENCES"

    # a) unauthenticated, after ApiVersions
    with env.raw() as c:
        assert c.api_versions().error_code == 0
        corr = c.send(case.key, case.version, case.body(env, "a"))
        if case.preauth == "answered":
            assert c.recv(case.key, case.version, corr).error_code == 0
        else:
            as_kafka("a", lambda: _unanswered_then_closed(c))
    unchanged("a")

    # b) a wrong password: refused, then the connection closes with the request unanswered
    with env.raw() as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        r = c.request(36, 2, {"auth_bytes": b"\0alice\0wrong-password"})
        assert r.error_code == SASL_AUTHENTICATION_FAILED, r
        try:
            c.send(case.key, case.version, case.body(env, "b"))
        except OSError:
            pass
        _unanswered_then_closed(c)
    unchanged("b")

    # c) authenticated, no ACL
    env.revoke_all()
    r = _answer(env, case, "bob", "c")
    code = case.error(r)
    if case.refusal is None:
        assert code == case.allowed, f"{case.id}: bob got {code}"
    else:
        assert code == case.refusal, f"{case.id}: bob got {code}, Kafka answers {case.refusal}"
    if case.check is not None:
        case.check(env, r, "c")
    unchanged("c")

    # d) each needed ACL denied while all are allowed: DENY wins
    for i, acl in enumerate(case.acls):
        env.revoke_all()
        env.grant(case.acls)
        env.grant([acl], DENY)
        r = _answer(env, case, "alice", "d")
        code = case.error(r)
        expected = case.deny.get(i, REFUSAL_OF[acl[0]])
        assert code == expected, f"{case.id}: alice with {acl} denied got {code}, Kafka answers {expected}"
        if case.check is not None:
            case.check(env, r, "d")
        unchanged(f"d, {acl} denied")

    # e) the needed ACLs
    env.revoke_all()
    env.grant(case.acls)
    r = _answer(env, case, "alice", "e")
    code = case.error(r)
    env.revoke_all()
    assert code not in REFUSALS, f"{case.id}: alice with {case.acls} refused ({code})"
    if case.allowed is not None:
        as_kafka("e", lambda: _is(code, case.allowed, f"{case.id}: alice got {code}, Kafka answers {case.allowed}"))
    if case.check is not None:
        case.check(env, r, "e")
    if case.writes:
        assert case.state(env) != snapshot, f"{case.id}: the allowed request changed nothing"

    # f) the super user
    r = _answer(env, case, "admin", "f")
    code = case.error(r)
    assert code not in REFUSALS, f"{case.id}: the super user refused ({code})"
    if case.admin is not None:
        as_kafka("f", lambda: _is(code, case.admin, f"{case.id}: admin got {code}, Kafka answers {case.admin}"))
    if case.check is not None:
        case.check(env, r, "f")

    if differences:
        pytest.xfail("; ".join(differences))
