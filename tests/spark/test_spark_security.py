"""The connector on a secured listener, with Spark's own option names (Spark's Kafka source hands kafka.* to Kafka's
Java client): kafka.security.protocol=SASL_SSL, kafka.sasl.mechanism=SCRAM-SHA-512, kafka.sasl.jaas.config,
kafka.ssl.truststore.type=PEM / kafka.ssl.truststore.location. Every connection the connector makes honours them:
librdkafka's (planning AdminClient and consumers, Fetch tasks, the writer's producers), the reachability probe and
DescribeWalPointers. One broker with a PLAINTEXT listener (set-up) and a SASL_SSL one, tiering on."""
from __future__ import annotations

import time

import pytest

from spark_helpers import (BrokerProcess, check_rows, create_tiered, create_topic, free_port, plan,
                           produce_dataset, rows_of, tiered_overrides, wait_tiered)

pytestmark = pytest.mark.spark

ALICE_PW = "alice-Secret-1"
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{}";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.security_certs import CertificateAuthority
    ca = CertificateAuthority(tmp_path_factory.mktemp("spark-pki"))
    return ca, ca.issue("broker", CN="localhost", O="Strata")


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, pki):
    """Tiering on (absolute file store), PLAINTEXT for set-up, SASL_SSL with SCRAM-SHA-512; user alice."""
    from tests.integration.test_security import _create_scram_user
    ca, broker_pem = pki
    tmp = tmp_path_factory.mktemp("spark-secure")
    sasl_ssl = free_port()
    b = BrokerProcess(tmp, {**tiered_overrides(f"file://{tmp / 'objects'}"), "listeners": None,
                            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem.keystore),
                            "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{sasl_ssl}"
    b.sasl_ssl = f"127.0.0.1:{sasl_ssl}"
    b.start()
    _create_scram_user(b.bootstrap, "alice", ALICE_PW)
    yield b
    rc = b.stop()
    text = b.log_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text, text[text.index("Traceback") - 300:][:4000]
    assert ALICE_PW not in text


def secure_options(b, ca, password: str = ALICE_PW, **extra) -> dict:
    """Spark's Kafka source option names, as a Spark user has them."""
    return {"kafka.bootstrap.servers": b.sasl_ssl, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": SCRAM_JAAS.format(password),
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca.ca_file), **extra}


# ---- option translation (no broker) ---------------------------------------------------------------------------------
def test_kafka_security_names_become_librdkafka_ones(tmp_path):
    from spark_connector.options import parse_read_options, parse_write_options
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": SCRAM_JAAS.format('p\\"w'),
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
            "kafka.ssl.endpoint.identification.algorithm": "", "kafka.ssl.enabled.protocols": "TLSv1.2,TLSv1.3"}
    expected = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none"}
    conf = parse_read_options(opts, streaming=False).client.conf()
    assert {k: v for k, v in conf.items() if k not in ("bootstrap.servers", "broker.address.family")} == expected
    w = parse_write_options({k: v for k, v in opts.items() if k != "subscribe"})
    conf = w.client.conf(**w.producer_conf)
    assert conf["sasl.username"] == "alice" and "sasl.jaas.config" not in conf and "sasl.mechanism" not in conf
    assert conf["enable.idempotence"] == "true" and "ssl.enabled.protocols" not in conf

    # the Fetch tasks' consumers (their conf repeats the kafka.* options) get librdkafka's names too
    from spark_connector.fetch_reader import consumer_conf
    conf = consumer_conf(parse_read_options(opts, streaming=False))
    assert conf["sasl.mechanisms"] == "SCRAM-SHA-512" and "sasl.jaas.config" not in conf
    assert "ssl.truststore.location" not in conf and conf["ssl.ca.location"] == "/ca.pem"

    # librdkafka's own names still work, unchanged
    native = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "kafka.security.protocol": "SASL_SSL",
              "kafka.sasl.mechanisms": "PLAIN", "kafka.sasl.username": "bob", "kafka.sasl.password": "x",
              "kafka.ssl.ca.location": "/ca.pem"}
    conf = parse_read_options(native, streaming=False).client.conf()
    assert {k: conf[k] for k in ("security.protocol", "sasl.mechanisms", "sasl.username", "sasl.password",
                                  "ssl.ca.location")} == {k[len("kafka."):]: v for k, v in native.items()
                                                          if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}


def test_security_properties_for_the_connectors_own_connections(tmp_path):
    """librdkafka's names back to Kafka's, which protocol.client_security reads (the probe, DescribeWalPointers)."""
    from protocol.sasl.jaas import single_entry
    from spark_connector.options import client_security, security_properties
    props = security_properties({"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-256",
                                 "sasl.username": "bo\\b", "sasl.password": 'a"b c', "ssl.ca.location": "/ca.pem",
                                 "ssl.endpoint.identification.algorithm": "none"})
    entry = single_entry(props.pop("sasl.jaas.config"))
    assert entry.login_module.endswith("ScramLoginModule") and entry.options == {"username": "bo\\b",
                                                                                 "password": 'a"b c'}
    assert props == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                     "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM",
                     "ssl.endpoint.identification.algorithm": ""}
    oauth = security_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                 "sasl.oauthbearer.config": "principal=alice lifeSeconds=60 extension_a=1"})
    assert single_entry(oauth["sasl.jaas.config"]).options == {
        "unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginLifetimeSeconds": "60",
        "unsecuredLoginExtension_a": "1"}
    sec = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                           "sasl.oauthbearer.config": "principal=alice"})
    assert sec.ssl_context is None and sec.sasl_mechanism == "OAUTHBEARER" and sec.sasl_client() is not None
    # settings only librdkafka understands: TLS still, no SASL client (DescribeWalPointers then falls back to Fetch)
    sec = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI"})
    assert sec.sasl_mechanism == "GSSAPI" and sec.sasl_client is None and sec.ssl_context is None
    assert client_security({"security.protocol": "PLAINTEXT"}) is None and client_security({}) is None


@pytest.mark.parametrize("extra, message", [
    ({"kafka.security.protocol": "TLS"}, "security.protocol=TLS"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS", "kafka.ssl.truststore.location": "/x.jks"},
     "ssl.truststore.type=JKS"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
      "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\";"},
     "needs both username and password"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "DIGEST-MD5",
      "kafka.sasl.jaas.config": SCRAM_JAAS.format("x")}, "SASL mechanism DIGEST-MD5 is not supported"),
])
def test_wrong_security_options_fail_on_the_driver(extra, message):
    from spark_connector.options import StrataOptionError, parse_read_options, parse_write_options
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", **extra}
    with pytest.raises(StrataOptionError, match="Invalid Kafka security option") as e:
        parse_read_options({**opts, "subscribe": "t"}, streaming=None)
    assert message in str(e.value)
    with pytest.raises(StrataOptionError, match=message):
        parse_write_options(opts)


def test_missing_truststore_file_names_it(tmp_path):
    from spark_connector.options import StrataOptionError, parse_read_options
    o = parse_read_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                            "kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
                            "kafka.ssl.truststore.location": str(tmp_path / "no-ca.pem")}, streaming=False)
    with pytest.raises(StrataOptionError, match="Invalid Kafka security option"):
        o.client.security()


# ---- the connector's own connections against the broker (no Spark) --------------------------------------------------
def test_probe_and_describe_wal_pointers_over_sasl_ssl(secure_broker, pki):
    """The probe speaks TLS and authenticates; DescribeWalPointers does TLS, SaslHandshake v1 and SaslAuthenticate
    v2 (SCRAM-SHA-512) first; wrong credentials and an untrusted certificate fail at once, saying why."""
    from protocol.client_security import AuthenticationFailed
    from protocol.wal_pointers_client import describe_wal_pointers
    from spark_connector.cluster import BrokerSecurityError, reachable
    from spark_connector.options import parse_read_options
    ca, _ = pki
    topic = "sec-pointers"
    create_topic(secure_broker.bootstrap, topic, 1)
    host, port = secure_broker.sasl_ssl.split(":")
    good = parse_read_options({**secure_options(secure_broker, ca), "subscribe": topic}, streaming=False).client
    bad = parse_read_options({**secure_options(secure_broker, ca, "wrong"), "subscribe": topic},
                             streaming=False).client
    assert reachable(good.bootstrap, security=good.security())
    assert not reachable(good.bootstrap, timeout=1)          # PLAINTEXT bytes get no Kafka answer from a TLS port
    t0 = time.monotonic()
    with pytest.raises(BrokerSecurityError, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
        reachable(bad.bootstrap, security=bad.security())
    [answer] = describe_wal_pointers(host, int(port), topic, {0: 0}, security=good.security()).values()
    assert answer.error_code == 0 and answer.pointers == []
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        describe_wal_pointers(host, int(port), topic, {0: 0}, security=bad.security())
    assert time.monotonic() - t0 < 10

    from tests.security_certs import CertificateAuthority
    other = CertificateAuthority(ca.root / "other", "Someone Else's CA")
    untrusted = parse_read_options({**secure_options(secure_broker, ca), "subscribe": topic,
                                    "kafka.ssl.truststore.location": str(other.ca_file)}, streaming=False).client
    with pytest.raises(BrokerSecurityError, match="certificate does not verify"):
        reachable(untrusted.bootstrap, security=untrusted.security())

    # a streaming query's planner checks the same way before its first AdminClient call
    from spark_connector.stream import StrataStreamReader
    bad_stream = parse_read_options({**secure_options(secure_broker, ca, "wrong"), "subscribe": topic},
                                    streaming=True)
    with pytest.raises(BrokerSecurityError, match="invalid credentials"):
        StrataStreamReader(bad_stream).cluster


# ---- Spark ----------------------------------------------------------------------------------------------------------
def test_write_and_fetch_read_over_sasl_ssl(spark, secure_broker, pki, caplog):
    ca, _ = pki
    topic = "sec-spark-rw"
    create_topic(secure_broker.bootstrap, topic, 2)
    options = secure_options(secure_broker, ca)
    df = spark.createDataFrame([(f"k{i}", f"value-{i}", i % 2) for i in range(200)],
                               "key string, value string, partition int")
    df.write.format("strata").options(**options).option("topic", topic).mode("append").save()

    read = {**options, "subscribe": topic}
    with caplog.at_level("INFO", logger="strata.spark"):
        ranges, _ = plan(read)
    assert sum(r.sources()["fetch"] for r in ranges) == 200
    assert "DescribeWalPointers" not in caplog.text and "no fast-store pointers" not in caplog.text   # it answered
    rows = rows_of(spark.read.format("strata").options(**read).load())
    assert sorted(r.value for r in rows.values()) == sorted(f"value-{i}".encode() for i in range(200))
    assert all(int(r.value.split(b"-")[1]) % 2 == r.partition for r in rows.values())


def test_wrong_password_fails_clearly_and_quickly(spark, secure_broker, pki):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    ca, _ = pki
    topic = "sec-spark-rw"
    bad = secure_options(secure_broker, ca, "not-alice's")
    t0 = time.monotonic()
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        spark.read.format("strata").options(**bad, subscribe=topic).load().collect()
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in str(e.value)
    assert time.monotonic() - t0 < 30
    t0 = time.monotonic()
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        (spark.createDataFrame([("x",)], "value string").write.format("strata").options(**bad)
         .option("topic", topic).mode("append").save())
    assert "SASL authentication error" in str(e.value) and "check kafka.security.protocol" in str(e.value)
    assert time.monotonic() - t0 < 60


def test_direct_read_of_tiered_offsets_over_sasl_ssl(spark, secure_broker, pki):
    """Planning over SASL_SSL (Metadata, ListOffsets, DescribeConfigs, __remote_log_metadata, DescribeWalPointers):
    the tiered offsets are read from the object store, the rest fetched; with read_committed the leader's aborted
    transactions come from DescribeWalPointers v1 over the same listener."""
    ca, _ = pki
    topic = "sec-spark-tiered"
    create_tiered(secure_broker, topic)
    expected = produce_dataset(secure_broker.bootstrap, topic, 400, codec="lz4")
    wait_tiered(secure_broker, topic, 200)
    options = {**secure_options(secure_broker, ca), "subscribe": topic, "includeHeaders": "true"}
    ranges, _ = plan(options)
    assert sum(r.sources()["remote"] for r in ranges) >= 200 and sum(r.end - r.start for r in ranges) == 400
    check_rows(rows_of(spark.read.format("strata").options(**options).load()), expected, topic)

    [r], _ = plan({**options, "kafka.isolation.level": "read_committed"})
    assert r.sources()["remote"] >= 200 and r.txn is not None       # without the leader's answer: all fetched
