"""The admin tools with Kafka's verbs against a running three-broker cluster: what a Kafka user types, what they
read back, and a clear message with a non-zero exit for bad arguments."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

STRATA = str(Path(sys.executable).parent / "strata")     # the installed entry point, as a user runs it


def strata(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([STRATA, *args], capture_output=True, text=True, timeout=120)


def test_topics_verbs(cluster, topic_name):
    bs = ["--bootstrap-server", cluster.bootstrap]
    r = strata("topics", *bs, "--create", "--topic", topic_name, "--partitions", "3", "--replication-factor", "3",
               "--config", "retention.ms=3600000")
    assert (r.returncode, r.stdout.strip()) == (0, f"Created topic {topic_name}."), r.stderr
    r = strata("topics", *bs, "--create", "--topic", topic_name)
    assert r.returncode == 1 and "already exists" in r.stderr
    assert strata("topics", *bs, "--create", "--topic", topic_name, "--if-not-exists").returncode == 0
    assert topic_name in strata("topics", *bs, "--list").stdout.split()
    deadline = time.monotonic() + 30
    while True:                      # the ISRs fill as the followers start fetching
        r = strata("topics", *bs, "--describe", "--topic", topic_name)
        lines = r.stdout.splitlines()
        if r.returncode == 0 and len(lines) == 4 and all(line.count(",") >= 4 for line in lines[1:]):
            break
        assert time.monotonic() < deadline, r.stdout + r.stderr
        time.sleep(0.3)
    head = lines[0].split("\t")
    assert head[0] == f"Topic: {topic_name}" and head[2:] == ["PartitionCount: 3", "ReplicationFactor: 3",
                                                                "Configs: retention.ms=3600000"]
    for i, line in enumerate(lines[1:]):
        f = line.strip().split("\t")
        assert f[1] == f"Partition: {i}" and f[3].startswith("Replicas: ") and \
            sorted(f[3][10:].split(",")) == ["1", "2", "3"] and sorted(f[4][5:].split(",")) == ["1", "2", "3"]
    assert strata("topics", *bs, "--alter", "--topic", topic_name, "--partitions", "4").returncode == 0
    deadline = time.monotonic() + 30
    while "PartitionCount: 4" not in strata("topics", *bs, "--describe", "--topic", topic_name).stdout:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    r = strata("topics", *bs, "--alter", "--topic", topic_name, "--partitions", "2")
    assert r.returncode == 1 and r.stderr.startswith("Error while executing topics command")
    assert strata("topics", *bs, "--delete", "--topic", topic_name).returncode == 0
    deadline = time.monotonic() + 30
    while topic_name in strata("topics", *bs, "--list").stdout.split():
        assert time.monotonic() < deadline
        time.sleep(0.3)
    r = strata("topics", *bs, "--describe", "--topic", topic_name)
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = strata("topics", *bs, "--delete", "--topic", topic_name)
    assert r.returncode == 1 and "does not exist" in r.stderr
    assert strata("topics", *bs, "--delete", "--topic", topic_name, "--if-exists").returncode == 0


def test_bad_arguments_get_a_message_and_a_non_zero_exit(cluster):
    cases = [
        (["topics", "--bootstrap-server", cluster.bootstrap, "--create"], 1, 'Missing required argument "[topic]"'),
        (["topics", "--bootstrap-server", cluster.bootstrap, "--list", "--describe"], 2, "not allowed with"),
        (["topics", "--list"], 2, "--bootstrap-server"),
        (["topics", "--bootstrap-server", "nohostport", "--list"], 1, "expected host:port"),
        (["topics", "--bootstrap-server", "127.0.0.1:1", "--list"], 1, "answered"),
        (["topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", "x", "--config", "novalue"], 1,
         "expected KEY=VALUE"),
        (["topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", "bad/name"], 1, ""),
        (["topics", "--bootstrap-server", cluster.bootstrap, "--alter", "--topic", "x"], 1, "--partitions"),
    ]
    for args, code, text in cases:
        r = strata(*args)
        assert r.returncode == code and text in r.stderr, (args, r.returncode, r.stderr)


def test_cluster_shows_brokers_racks_controller_and_fenced_ones(cluster):
    r = strata("cluster", "--bootstrap-server", cluster.bootstrap)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    controller = int(lines[1].split(": ")[1])
    assert lines[0].startswith("Cluster id: ") and controller in (1, 2, 3)
    assert [line.split("\t")[0] for line in lines[2:5]] == ["Broker 1", "Broker 2", "Broker 3"]
    assert [line.split("\t")[2] for line in lines[2:5]] == ["rack: a", "rack: b", "rack: c"]
    assert all(line.endswith("\tunfenced") for line in lines[2:5])
    # the metadata log: its end at the controller, and each broker's position from its heartbeats
    assert lines[5].startswith("Metadata log: high watermark ")
    end = int(lines[5].split()[4].rstrip(","))
    nodes = [line.split("\t") for line in lines[6:]]
    assert [(n[0].strip(), n[1]) for n in nodes] == \
        [(f"node {i}", "controller" if i == controller else "observer") for i in (1, 2, 3)]
    assert all(0 < int(n[2].split()[-1]) <= end for n in nodes), lines
    victim = next(i for i in (1, 2, 3) if i != controller)
    cluster.brokers[victim].kill9()
    deadline = time.monotonic() + 30
    while True:
        out = strata("cluster", "--bootstrap-server", cluster.bootstrap).stdout
        if f"Broker {victim}\t" in out and out.split(f"Broker {victim}\t")[1].split("\n")[0].endswith("\tfenced"):
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.5)
    cluster.brokers[victim].start()
