"""What the kill -9 suites under tests/kafka/ share: three brokers of a test's own (Strata's or Apache Kafka's, the
same scenario runs on both), a topic's leader and ISR as a client sees them, and Kafka programs that print one JSON
event (or one line) per line on stdout, read by a thread as they come."""
from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests import apache_kafka as ak
from tests.cluster.conftest import CLUSTER_OVERRIDES, Cluster, stop_and_check
from tests.conftest import terminate


@contextlib.contextmanager
def three_brokers(system: str, root: Path):
    """Three brokers, RF=3 internal topics: Strata's test cluster or Apache Kafka in KRaft mode, both with the
    short timeouts of Strata's test cluster (failover about 3 s after a kill -9, where Kafka's default is 9 s)."""
    if system == "strata":
        c = Cluster(root / "strata", 3)
        try:
            start_together(c)
            yield c
        finally:
            stop_and_check(c)
    else:
        c = ak.KafkaCluster(root / "kafka", 3, dict(CLUSTER_OVERRIDES)).start()
        try:
            yield c
        finally:
            c.stop()


def start_together(c: Cluster) -> None:
    """Start the three Strata brokers; `__consumer_offsets` then has three replicas, as on Apache Kafka (it is never
    created with fewer than offsets.topic.replication.factor, however far apart the brokers start)."""
    c.start()
    deadline = time.monotonic() + 60
    while not partitions(c, "__consumer_offsets"):
        assert time.monotonic() < deadline, "__consumer_offsets not created"
        time.sleep(0.2)
    assert {len(p.replicas) for p in partitions(c, "__consumer_offsets").values()} == {len(c.brokers)}
    wait_for_isr(c, ["__consumer_offsets"], len(c.brokers))


def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def partitions(cluster, topic: str) -> dict:
    return admin(cluster).list_topics(topic, timeout=15).topics[topic].partitions


def leader(cluster, topic: str, partition: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            lead = partitions(cluster, topic)[partition].leader
            if lead in cluster.brokers:
                return lead
        except Exception:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, f"{topic}-{partition} has no leader"
        time.sleep(0.2)


def wait_for_isr(cluster, topics: list[str], size: int = 3, timeout: float = 120) -> None:
    """Until every partition of `topics` has a leader and an ISR of `size` (a restarted broker caught up)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = {(t, i): (p.leader, p.isrs) for t in topics for i, p in partitions(cluster, t).items()}
            if all(lead >= 0 and len(isr) == size for lead, isr in last.values()):
                return
        except Exception as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"ISR of {size} not reached in {timeout}s: {last}")


def create_topics(cluster, topics: dict[str, int], configs: dict | None = None) -> None:
    """Topics (name -> partitions) with three replicas, each partition led and fully in sync."""
    client = admin(cluster)                    # kept referenced until the answers come (else it is destroyed first)
    fs = client.create_topics([NewTopic(t, n, 3, config=configs or {}) for t, n in topics.items()])
    for f in fs.values():
        f.result(timeout=60)
    wait_for_isr(cluster, list(topics))


class Lines:
    """A Kafka program run as a process; a thread keeps its stdout lines (JSON objects parsed, others as text)."""

    def __init__(self, stderr_path: Path, main: str, *args: str):
        self.events: list = []
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "w")
        self.proc = subprocess.Popen(ak.java(main, *args), cwd=ak.ROOT, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            self.events.append(json.loads(line) if line.startswith("{") else line)

    def of(self, name: str) -> list[dict]:
        return [e for e in list(self.events) if isinstance(e, dict) and e["name"] == name]

    def wait_for(self, check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline or self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"{what}: not within {timeout}s (exit {self.proc.poll()})\n{self.tail()}")
            time.sleep(0.1)

    def wait_exit(self, timeout: float) -> int:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"did not exit within {timeout}s\n{self.tail()}")
        return self._finish()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM: Kafka's programs close their clients in a shutdown hook (a producer sends what it holds)."""
        terminate(self.proc, timeout)
        return self._finish()

    def _finish(self) -> int:
        self._reader.join(30)
        if not self._stderr.closed:
            self._stderr.close()
        return self.proc.returncode

    def tail(self) -> str:
        events = "\n".join(e if isinstance(e, str) else json.dumps(e) for e in self.events[-20:])
        return f"--- last lines\n{events}\n--- stderr\n{self.stderr_path.read_text(errors='replace')[-4000:]}"
