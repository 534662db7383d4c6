"""`strata reassign` (kafka-reassign-partitions.sh) against three real brokers: a partition with records moves from
broker 1 to brokers 2 and 3 and every record is then read from them; a move that waits for a dead broker is listed,
verified, followed with --progress, cancelled, and completes once the broker is back; bad arguments get Kafka's
messages and exit 1 with nothing started."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from tests.cluster.helpers import consume_all
from tests.integration.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def strata(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def reassign(cluster, *args: str) -> subprocess.CompletedProcess:
    return strata("reassign", "--bootstrap-server", cluster.bootstrap, *args)


def wait_replicas(cluster, topic: str, replicas: dict[int, list[int]]) -> None:
    """Until every live broker's metadata gives the partitions of `topic` these replicas: the controller has applied
    a move or a cancellation when the tool says so, and each broker applies it from the metadata log a little later
    (CI once read [2, 3, 1] from a broker 0.1 s after "completed")."""
    def check(md) -> bool:
        got = {p.partition_index: list(p.replica_nodes) for p in md.topics[0].partitions}
        return all(got.get(p) == r for p, r in replicas.items())
    cluster.wait_every_broker(check, [topic], 30, f"{topic} on {replicas}")


def create_on_broker_1(cluster, topic: str, partitions: int, records: int) -> set[bytes]:
    """`topic` with every partition on broker 1 alone, and `records` acknowledged records in each."""
    admin = cluster.admin()
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                           replica_assignment=[[1]] * partitions)]).values():
        f.result(30)
    for p in range(partitions):
        cluster.wait_for_isr(topic, 1, p)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    values = set()
    for p in range(partitions):
        for i in range(records):
            value = f"{p}-{i}-".encode() + b"x" * 200
            producer.produce(topic, value, partition=p)
            values.add(value)
    assert producer.flush(60) == 0
    return values


def write_json(tmp_path: Path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def moves(topic: str, targets: dict[int, list[int]]) -> dict:
    return {"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": r} for p, r in targets.items()]}


def test_generate_execute_verify_moves_records_to_the_new_replicas(cluster, topic_name, tmp_path):
    values = create_on_broker_1(cluster, topic_name, 2, 3000)
    topics = write_json(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": topic_name}]})
    r = reassign(cluster, "--generate", "--topics-to-move-json-file", topics, "--broker-list", "2,3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[2] == "" and \
        lines[3] == "Proposed partition reassignment configuration"
    assert json.loads(lines[1]) == {"version": 1, "partitions": [
        {"topic": topic_name, "partition": p, "replicas": [1], "log_dirs": ["any"]} for p in (0, 1)]}
    proposed = json.loads(lines[4])["partitions"]
    assert [(e["topic"], e["partition"], len(e["replicas"]), e["log_dirs"]) for e in proposed] == \
        [(topic_name, 0, 1, ["any"]), (topic_name, 1, 1, ["any"])]
    # round robin over the given brokers only: one partition on each
    assert sorted(e["replicas"][0] for e in proposed) == [2, 3]

    plan = write_json(tmp_path, "plan.json", moves(topic_name, {0: [2, 3], 1: [3, 2]}))
    r = reassign(cluster, "--execute", "--reassignment-json-file", plan)
    assert r.returncode == 0, r.stderr
    rollback = json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": p, "replicas": [1], "log_dirs": ["any"]} for p in (0, 1)]},
        separators=(",", ":"))
    assert r.stdout.splitlines() == [
        "Current partition replica assignment", "", rollback, "",
        "Save this to use as the --reassignment-json-file option during rollback",
        f"Successfully started partition reassignments for {topic_name}-0,{topic_name}-1"]

    r = reassign(cluster, "--verify", "--reassignment-json-file", plan, "--progress", "--progress-interval-ms", "200")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(line.startswith("Progress: ") for line in lines[:-3])
    assert lines[-4] == "Progress: 2/2 partitions reassigned"
    assert lines[-3:] == ["Status of partition reassignment:",
                          f"Reassignment of partition {topic_name}-0 is completed.",
                          f"Reassignment of partition {topic_name}-1 is completed."]
    wait_replicas(cluster, topic_name, {0: [2, 3], 1: [3, 2]})
    assert reassign(cluster, "--list").stdout == "No partition reassignments found.\n"
    # broker 1 dropped its copies; the records are all read back from brokers 2 and 3 with broker 1 gone
    wait_until(lambda: not list((cluster.brokers[1].data_dir / "logs").glob(f"{topic_name}-*")),
               what="broker 1 to delete its replicas")
    cluster.brokers[1].stop()
    got = consume_all(cluster.bootstrap, topic_name, len(values))
    assert sorted(m.value() for m in got) == sorted(values)


def test_a_move_waiting_for_a_dead_broker_is_listed_followed_cancelled_and_completed(cluster, topic_name, tmp_path):
    values = create_on_broker_1(cluster, topic_name, 1, 3000)
    tp = f"{topic_name}-0"
    plan = write_json(tmp_path, "plan.json", moves(topic_name, {0: [2, 3]}))
    cluster.brokers[3].kill9()
    # Kafka's tool (and ours) refuses a broker that is not alive; the API takes any registered broker, so a real
    # client starts a move that cannot finish while broker 3 is down
    wait_until(lambda: 3 not in cluster.admin().list_topics(timeout=10).brokers, what="broker 3 to be fenced")
    r = reassign(cluster, "--execute", "--reassignment-json-file", plan)
    assert (r.returncode, r.stdout) == (1, "") and "Unknown broker id 3" in r.stderr, r.stderr
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        assert kadmin.alter_partition_reassignments({TopicPartition(topic_name, 0): [2, 3]}) == \
            {TopicPartition(topic_name, 0): None}
        assert reassign(cluster, "--list").stdout.splitlines() == [
            "Current partition reassignments:", f"{tp}: replicas: 2,3,1. adding: 2,3. removing: 1."]
        assert reassign(cluster, "--verify", "--reassignment-json-file", plan).stdout.splitlines() == [
            "Status of partition reassignment:", f"Reassignment of partition {tp} is still in progress."]
        r = reassign(cluster, "--execute", "--reassignment-json-file", plan)
        assert r.returncode == 1 and "Cannot execute because there is an existing partition assignment." in r.stderr

        r = reassign(cluster, "--cancel", "--reassignment-json-file", plan)
        assert (r.returncode, r.stdout.splitlines()) == (0, [
            f"Successfully cancelled partition reassignment for: {tp}",
            "None of the specified partition moves are active."]), r.stderr
        assert reassign(cluster, "--verify", "--reassignment-json-file", plan).stdout.splitlines() == [
            "Status of partition reassignment:",
            f"There is no active reassignment of partition {tp}, but replica set is 1 rather than 2,3."]
        assert reassign(cluster, "--list").stdout == "No partition reassignments found.\n"
        assert reassign(cluster, "--cancel", "--reassignment-json-file", plan).stdout.splitlines()[0] == \
            "None of the specified partition reassignments are active."
        wait_replicas(cluster, topic_name, {0: [1]})
        wait_until(lambda: not (cluster.brokers[2].data_dir / "logs" / tp).exists(),
                   what="broker 2 to drop the cancelled replica")
        # DescribeLogDirs (kafka-python): broker 1 holds the partition, with its records' bytes
        dirs = {d["broker"]: d["log_dirs"] for d in kadmin.describe_log_dirs({topic_name: [0]}, brokers=[1, 2])}
        [dir1], [dir2] = dirs[1], dirs[2]
        assert dir1["log_dir"] == str((cluster.brokers[1].data_dir / "logs").resolve()) and dir1["error_code"] == 0
        [t1] = dir1["topics"]
        [p1] = t1["partitions"]
        assert t1["name"] == topic_name and p1["partition_index"] == 0 and p1["partition_size"] > 3000 * 200
        assert (p1["offset_lag"], p1["is_future_key"]) == (0, False)
        assert dir2["topics"] == [] and dir2["total_bytes"] >= dir2["usable_bytes"] > 0

        # again, followed with --progress: broker 2 copies everything, broker 3 is down; then broker 3 comes back
        assert kadmin.alter_partition_reassignments({TopicPartition(topic_name, 0): [2, 3]}) == \
            {TopicPartition(topic_name, 0): None}
    finally:
        kadmin.close()
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "reassign", "--bootstrap-server", cluster.bootstrap,
                             "--verify", "--reassignment-json-file", plan, "--progress",
                             "--progress-interval-ms", "200"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if "(100%)" in line:
                break
        assert seen[-1].startswith(f"Progress: 0/1 partitions reassigned; {tp}: broker 2 has ") and \
            seen[-1].endswith("(100%), broker 3 unreachable"), seen
        size = seen[-1].split("broker 2 has ")[1].split(" of ")
        assert size[0] == size[1].split(" (")[0]                           # as many bytes as the leader
        cluster.brokers[3].start()
        rest = proc.stdout.read().splitlines()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rest[-3:] == ["Progress: 1/1 partitions reassigned", "Status of partition reassignment:",
                         f"Reassignment of partition {tp} is completed."]
    wait_replicas(cluster, topic_name, {0: [2, 3]})
    cluster.brokers[1].stop()
    got = consume_all(cluster.bootstrap, topic_name, len(values))
    assert sorted(m.value() for m in got) == sorted(values)


def test_bad_arguments_get_kafkas_messages_and_start_nothing(cluster, topic_name, tmp_path):
    create_on_broker_1(cluster, topic_name, 1, 10)
    t = topic_name
    plan = write_json(tmp_path, "ok.json", moves(t, {0: [2, 3]}))
    topics = write_json(tmp_path, "topics.json", {"topics": [{"topic": t}]})

    def file(data) -> str:
        return write_json(tmp_path, f"f{abs(hash(str(data)))}.json", data)

    def ex(data) -> list[str]:
        return ["--execute", "--reassignment-json-file", file(data)]
    cases = [
        (["--list", "--verify"], "Command must include exactly one action: --generate, --execute, --verify, "
                                 "--cancel, --list"),
        ([], "Command must include exactly one action"),
        (["--execute"], 'Missing required argument "[reassignment-json-file]"'),
        (["--generate", "--broker-list", "2"], 'Missing required argument "[topics-to-move-json-file]"'),
        (["--execute", "--reassignment-json-file", plan, "--broker-list", "2"],
         'Option "[broker-list]" can\'t be used with action "[execute]"'),
        (["--list", "--progress"], 'Option "[progress]" can\'t be used with action "[list]"'),
        (["--execute", "--reassignment-json-file", plan, "--throttle", "1000"], "--throttle is not supported"),
        (["--execute", "--reassignment-json-file", str(tmp_path / "missing.json")],
         f"Cannot read {tmp_path / 'missing.json'}: No such file or directory"),
        (ex("{invalid_json"), "The input string is not a valid JSON"),
        (ex({"version": 2, "partitions": []}), "Not supported version field value 2"),
        (ex({"partitions": [{"topic": t, "partition": 0}]}), "No such field exists: `replicas`"),
        (ex({"partitions": [{"topic": t, "partition": "0", "replicas": [2]}]}), 'Expected `Int` value, received "0"'),
        (ex({"version": 1, "partitions": []}), "Partition reassignment list cannot be empty"),
        (ex(moves(t, {0: []})), "Partition replica list cannot be empty"),
        (ex({"partitions": [{"topic": t, "partition": 0, "replicas": [2]}] * 2}),
         f"Partition reassignment contains duplicate topic partitions: {t}-0"),
        (ex(moves(t, {0: [2, 2]})), f"Partition replica lists may not contain duplicate entries: {t}-0 contains "
                                    f"multiple entries for 2"),
        (ex({"partitions": [{"topic": t, "partition": 0, "replicas": [2, 3], "log_dirs": ["any"]}]}),
         f"Size of replicas list [2, 3] is different from size of log dirs list [any] for partition {t}-0"),
        (ex({"partitions": [{"topic": t, "partition": 0, "replicas": [2], "log_dirs": ["/data"]}]}),
         'log_dirs other than "any" are not supported'),
        (ex(moves(t, {0: [2, 7]})), "Unknown broker id 7"),
        (ex(moves("nosuch", {0: [2]})), "Topic nosuch not found."),
        (ex(moves(t, {5: [2]})), f"Unable to find partition: {t}-5"),
        (["--generate", "--topics-to-move-json-file", topics, "--broker-list", "2,x"], 'For input string: "x"'),
        (["--generate", "--topics-to-move-json-file", topics, "--broker-list", "2,2"],
         "Broker list contains duplicate entries: [2]"),
        (["--generate", "--topics-to-move-json-file", file({"topics": [{"topic": "nosuch"}]}), "--broker-list", "2"],
         "Topic nosuch not found."),
        (["--generate", "--topics-to-move-json-file", topics, "--broker-list", "7"],
         "Replication factor: 1 larger than available brokers: 0."),
        (["--generate", "--topics-to-move-json-file", file("[1"), "--broker-list", "2"],
         "The input string is not a valid JSON"),
    ]
    for args, text in cases:
        r = reassign(cluster, *args)
        assert (r.returncode, r.stdout) == (1, "") and text in r.stderr and \
            r.stderr.startswith("Error while executing reassign command : "), (args, r.returncode, r.stdout, r.stderr)
    r = strata("reassign", "--list")
    assert r.returncode == 2 and "--bootstrap-server" in r.stderr
    assert reassign(cluster, "--list").stdout == "No partition reassignments found.\n"
    assert cluster.partition(t).replicas == [1]
