"""`strata groups` (kafka-consumer-groups.sh) against three real brokers, with real consumers in the groups: a classic
confluent-kafka group and a KIP-848 one (group.protocol=consumer). What a user reads: exact offsets and lag, members
and their assignments, states; resets that dry-run without writing and, executed, make the next consumer (kafka-python
or confluent-kafka) start where they said; deletes; and Kafka's messages with a non-zero exit for what is refused."""
from __future__ import annotations

import datetime
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer

from tests.cluster.helpers import create

ROOT = Path(__file__).resolve().parents[2]
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]


def groups(cluster, *args: str) -> subprocess.CompletedProcess:
    bootstrap = cluster.bootstrap if cluster is not None else "127.0.0.1:1"
    return subprocess.run([sys.executable, "-m", "tools.cli", "groups", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def ok(cluster, *args: str) -> subprocess.CompletedProcess:
    r = groups(cluster, *args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def table(stdout: str) -> list[list[str]]:
    """The header and rows of Kafka's whitespace-aligned tables (blank lines dropped)."""
    return [line.split() for line in stdout.splitlines() if line.strip()]


def new_offsets(stdout: str) -> dict[int, int]:
    t = table(stdout)
    assert t[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    return {int(r[2]): int(r[3]) for r in t[1:]}


def produce(cluster, topic: str, counts: dict[int, int], base_ms: int) -> None:
    """counts[p] records into partition p, record i stamped base_ms + i seconds."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, f"{partition}-{i}".encode(), partition=partition, timestamp=base_ms + i * 1000)
    assert p.flush(30) == 0


def consume(c: Consumer, n: int, timeout: float = 60) -> list[tuple[int, int]]:
    """(partition, offset) of the first n records c reads."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset()))
    assert len(got) == n, got
    return got


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def test_classic_group_lag_members_state_reset_and_delete(cluster, topic_name):
    create(cluster, topic_name, partitions=2)
    base = int(time.time() * 1000) - 3_600_000
    produce(cluster, topic_name, {0: 10, 1: 5}, base)
    group = f"{topic_name}-classic"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": "lag-checker",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([topic_name])
    consume(c, 15)
    c.commit(offsets=[TopicPartition(topic_name, 0, 4), TopicPartition(topic_name, 1, 2)], asynchronous=False)
    member = c.memberid()

    r = ok(cluster, "--describe", "--group", group)
    assert table(r.stdout) == [OFFSETS_HEADER,
                               [group, topic_name, "0", "4", "10", "6", member, "/127.0.0.1", "lag-checker"],
                               [group, topic_name, "1", "2", "5", "3", member, "/127.0.0.1", "lag-checker"]]
    assert r.stderr == ""
    r = ok(cluster, "--describe", "--group", group, "--members", "--verbose")
    assert table(r.stdout) == [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                                "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"],
                               [group, member, "/127.0.0.1", "lag-checker", "2", "-", f"{topic_name}:0,1", "-", "-"]]
    head, row = table(ok(cluster, "--describe", "--group", group, "--state").stdout)
    assert head == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert row[0] == group and row[2][1:-1] in ("1", "2", "3") and row[3:] == ["range", "Stable", "1"]
    assert group in ok(cluster, "--list").stdout.split()
    assert [group, "Classic", "Stable"] in table(ok(cluster, "--list", "--type", "--state", "stable").stdout)
    assert group not in ok(cluster, "--list", "--state", "Empty").stdout.split()

    # A live member would overwrite whatever is reset or deleted: refused, with Kafka's messages.
    r = groups(cluster, "--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest", "--execute")
    assert r.returncode == 1 and f"Assignments can only be reset if the group '{group}' is inactive, but the " \
        "current state is Stable." in r.stderr, r.stderr
    r = groups(cluster, "--delete", "--group", group)
    assert r.returncode == 1 and f"* Group '{group}' could not be deleted due to: GroupNotEmptyException: The " \
        "group is not empty." in r.stderr, r.stderr
    r = groups(cluster, "--delete-offsets", "--group", group, "--topic", topic_name)
    assert r.returncode == 1 and "partition-level error" in r.stderr
    assert all(row[2].startswith("Error: GroupSubscribedToTopicException") for row in
               (line.split(None, 2) for line in r.stdout.splitlines()[2:]))
    c.close()

    r = ok(cluster, "--describe", "--group", group)
    assert table(r.stdout)[1:] == [[group, topic_name, "0", "4", "10", "6", "-", "-", "-"],
                                   [group, topic_name, "1", "2", "5", "3", "-", "-", "-"]]
    assert f"Consumer group '{group}' has no active members." in r.stderr

    # Dry runs: the plan, clamped to [earliest, latest] as Kafka does, and nothing written.
    reset = ["--reset-offsets", "--group", group]
    r = ok(cluster, *reset, "--topic", topic_name, "--to-offset", "7", "--dry-run")
    assert new_offsets(r.stdout) == {0: 7, 1: 5}
    assert f"New offset (7) is higher than latest offset for topic partition {topic_name}-1. Value will be set " \
        "to 5." in r.stderr
    r = ok(cluster, *reset, "--topic", topic_name, "--to-datetime", iso(base + 5000), "--dry-run")
    assert new_offsets(r.stdout) == {0: 5, 1: 5}              # partition 1 has nothing that late: its end
    assert f"Partition 1 from topic {topic_name} is empty. Falling back to latest known offset." in r.stderr
    r = ok(cluster, *reset, "--all-topics", "--by-duration", "PT2H")          # neither: a dry run, as Kafka
    assert new_offsets(r.stdout) == {0: 0, 1: 0} and "WARN: No action will be performed" in r.stderr
    assert new_offsets(ok(cluster, *reset, "--topic", f"{topic_name}:1", "--to-latest", "--dry-run").stdout) == \
        {1: 5}
    assert new_offsets(ok(cluster, *reset, "--all-topics", "--shift-by", "-3", "--dry-run").stdout) == {0: 1, 1: 0}
    assert new_offsets(ok(cluster, *reset, "--all-topics", "--to-current", "--dry-run").stdout) == {0: 4, 1: 2}
    assert table(ok(cluster, "--describe", "--group", group).stdout)[1][3] == "4"

    r = ok(cluster, *reset, "--topic", topic_name, "--to-offset", "7", "--execute")
    assert new_offsets(r.stdout) == {0: 7, 1: 5}
    assert [row[3:6] for row in table(ok(cluster, "--describe", "--group", group).stdout)[1:]] == \
        [["7", "10", "3"], ["5", "5", "0"]]
    # The next member of the group (kafka-python this time) starts exactly there.
    k = KafkaConsumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:
        for msgs in k.poll(200).values():
            got += [(m.partition, m.offset) for m in msgs]
    k.close()
    assert got == [(0, 7), (0, 8), (0, 9)]

    r = ok(cluster, "--delete-offsets", "--group", group, "--topic", f"{topic_name}:1")
    assert r.stdout.splitlines()[0] == f"Request succeeded for deleting offsets from group {group}."
    assert table(r.stdout)[-1] == [topic_name, "1", "Successful"]
    assert [row[2] for row in table(ok(cluster, "--describe", "--group", group).stdout)[1:]] == ["0"]
    r = ok(cluster, "--delete", "--group", group)
    assert r.stdout.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert group not in ok(cluster, "--list").stdout.split()
    for args, message in ((["--describe", "--group", group], f"Consumer group '{group}' does not exist."),
                          (["--describe", "--group", group, "--members"], f"Consumer group '{group}' does not exist."),
                          (["--delete", "--group", group], f"* Group '{group}' could not be deleted due to: "
                                                           "GroupIdNotFoundException: The group id does not exist."),
                          (["--delete-offsets", "--group", group, "--topic", topic_name],
                           "The group id does not exist."),
                          ([*reset, "--topic", "no-such-topic", "--to-latest", "--execute"],
                           "This server does not host this topic-partition. (topic 'no-such-topic')"),
                          ([*reset, "--topic", f"{topic_name}:2", "--to-latest", "--execute"],
                           f'The partitions "{topic_name}-2" do not exist'),
                          ([*reset, "--topic", topic_name, "--shift-by", "1", "--execute"],
                           f"Cannot shift offset for partition {topic_name}-0 since there is no current committed "
                           "offset")):
        r = groups(cluster, *args)
        assert r.returncode == 1 and message in r.stderr, (args, r.stdout, r.stderr)


def test_consumer_protocol_group_describe_reset_and_delete(cluster, topic_name):
    create(cluster, topic_name, partitions=2)
    produce(cluster, topic_name, {0: 6, 1: 4}, int(time.time() * 1000))
    group = f"{topic_name}-kip848"
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer",
            "client.id": "kip848", "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    c = Consumer(conf)
    c.subscribe([topic_name])
    consume(c, 10)
    c.commit(offsets=[TopicPartition(topic_name, 0, 1), TopicPartition(topic_name, 1, 4)], asynchronous=False)
    member = c.memberid()

    assert table(ok(cluster, "--describe", "--group", group).stdout) == [
        OFFSETS_HEADER, [group, topic_name, "0", "1", "6", "5", member, "/127.0.0.1", "kip848"],
        [group, topic_name, "1", "4", "4", "0", member, "/127.0.0.1", "kip848"]]
    head, row = table(ok(cluster, "--describe", "--group", group, "--state", "--verbose").stdout)
    assert head == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                    "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert row[3:5] == ["uniform", "Stable"] and row[7] == "1"
    epoch = row[6]
    assert table(ok(cluster, "--describe", "--group", group, "--members", "--verbose").stdout)[1] == \
        [group, member, "/127.0.0.1", "kip848", "2", epoch, f"{topic_name}:0,1", epoch, f"{topic_name}:0,1"]
    assert [group, "Consumer", "Stable"] in table(ok(cluster, "--list", "--type", "consumer", "--state").stdout)
    assert group not in ok(cluster, "--list", "--type", "classic").stdout.split()
    r = groups(cluster, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute")
    assert r.returncode == 1 and "is inactive, but the current state is Stable." in r.stderr
    c.close()

    r = ok(cluster, "--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest", "--execute")
    assert new_offsets(r.stdout) == {0: 0, 1: 0}
    c = Consumer(conf)
    c.subscribe([topic_name])
    got = consume(c, 10)
    c.close()
    assert sorted(got) == [(0, i) for i in range(6)] + [(1, i) for i in range(4)]
    assert ok(cluster, "--delete", "--group", group).stdout.strip() == \
        f"Deletion of requested consumer groups ('{group}') was successful."


def test_bad_arguments_get_kafkas_message_and_a_non_zero_exit():
    """Checked before any broker is asked (the bootstrap here answers nothing); usage errors exit 2."""
    cases = [
        (["--list", "--describe"], "Command must include exactly one action: --list, --describe, --delete, "
                                   "--reset-offsets, --delete-offsets"),
        ([], "Command must include exactly one action"),
        (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
        (["--describe", "--group", "g", "--members", "--state"],
         "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
        (["--describe", "--group", "g", "--state", "Stable"], "Option [describe] does not take a value for [state]"),
        (["--describe", "--group", "g", "--all-groups"], 'Option "[group]" can\'t be used with option "[all-groups]"'),
        (["--list", "--members"], "Option(s) [members] are unavailable given other options on the command line"),
        (["--list", "--state", "sleeping"], "Invalid state list 'sleeping'. Valid states are: "),
        (["--list", "--type", "share"], "Invalid types list 'share'. Valid types are: Classic, Consumer"),
        (["--delete"], "Option [delete] takes one of these options: [all-groups], [group]"),
        (["--delete", "--group", "g", "--topic", "t"], "The consumer does not support topic-specific offset deletion"),
        (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], "
                                               "[topic]"),
        (["--reset-offsets", "--topic", "t", "--to-latest"], "Option [reset-offsets] takes one of these options"),
        (["--reset-offsets", "--group", "g", "--topic", "t"], "Option '[reset-offsets]' requires one of the "
                                                             "following scenarios: [to-offset], [to-datetime]"),
        (["--reset-offsets", "--group", "g", "--to-latest"], "One of the reset scopes should be defined: "
                                                            "--all-topics, --topic."),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
         'Option "[to-earliest]" can\'t be used with option "[to-latest]"'),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-latest", "--dry-run", "--execute"],
         "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "2024-01-01 00:00:00"],
         "It does not contain a 'T' according to ISO8601 format"),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "2024-01-01T00:00:00"],
         'Unparseable date: "2024-01-01T00:00:00"'),
        (["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "2h"],
         "Text cannot be parsed to a Duration"),
        (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-latest"],
         "Invalid partition 'x' specified in topic arg 't:x'"),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-offset", "ten"], "invalid int value: 'ten'"),
    ]
    for args, message in cases:
        r = groups(None, *args)
        assert r.returncode == 2 and message in r.stderr, (args, r.returncode, r.stderr)
    r = groups(None, "--list")
    assert r.returncode == 1 and "no broker of 127.0.0.1:1 answered" in r.stderr
