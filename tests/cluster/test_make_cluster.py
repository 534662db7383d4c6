"""`make cluster`: deploy/cluster/run_cluster.py starts three brokers from deploy/cluster/broker-N.properties, keeps
running when one dies (without restarting it) and stops the rest on SIGINT. The launcher runs itself here, moved to
free ports (--port-offset) and a temporary data dir (--data-dir), since 9092-9094 and 9101-9103 may be taken."""
from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.config import parse_properties
from tests.conftest import ROOT

LAUNCHER = ROOT / "deploy" / "cluster" / "run_cluster.py"
LISTENERS = (9092, 9093, 9094)
METRICS = (9101, 9102, 9103)


def test_properties_files_describe_the_three_brokers():
    for node, port, metrics, rack in zip((1, 2, 3), LISTENERS, METRICS, "abc"):
        p = parse_properties((ROOT / "deploy" / "cluster" / f"broker-{node}.properties").read_text())
        assert p["node.id"] == str(node) and p["broker.rack"] == rack
        assert p["replica.selector.class"] == "org.apache.kafka.common.replica.RackAwareReplicaSelector"
        assert p["listeners"] == f"PLAINTEXT://127.0.0.1:{port}" and p["metrics.port"] == str(metrics)
        assert p["log.dirs"] == f"./data/cluster/broker-{node}/logs"
        assert p["metadata.log.storage.url"] == "file://./data/cluster/metadata"
        assert p["remote.log.storage.system.enable"] == "true"
        assert p["remote.log.storage.manager.store.url"] == "file://./data/cluster/remote"
        assert p["remote.wal.storage.url"] == "file://./data/cluster/fast"
        assert (p["default.replication.factor"], p["offsets.topic.replication.factor"],
                p["min.insync.replicas"]) == ("3", "3", "2")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _port_offset() -> int:
    """An offset that puts all six ports below the ephemeral range and on free ports."""
    for _ in range(200):
        off = random.randrange(1000, 20000)
        if all(_bindable(p + off) for p in LISTENERS + METRICS):
            return off
    raise RuntimeError("no free port range")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(pid, 0): only its parent can reap it
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait(predicate, timeout: float, what: str, output=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{output()[-6000:]}")


def test_make_cluster_launcher(tmp_path, topic_name):
    off = _port_offset()
    data = tmp_path / "cluster"
    out_path = tmp_path / "launcher.out"
    bootstrap = ",".join(f"127.0.0.1:{p + off}" for p in LISTENERS)
    with open(out_path, "wb") as out:
        launcher = subprocess.Popen([sys.executable, str(LAUNCHER), "--port-offset", str(off), "--data-dir", str(data)],
                                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
    output = lambda: out_path.read_text(errors="replace")
    pids: dict[int, int] = {}
    try:
        started = _wait(lambda: re.findall(r"started broker-(\d) \(pid (\d+)\)", output()) if
                        len(re.findall(r"started broker-\d", output())) == 3 else None, 30, "three brokers", output)
        pids = {int(n): int(pid) for n, pid in started}
        assert sorted(pids) == [1, 2, 3]
        for n, pid in pids.items():                 # the pid files name the same processes
            assert int((data / f"broker-{n}.pid").read_text()) == pid

        admin = AdminClient({"bootstrap.servers": bootstrap})    # kept while its futures are pending

        def cluster_up():
            try:
                md = admin.list_topics(timeout=5)
            except Exception:
                return None
            return md if len(md.brokers) == 3 and md.controller_id >= 0 else None
        md = _wait(cluster_up, 60, "3 brokers and a controller", output)
        assert sorted(md.brokers) == [1, 2, 3]
        assert {md.brokers[n].port for n in (1, 2, 3)} == {p + off for p in LISTENERS}

        # Prometheus on 9101-9103 (+ offset), and the data where the properties put it
        for port in METRICS:
            with urllib.request.urlopen(f"http://127.0.0.1:{port + off}/metrics", timeout=10) as r:
                body = r.read().decode()
                assert r.status == 200 and ("python_info" in body or "# TYPE" in body), body[:500]
        for n in (1, 2, 3):
            assert (data / f"broker-{n}" / "logs").is_dir()
            assert (data / f"broker-{n}.log").stat().st_size > 0
        assert any((data / "metadata").iterdir())
        assert (data / "remote").is_dir()

        # replication factor 3, acks=all, replicated through the fast store (KIP-1176)
        for f in admin.create_topics([NewTopic(topic_name, 1, 3, config={"remote.wal.enable": "true"})]).values():
            f.result(timeout=30)

        def full_isr():
            try:
                p = admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions[0]
            except Exception:
                return None
            return p if len(p.isrs) == 3 and p.leader >= 0 else None
        _wait(full_isr, 60, "an ISR of 3", output)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        errors: list = []
        for i in range(20):
            producer.produce(topic_name, str(i).encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
        assert producer.flush(30) == 0 and errors == []
        leader = full_isr().leader

        def scrape(node: int, name: str) -> float:
            with urllib.request.urlopen(f"http://127.0.0.1:{METRICS[node - 1] + off}/metrics", timeout=10) as r:
                return sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                           if line.startswith(name + " ") or line.startswith(name + "{"))
        followers = [n for n in (1, 2, 3) if n != leader]
        _wait(lambda: all(scrape(n, "strata_wal_download_bytes_total") > 0 for n in followers), 30,
              "followers to download from the fast store", output)
        assert all(scrape(n, "strata_replication_bytes_in_total") == 0 for n in followers)   # no record bytes
        assert any((data / "fast" / "wal").rglob("*"))
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic_name}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic_name])
        got: list[int] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < 20 and time.monotonic() < deadline:
                got += [int(m.value()) for m in consumer.consume(20, 1) if m.error() is None]
        finally:
            consumer.close()
        assert sorted(got) == list(range(20))

        # kill -9 of one broker: reported, not restarted, the others and the launcher keep running
        victim = pids[2]
        os.kill(victim, signal.SIGKILL)
        line = _wait(lambda: re.search(rf"broker-2 \(pid {victim}\) died: killed by SIGKILL.*", output()), 15,
                     "the launcher to report broker-2's death", output).group(0)
        assert "strata broker --config deploy/cluster/broker-2.properties" in line
        assert f"--override metrics.port={9102 + off}" in line         # the restart command keeps the moved ports
        time.sleep(2)
        assert launcher.poll() is None
        assert _pid_alive(pids[1]) and _pid_alive(pids[3])
        assert len(re.findall(r"started broker-\d", output())) == 3           # nothing restarted
        assert not (data / "broker-2.pid").exists()

        # SIGINT stops the other two and exits 0
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(30) == 0, output()[-6000:]
        assert not any(_pid_alive(pid) for pid in pids.values())
        assert not list(data.glob("broker-*.pid"))
        assert "cluster stopped" in output()
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in pids.values():
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
