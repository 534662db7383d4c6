"""deploy/docker-compose.yml's topology without a Docker engine: three brokers started through the image's entry
point (deploy/docker/entrypoint.sh) with exactly the environment the compose file gives them, moto in place of MinIO
(same bucket roles), loopback ports in place of the published ones. Real clients then use the cluster."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moto_server import moto_server  # noqa: F401  (fixture)
from tests.conftest import free_port
from tests.cluster.conftest import metadata_of

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def compose_services() -> dict:
    r = subprocess.run([str(BIN / "docker-compose"), "-f", str(ROOT / "deploy" / "docker-compose.yml"), "config",
                        "--format", "json"], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(r.stdout)["services"]


def exported_names(body: str) -> set[str]:
    """Every sample name a /metrics page can have: the families it declares (# TYPE) with their suffixes."""
    names = set()
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                        "summary": ("_sum", "_count", "_created")}.get(kind, ("",))
            names |= {name + s for s in suffixes} | {name}
    return names


def sampled_names(body: str) -> set[str]:
    """The sample names a /metrics page has at least one series of."""
    return {line.split("{", 1)[0].split(" ", 1)[0] for line in body.splitlines() if line and not line.startswith("#")}


# Dashboard metrics whose series only appear on events this test does not cause (a copy to or a read from the remote
# tier, a failed WAL download); the check below still requires every broker to declare them.
EVENT_ONLY = {"kafka_server_brokertopicmetrics_remote_copy_bytes_total",
              "kafka_server_brokertopicmetrics_remote_fetch_bytes_total", "strata_wal_download_errors_total"}


def dashboard_metrics() -> set[str]:
    """The metric names the Grafana dashboard's panels query (deploy/grafana/dashboards/strata.json)."""
    dash = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "strata.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", ())]
    return {m for e in exprs for m in re.findall(r"\b((?:kafka|strata)_[a-z0-9_]+)", e)}


@pytest.mark.s3
def test_the_compose_topology_runs_as_processes(tmp_path, moto_server, topic_name):
    services = compose_services()
    buckets = {"strata-slow": moto_server.new_bucket(), "strata-fast": moto_server.new_bucket()}
    ports = {p: free_port() for p in (9092, 9093, 9094, 9101, 9102, 9103)}
    procs, logs = [], []
    try:
        for n in (1, 2, 3):
            env = dict(services[f"broker-{n}"]["environment"])
            for k, v in env.items():           # the same settings, pointed at moto and at free loopback ports
                v = v.replace("http://minio:9000", moto_server.endpoint)
                for bucket, real in buckets.items():
                    v = v.replace(f"s3://{bucket}/", f"s3://{real}/")
                for port, free in ports.items():
                    v = v.replace(f":{port}", f":{free}")
                env[k] = v
            env["STRATA_METRICS_PORT"] = str(ports[int(services[f"broker-{n}"]["environment"]["STRATA_METRICS_PORT"])])
            env["STRATA_LOG_DIRS"] = str(tmp_path / f"broker-{n}")
            env["STRATA_ADVERTISED_LISTENERS"] = env["STRATA_ADVERTISED_LISTENERS"].replace("localhost", "127.0.0.1")
            log = open(tmp_path / f"broker-{n}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(
                ["sh", str(ROOT / "deploy" / "docker" / "entrypoint.sh")], stdout=log, stderr=subprocess.STDOUT,
                cwd=ROOT, env={"PATH": f"{BIN}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1",
                               "PYTHONPATH": str(ROOT),        # this checkout, whichever the venv's `strata` names
                               "SERVER_PROPERTIES": str(ROOT / "deploy" / "docker" / "server.properties"), **env}))
        bootstrap = ",".join(f"127.0.0.1:{ports[p]}" for p in (9092, 9093, 9094))
        admin = AdminClient({"bootstrap.servers": bootstrap})     # kept while its futures are pending
        deadline = time.monotonic() + 90
        while True:
            try:
                # every broker has applied the three registrations (kcat below may ask any of them)
                if all(len(metadata_of(f"127.0.0.1:{ports[p]}").brokers) == 3 for p in (9092, 9093, 9094)):
                    md = admin.list_topics(timeout=5)
                    if len(md.brokers) == 3 and md.controller_id > 0:
                        break
            except Exception:
                pass
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                "\n".join((tmp_path / f"broker-{n}.log").read_text()[-3000:] for n in (1, 2, 3))
            time.sleep(0.5)
        assert sorted(md.brokers) == [1, 2, 3]
        # kcat -L, as the quick start does
        if shutil.which("kcat"):
            out = subprocess.run(["kcat", "-b", bootstrap, "-L"], capture_output=True, text=True, timeout=30).stdout
            assert "3 brokers" in out, out
        for f in admin.create_topics([NewTopic(topic_name, 1, -1, config={"remote.wal.enable": "true"})]).values():
            f.result(timeout=60)
        deadline = time.monotonic() + 60
        while len(admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions[0].isrs) < 3:
            assert time.monotonic() < deadline, "no ISR of 3 (default.replication.factor from the compose file)"
            time.sleep(0.3)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(100):
            p.produce(topic_name, str(i).encode())
        assert p.flush(60) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compose", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic_name])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 100 and time.monotonic() < deadline:
            got += [int(m.value()) for m in c.consume(100, 1) if m.error() is None]
        c.commit(asynchronous=False)
        c.close()
        assert got == list(range(100))
        # what the other panels need series of: an error response, and a tiered topic (local vs remote bytes)
        missing = topic_name + "-missing"
        try:
            admin.delete_topics([missing])[missing].result(timeout=60)
            raise AssertionError("deleting a missing topic succeeded")
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, e
        tiered = topic_name + "-tiered"
        for f in admin.create_topics([NewTopic(tiered, 1, -1, config={"remote.storage.enable": "true"})]).values():
            f.result(timeout=60)
        p.produce(tiered, b"tiered")
        assert p.flush(60) == 0
        deadline = time.monotonic() + 60
        while True:
            exported, sampled, gauges, bodies = set(), set(), [], []
            for port in (9101, 9102, 9103):             # Prometheus' targets answer
                body = urllib.request.urlopen(f"http://127.0.0.1:{ports[port]}/metrics", timeout=10).read().decode()
                bodies.append(body)
                exported |= exported_names(body)
                sampled |= sampled_names(body)
                gauges.append({k: float(v) for k, v in (line.rsplit(" ", 1) for line in body.splitlines()
                                                         if line.startswith("kafka_"))})
            if f'kafka_server_brokertopicmetrics_remote_log_size_bytes{{partition="0",topic="{tiered}"}}' in \
                    "".join(bodies) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        kc = "kafka_controller_kafkacontroller_"
        assert sum(g[kc + "active_controller_count"] for g in gauges) == 1
        assert sum(g[kc + "active_broker_count"] for g in gauges) == 3
        assert sum(g["kafka_server_replicamanager_under_replicated_partitions"] for g in gauges) == 0
        wanted = dashboard_metrics()
        assert wanted and wanted <= exported, f"dashboard panels query metrics no broker exports: {wanted - exported}"
        no_series = wanted - EVENT_ONLY - sampled
        assert not no_series, f"dashboard panels query metrics without series: {no_series}"
        text = "".join(bodies)
        assert 'error="UNKNOWN_TOPIC_OR_PARTITION",request="DeleteTopics"' in text
        assert 'kafka_consumergroup_lag_sum{consumergroup="compose",' in text
        assert f'kafka_log_log_size{{partition="0",topic="{tiered}"}}' in text
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()
    for n in (1, 2, 3):
        text = (tmp_path / f"broker-{n}.log").read_text()
        assert "Traceback" not in text, text[-4000:]

