"""Debian's kcat 1.7.1 (librdkafka 2.0.2) on Strata's secured listeners, with librdkafka's own property names
(-X security.protocol, sasl.mechanisms, sasl.username, sasl.password, ssl.ca.location): SCRAM-SHA-512 over
SASL_SSL and PLAIN over SASL_PLAINTEXT, producing, consuming by partition and in a group; a wrong password ends kcat
with librdkafka's authentication error instead of a hang. The broker is tests/integration/test_security.py's
`secure_broker` (SCRAM user alice, PLAIN users in the listeners' JAAS configs)."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.helpers import create_topic
from tests.integration.test_security import ALICE_PW, pki, secure_broker  # noqa: F401 (fixtures)

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make kcat)")]

LINES = b"".join(b"k%d:value-%d\n" % (i, i) for i in range(50))
EXPECTED = [f"k{i}=value-{i}@{i}" for i in range(50)]


def security(b, pki, protocol: str, mechanism: str, password: str = ALICE_PW) -> list[str]:
    """kcat's -b and -X options for user alice on the broker's `protocol` listener."""
    ca, _, _ = pki
    args = ["-b", f"127.0.0.1:{b.ports[protocol]}", "-X", "broker.address.family=v4",
            "-X", f"security.protocol={protocol}", "-X", f"sasl.mechanisms={mechanism}",
            "-X", "sasl.username=alice", "-X", f"sasl.password={password}"]
    if protocol == "SASL_SSL":
        args += ["-X", f"ssl.ca.location={ca.ca_file}"]
    return args


def kcat(args: list[str], *more: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([KCAT, *args, *more], input=stdin, capture_output=True, timeout=timeout)


def ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, f"{p.args} exited {p.returncode}:\n{p.stderr.decode(errors='replace')}"
    return p.stdout.decode()


@pytest.mark.parametrize("protocol, mechanism", [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")])
def test_produce_and_consume(secure_broker, pki, topic_name, protocol, mechanism):
    create_topic(secure_broker.bootstrap, topic_name)
    args = security(secure_broker, pki, protocol, mechanism)
    ok(kcat(args, "-P", "-t", topic_name, "-p", "0", "-K:", "-X", "acks=all", stdin=LINES))
    out = ok(kcat(args, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-f", "%k=%s@%o\n"))
    assert out.splitlines() == EXPECTED
    # A balanced consumer (-G): FindCoordinator, JoinGroup, SyncGroup, OffsetCommit over the same listener.
    out = ok(kcat(args, "-G", f"{topic_name}-group", topic_name, "-X", "auto.offset.reset=earliest", "-e",
                  "-f", "%k=%s@%o\n"))
    assert out.splitlines() == EXPECTED


# Kafka's SaslAuthenticate error messages, as librdkafka logs them
REFUSED = {"SCRAM-SHA-512": "SASL authentication error: Authentication failed during authentication due to invalid "
                            "credentials with SASL mechanism SCRAM-SHA-512",
           "PLAIN": "SASL authentication error: Authentication failed: Invalid username or password"}


@pytest.mark.parametrize("protocol, mechanism", [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")])
def test_wrong_password_fails_cleanly(secure_broker, pki, topic_name, protocol, mechanism):
    """The producer stops at once with librdkafka's authentication failure, having written nothing; a metadata
    listing gives up when its -m timeout ends."""
    args = security(secure_broker, pki, protocol, mechanism, password="wrong")
    t0 = time.monotonic()
    p = kcat(args, "-P", "-t", topic_name, stdin=b"never\n")
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and time.monotonic() - t0 < 20, err
    assert "% ERROR: Local: Authentication failure: " in err and REFUSED[mechanism] in err, err
    p = kcat(args, "-L", "-m", "3")
    err = p.stderr.decode(errors="replace")
    assert (p.returncode, p.stdout) == (1, b""), err
    assert REFUSED[mechanism] in err and "% ERROR: Failed to acquire metadata" in err, err
    assert topic_name not in AdminClient({"bootstrap.servers": secure_broker.bootstrap}).list_topics(timeout=10).topics
