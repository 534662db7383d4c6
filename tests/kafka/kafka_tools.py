"""Running Apache Kafka's command-line tools side by side (tests/kafka/test_kafka_tools.py): each tool is its main
class on Kafka's classpath (what bin/kafka-*.sh run), once against Apache Kafka and once against Strata, in two
threads; the output a user reads is normalized (addresses, topic ids, member ids, timestamps) and compared."""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import apache_kafka as ak

TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"                  # kafka-configs.sh in 4.1 (kafka_2.13's jar)
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"

# Log lines of the tools' clients (connection warnings while a broker is down, ...) and stack frames: not what the
# tool says to its user. Its own ERROR lines stay.
_NOISE = re.compile(r"^\[[^\]]*\] (WARN|INFO|DEBUG) |^\s+at |^\s+\.\.\. \d+ more")


@dataclass(frozen=True)
class Run:
    rc: int
    out: str           # stdout, normalized
    err: str           # stderr without client log lines and stack frames, normalized

    def lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def text(self) -> str:
        """What the user sees in the terminal: stdout, then stderr."""
        return self.out + self.err


def normalize(text: str) -> str:
    text = re.sub(r"127\.0\.0\.1:\d+", "<addr>", text)
    text = re.sub(r"TopicId: \S+", "TopicId: <id>", text)
    text = re.sub(r"ClusterId:\s+\S+", "ClusterId: <id>", text)
    text = re.sub(r"\b\d{13}\b", "<ts>", text)                       # epoch milliseconds
    text = re.sub(r"\b\d+ ms ago\b", "<ago>", text)
    text = re.sub(r"\b([\w.-]+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", r"\1-<uuid>", text)
    text = re.sub(r"deadlineMs=\d+|tries=\d+|nextAllowedTryMs=\d+", "", text)
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def without_elr_default(text: str) -> str:
    """Kafka 4.1 formats a new cluster with eligible leader replicas on (KIP-966), and its controller then keeps
    `min.insync.replicas` as a cluster-wide dynamic default (a ConfigRecord of the default BROKER resource), which
    kafka-topics.sh shows among a topic's configs and kafka-configs.sh among the cluster's defaults. Strata has no
    ELR and no such record: that config is dropped from both sides' output before comparing."""
    out = []
    for line in text.splitlines():
        if "Configs: " in line:
            head, configs = line.split("Configs: ", 1)
            line = head + "Configs: " + ",".join(c for c in configs.split(",") if c and c != "min.insync.replicas=1")
        elif line == "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" \
                    "min.insync.replicas=1}":
            continue
        out.append(line.replace("DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1, ", "").rstrip() + "\n")
    return "".join(out)


def sorted_isr(text: str) -> str:
    """kafka-topics.sh's `Isr:` column with its brokers sorted: Kafka lists the ISR in the order replicas joined it
    (a broker back in sync comes last), Strata in assignment order; the members are what a user reads."""
    return re.sub(r"Isr: ([\d,]+)", lambda m: "Isr: " + ",".join(sorted(m.group(1).split(","), key=int)), text)


def three_brokers(text: str) -> str:
    return sorted_isr(without_elr_default(text))


class Side:
    """One broker or cluster under test: `target` has `.bootstrap` (the live brokers)."""

    def __init__(self, name: str, target):
        self.name = name
        self.target = target
        self._admins: dict[str, AdminClient] = {}

    @property
    def bootstrap(self) -> str:
        return self.target.bootstrap

    def run(self, main: str, *args: str, input: str | None = None, timeout: float = 180) -> Run:
        p = ak.run(main, "--bootstrap-server", self.bootstrap, *args, check=False, timeout=timeout, input=input)
        err = "\n".join(line for line in p.stderr.splitlines() if not _NOISE.search(line))
        return Run(p.returncode, normalize(p.stdout), normalize(err))

    def admin(self) -> AdminClient:
        """One admin client per bootstrap list (a cluster's shrinks while a broker is down)."""
        if self.bootstrap not in self._admins:
            self._admins[self.bootstrap] = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admins[self.bootstrap]

    def create(self, topics: dict[str, int], rf: int = 1) -> None:
        fs = self.admin().create_topics([NewTopic(t, n, rf) for t, n in topics.items()])
        for f in fs.values():
            f.result(timeout=60)
        for t, n in topics.items():
            eventually(lambda: len(self.partitions(t)) == n and all(p.leader >= 0 for p in
                                                                     self.partitions(t).values()),
                       f"{self.name}: {t} with a leader for each of {n} partitions")

    def partitions(self, topic: str) -> dict:
        t = self.admin().list_topics(topic, timeout=20).topics[topic]
        return {} if t.error is not None else t.partitions

    def produce(self, topic: str, partitions: int, count: int, base_ts: int) -> None:
        """`count` records into each partition, record i stamped base_ts + i seconds."""
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        failed = []
        for part in range(partitions):
            for i in range(count):
                p.produce(topic, value=f"v{i}".encode(), partition=part, timestamp=base_ts + i * 1000,
                          on_delivery=lambda err, _m: err and failed.append(err))
        assert p.flush(60) == 0 and not failed, (self.name, failed)


def both(kafka: Side, strata: Side, steps: Callable[[Side], dict]) -> tuple[dict, dict]:
    """`steps` against both, at the same time (each side's steps run in order)."""
    with ThreadPoolExecutor(2) as ex:
        fk, fs = ex.submit(steps, kafka), ex.submit(steps, strata)
        return fk.result(), fs.result()


def same(k: dict, s: dict, keys=None, fix: Callable[[str], str] = lambda t: t) -> None:
    """Each step's exit code, output and messages are Kafka's."""
    for key in keys or k:
        kr, sr = k[key], s[key]
        assert (sr.rc, fix(sr.out), fix(sr.err)) == (kr.rc, fix(kr.out), fix(kr.err)), \
            f"step {key!r}:\n--- Apache Kafka (exit {kr.rc})\n{kr.out}{kr.err}\n--- Strata (exit {sr.rc})\n{sr.out}{sr.err}"


def eventually(check: Callable[[], object], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {what}")
        time.sleep(0.3)


def partition_lines(run: Run, topic: str) -> dict[int, dict[str, str]]:
    """kafka-topics.sh --describe's partition lines of `topic`: {partition: {Leader, Replicas, Isr (sorted), ...}}."""
    out = {}
    for line in run.lines():
        fields = dict(re.findall(r"(\w+): ?([^\t]*)", line.strip()))
        if line.startswith("\t") and fields.get("Topic") == topic:
            fields["Isr"] = ",".join(sorted(fields["Isr"].split(",")))
            out[int(fields.pop("Partition"))] = fields
    return out


def table(run: Run, header: str = "GROUP") -> list[list[str]]:
    """The rows of a tool's whitespace-separated table, from its header line (the first starting with `header`)
    on; blank lines dropped."""
    lines = run.lines()
    start = next((i for i, line in enumerate(lines) if line.split()[:1] == [header]), len(lines))
    return [line.split() for line in lines[start:] if line.strip()]
