"""Listeners, TLS and SASL on a real broker process, with real clients (confluent-kafka, kafka-python, aiokafka):
SASL_SSL with SCRAM-SHA-512 and PLAIN, mutual TLS, OAUTHBEARER, re-authentication, and bad input before
authentication (docs/security.md)."""
from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from tests.conftest import free_port
from tests.integration.rawclient import RawClient, encode_body, encode_header, frame
from tests.security_certs import CertificateAuthority

ADMIN_PW, ALICE_PW = "admin-secret", "alice-secret"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              f'password="{ADMIN_PW}" user_admin="{ADMIN_PW}" user_alice="{ALICE_PW}";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("broker", password="broker-key-pw", CN="localhost", OU="brokers", O="Strata"), \
        ca.issue("alice", CN="alice", OU="eng", O="Strata")


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, pki):
    """PLAINTEXT (for set-up), SASL_SSL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), SSL with client certificates
    required, and SASL_PLAINTEXT, on one broker."""
    from tests.conftest import BrokerProcess
    ca, broker_pem, _ = pki
    ports = {name: free_port() for name in ("SASL_SSL", "SSL", "SASL_PLAINTEXT")}
    metrics_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("secure-broker"), {
        "listeners": None,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem.keystore),
        "ssl.key.password": "broker-key-pw",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.idle.ms": "3000",
        "metrics.port": str(metrics_port),
    })
    b.metrics_port = metrics_port
    b.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{ports['SASL_SSL']},"
                                f"SSL://127.0.0.1:{ports['SSL']},SASL_PLAINTEXT://127.0.0.1:{ports['SASL_PLAINTEXT']}")
    b.ports = ports
    b.start()
    _create_scram_user(b.bootstrap, "alice", ALICE_PW)
    yield b
    rc = b.stop()
    log = b.log_text()
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log, log[-5000:]
    for secret in (ADMIN_PW, ALICE_PW, "broker-key-pw"):
        assert secret not in log, f"{secret!r} appears in the broker's log"


def _create_scram_user(bootstrap: str, user: str, password: str) -> None:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096), password.encode())
               for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for fut in admin.alter_user_scram_credentials(upserts).values():
        fut.result(timeout=30)


def _client_conf(b, protocol: str, pki, **extra) -> dict:
    ca, _, alice = pki
    conf = {"bootstrap.servers": f"127.0.0.1:{b.ports[protocol]}", "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(ca.ca_file)
    return {**conf, **extra}


def _round_trip(conf: dict, n: int = 20) -> list[bytes]:
    """Produce n records (acks=all) and read them back with a consumer, both over `conf`."""
    from confluent_kafka import Consumer, Producer
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    p = Producer({**conf, "acks": "all"})
    errors = []
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, errors
    c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def test_scram_sha_512_over_sasl_ssl_with_confluent_kafka(secure_broker, pki):
    conf = _client_conf(secure_broker, "SASL_SSL", pki, **{"sasl.mechanism": "SCRAM-SHA-512",
                                                           "sasl.username": "alice", "sasl.password": ALICE_PW})
    assert _round_trip(conf) == [f"v{i}".encode() for i in range(20)]


def test_wrong_scram_password_is_refused(secure_broker, pki):
    from confluent_kafka import KafkaError, Producer
    errs = []
    p = Producer(_client_conf(secure_broker, "SASL_SSL", pki, **{
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "wrong",
        "error_cb": errs.append}))
    p.produce("never-written", b"x")
    deadline = time.monotonic() + 20
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errs) and time.monotonic() < deadline:
        p.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errs), errs
    assert "never-written" not in _topics(secure_broker)


def _topics(b) -> set[str]:
    with RawClient(b.bootstrap) as c:
        return {t.name for t in c.request(3, 1, {"topics": None}).topics}


def test_plain_over_sasl_plaintext_with_kafka_python(secure_broker):
    from kafka import KafkaConsumer, KafkaProducer
    conf = {"bootstrap_servers": f"127.0.0.1:{secure_broker.ports['SASL_PLAINTEXT']}",
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice", "sasl_plain_password": ALICE_PW}
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(acks="all", **conf)
    for i in range(5):
        p.send(topic, f"k{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    assert [m.value for m in c][:5] == [f"k{i}".encode() for i in range(5)]
    c.close()


async def test_scram_sha_512_over_sasl_ssl_with_aiokafka(secure_broker, pki):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    ca, _, _ = pki
    conf = {"bootstrap_servers": f"127.0.0.1:{secure_broker.ports['SASL_SSL']}", "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice", "sasl_plain_password": ALICE_PW,
            "ssl_context": create_ssl_context(cafile=str(ca.ca_file))}
    topic = f"aio-{uuid.uuid4().hex[:8]}"
    p = AIOKafkaProducer(acks="all", **conf)
    await p.start()
    try:
        for i in range(5):
            await p.send_and_wait(topic, f"a{i}".encode())
    finally:
        await p.stop()
    c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
    await c.start()
    try:
        got = []
        while len(got) < 5:
            batch = await c.getmany(timeout_ms=10000)
            assert batch, "no records within 10 s"
            got += [m.value for msgs in batch.values() for m in msgs]
        assert got == [f"a{i}".encode() for i in range(5)]
    finally:
        await c.stop()


def test_mutual_tls(secure_broker, pki):
    ca, _, alice = pki
    conf = _client_conf(secure_broker, "SSL", pki, **{"ssl.certificate.location": str(alice.cert),
                                                      "ssl.key.location": str(alice.key)})
    assert _round_trip(conf, 3) == [b"v0", b"v1", b"v2"]


def test_tls_without_client_certificate_is_refused(secure_broker, pki):
    import ssl
    ca, _, _ = pki
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    with socket.create_connection(("127.0.0.1", secure_broker.ports["SSL"]), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(frame(encode_header(18, 0, 1) + encode_body(18, 0, {})))
                if not tls.recv(4):                  # TLS 1.3 reports the refusal at the first read
                    raise ConnectionResetError("closed")


def test_oauthbearer_unsecured_jws_with_confluent_kafka(secure_broker, pki):
    conf = _client_conf(secure_broker, "SASL_SSL", pki, **{
        "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice"})
    assert _round_trip(conf, 3) == [b"v0", b"v1", b"v2"]


# ---- bad input before authentication ---------------------------------------------------------------------------------

def _sasl_client(b) -> RawClient:
    return RawClient(f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}")


def test_request_before_authentication_closes_the_connection(secure_broker):
    with _sasl_client(secure_broker) as c:
        assert c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
        c.send(3, 1, {"topics": None})
        assert c.wait_closed()


def test_garbage_before_handshake_closes_the_connection(secure_broker):
    with _sasl_client(secure_broker) as c:
        c.send_bytes(struct.pack(">i", 12) + b"\xff" * 12)
        assert c.wait_closed()
    with _sasl_client(secure_broker) as c:
        c.send_bytes(struct.pack(">i", 600_000))     # above sasl.server.max.receive.size (524288)
        assert c.wait_closed()


def test_unknown_mechanism_is_answered_then_closed(secure_broker):
    with _sasl_client(secure_broker) as c:
        resp = c.request(17, 1, {"mechanism": "GSSAPI"})
        assert resp.error_code == 33                 # UNSUPPORTED_SASL_MECHANISM
        assert set(resp.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}
        assert c.wait_closed()


def test_wrong_plain_password_answers_sasl_authentication_failed(secure_broker):
    with _sasl_client(secure_broker) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        resp = c.request(36, 2, {"auth_bytes": b"\0alice\0wrong"})
        assert resp.error_code == 58 and "Invalid username or password" in resp.error_message
        assert c.wait_closed()


def test_truncated_scram_exchange_is_refused(secure_broker):
    with _sasl_client(secure_broker) as c:
        assert c.request(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
        first = c.request(36, 2, {"auth_bytes": b"n,,n=alice,r=abcdefgh"})
        assert first.error_code == 0 and first.auth_bytes.startswith(b"r=abcdefgh")
        resp = c.request(36, 2, {"auth_bytes": b"c=biws,r=abc"})            # no proof, wrong nonce
        assert resp.error_code == 58
        assert c.wait_closed()


def test_handshake_v0_raw_tokens(secure_broker):
    """SaslHandshake v0: the PLAIN token follows as a bare frame, answered by a bare (empty) frame."""
    with _sasl_client(secure_broker) as c:
        assert c.request(17, 0, {"mechanism": "PLAIN"}).error_code == 0
        c.send_bytes(frame(b"\0alice\0" + ALICE_PW.encode()))
        c._fill(4, None)
        assert bytes(c._buf[:4]) == b"\0\0\0\0"           # an empty challenge: authenticated
        del c._buf[:4]
        assert c.request(3, 1, {"topics": []}).brokers


def test_client_that_never_authenticates_is_closed_when_idle(secure_broker):
    with _sasl_client(secure_broker) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        assert c.wait_closed(timeout=10)                 # connections.max.idle.ms=3000 here


def test_sasl_requests_on_a_plaintext_listener_answer_illegal_sasl_state(secure_broker):
    with RawClient(secure_broker.bootstrap) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 34
        assert c.request(36, 2, {"auth_bytes": b"\0a\0b"}).error_code == 34


def test_metadata_answers_the_endpoints_of_the_listener_asked(secure_broker, pki):
    with RawClient(secure_broker.bootstrap) as c:
        plain = c.request(3, 9, {"topics": [], "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
    assert [(b.host, b.port) for b in plain.brokers] == [("127.0.0.1", secure_broker.port)]
    with _sasl_client(secure_broker) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        assert c.request(36, 2, {"auth_bytes": b"\0alice\0" + ALICE_PW.encode()}).error_code == 0
        resp = c.request(3, 9, {"topics": [], "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
    assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", secure_broker.ports["SASL_PLAINTEXT"])]


def test_reauthentication(tmp_path):
    """KIP-368: with connections.max.reauth.ms the broker answers the session lifetime; a client that re-
    authenticates in time keeps its connection, one that does not is closed at its next request."""
    from tests.conftest import BrokerProcess
    port = free_port()
    b = BrokerProcess(tmp_path / "reauth", {"sasl.enabled.mechanisms": "PLAIN",
                                            "connections.max.reauth.ms": "1500",
                                            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{port}"
    b.start()
    try:
        token = b"\0alice\0" + ALICE_PW.encode()
        with RawClient(f"127.0.0.1:{port}") as c:
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            resp = c.request(36, 2, {"auth_bytes": token})
            assert resp.error_code == 0 and 0 < resp.session_lifetime.total_seconds() <= 1.5
            time.sleep(1.0)
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0        # re-authenticate in time
            assert c.request(36, 2, {"auth_bytes": token}).error_code == 0
            time.sleep(1.0)
            assert c.request(3, 1, {"topics": []}).brokers                           # still in the new session
            time.sleep(1.6)
            c.send(3, 1, {"topics": []})
            assert c.wait_closed()
        with RawClient(f"127.0.0.1:{port}") as c:                                   # the principal may not change
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            assert c.request(36, 2, {"auth_bytes": token}).error_code == 0
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            resp = c.request(36, 2, {"auth_bytes": b"\0admin\0" + ADMIN_PW.encode()})
            assert resp.error_code == 58
            assert c.wait_closed()
    finally:
        assert b.stop() == 0
    assert "Traceback" not in b.log_text()


def test_admin_cli_and_perf_with_command_config(secure_broker, pki, tmp_path, capsys):
    """`strata topics` and `strata perf` over SASL_SSL with SCRAM-SHA-512, from Kafka's client properties."""
    from tools.cli import main
    ca, _, _ = pki
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                     f'    username="alice" password="{ALICE_PW}";\n'
                     f"ssl.truststore.type=PEM\nssl.truststore.location={ca.ca_file}\n")
    server = f"127.0.0.1:{secure_broker.ports['SASL_SSL']}"
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    assert main(["topics", "--bootstrap-server", server, "--command-config", str(props), "--create", "--topic",
                 topic, "--partitions", "2"]) == 0
    assert main(["topics", "--bootstrap-server", server, "--command-config", str(props), "--list"]) == 0
    assert topic in capsys.readouterr().out.split()
    assert main(["perf", "produce", "--bootstrap-server", server, "--command-config", str(props), "--topic", topic,
                 "--num-records", "200", "--record-size", "100", "--throughput", "-1"]) == 0
    assert "200 records sent" in capsys.readouterr().out
    assert main(["check", "--bootstrap", server, "--command-config", str(props)]) == 0     # the health check
    bad = tmp_path / "bad.properties"
    bad.write_text(props.read_text().replace(ALICE_PW, "wrong"))
    assert main(["topics", "--bootstrap-server", server, "--command-config", str(bad), "--list"]) == 1
    assert "Authentication failed" in capsys.readouterr().err
    assert main(["check", "--bootstrap", server, "--command-config", str(bad)]) == 1


def test_secrets_are_not_shown(secure_broker, pki, capsys):
    """Sensitive settings are answered as Kafka answers PASSWORD configs (value null, is_sensitive) by
    DescribeConfigs, hidden by `--print-config`, and absent from the metrics."""
    import urllib.request
    from broker.cli import main as server_main
    with RawClient(secure_broker.bootstrap) as c:
        resp = c.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                                 "include_synonyms": True, "include_documentation": False})
    entries = {e.name: e for e in resp.results[0].configs}
    for name in ("listener.name.sasl_ssl.plain.sasl.jaas.config", "ssl.key.password"):
        assert entries[name].value is None and entries[name].is_sensitive, name
        assert all(s.value is None for s in entries[name].synonyms), name
    assert entries["ssl.keystore.type"].value == "PEM" and not entries["ssl.keystore.type"].is_sensitive
    assert server_main(["broker", "--print-config", "--override", f"sasl.jaas.config={PLAIN_JAAS}",
                        "--override", "ssl.key.password=broker-key-pw"]) == 0
    printed = capsys.readouterr().out
    assert "sasl.jaas.config=[hidden]" in printed and ADMIN_PW not in printed and "broker-key-pw" not in printed
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{secure_broker.metrics_port}/metrics", timeout=10).read()
    assert ADMIN_PW.encode() not in metrics and b"broker-key-pw" not in metrics


@pytest.mark.parametrize("overrides, message", [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "GSSAPI is not supported"),
    ({"listeners": "SSL://127.0.0.1:0"}, "an SSL listener needs a keystore"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent.jks"}, "reads PEM stores only"),
    ({"listeners": "CLIENT://127.0.0.1:0"}, "not in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "INTERNAL"}, "not one of the listeners"),
    ({"authorizer.class.name": "com.example.Authorizer"}, "com.example.Authorizer"),
])
def test_bad_security_settings_fail_at_start_with_one_line(overrides, message, tmp_path, capsys):
    from broker.cli import main as server_main
    argv = ["broker", "--override", f"log.dirs={tmp_path}"]
    for k, v in overrides.items():
        argv += ["--override", f"{k}={v}"]
    assert server_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("strata: bad configuration:") and message in err, err


def test_envelope_only_on_the_inter_broker_listener(secure_broker):
    """Kafka's handleEnvelope: a client on another listener cannot wrap requests with a principal of its choosing."""
    from broker.handlers.envelope import serialize_principal
    inner = encode_header(30, 3, 7, "x") + encode_body(30, 3, {"creations": []})
    with _sasl_client(secure_broker) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        assert c.request(36, 2, {"auth_bytes": b"\0alice\0" + ALICE_PW.encode()}).error_code == 0
        c.send(58, 0, {"request_data": inner, "request_principal": serialize_principal("User:admin"),
                       "client_host_address": bytes([127, 0, 0, 1])})
        assert c.wait_closed()


def test_handshake_after_authentication_without_reauthentication(secure_broker):
    """No connections.max.reauth.ms and no token lifetime: a second SaslHandshake is answered ILLEGAL_SASL_STATE
    and the connection stays up (Kafka's maybeBeginServerReauthentication declines)."""
    with _sasl_client(secure_broker) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        assert c.request(36, 2, {"auth_bytes": b"\0alice\0" + ALICE_PW.encode()}).error_code == 0
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 34
        assert c.request(3, 1, {"topics": []}).brokers


async def test_broker_connection_reauthenticates_without_failing_requests(tmp_path):
    """The broker's own client (inter-broker, controller, tools) re-authenticates before its session ends by moving
    to a new connection; requests in flight on the old one are still answered, none fails or is sent twice."""
    import asyncio
    from protocol.client import BrokerConnection
    from protocol.client_security import ClientSecurity
    from tests.conftest import BrokerProcess
    port = free_port()
    b = BrokerProcess(tmp_path / "reauth-client", {"sasl.enabled.mechanisms": "PLAIN",
                                                   "connections.max.reauth.ms": "1000",
                                                   "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{port}"
    b.start()
    conn = BrokerConnection("127.0.0.1", port, "reauth-test", security=ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                            f'password="{ALICE_PW}";'}))
    try:
        deadline = time.monotonic() + 4

        async def worker() -> int:                   # 8 of them: requests are always in flight when one is sent
            n = 0
            while time.monotonic() < deadline:
                await conn.send(3, 1, {"topics": []})
                n += 1
            return n
        assert sum(await asyncio.gather(*(worker() for _ in range(8)))) > 100
    finally:
        conn.close()
        assert b.stop() == 0
    log = b.log_text()
    assert "expired" not in log and "Traceback" not in log, log[-3000:]
