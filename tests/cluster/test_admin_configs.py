"""`strata configs` (kafka-configs.sh verbs) against a running three-broker cluster: a per-broker config reaches that
broker only, the cluster-wide default reaches every broker, topic configs change live, and bad arguments get a
message and a non-zero exit."""
from __future__ import annotations

import subprocess
import sys
import time


def strata(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True, timeout=120)


def configs(cluster, *args: str) -> subprocess.CompletedProcess:
    return strata("configs", "--bootstrap-server", cluster.bootstrap, *args)


def eventually(check, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        out = check()
        if out:
            return out
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.3)


def test_broker_topic_and_group_configs(cluster, topic_name):
    r = configs(cluster, "--alter", "--entity-type", "brokers", "--entity-name", "2", "--add-config",
                "log.retention.ms=7200000,log.cleanup.policy=[compact,delete]")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for broker 2.\n"), r.stderr
    line = "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=7200000, " \
           "DEFAULT_CONFIG:log.retention.hours=168}"             # as Kafka: the default is in hours
    eventually(lambda: line in configs(cluster, "--describe", "--broker", "2").stdout.splitlines())
    assert "log.cleanup.policy=compact,delete" in configs(cluster, "--describe", "--broker", "2").stdout
    assert configs(cluster, "--describe", "--broker", "1").stdout == "Dynamic configs for broker 1 are:\n"

    r = configs(cluster, "--alter", "--broker-defaults", "--add-config", "log.segment.bytes=50000000")
    assert r.returncode == 0 and r.stdout == "Completed updating default config for brokers in the cluster.\n"
    for node in ("1", "2", "3"):             # every broker applies the default from the metadata log
        eventually(lambda: "log.segment.bytes=50000000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
                   in configs(cluster, "--describe", "--broker", node, "--all").stdout)
    r = configs(cluster, "--describe", "--entity-type", "brokers")
    assert r.stdout.count("Dynamic configs for broker ") == 3 and \
        "Default configs for brokers in the cluster are:\n  log.segment.bytes=50000000" in r.stdout

    assert strata("topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic_name,
                  "--replication-factor", "3").returncode == 0
    r = configs(cluster, "--alter", "--topic", topic_name, "--add-config", "retention.ms=1000,segment.ms=60000")
    assert (r.returncode, r.stdout) == (0, f"Completed updating config for topic {topic_name}.\n"), r.stderr
    r = configs(cluster, "--alter", "--topic", topic_name, "--delete-config", "segment.ms")
    assert r.returncode == 0, r.stderr
    assert configs(cluster, "--describe", "--topic", topic_name).stdout == (
        f"Dynamic configs for topic {topic_name} are:\n  retention.ms=1000 sensitive=false synonyms="
        f"{{DYNAMIC_TOPIC_CONFIG:retention.ms=1000}}\n")         # as Kafka: log.retention.ms has no default

    r = configs(cluster, "--alter", "--group", "g1", "--add-config", "consumer.heartbeat.interval.ms=6000")
    assert r.returncode == 0 and r.stdout == "Completed updating config for group g1.\n"
    assert configs(cluster, "--describe", "--group", "g1").stdout == (
        "Dynamic configs for group g1 are:\n  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={}\n")

    r = configs(cluster, "--alter", "--broker-defaults", "--delete-config", "log.segment.bytes")
    assert r.returncode == 0
    assert configs(cluster, "--describe", "--broker-defaults").stdout == \
        "Default configs for brokers in the cluster are:\n"


def test_configs_bad_arguments(cluster, topic_name):
    bs = ["--bootstrap-server", cluster.bootstrap]
    cases = [
        (["--describe"], 1, "Exactly one entity must be specified"),
        (["--topic", "x"], 1, "exactly one action"),
        (["--describe", "--alter", "--topic", "x"], 2, "not allowed with"),
        (["--alter", "--topic", topic_name], 1, "At least one of --add-config"),
        (["--alter", "--broker", "1", "--add-config", "novalue"], 1, "key=val"),
        (["--alter", "--broker", "1", "--add-config", "log.dirs=/x"], 1,
         "Cannot update these configs dynamically: Set(log.dirs)"),
        (["--alter", "--broker", "1", "--add-config", "log.retention.ms=soon"], 1, "log.retention.ms"),
        (["--alter", "--broker", "1", "--delete-config", "log.retention.ms"], 1, "Invalid config(s): log.retention.ms"),
        (["--describe", "--entity-type", "broker-loggers", "--entity-name", "1"], 1, "not supported by Strata"),
        (["--alter", "--entity-type", "users", "--entity-name", "u", "--add-config", "SCRAM-SHA-1=[password=x]"], 1,
         "SCRAM-SHA-1"),
        (["--describe", "--entity-type", "things", "--entity-name", "u"], 1, "Invalid entity type things"),
        (["--describe", "--broker", "9"], 1, "Broker 9 is not in the cluster"),
        (["--describe", "--topic", "no-such-topic"], 1, "does not exist"),
        (["--alter", "--topic", "no-such-topic", "--add-config", "retention.ms=1"], 1, "does not exist"),
        (["--alter", "--group", "g", "--add-config", "consumer.session.timeout.ms=1"], 1, "greater than or equal"),
    ]
    for args, code, text in cases:
        r = strata("configs", *bs, *args)
        assert r.returncode == code and text in r.stderr, (args, r.returncode, r.stderr)
