"""librdkafka's own transaction tests (issue 24), and its admin and security tests, against 3-broker Strata clusters.

librdkafka 2.8.0's test-runner (tests/librdkafka_suite.py downloads Debian's pinned copy of the release and builds it
once under .cache/librdkafka/) runs each test with TESTS=<number>; the runner's exit status must be 0 and every
test it names must be in its closing table as PASSED (a skip inside the runner fails here: nothing passes silently).
The whole suite skips only when the source cannot be downloaded, and 0098 when Apache Kafka's jars cannot be
resolved (it runs Kafka's Java producer, tests/java/TransactionProducerCli, as librdkafka's own CI does).

What each exercises (none of them uses librdkafka's in-process mock cluster; 0103_transactions_local, which TESTS=0103
also selects, talks to no broker at all):
- 0098 consumer_txn: read_committed/read_uncommitted consumers over transactions from the Java producer and from
  librdkafka's, interleaved with non-transactional producers, across partitions, split over message sets, one left
  open (LSO three below the high watermark in the consumer's statistics); topics of replication factor 3.
- 0103 transactions: misuse (INVALID_TRANSACTION_TIMEOUT, repeated init_transactions), commit/abort with and
  without lz4, a consume-transform-produce loop with send_offsets_to_transaction and committed() after recreating
  the consumer, fencing (a second producer's InitProducerId), UNKNOWN_PRODUCER_ID after DeleteRecords and its KIP-360
  recovery, empty transactions with and without offsets, watermarks per isolation level, the committed offset after
  an aborted transaction's control record; replication factor 3.
- 0129 fetch_aborted_msgs: an aborted transaction across small segments (segment.bytes=20000) read to EOF.
- 0137 barrier_batch_consume: batch consume with seek/pause/resume/store_offset, and control records skipped with the
  committed offset past them.
- 0061 consumer_lag: consumer_lag in the statistics with and without aborted transactions at the end of the log.

The admin and security tests run on two more clusters, configured as librdkafka's CI configures Apache Kafka (see
TestAdminAndAcls and TestSasl), each client with the security.protocol and mechanism its test needs to run in full:
- 0081 admin (SASL_PLAINTEXT, SCRAM-SHA-512, as testuser, no super user), twice (a producer and a consumer handle):
  CreateTopics (validate-only, replica assignments, configs), DeleteTopics, CreatePartitions, CreateAcls /
  DescribeAcls / DeleteAcls (LITERAL, PREFIXED, MATCH filters), AlterConfigs and IncrementalAlterConfigs (topic and
  broker resources, an unknown topic), DescribeConfigs, DeleteRecords, ListConsumerGroups (state filter),
  DescribeConsumerGroups, DescribeTopics and DescribeCluster with and without authorized operations (KIP-430: all of
  a resource's operations while no ACL names it, then only those granted once the principal has an ACL; for a group
  Kafka 4's five), DeleteGroups, DeleteConsumerGroupOffsets, ListOffsets (earliest, latest, max timestamp),
  AlterConsumerGroupOffsets, ListConsumerGroupOffsets, Describe/AlterUserScramCredentials. No sub-test may skip.
- 0115 producer_auth and 0119 consumer_auth (PLAINTEXT, as User:ANONYMOUS, with Kafka's kafka-acls.sh adding the
  ACLs): a DENY of every operation on a topic fails produce() and delivery with TOPIC_AUTHORIZATION_FAILED whether or
  not the producer knew the topic; with DESCRIBE allowed and READ denied, a consumer gets exactly one
  TOPIC_AUTHORIZATION_FAILED per partition and no message.
- 0135 sasl_credentials (SASL_SSL, SCRAM-SHA-256): wrong credentials fail authentication until sasl_set_credentials.
- 0142 reauthentication (KIP-368, connections.max.reauth.ms=10000): a consumer, a producer and a transactional
  producer (committed and aborted) re-authenticating as they go, every message delivered and consumed; with PLAIN
  over SASL_SSL, credentials changed to wrong ones fail the next re-authentication; with OAUTHBEARER over
  SASL_PLAINTEXT, tokens living shorter (the session ends with the token) and longer than connections.max.reauth.ms.
Sources of librdkafka 2.8.0's tests that needed upstream's later fixes are patched before the build
(tests/librdkafka_suite.py, TEST_PATCHES).
"""
from __future__ import annotations

import re
import time

import pytest

from tests import librdkafka_suite as suite
from tests.cluster.conftest import Cluster, stop_and_check
from tests.conftest import free_port

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1200)]

# TESTS=<number> runs every test whose name starts with it; these must all be in the runner's table as PASSED.
EXPECTED = {
    "0098": ["0098_consumer_txn"],
    "0103": ["0103_transactions_local", "0103_transactions"],
    "0129": ["0129_fetch_aborted_msgs"],
    "0137": ["0137_barrier_batch_consume"],
    "0061": ["0061_consumer_lag"],
    "0081": ["0081_admin"],
    "0115": ["0115_producer_auth"],
    "0119": ["0119_consumer_auth"],
    "0135": ["0135_sasl_credentials"],
    "0142": ["0142_reauthentication"],
}


@pytest.fixture(scope="module")
def test_runner():
    try:
        return suite.build()
    except suite.DownloadError as e:
        pytest.skip(f"librdkafka's source could not be downloaded: {e}")


@pytest.fixture(scope="module")
def java_helpers(test_runner, kafka_jars):
    """tests/java compiled against Kafka's jars, and the KAFKA_PATH stand-in that runs them (0098)."""
    suite.build_java_helpers()


def _run_and_check(number: str, strata_cluster, tmp_path, bootstrap: str | None = None,
                   conf: dict[str, str] | None = None, allowed_skips: str | None = None):
    """Run test `number` against `bootstrap` (the cluster's PLAINTEXT listeners by default) with `conf` added to
    its test.conf. `allowed_skips`, when given, is a pattern every sub-test's SKIP reason must match ("" when none
    may skip): a sub-test that skips itself leaves its test PASSED in the runner's table."""
    res = suite.run(number, bootstrap or strata_cluster.bootstrap, tmp_path, timeout=1080, extra_conf=conf)
    print(res.plain)                           # shown by pytest when the test fails
    status = res.summary()
    wrong = {name: status.get(name, "missing") for name in EXPECTED[number] if status.get(name) != "PASSED"}
    if allowed_skips is not None:
        skipped = re.findall(r"\[ (\w+:\d+)[^\n]*?: SKIP: ([^\n]*)", res.plain)
        wrong.update({f"sub-test {where}": f"SKIP: {why}" for where, why in skipped
                      if not (allowed_skips and re.search(allowed_skips, why.rstrip(" ]")))})
    assert res.returncode == 0 and not wrong, (
        f"librdkafka test {number}: test-runner exit {res.returncode} after {res.seconds:.0f}s, "
        f"not passed: {wrong or '-'}\n{res.failures()[-6000:]}\n--- last lines\n"
        + "\n".join([line for line in res.plain.splitlines() if "test(s) running" not in line][-40:]))
    return res


# ---- the security tests, on clusters configured as librdkafka's CI configures Apache Kafka ------------------------
# (trivup 0.15's KafkaBrokerApp, pinned in librdkafka's tests/requirements.txt, and its interactive_broker_version.py):
# StandardAuthorizer with super.users=User:admin and allow.everyone.if.no.acl.found=true; SASL users from
# sasl_users=testuser=testpass (PLAIN users in the listener's JAAS config, SCRAM credentials created after start as
# kafka-configs.sh does); OAUTHBEARER with the unsecured validator requiring scope "requiredScope"; brokers talking to
# each other over SASL_PLAINTEXT with PLAIN as admin; connections.max.reauth.ms set. Clients use the listener their
# security.protocol names: PLAINTEXT for 0115 and 0119 (they skip themselves on any other, as they run kafka-acls.sh
# without client security settings), SASL_PLAINTEXT or SASL_SSL for the others.
SASL_USERS = {"admin": "admin-secret", "testuser": "testpass"}
SECURE_LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")


def _secure_overrides(broker_pem, ca) -> dict[str, str]:
    plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
             f'password="{SASL_USERS["admin"]}" ' + " ".join(f'user_{u}="{pw}"' for u, pw in SASL_USERS.items()) + ";")
    oauth = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
             'unsecuredLoginStringClaim_sub="admin" unsecuredLoginLifetimeSeconds="3600" '
             'unsecuredValidatorRequiredScope="requiredScope";')
    out = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin", "allow.everyone.if.no.acl.found": "true",
           "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
           "inter.broker.listener.name": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "PLAIN",
           "ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem.keystore),
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file)}
    for listener in ("sasl_plaintext", "sasl_ssl"):
        out[f"listener.name.{listener}.plain.sasl.jaas.config"] = plain
        out[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = oauth
    return out


def _secure_cluster(tmp_path_factory, dir_name: str, overrides: dict[str, str]):
    """Three brokers with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners, testuser's SCRAM credentials on every
    broker; `addresses[listener]` is the bootstrap list of one, `ca_file` the CA that signed the brokers'
    certificate. A generator for a fixture."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    from tests.security_certs import CertificateAuthority
    root = tmp_path_factory.mktemp(dir_name)
    ca = CertificateAuthority(root / "pki")
    c = Cluster(root, 3, overrides={**_secure_overrides(ca.issue("broker", CN="localhost"), ca), **overrides})
    c.addresses = {name: [] for name in SECURE_LISTENERS}
    for b in c.brokers.values():
        ports = {"PLAINTEXT": b.port, **{name: free_port() for name in SECURE_LISTENERS[1:]}}
        b.overrides["listeners"] = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
        for name, port in ports.items():
            c.addresses[name].append(f"127.0.0.1:{port}")
    c.ca_file = ca.ca_file
    c.start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        password = SASL_USERS["testuser"].encode()
        upserts = [UserScramCredentialUpsertion("testuser", ScramCredentialInfo(m, 4096), password)
                   for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
        for fut in admin.alter_user_scram_credentials(upserts).values():
            fut.result(timeout=30)
        _wait_for_scram_credentials(c, "testuser", len(upserts))
    except BaseException:
        stop_and_check(c)
        raise
    yield c
    stop_and_check(c)


# connections.max.reauth.ms as librdkafka's CI sets it. Each of 0142's sub-tests lasts 1.2 times it, and its
# OAUTHBEARER tokens live half of it (whole seconds): with 5000, a 2 s token, librdkafka on a busy machine was seen
# re-authenticating with its token at the very millisecond it expired, which the broker refuses as Kafka does.
REAUTH_MS = "10000"


@pytest.fixture(scope="class")
def acl_cluster(tmp_path_factory):
    """With group.initial.rebalance.delay.ms=0, as this module's other cluster: 0081 joins a consumer group some forty
    times, and Kafka's 3 s delay would double its four minutes."""
    yield from _secure_cluster(tmp_path_factory, "strata-acls", {"connections.max.reauth.ms": REAUTH_MS,
                                                                 "group.initial.rebalance.delay.ms": "0"})


@pytest.fixture(scope="class")
def sasl_cluster(tmp_path_factory):
    """With Kafka's group.initial.rebalance.delay.ms (3 s): 0142's consumer test expects its consumer to start behind
    its producer (it ends by polling for the messages still owed, and fails when none are: its helper waits for at
    least one), as it does against Kafka."""
    yield from _secure_cluster(tmp_path_factory, "strata-sasl", {"connections.max.reauth.ms": REAUTH_MS})


def _wait_for_scram_credentials(cluster, user: str, count: int, timeout: float = 30) -> None:
    """Until every broker's own image has `count` SCRAM credentials for `user` (DescribeUserScramCredentials answers
    from it): a broker applies the metadata log a little after the controller, and a client that reaches it before
    fails authentication."""
    from tests.integration.rawclient import RawClient
    deadline = time.monotonic() + timeout
    for b in cluster.brokers.values():
        while True:
            with RawClient(b.bootstrap) as raw:
                found = raw.request(50, 0, {"users": [{"name": user}]}).results[0].credential_infos
            if len(found) == count:
                break
            assert time.monotonic() < deadline, f"broker at {b.bootstrap} has {len(found)} credentials for {user}"
            time.sleep(0.1)


def _client(cluster, protocol: str, mechanism: str | None = None) -> tuple[str, dict[str, str]]:
    """The bootstrap list and test.conf settings of a client on `protocol` (with `mechanism` for SASL), as
    librdkafka's LibrdkafkaTestApp writes them: the first of sasl_users for PLAIN and SCRAM, the unsecured JWT
    with principal admin and scope requiredScope for OAUTHBEARER, and its timeout multiplier of 2 (0119 needs it:
    two runs of kafka-acls.sh, a JVM each, and 15 s of consuming within a 20 s test timeout)."""
    conf = {"security.protocol": protocol, "test.timeout.multiplier": "2"}
    if mechanism == "OAUTHBEARER":
        conf.update({"sasl.mechanisms": mechanism, "enable.sasl.oauthbearer.unsecure.jwt": "true",
                     "sasl.oauthbearer.config": "scope=requiredScope principal=admin"})
    elif mechanism:
        conf.update({"sasl.mechanisms": mechanism, "sasl.username": "testuser",
                     "sasl.password": SASL_USERS["testuser"]})
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(cluster.ca_file)
    return ",".join(cluster.addresses[protocol]), conf


# The two classes come before the tests on `strata_cluster`, so that no two clusters are ever up at once (a class's
# is stopped when the class ends, `strata_cluster` only with the module).
class TestAdminAndAcls:
    def test_0081_admin(self, test_runner, acl_cluster, tmp_path):
        bootstrap, conf = _client(acl_cluster, "SASL_PLAINTEXT", "SCRAM-SHA-512")
        _run_and_check("0081", acl_cluster, tmp_path, bootstrap, conf, allowed_skips="")

    @pytest.mark.parametrize("number", ["0115", "0119"])
    def test_acls_by_kafka_acls_sh(self, number, test_runner, java_helpers, acl_cluster, tmp_path):
        bootstrap, conf = _client(acl_cluster, "PLAINTEXT")
        _run_and_check(number, acl_cluster, tmp_path, bootstrap, conf, allowed_skips="")


class TestSasl:
    def test_0135_sasl_credentials(self, test_runner, sasl_cluster, tmp_path):
        bootstrap, conf = _client(sasl_cluster, "SASL_SSL", "SCRAM-SHA-256")
        _run_and_check("0135", sasl_cluster, tmp_path, bootstrap, conf, allowed_skips="")

    # 0142's sub-tests are for either mechanism: the OAUTHBEARER ones (token lifetimes shorter and longer than
    # the session) skip under PLAIN or SCRAM, the one changing credentials to wrong ones skips under OAUTHBEARER
    @pytest.mark.parametrize("protocol, mechanism, skips", [
        ("SASL_SSL", "PLAIN", r"^`sasl.mechanism=OAUTHBEARER` is required, have PLAIN$"),
        ("SASL_PLAINTEXT", "OAUTHBEARER", r"^PLAIN or SCRAM mechanism is required is required, have OAUTHBEARER$")],
        ids=["PLAIN-SASL_SSL", "OAUTHBEARER-SASL_PLAINTEXT"])
    def test_0142_reauthentication(self, protocol, mechanism, skips, test_runner, sasl_cluster, tmp_path):
        bootstrap, conf = _client(sasl_cluster, protocol, mechanism)
        _run_and_check("0142", sasl_cluster, tmp_path, bootstrap, conf, allowed_skips=skips)


@pytest.mark.parametrize("number", ["0103", "0129", "0137", "0061"])
def test_librdkafka(number, test_runner, strata_cluster, tmp_path):
    _run_and_check(number, strata_cluster, tmp_path)


def test_librdkafka_0098_consumer_txn(test_runner, java_helpers, strata_cluster, tmp_path):
    _run_and_check("0098", strata_cluster, tmp_path)
