"""A real cluster for tests: several `strata broker` processes on loopback ports sharing one metadata store (the
embedded local-filesystem store by default), killed with SIGKILL where a test needs a crash."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import BrokerProcess, free_port

# Short timeouts so failover happens within seconds; everything else is Kafka's default.
CLUSTER_OVERRIDES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "controller.quorum.fetch.timeout.ms": "2000",
    "replica.lag.time.max.ms": "5000",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "num.partitions": "1",
}


class Cluster:
    def __init__(self, root: Path, size: int, store_url: str | None = None, overrides: dict | None = None,
                 store_options: dict | None = None):
        self.root = root
        self.store_url = store_url or f"file://{root / 'store'}"
        self.store_options = store_options or {}
        ports = [free_port() for _ in range(size)]
        self.brokers: dict[int, BrokerProcess] = {}
        for i, port in enumerate(ports, start=1):
            b = BrokerProcess(root / f"broker-{i}", {
                "node.id": str(i), "broker.rack": "abc"[(i - 1) % 3],
                "metadata.log.storage.url": self.store_url, **CLUSTER_OVERRIDES,
                **{"metadata.log.storage." + k.replace("_", "."): str(v) for k, v in self.store_options.items()},
                **(overrides or {})})
            b.port = port
            b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
            self.brokers[i] = b

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def start(self) -> "Cluster":
        for b in self.brokers.values():
            b.start()
        self.wait_for_brokers(len(self.brokers))
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()

    def admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def wait_for_brokers(self, n: int, timeout: float = 60) -> None:
        """Until every live broker lists `n` brokers and a controller."""
        self.wait_every_broker(lambda md: len(md.brokers) >= n and md.controller_id >= 0, None, timeout,
                               f"{n} brokers")

    def wait_every_broker(self, check, topics: list[str] | None, timeout: float, what: str) -> None:
        """Until `check` holds for every live broker's own Metadata answer (for `topics`, None for all): brokers
        apply the metadata log with a lag, and a client may ask any of them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all(check(metadata_of(b.bootstrap, topics)) for b in self.brokers.values() if b.alive()):
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise AssertionError(f"not every broker lists {what}:\n" +
                             "\n".join(b.log_text()[-2000:] for b in self.brokers.values()))

    def partition(self, topic: str, index: int = 0):
        md = self.admin().list_topics(topic, timeout=10)
        return md.topics[topic].partitions[index]

    def leader(self, topic: str, index: int = 0) -> int:
        return self.partition(topic, index).leader

    def wait_for_isr(self, topic: str, size: int, index: int = 0, timeout: float = 60) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                p = self.partition(topic, index)
                if len(p.isrs) == size and p.leader >= 0:
                    return p.isrs
            except Exception:
                pass
            time.sleep(0.2)
        raise AssertionError(f"{topic}-{index} did not reach an ISR of {size}")

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log_text()[-4000:]}" for i, b in self.brokers.items())


def stop_and_check(c: Cluster) -> None:
    """Stop every broker; none may have logged a traceback (an unexpected exception anywhere)."""
    c.stop()
    print(c.logs())              # shown with a failing test's output
    for i, b in c.brokers.items():
        text = b.log_text()
        assert "Traceback" not in text, f"broker {i}:\n" + text[max(0, text.index("Traceback") - 500):][:5000]


def metadata_of(bootstrap: str, topics: list[str] | None = None):
    """One broker's own Metadata answer (v12), topics not created on the way."""
    from tests.integration.rawclient import RawClient
    with RawClient(bootstrap) as raw:
        return raw.metadata(topics, auto_create=False)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, 3).start()
    yield c
    stop_and_check(c)
