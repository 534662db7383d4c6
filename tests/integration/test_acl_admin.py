"""ACL and SCRAM-credential administration end to end, as operators do it: confluent-kafka's AdminClient
(create_acls / describe_acls / delete_acls, describe_user_scram_credentials), `strata acls` (kafka-acls.sh) and
`strata configs --entity-type users` (kafka-configs.sh) against a broker with Kafka's StandardAuthorizer configured;
and a broker without an authorizer answering the ACL APIs with SECURITY_DISABLED, as Kafka does."""
from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType, ScramMechanism)

from tests.integration.helpers import admin_client

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true"}
ANY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)
T = 15


def strata(*argv: str) -> str:
    """`strata <argv>` in this process; its output (AdminError fails the test with the tool's message)."""
    from tools.cli import main
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(list(argv))
    assert rc == 0, out.getvalue()
    return out.getvalue()


def binding(restype, name, principal, op, ptype=ResourcePatternType.LITERAL, perm=AclPermissionType.ALLOW):
    return AclBinding(restype, name, ptype, principal, "*", op, perm)


def described(admin, f=ANY) -> set[tuple]:
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.operation, b.permission_type)
            for b in admin.describe_acls(f).result(timeout=T)}


def test_acls_and_scram_credentials(make_broker):
    b = make_broker(AUTHORIZER)
    admin = admin_client(b.bootstrap)          # kept until every future has resolved
    read = binding(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ)
    prefixed = binding(ResourceType.TOPIC, "ord", "User:bob", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    group = binding(ResourceType.GROUP, "g1", "User:alice", AclOperation.READ)
    bad = binding(ResourceType.BROKER, "my-cluster", "User:alice", AclOperation.ALTER)   # 4: CLUSTER in Kafka
    futures = admin.create_acls([read, prefixed, group, bad])
    for acl in (read, prefixed, group):
        futures[acl].result(timeout=T)
    with pytest.raises(KafkaException, match="The only valid name for the CLUSTER resource is kafka-cluster"):
        futures[bad].result(timeout=T)
    assert len(described(admin)) == 3
    match = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    assert {(name, principal) for _, name, _, principal, _, _ in described(admin, match)} == \
        {("orders", "User:alice"), ("ord", "User:bob")}

    # kafka-acls.sh: --producer expands to WRITE, DESCRIBE and CREATE on the topic; --list; --remove --force
    out = strata("acls", "--bootstrap-server", b.bootstrap, "--add", "--allow-principal", "User:carol",
                 "--producer", "--topic", "payments")
    assert out.startswith("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=payments, "
                          "patternType=LITERAL)`: \n \t(principal=User:carol, host=*, operation=")
    out = strata("acls", "--bootstrap-server", b.bootstrap, "--list", "--topic", "payments")
    assert out.count("principal=User:carol") == 3 and "operation=CREATE" in out and "operation=WRITE" in out
    out = strata("acls", "--bootstrap-server", b.bootstrap, "--list", "--topic", "orders",
                 "--resource-pattern-type", "match")
    assert "name=orders, patternType=LITERAL" in out and "name=ord, patternType=PREFIXED" in out
    strata("acls", "--bootstrap-server", b.bootstrap, "--remove", "--force", "--topic", "payments")
    assert not any(name == "payments" for _, name, *_ in described(admin))

    by_bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
                              AclPermissionType.ANY)
    deleted = admin.delete_acls([by_bob])[by_bob].result(timeout=T)
    assert [(d.name, d.principal) for d in deleted] == [("ord", "User:bob")]
    assert len(described(admin)) == 2

    # kafka-configs.sh for users: SCRAM credentials salted by the tool, described through librdkafka and the tool
    users = ["--bootstrap-server", b.bootstrap, "--entity-type", "users", "--entity-name", "alice"]
    out = strata("configs", *users, "--alter", "--add-config",
                 "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]")
    assert out == "Completed updating config for user alice.\n"
    desc = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=T)
    assert sorted((c.mechanism, c.iterations) for c in desc.scram_credential_infos) == \
        [(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    assert strata("configs", *users, "--describe") == \
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, " \
        "SCRAM-SHA-512=iterations=4096\n"
    strata("configs", *users, "--alter", "--delete-config", "SCRAM-SHA-512")
    everyone = admin.describe_user_scram_credentials().result(timeout=T)
    assert [(c.mechanism, c.iterations) for c in everyone["alice"].scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_256, 8192)]
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=T)


def test_no_authorizer_answers_security_disabled(broker):
    admin = admin_client(broker.bootstrap)
    acl = binding(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ)
    with pytest.raises(KafkaException) as e:
        admin.create_acls([acl])[acl].result(timeout=T)
    assert e.value.args[0].code() == 54 and "No Authorizer is configured" in e.value.args[0].str()
    # librdkafka's describe_acls drops DescribeAcls' top-level error (an empty list); kafka-acls.sh reports it
    from tools.cli import main
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert main(["acls", "--bootstrap-server", broker.bootstrap, "--list"]) == 1
    assert "No Authorizer is configured on the broker" in err.getvalue()
    with pytest.raises(KafkaException) as e:
        admin.delete_acls([ANY])[ANY].result(timeout=T)
    assert e.value.args[0].code() == 54
