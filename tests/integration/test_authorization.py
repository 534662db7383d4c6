"""Kafka's StandardAuthorizer on a real broker, over PLAINTEXT where every client is User:ANONYMOUS: refusals with
Kafka's error codes (and nothing written or created for a refused request), ACLs granting and denying through the
broker's own CreateAcls, allow.everyone.if.no.acl.found opening only resources without ACLs, and super.users
bypassing everything."""
from __future__ import annotations

import time
import uuid

import pytest

from protocol.record_batch import build_batch
from tests.integration.rawclient import RawClient

pytestmark = pytest.mark.integration

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, DESCRIBE = 3, 4, 8
DENY, ALLOW = 2, 3
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, FIND_COORDINATOR, JOIN_GROUP = 0, 1, 2, 3, 8, 10, 11
DESCRIBE_GROUPS, INIT_PRODUCER_ID, CREATE_ACLS, DESCRIBE_CONFIGS, DESCRIBE_CLUSTER = 15, 22, 30, 32, 60


def _broker(make_broker, **settings):
    return make_broker({"authorizer.class.name": AUTHORIZER, "auto.create.topics.enable": "true", **settings})


def produce(c: RawClient, topic: str) -> int:
    return int(c.produce(topic, 0, build_batch([(b"k", b"v")])).error_code)


def fetch_error(c: RawClient, topic: str) -> int:
    [t] = c.fetch(topic, 0, 0).responses
    return int(t.partitions[0].error_code)


def list_offsets(c: RawClient, topic: str) -> tuple[int, int]:
    r = c.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    p = r.topics[0].partitions[0]
    return int(p.error_code), p.offset


def add_acl(c: RawClient, rtype: int, name: str, principal: str, op: int, perm: int = ALLOW,
            pattern: int = LITERAL) -> None:
    r = c.request(CREATE_ACLS, 3, {"creations": [{
        "resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern, "principal": principal,
        "host": "*", "operation": op, "permission_type": perm}]})
    assert [int(x.error_code) for x in r.results] == [0], r


def test_everything_refused_without_acls(make_broker):
    """No ACLs, allow.everyone.if.no.acl.found=false, no super users: each API answers Kafka's refusal, and no
    topic, group or transaction state comes into being."""
    b = _broker(make_broker)
    with RawClient(b.bootstrap) as c:
        assert produce(c, "t") == TOPIC_DENIED                       # refused before the topic is even looked up
        assert fetch_error(c, "t") == TOPIC_DENIED
        assert list_offsets(c, "t")[0] == TOPIC_DENIED
        md = c.metadata(["t"])                                       # named: refused, and not auto-created
        assert [(t.name, int(t.error_code)) for t in md.topics] == [("t", TOPIC_DENIED)]
        assert c.metadata(None).topics == ()                         # all topics: the undescribable left out
        assert int(c.create_topic("t").error_code) == TOPIC_DENIED
        r = c.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert int(r.coordinators[0].error_code) == GROUP_DENIED and r.coordinators[0].node_id == -1
        r = c.request(JOIN_GROUP, 9, {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000,
                                      "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                      "protocols": [{"name": "range", "metadata": b""}], "reason": None})
        assert int(r.error_code) == GROUP_DENIED
        r = c.request(OFFSET_COMMIT, 8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                         "group_instance_id": None, "topics": [
                                             {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                                           "committed_leader_epoch": -1,
                                                                           "committed_metadata": ""}]}]})
        assert int(r.topics[0].partitions[0].error_code) == GROUP_DENIED
        r = c.request(DESCRIBE_GROUPS, 5, {"groups": ["g"], "include_authorized_operations": True})
        assert int(r.groups[0].error_code) == GROUP_DENIED
        r = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                            "producer_id": -1, "producer_epoch": -1})
        assert int(r.error_code) == CLUSTER_DENIED                  # neither IDEMPOTENT_WRITE nor WRITE on a topic
        r = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout": 60000,
                                            "producer_id": -1, "producer_epoch": -1})
        assert int(r.error_code) == TXN_DENIED
        r = c.request(DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 4, "resource_name": "1",
                                                           "configuration_keys": None}],
                                            "include_synonyms": False, "include_documentation": False})
        assert int(r.results[0].error_code) == CLUSTER_DENIED
        r = c.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert r.cluster_authorized_operations == 0                 # KIP-700: no DESCRIBE on the cluster
        r = c.request(CREATE_ACLS, 3, {"creations": [{
            "resource_type": TOPIC, "resource_name": "t", "resource_pattern_type": LITERAL,
            "principal": "User:ANONYMOUS", "host": "*", "operation": WRITE, "permission_type": ALLOW}]})
        assert int(r.results[0].error_code) == CLUSTER_DENIED       # ALTER on the cluster needed
        _every_api_refuses(c)
    logs = b.data_dir / "logs"          # (__consumer_offsets is the broker's own, created at start)
    assert not any(p.name.startswith(("t-", "__transaction_state")) for p in logs.iterdir())
    assert "Traceback" not in b.log_text()


# APIs that answer a principal with no rights without an authorization error: the handshake ones, and those that
# filter what they list (ListGroups, ListTransactions) or report the rights (DescribeCluster)
_NO_REFUSAL = {17, 18, 36, 16, 66, 60}
_NOWHERE_TO_SAY = {(35, 1), (35, 2)}        # DescribeLogDirs before v3 has no error code: an empty answer
_SAMPLE = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "bool": False, "string": "t", "bytes": b"",
           "records": None, "uuid": uuid.UUID(int=0), "timedelta_i32": 0, "timedelta_i64": 0, "float64": 1.0}
_FIELDS = {"acks": -1, "resource_type": 2, "transactional_id": "t", "key_type": 0, "election_type": 0,
           "forgotten_topics_data": []}


def _sample(schema) -> dict:
    """A request with every field filled (one element per array, topic/group/id names "t"), to drive each
    handler's authorization path."""
    from dataclasses import fields
    from kio.serial._introspect import PrimitiveTupleField, classify_field
    from protocol.kio_codec import _field_plan
    out = {}
    for f, (name, kind, nested, is_array, *_) in zip(fields(schema), _field_plan(schema)):
        if name in _FIELDS:
            out[name] = _FIELDS[name]
            continue
        value = _sample(nested) if nested is not None else _SAMPLE.get(kind)
        out[name] = [value] if is_array or isinstance(classify_field(f), PrimitiveTupleField) else value
    return out


def _every_api_refuses(c: RawClient, refused: bool = True) -> None:
    """Every API the broker serves, at every version it decodes, with a request naming resources it has no right
    to: answered with Kafka's authorization error codes somewhere in the response (none for the APIs that filter)."""
    from broker.handlers import load_handlers
    from protocol.kio_codec import error_counts, request_schema, response_schema
    refusals = {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED}
    for key, mod in sorted(load_handlers().items()):
        if key > 1000:                  # Strata's own APIs (DescribeWalPointers): no kio schema
            continue
        for v in range(max(mod.VERSIONS[0], mod.DECODABLE[0]), mod.VERSIONS[1] + 1):
            try:
                schema = request_schema(key, v)
            except Exception:           # a version kio has no schema for (Produce v0-2)
                continue
            r = c.request(key, v, _sample(schema))
            codes = set(error_counts(response_schema(key, v), r))
            if not refused or key in _NO_REFUSAL or (key, v) in _NOWHERE_TO_SAY:
                assert not codes & refusals, (mod.__name__, v, codes)
            else:
                assert codes & refusals, (mod.__name__, v, codes)


def test_acls_open_and_close_topics(make_broker):
    """allow.everyone.if.no.acl.found=true: a resource is open while no ACL names it; an ACL for someone else closes
    it; ALLOW (literal or prefixed) grants with its implied DESCRIBE; DENY wins over ALLOW."""
    b = _broker(make_broker, **{"allow.everyone.if.no.acl.found": "true"})
    with RawClient(b.bootstrap) as c:
        for t in ("open", "secret"):
            assert int(c.create_topic(t).error_code) == 0
            assert produce(c, t) == 0
        add_acl(c, TOPIC, "secret", "User:alice", READ)            # an ACL of someone else closes "secret"
        assert produce(c, "secret") == TOPIC_DENIED
        assert fetch_error(c, "secret") == TOPIC_DENIED
        assert list_offsets(c, "secret") == (TOPIC_DENIED, -1)
        assert produce(c, "open") == 0 and fetch_error(c, "open") == 0
        assert {t.name for t in c.metadata(None).topics} == {"open", "__consumer_offsets"}   # no ACLs: open

        add_acl(c, TOPIC, "sec", "User:ANONYMOUS", WRITE, pattern=PREFIXED)
        assert produce(c, "secret") == 0
        assert list_offsets(c, "secret") == (0, 2)                  # WRITE implies DESCRIBE; the refused one absent
        assert fetch_error(c, "secret") == TOPIC_DENIED             # but not READ
        r = c.request(METADATA, 12, {"topics": [{"name": "secret", "topic_id": uuid.UUID(int=0)}],
                                     "allow_auto_topic_creation": False, "include_topic_authorized_operations": True})
        assert int(r.topics[0].error_code) == 0
        assert r.topics[0].topic_authorized_operations == (1 << WRITE) | (1 << DESCRIBE)

        add_acl(c, TOPIC, "secret", "User:*", WRITE, perm=DENY)     # DENY wins over the prefixed ALLOW
        assert produce(c, "secret") == TOPIC_DENIED
        assert list_offsets(c, "secret") == (0, 2)                  # a DENY of WRITE does not deny DESCRIBE
        # an unknown topic with no ACLs is open: auto-created through Metadata
        md = c.metadata(["fresh"])
        assert int(md.topics[0].error_code) in (0, 5)               # created (LEADER_NOT_AVAILABLE at first)


def test_super_users_bypass_acls(make_broker):
    """super.users=User:ANONYMOUS: allowed whatever the ACLs say, DENY included."""
    b = _broker(make_broker, **{"super.users": "User:ANONYMOUS"})
    with RawClient(b.bootstrap) as c:
        assert int(c.create_topic("t").error_code) == 0
        add_acl(c, TOPIC, "t", "User:ANONYMOUS", WRITE, perm=DENY)
        add_acl(c, TOPIC, "*", "User:*", READ, perm=DENY)
        assert produce(c, "t") == 0
        assert fetch_error(c, "t") == 0
        r = c.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert r.cluster_authorized_operations == sum(1 << op for op in (5, 9, 10, 11, 12, 7, 8))
        _every_api_refuses(c, refused=False)            # and every API's allowed path answers without refusals
    assert "Traceback" not in b.log_text()


def test_unknown_authorizer_fails_start(tmp_path):
    from tests.conftest import BrokerProcess
    b = BrokerProcess(tmp_path / "b", {"authorizer.class.name": "com.example.Custom"})
    with pytest.raises(RuntimeError, match="com.example.Custom"):
        b.start(timeout=20)
    assert "strata: bad configuration: authorizer.class.name='com.example.Custom' is not supported" in b.log_text()
    assert "Traceback" not in b.log_text()


def test_sasl_principals_with_kafka_python(tmp_path):
    """Real principals over SASL_PLAINTEXT (PLAIN): alice, granted WRITE and READ on the topic and READ on her group,
    produces and consumes with kafka-python; bob, with no ACLs, is refused TOPIC_AUTHORIZATION_FAILED. The ACLs are
    created over PLAINTEXT by User:ANONYMOUS, the super user."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError
    from tests.conftest import BrokerProcess, free_port
    sasl_port = free_port()
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a" '
            'user_admin="a" user_alice="alice-pw" user_bob="bob-pw";')
    b = BrokerProcess(tmp_path / "b", {"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS",
                                       "group.initial.rebalance.delay.ms": "0",
                                       "sasl.enabled.mechanisms": "PLAIN",
                                       "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    b.start()
    try:
        with RawClient(b.bootstrap) as c:
            assert int(c.create_topic("orders").error_code) == 0
            for op in (WRITE, READ):
                add_acl(c, TOPIC, "orders", "User:alice", op)
            add_acl(c, GROUP, "billing", "User:alice", READ)

        def conf(user: str) -> dict:
            return {"bootstrap_servers": f"127.0.0.1:{sasl_port}", "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "PLAIN", "sasl_plain_username": user, "sasl_plain_password": f"{user}-pw"}

        p = KafkaProducer(acks="all", **conf("alice"))
        for i in range(3):
            p.send("orders", f"m{i}".encode()).get(timeout=30)
        p.close()
        consumer = KafkaConsumer("orders", group_id="billing", auto_offset_reset="earliest", **conf("alice"))
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.value for batch in consumer.poll(timeout_ms=500).values() for m in batch]
        assert got == [b"m0", b"m1", b"m2"]
        consumer.commit()
        consumer.close()

        p = KafkaProducer(acks="all", max_block_ms=10000, **conf("bob"))
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("orders", b"no").get(timeout=30)
        p.close()
    finally:
        rc = b.stop()
    assert rc == 0 and "Traceback" not in b.log_text(), b.log_text()[-3000:]
