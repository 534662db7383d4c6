"""Apache Kafka beside Strata: its jars (resolved by deploy/apache-kafka/resolve.sh), its command-line tools and
Java programs run as a Kafka user runs them, and real KRaft Apache Kafka brokers as processes on loopback ports.

Used by the tests under tests/kafka/ and by bench/vs_kafka.py. Everything here is a process: a JVM per tool run, a
JVM per broker. `skip_reason()` says why Kafka cannot run here (no java, no mvn); nothing else is skipped.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from tests.conftest import free_port, terminate

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "apache-kafka"
JAVA_SOURCES = Path(__file__).resolve().parent / "kafka" / "java"
# Tools and clients: a small heap, the quick JIT tier and the serial collector (start-up dominates a tool run).
TOOL_JVM = ["-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
# Brokers: Kafka's own defaults (G1, full JIT), a heap sized for this 2-core, 24 GiB machine.
BROKER_JVM = ["-Xms512m", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
              "-Dorg.slf4j.simpleLogger.defaultLogLevel=info", "-Dorg.slf4j.simpleLogger.showDateTime=true"]


def skip_reason() -> str | None:
    """Why Apache Kafka's jars cannot be used here, or None. Resolves them on first use."""
    try:
        subprocess.run([str(ROOT / "deploy" / "apache-kafka" / "resolve.sh")], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=900)
    except FileNotFoundError as e:
        return f"deploy/apache-kafka/resolve.sh could not run: {e}"
    missing = CACHE / "missing"
    if missing.exists():
        return f"Apache Kafka suites need java and mvn: {missing.read_text().strip()}"
    return None


def classpath() -> str:
    return (CACHE / "classpath.txt").read_text().strip()


def spark_jars() -> list[str]:
    """Spark's own Kafka source and what it needs beyond PySpark's own jars (those are left out, as Spark's
    `--packages` resolution would find them provided)."""
    import pyspark
    provided = {p.name.rsplit("-", 1)[0] for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    jars = (CACHE / "spark-classpath.txt").read_text().strip().split(":")
    return [j for j in jars if Path(j).name.rsplit("-", 1)[0] not in provided]


def java(main: str, *args: str, jvm: list[str] | None = None) -> list[str]:
    """The command line that runs `main` (a class, or a tests/kafka/java/*.java single-file program) with Kafka's
    jars, as Kafka's bin/kafka-run-class.sh does."""
    target = str(JAVA_SOURCES / main) if main.endswith(".java") else main
    return ["java", *(jvm or TOOL_JVM), "-cp", classpath(), target, *args]


def run(main: str, *args: str, timeout: float = 120, check: bool = True, input: str | None = None,
        jvm: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run a tool to completion; stdout and stderr captured as text. `check` raises with both on a non-zero exit."""
    p = subprocess.run(java(main, *args, jvm=jvm), capture_output=True, text=True, timeout=timeout, input=input,
                       cwd=ROOT)
    if check and p.returncode != 0:
        raise AssertionError(f"{main} {' '.join(args)} exited {p.returncode}\n--- stdout\n{p.stdout[-4000:]}\n"
                             f"--- stderr\n{p.stderr[-4000:]}")
    return p


class KafkaNode:
    """One KRaft Apache Kafka node (broker and controller in one process), formatted as kafka-storage.sh does."""

    def __init__(self, data_dir: Path, node_id: int, port: int, controller_port: int, voters: str,
                 overrides: dict[str, str]):
        self.data_dir = data_dir
        self.node_id = node_id
        self.port = port
        self.config = {
            "process.roles": "broker,controller", "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data_dir / "logs"), **overrides}
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir / "kafka.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def properties(self) -> Path:
        return self.data_dir / "server.properties"

    def format(self, cluster_id: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
        run("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties), "--ignore-formatted")

    def start(self, wait: bool = True, timeout: float = 60) -> "KafkaNode":
        """Start the process (formatted already); with `wait`, until it listens. A restart keeps the data."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(java("kafka.Kafka", str(self.properties), jvm=BROKER_JVM), cwd=ROOT,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_listening(timeout)
        return self

    def wait_listening(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"kafka {self.node_id} exited:\n{self.log_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"kafka {self.node_id} did not listen within {timeout}s:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> None:
        if self.proc is None:
            return
        terminate(self.proc, timeout)
        self.proc = None
        self._log.close()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self._log.close()

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


class KafkaCluster:
    """`size` KRaft nodes, each broker and controller, a static quorum of all of them. Internal topics get
    min(3, size) replicas; otherwise Kafka's defaults, with the first group rebalance not delayed (as Strata's
    tests run)."""

    def __init__(self, root: Path, size: int = 1, overrides: dict[str, str] | None = None):
        self.root = root
        ports = [(free_port(), free_port()) for _ in range(size)]
        voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports, start=1))
        rf = str(min(3, size))
        base = {"offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": str(min(2, size)), "group.initial.rebalance.delay.ms": "0",
                "num.partitions": "1", **(overrides or {})}
        self.nodes = {i: KafkaNode(root / f"kafka-{i}", i, p, c, voters, base)
                      for i, (p, c) in enumerate(ports, start=1)}
        # Same names as tests.cluster.conftest.Cluster, so a scenario can take either.
        self.brokers = self.nodes

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.alive())

    def start(self, timeout: float = 90) -> "KafkaCluster":
        cluster_id = _kafka_uuid()
        for n in self.nodes.values():
            n.format(cluster_id)
        for n in self.nodes.values():
            n.start(wait=False)
        for n in self.nodes.values():
            n.wait_listening(timeout)
        self.wait_for_brokers(len(self.nodes), timeout)
        return self

    def wait_for_brokers(self, n: int, timeout: float = 90) -> None:
        """Until a Metadata answer lists `n` brokers (KRaft registers them with the controller quorum first)."""
        from tests.integration.rawclient import RawClient
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with RawClient(self.bootstrap.split(",")[0]) as raw:
                    md = raw.metadata([], auto_create=False)
                if len(md.brokers) >= n and md.controller_id >= 0:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"Apache Kafka did not list {n} brokers:\n{self.logs()}")

    def stop(self) -> None:
        # SIGTERM to every node first: one by one, the last nodes wait for a controller quorum the others already
        # left (three nodes took ~35 s one by one, ~7 s together).
        for n in self.nodes.values():
            if n.proc is not None and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGTERM)
        for n in self.nodes.values():
            n.stop()

    def logs(self) -> str:
        return "\n".join(f"--- kafka {i}\n{n.log_text()[-4000:]}" for i, n in self.nodes.items())


def _kafka_uuid() -> str:
    """A cluster id as `kafka-storage.sh random-uuid` prints it: 16 random bytes, URL-safe base64, no padding; like
    Kafka's Uuid.randomUuid, never one starting with "-" (kafka-storage's `-t` would take it for an option)."""
    import base64
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


def environment_note() -> dict[str, str]:
    """The versions a result was measured with."""
    import re
    pom = (ROOT / "deploy" / "apache-kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka.version>(.*)</kafka.version>", pom).group(1)
    java_version = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return {"apache_kafka": version, "java": java_version, "pid": str(os.getpid())}
