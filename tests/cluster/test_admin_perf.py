"""`strata perf produce|consume` (kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh) against real brokers:
the summary lines a Kafka user knows, the records really in the log (read back with kafka-python, another client than
the tool's librdkafka), the consumer group's committed offsets, Ctrl-C, and bad arguments."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import create

MIB = 1024 * 1024
WINDOW = re.compile(r"^(\d+) records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, "
                    r"\d+\.\d ms max latency\.$")
SUMMARY = re.compile(r"^(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), "
                     r"(?:\d+\.\d\d|NaN) ms avg latency, \d+\.\d\d ms max latency, "
                     r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$")
HEADER = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, " \
         "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
DATE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}$")


def strata(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def perf_cluster(tmp_path_factory):
    """Three brokers that, like many production clusters, do not create topics on use; groups start at once."""
    c = Cluster(tmp_path_factory.mktemp("perf"), 3, overrides={"auto.create.topics.enable": "false",
                                                                "group.initial.rebalance.delay.ms": "0"}).start()
    yield c
    stop_and_check(c)


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """Every record value of the topic, read with kafka-python; the log's end offsets must add up to `expected`."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        tps = [KpTopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
        c.assign(tps)
        assert sum(c.end_offsets(tps).values()) == expected
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < expected:
            assert time.monotonic() < deadline, f"read {len(values)} of {expected}"
            for records in c.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        return values
    finally:
        c.close()


def summary(stdout: str) -> re.Match:
    m = SUMMARY.match(stdout.splitlines()[-1])
    assert m, stdout
    return m


def test_produce_then_consume(perf_cluster, topic_name):
    bs = perf_cluster.bootstrap
    create(perf_cluster, topic_name, partitions=3, rf=3)
    r = strata("perf", "produce", "--bootstrap-server", bs, "--topic", topic_name, "--num-records", "3000",
               "--record-size", "100", "--throughput", "-1", "--command-property", "acks=all", "linger.ms=5")
    assert r.returncode == 0, r.stderr
    m = summary(r.stdout)
    assert int(m.group(1)) == 3000
    assert int(m.group(2)) <= int(m.group(3)) <= int(m.group(4)) <= int(m.group(5))
    values = read_all(bs, topic_name, 3000)
    assert len(values) == 3000 and all(len(v) == 100 and v.isalpha() and v.isupper() for v in values)

    group = f"perf-{topic_name}"
    r = strata("perf", "consume", "--bootstrap-server", bs, "--topic", topic_name, "--num-records", "3000",
               "--group", group, "--timeout", "30000")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()
    assert header == HEADER
    f = row.split(", ")
    assert len(f) == 10 and DATE.match(f[0]) and DATE.match(f[1]), row
    assert (f[2], f[4]) == (f"{3000 * 100 / MIB:.4f}", "3000")
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:                                                  # the run's group committed what it read
        committed = c.committed([TopicPartition(topic_name, p) for p in range(3)], timeout=10)
    finally:
        c.close()
    assert sum(max(tp.offset, 0) for tp in committed) == 3000          # a partition without records has none

    r = strata("perf", "consume", "--bootstrap-server", bs, "--topic", topic_name, "--num-records", "3000",
               "--show-detailed-stats", "--reporting-interval", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "time, threadId" + HEADER[len("start.time, end.time"):]
    assert all(len(line.split(", ")) == 10 and line.split(", ")[1] == "0" for line in lines[1:]), lines


def test_throttled_run_prints_progress_before_the_summary(perf_cluster, topic_name):
    create(perf_cluster, topic_name, rf=3)
    r = strata("perf", "produce", "--bootstrap-server", perf_cluster.bootstrap, "--topic", topic_name,
               "--num-records", "600", "--payload-monotonic", "--throughput", "300", "--reporting-interval", "300")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert int(summary(r.stdout).group(1)) == 600
    progress = [WINDOW.match(line) for line in lines[:-1]]
    assert progress and all(progress), lines           # 600 records at 300/s take 2 s: several 300 ms windows
    assert sum(int(m.group(1)) for m in progress) <= 600
    assert sorted(read_all(perf_cluster.bootstrap, topic_name, 600), key=int) == [str(i).encode() for i in range(600)]


def test_payload_file_and_warmup(perf_cluster, topic_name, tmp_path):
    create(perf_cluster, topic_name, rf=3)
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\ngamma\n")
    r = strata("perf", "produce", "--bootstrap-server", perf_cluster.bootstrap, "--topic", topic_name,
               "--num-records", "60", "--payload-file", str(payloads), "--throughput", "-1",
               "--warmup-records", "10")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == [f"Reading payloads from: {payloads}", "Number of messages read: 3",
                         "Warmup first 10 records. Steady state results will print after the complete test summary."]
    assert SUMMARY.match(lines[-2]) and int(SUMMARY.match(lines[-2]).group(1)) == 60, lines
    assert lines[-1].startswith("50 steady state records sent, "), lines
    assert set(read_all(perf_cluster.bootstrap, topic_name, 60)) <= {b"alpha", b"beta", b"gamma"}


def test_ctrl_c_prints_the_summary_so_far(perf_cluster, topic_name):
    create(perf_cluster, topic_name, rf=3)
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "perf", "produce", "--bootstrap-server",
                             perf_cluster.bootstrap, "--topic", topic_name, "--num-records", "1000000",
                             "--record-size", "10", "--throughput", "200", "--reporting-interval", "200"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert WINDOW.match(first), first + proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    sent = int(summary(rest).group(1))
    assert 0 < sent < 1_000_000
    assert len(read_all(perf_cluster.bootstrap, topic_name, sent)) == sent      # the summary counts what is stored

    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "perf", "consume", "--bootstrap-server",
                             perf_cluster.bootstrap, "--topic", topic_name, "--num-records", "1000000",
                             "--timeout", "600000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    header = proc.stdout.readline()
    assert header.rstrip("\n") == HEADER, header + proc.stderr.read()
    proc.send_signal(signal.SIGINT)                     # waiting for records that will not come: the line so far
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    f = rest.splitlines()[-1].split(", ")
    assert len(f) == 10 and 0 <= int(f[4]) <= sent, rest


def test_records_the_broker_refuses_are_reported_after_the_summary(perf_cluster, topic_name):
    create(perf_cluster, topic_name, rf=3, configs={"max.message.bytes": "500"})
    r = strata("perf", "produce", "--bootstrap-server", perf_cluster.bootstrap, "--topic", topic_name,
               "--num-records", "5", "--record-size", "1000", "--throughput", "-1")
    assert r.returncode == 1 and int(summary(r.stdout).group(1)) == 0, r.stdout + r.stderr
    assert "Error: record not delivered: Broker: Message size too large" in r.stderr
    assert "Error while executing perf command : 5 of 5 records not delivered" in r.stderr


def test_missing_topic_is_an_error_and_is_not_created(perf_cluster):
    bs = perf_cluster.bootstrap
    r = strata("perf", "produce", "--bootstrap-server", bs, "--topic", "no-such-topic", "--num-records", "10",
               "--record-size", "10", "--throughput", "-1")
    assert r.returncode == 1 and "Topic no-such-topic not present in metadata" in r.stderr, r.stderr
    assert "auto.create.topics.enable=false" in r.stderr
    r = strata("perf", "consume", "--bootstrap-server", bs, "--topic", "no-such-topic", "--num-records", "10")
    assert r.returncode == 1 and "Topic no-such-topic not present in metadata" in r.stderr, r.stderr
    assert "no-such-topic" not in strata("topics", "--bootstrap-server", bs, "--list").stdout.split()


def test_topic_created_on_use_where_the_broker_does_so_and_the_deprecated_names(broker, topic_name):
    """The shared broker has Kafka's default auto.create.topics.enable=true: the producer's first Metadata request
    creates the topic. --producer-props (bootstrap.servers in it) and --messages still work, with Kafka's warning."""
    r = strata("perf", "produce", "--topic", topic_name, "--num-records", "500", "--record-size", "20",
               "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=1")
    assert r.returncode == 0, r.stderr
    assert int(summary(r.stdout).group(1)) == 500
    assert "Warning: --producer-props is deprecated. Use --command-property instead." in r.stderr
    r = strata("perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic_name, "--messages", "500",
               "--timeout", "30000", "--hide-header")
    assert r.returncode == 0, r.stderr
    f = r.stdout.splitlines()[-1].split(", ")
    assert (f[2], f[4]) == (f"{500 * 20 / MIB:.4f}", "500")
    assert "Warning: --messages is deprecated. Use --num-records instead." in r.stderr


def test_bad_arguments_get_a_message_and_a_non_zero_exit(perf_cluster, tmp_path):
    bs = ["--bootstrap-server", perf_cluster.bootstrap]
    produce = ["perf", "produce", *bs, "--topic", "t", "--throughput", "-1"]
    consume = ["perf", "consume", *bs, "--topic", "t"]
    (tmp_path / "empty").write_text("")
    cases = [
        (produce + ["--record-size", "10"], 2, "the following arguments are required: --num-records"),
        (produce + ["--num-records", "5"], 2, "one of the arguments --record-size --payload-file"),
        (produce + ["--num-records", "5", "--record-size", "10", "--payload-file", "f"], 2, "not allowed with"),
        (produce + ["--num-records", "5", "--record-size", "-1"], 2, "--record-size: should be greater than zero"),
        (produce + ["--num-records", "0", "--record-size", "1"], 2, "--num-records: should be greater than zero"),
        (produce + ["--num-records", "x", "--record-size", "1"], 2, "invalid int value: 'x'"),
        (produce + ["--num-records", "5", "--record-size", "1", "--command-property", "acks"], 2,
         "Invalid property: acks"),
        (produce + ["--num-records", "5", "--record-size", "1", "--command-property", "no.such.property=1"], 1,
         'No such configuration property: "no.such.property"'),
        (produce + ["--num-records", "5", "--record-size", "1", "--warmup-records", "5"], 1,
         "--warmup-records must be strictly fewer"),
        (produce + ["--num-records", "5", "--payload-file", str(tmp_path / "empty")], 1,
         "File does not exist or empty file provided"),
        (produce + ["--num-records", "5", "--record-size", "1", "--command-config", str(tmp_path / "missing")], 1,
         "cannot read"),
        (["perf", "produce", "--topic", "t", "--num-records", "5", "--record-size", "1", "--throughput", "-1"], 1,
         "Either --bootstrap-server"),
        (["perf", "produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--num-records", "5",
          "--record-size", "1", "--throughput", "-1"], 1, "no broker of 127.0.0.1:1 answered"),
        (consume, 2, "one of the arguments --num-records --messages is required"),
        (consume + ["--num-records", "5", "--messages", "5"], 2, "not allowed with"),
        (consume + ["--num-records", "5", "--reporting-interval", "0"], 2, "should be greater than zero"),
        (consume + ["--num-records", "5", "--consumer.config", "a", "--command-config", "b"], 2, "not allowed with"),
        (consume + ["--num-records", "5", "--date-format", "EEE"], 1, "unsupported pattern letter 'E'"),
        (["perf", "consume", "--topic", "t", "--num-records", "5"], 2, "--bootstrap-server"),
        (["perf"], 2, "required"),
    ]
    for args, code, text in cases:
        r = strata(*args)
        assert r.returncode == code and text in r.stderr, (args, r.returncode, r.stderr)


def test_other_commands_do_not_load_the_client():
    r = subprocess.run([sys.executable, "-c", "import sys, tools.cli; tools.cli.parser(); "
                        "assert 'confluent_kafka' not in sys.modules, 'imported'"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_transactional_produce_commits_every_duration(perf_cluster, topic_name):
    """--transactional-id / --transaction-duration-ms (kafka-producer-perf-test.sh's): every record is committed
    (a read_committed consumer gets them all) and there are commit markers in the log, about one per duration."""
    create(perf_cluster, topic_name, partitions=1)
    r = strata("perf", "produce", "--bootstrap-server", perf_cluster.bootstrap, "--topic", topic_name,
               "--num-records", "2000", "--record-size", "100", "--throughput", "1000",
               "--transactional-id", "perf-" + topic_name, "--transaction-duration-ms", "500")
    assert r.returncode == 0, r.stderr
    assert SUMMARY.match(r.stdout.splitlines()[-1]).group(1) == "2000"
    c = Consumer({"bootstrap.servers": perf_cluster.bootstrap, "group.id": "perf-check", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 2000 and time.monotonic() < deadline:
        got += [m for m in c.consume(500, 1) if m.error() is None]
    low, high = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
    c.close()
    assert len(got) == 2000
    markers = high - 2000            # the offsets that are not records are the COMMIT markers
    assert 2 <= markers <= 8, markers
