"""Kafka 4.1.1's Java clients and tools against Strata's secured listeners, with Kafka's StandardAuthorizer on.

One broker: PLAINTEXT (set-up; its ANONYMOUS principal is a super user, as brokers' own principal must be),
SASL_SSL (SCRAM-SHA-512 and OAUTHBEARER with Kafka's unsecured JWS validator), SSL with client certificates
required (mTLS, the subject mapped to `alice` by ssl.principal.mapping.rules) and REAUTH, a second SASL_SSL listener
with `listener.name.reauth.connections.max.reauth.ms=3000` (KIP-368). PEM stores on both sides: the Java client reads
the CA with ssl.truststore.type=PEM and its own key and chain with ssl.keystore.type=PEM. Every way in is the
principal User:alice, whose ACLs (ALL on the topics and groups prefixed `jsec-`) are all it may do.

- tests/kafka/java/SecurityCheck.java runs every client check in one JVM (their threads at once), each from a
  client properties file as a Kafka user writes one: the AdminClient, the idempotent producer and classic and
  KIP-848 consumer groups over SCRAM-SHA-512, mTLS and OAUTHBEARER, and a producer with a group member reading
  along for 8 s across re-authentications.
- Kafka's own kafka-configs.sh (SCRAM users) and kafka-acls.sh (add, list, remove) over SASL_SSL as User:admin (a
  super user) with --command-config, their output checked against what Apache Kafka 4.1.1 prints for the same
  commands; what they set is then used by confluent-kafka clients logging in as the new users."""
from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from tests import apache_kafka as ak
from tests.conftest import BrokerProcess, free_port
from tests.integration.test_security import _create_scram_user
from tests.kafka.kafka_tools import CONFIGS
from tests.security_certs import CertificateAuthority

# slow: seven JVM starts (~35 s); the Java clients over PLAINTEXT run in the normal suite
pytestmark = [pytest.mark.usefixtures("kafka_jars"), pytest.mark.slow]

ACLS = "org.apache.kafka.tools.AclCommand"                  # kafka-acls.sh (4.0+)
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN_PW, ALICE_PW, BOB_PW, CAROL_PW = "admin-Secret-1", "alice-Secret-1", "bob-Secret-1", "carol-Secret-1"
KEY_PW, ALICE_KEY_PW = "broker-key-pw", "alice-key-pw"
REAUTH_MS, REAUTH_SECONDS = 3000, 8
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="alice";')
LISTENERS = ("SASL_SSL", "SSL", "REAUTH")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("java-pki"))
    alice = ca.issue("alice", password=ALICE_KEY_PW, CN="alice", OU="eng", O="Strata")
    # Java 17 cannot decrypt a PBES2 (PKCS#5 v2) key, which is what `cryptography` writes: Kafka's PEM keystore asks
    # for a SecretKeyFactory named after the key's algorithm ("PBES2 SecretKeyFactory not available"). The same key
    # re-encrypted with PKCS#12's PBE-SHA1-3DES, which it can read.
    key = subprocess.run(["openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", str(alice.key), "-passin",
                          f"pass:{ALICE_KEY_PW}", "-passout", f"pass:{ALICE_KEY_PW}"],
                         check=True, capture_output=True).stdout
    assert key.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    alice.keystore.write_bytes(key + alice.cert.read_bytes() + ca.ca_file.read_bytes())
    return ca, ca.issue("broker", password=KEY_PW, CN="localhost", OU="brokers", O="Strata"), alice


@pytest.fixture(scope="module")
def secured(tmp_path_factory, pki):
    ca, broker_pem, _ = pki
    ports = {name: free_port() for name in LISTENERS}
    b = BrokerProcess(tmp_path_factory.mktemp("java-secure-broker"), {
        "listeners": None,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,REAUTH:SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem.keystore), "ssl.key.password": KEY_PW,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "authorizer.class.name": AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": "0",
    })
    b.overrides["listeners"] = ",".join([f"PLAINTEXT://127.0.0.1:{b.port}"] +
                                        [f"{n}://127.0.0.1:{p}" for n, p in ports.items()])
    b.ports = ports
    b.start()
    _create_scram_user(b.bootstrap, "admin", ADMIN_PW)
    _create_scram_user(b.bootstrap, "alice", ALICE_PW)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    acls = [AclBinding(rt, "jsec-", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.ALL,
                       AclPermissionType.ALLOW) for rt in (ResourceType.TOPIC, ResourceType.GROUP)]
    for f in admin.create_acls(acls).values():
        f.result(timeout=30)
    yield b
    rc = b.stop()
    log = b.log_text()
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log, log[log.index("Traceback") - 300:][:5000]
    for secret in (ADMIN_PW, ALICE_PW, BOB_PW, CAROL_PW, KEY_PW, ALICE_KEY_PW):
        assert secret not in log, f"{secret!r} appears in the broker's log"


def properties(path, entries: dict[str, str]):
    path.write_text("".join(f"{k}={v}\n" for k, v in entries.items()))
    return path


def client_properties(b, pki, tmp, mode: str):
    """A Java client properties file: bootstrap.servers and the security settings of `mode`."""
    ca, _, alice = pki
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file)}
    scram = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": SCRAM_JAAS.format("alice", ALICE_PW), **trust}
    entries = {
        "scram": {"bootstrap.servers": f"127.0.0.1:{b.ports['SASL_SSL']}", **scram},
        "mtls": {"bootstrap.servers": f"127.0.0.1:{b.ports['SSL']}", "security.protocol": "SSL",
                 "ssl.keystore.type": "PEM", "ssl.keystore.location": str(alice.keystore),
                 "ssl.key.password": ALICE_KEY_PW, **trust},
        "oauthbearer": {"bootstrap.servers": f"127.0.0.1:{b.ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": OAUTH_JAAS, **trust},
        "reauth": {"bootstrap.servers": f"127.0.0.1:{b.ports['REAUTH']}", **scram},
    }[mode]
    return properties(tmp / f"{mode}.properties", entries)


@pytest.fixture(scope="module")
def checks(secured, pki, tmp_path_factory) -> dict[str, dict]:
    """SecurityCheck's JSON line of each check, all run by one JVM."""
    tmp = tmp_path_factory.mktemp("java-security-checks")
    run_id = uuid.uuid4().hex[:6]
    specs = [f"roundtrip,{m},{client_properties(secured, pki, tmp, m)},jsec-{m}-{run_id}"
             for m in ("scram", "mtls", "oauthbearer")]
    specs.append(f"reauth,reauth,{client_properties(secured, pki, tmp, 'reauth')},jsec-reauth-{run_id},"
                 f"{REAUTH_SECONDS}")
    p = ak.run("SecurityCheck.java", *specs, timeout=420, check=False)
    (tmp / "SecurityCheck.out").write_text(p.stdout + "\n--- stderr\n" + p.stderr)
    assert p.returncode == 0, f"SecurityCheck exited {p.returncode}\n{p.stdout[-4000:]}\n--- stderr\n{p.stderr[-4000:]}"
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return {d["check"]: d for d in lines}


def check(checks, name: str) -> dict:
    d = checks[name]
    assert "error" not in d, d["error"]
    return d


# ---- the producer, consumer groups and AdminClient -------------------------------------------------------------------

@pytest.mark.parametrize("mode, listener", [("scram", "SASL_SSL"), ("mtls", "SSL"), ("oauthbearer", "SASL_SSL")])
def test_producer_consumer_groups_and_admin(checks, secured, mode, listener):
    """SCRAM-SHA-512 over SASL_SSL, mutual TLS, OAUTHBEARER (unsecured JWS): the principal is User:alice each way,
    so alice's prefixed ACLs let her do all of it, and nothing else."""
    d = check(checks, mode)
    # the endpoint of the listener the client came in on
    assert d["nodes"] == [f"1@127.0.0.1:{secured.ports[listener]}"], d
    assert (d["create"], d["described_partitions"], d["retention_ms"], d["listed"]) == ("ok", 3, "7200000", True), d
    assert d["acked"] == 300 and d["produce_errors"] == [], d
    for protocol in ("classic", "consumer"):
        g = d["groups"][protocol]
        assert (g["distinct_read"], g["bad"], g["assignment"]) == (300, [], 3), (protocol, g)
        assert g["state_after_close"] == "Empty", (protocol, g)
        assert d["committed_offsets_sum"][protocol] == 300, d
    assert d["delete"] == "ok", d
    # what the authorizer refuses alice: a topic outside her prefix, and the cluster's ACLs
    assert d["forbidden_produce"] == "TopicAuthorizationException", d
    assert d["describe_acls"] == "ClusterAuthorizationException", d


def test_producer_and_consumer_across_reauthentications(checks, secured):
    """KIP-368 with a 3 s session on the REAUTH listener: the producer (one record every 10 ms) and a group member
    reading along re-authenticate every ~2.7 s for 8 s; nothing fails and the broker closes no expired session."""
    d = check(checks, "reauth")
    assert d["produced_for_ms"] >= REAUTH_SECONDS * 1000
    assert d["produce_errors"] == [] and d["consumer_errors"] == [], d
    assert d["sent"] >= 100 and d["acked"] == d["sent"] == d["distinct_read"], d
    for side in ("producer_metrics", "consumer_metrics"):
        m = d[side]
        assert m["successful-reauthentication-total"] >= 2, (side, m)
        assert m["failed-reauthentication-total"] == 0 and m["failed-authentication-total"] == 0, (side, m)
        assert m["connection-close-total"] == 0, (side, m)          # every connection lived through its sessions
    assert "SASL session of" not in secured.log_text()      # "... expired (connections.max.reauth.ms ...)"


# ---- Kafka's tools over SASL_SSL -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def admin_config(secured, pki, tmp_path_factory):
    """kafka-*.sh --command-config for User:admin (a super user) over SASL_SSL with SCRAM-SHA-512."""
    ca, _, _ = pki
    return properties(tmp_path_factory.mktemp("admin-config") / "admin.properties", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM_JAAS.format("admin", ADMIN_PW),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file)})


def tool(secured, config, main: str, *args: str):
    return ak.run(main, "--bootstrap-server", f"127.0.0.1:{secured.ports['SASL_SSL']}", "--command-config",
                  str(config), *args, check=False, timeout=180)


def sasl_ssl_conf(secured, pki, user: str, password: str) -> dict:
    ca, _, _ = pki
    return {"bootstrap.servers": f"127.0.0.1:{secured.ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(ca.ca_file)}


def produce_one(conf: dict, topic: str):
    """The error code producing one record ends with (None: written)."""
    errors, auth_errors = [], []
    p = Producer({**conf, "message.timeout.ms": 15000,
                  "error_cb": lambda e: e.code() == KafkaError._AUTHENTICATION and auth_errors.append(e)})
    p.produce(topic, b"x", on_delivery=lambda e, m: errors.append(e))
    deadline = time.monotonic() + 20
    while not errors and not auth_errors and time.monotonic() < deadline:
        p.poll(0.2)
    if auth_errors:
        return KafkaError._AUTHENTICATION
    assert errors, "no delivery report"
    return None if errors[0] is None else errors[0].code()


def test_kafka_configs_adds_a_scram_user(secured, pki, admin_config):
    """kafka-configs.sh --alter --entity-type users --add-config 'SCRAM-SHA-512=[...]': the new user logs in with
    that password, and only with it."""
    alter = tool(secured, admin_config, CONFIGS, "--alter", "--entity-type", "users", "--entity-name", "bob",
                 "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={BOB_PW}]")
    assert (alter.returncode, alter.stdout) == (0, "Completed updating config for user bob.\n"), alter.stderr
    admin = AdminClient(sasl_ssl_conf(secured, pki, "bob", BOB_PW))
    assert admin.list_topics(timeout=30).brokers       # authenticated (bob may describe no topic)
    assert produce_one(sasl_ssl_conf(secured, pki, "bob", "wrong"), "jsec-never") == KafkaError._AUTHENTICATION


def test_kafka_configs_describes_scram_users(secured, admin_config):
    """kafka-configs.sh --describe --entity-type users --entity-name dave, as Apache Kafka 4.1.1 prints it."""
    _create_scram_user(secured.bootstrap, "dave", "dave-Secret-1")          # SCRAM-SHA-256 and -512, 4096 iterations
    described = tool(secured, admin_config, CONFIGS, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert (described.returncode, described.stdout) == (
        0, "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-256=iterations=4096, "
           "SCRAM-SHA-512=iterations=4096\n"), described.stderr


def acl_output(text: str) -> tuple[str, list[str]]:
    """AclCommand's output for one resource: its header line and its entry lines, sorted. (`--add` puts a space
    before the first entry.)"""
    head, _, body = text.partition("\n")
    assert body.endswith("\n\n"), text
    return head, sorted(line.removeprefix(" ") for line in body[:-2].split("\n"))


def test_kafka_acls_add_list_remove(secured, pki, admin_config):
    """kafka-acls.sh --add / --list / --remove --force: carol may write to the topic exactly while the ACLs are
    there."""
    topic = f"tools-acl-{uuid.uuid4().hex[:8]}"
    plain = AdminClient({"bootstrap.servers": secured.bootstrap})
    plain.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    _create_scram_user(secured.bootstrap, "carol", CAROL_PW)
    carol = sasl_ssl_conf(secured, pki, "carol", CAROL_PW)
    assert produce_one(carol, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # The tool's output as Apache Kafka 4.1.1 prints it (StandardAuthorizer, the same commands). AclCommand groups
    # the entries of a resource in a HashSet of AccessControlEntry, whose hash includes enums' identity hashes:
    # their order changes from one run of the tool to the next, on Kafka as here.
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    entries = ["\t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW)",
               "\t(principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW)"]
    add = tool(secured, admin_config, ACLS, "--add", "--allow-principal", "User:carol", "--operation", "Write",
               "--operation", "Describe", "--topic", topic)
    assert add.returncode == 0 and add.stdout.startswith(f"Adding ACLs for resource `{pattern}`: \n \t"), \
        add.stdout + add.stderr
    assert acl_output(add.stdout) == (f"Adding ACLs for resource `{pattern}`: ", entries), add.stdout
    listed = tool(secured, admin_config, ACLS, "--list", "--topic", topic)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert acl_output(listed.stdout) == (f"Current ACLs for resource `{pattern}`:", entries), listed.stdout
    assert produce_one(carol, topic) is None

    remove = tool(secured, admin_config, ACLS, "--remove", "--force", "--allow-principal", "User:carol",
                  "--operation", "Write", "--operation", "Describe", "--topic", topic)
    assert (remove.returncode, remove.stdout) == (0, ""), remove.stdout + remove.stderr
    left = plain.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(timeout=30)
    assert left == []
    assert produce_one(carol, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafka_tool_with_a_wrong_password_fails(secured, pki, admin_config, tmp_path):
    bad = properties(tmp_path / "bad.properties", {
        **dict(line.split("=", 1) for line in admin_config.read_text().splitlines()),
        "sasl.jaas.config": SCRAM_JAAS.format("admin", "wrong")})
    r = tool(secured, bad, ACLS, "--list")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Authentication failed during authentication due to invalid credentials with SASL mechanism " \
           "SCRAM-SHA-512" in r.stdout + r.stderr, r.stdout + r.stderr
