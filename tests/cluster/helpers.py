"""What the cluster tests share: topic creation that waits for the ISR, an acks=all producer that keeps what was
acknowledged, reading everything back, and each replica's copy of a partition read from its log dir."""
from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from tests.integration.helpers import records


def create(cluster, topic: str, partitions: int = 1, rf: int = 3, configs: dict | None = None) -> None:
    admin = cluster.admin()
    fs = admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})])
    for f in fs.values():
        f.result(timeout=30)
    for p in range(partitions):
        cluster.wait_for_isr(topic, rf, p)

    def led(md) -> bool:        # a broker that has not applied the new records answers UNKNOWN_TOPIC_OR_PARTITION
        t = md.topics[0]
        return t.error_code == 0 and len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions)
    cluster.wait_every_broker(led, [topic], 30, f"{topic} with a leader for each partition")


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            out += records(c.consume(500, 1))
    finally:
        c.close()
    return out


class AckedProducer:
    """Produces numbered records with acks=all and idempotence from a thread, keeping what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, config: dict | None = None):
        self.topic = topic
        self.acked: dict[int, int] = {}              # value -> offset
        self.failed = 0
        self.errors: list[str] = []                  # the first few delivery errors, for the failure message
        self._stop = threading.Event()
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": 60000, **(config or {})})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked[int(msg.value())] = msg.offset()
        else:
            self.failed += 1
            if len(self.errors) < 5:
                self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._p.produce(self.topic, str(i).encode(), on_delivery=self._done)
                i += 1
            except BufferError:
                pass
            self._p.poll(0.002)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._p.flush(60)

    def wait_for_more(self, n: int, timeout: float = 60) -> None:
        target = len(self.acked) + n
        deadline = time.monotonic() + timeout
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"produce stalled at {len(self.acked)} acknowledged records"
            time.sleep(0.05)


def read_back_once_in_order(cluster, topic_name: str, prod: AckedProducer) -> None:
    """Every record `prod` got acknowledged is read back exactly once, at its acknowledged offset, in order."""
    assert prod.failed == 0, f"{prod.failed} sends failed: {prod.errors}"
    got = consume_all(cluster.bootstrap, topic_name, len(prod.acked))
    offsets = [m.offset() for m in got]
    assert offsets == sorted(offsets)                                       # in order
    seen = {int(m.value()): m.offset() for m in got}
    assert len(seen) == len(got)                                            # no duplicates
    missing = [v for v in prod.acked if v not in seen]
    assert missing == [], f"{len(missing)} acknowledged records lost, first {missing[:5]}\n{cluster.logs()}"
    assert all(seen[v] == off for v, off in prod.acked.items())            # at the acknowledged offset


def kill_leaders(cluster, topic_name: str, rounds: int, configs: dict | None = None) -> None:
    """kill -9 of the leader `rounds` times under acks=all produce; then nothing acknowledged may be missing,
    duplicated, out of order or at another offset."""
    create(cluster, topic_name, configs=configs)
    with AckedProducer(cluster.bootstrap, topic_name) as prod:
        prod.wait_for_more(200)
        for _ in range(rounds):
            leader = cluster.leader(topic_name)
            cluster.brokers[leader].kill9()
            prod.wait_for_more(200)                  # the new leader takes acks=all writes
            cluster.brokers[leader].start()
            cluster.wait_for_isr(topic_name, 3)      # the returning broker catches up and rejoins
            prod.wait_for_more(100)
    read_back_once_in_order(cluster, topic_name, prod)


def replica_contents(cluster, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record in each broker's copy of `topic`-0, read from its log dir (brokers stopped)."""
    from protocol.records import iter_all_records
    from storage.log.log import Log
    from storage.log.log_config import LogConfig
    out = {}
    for i, b in cluster.brokers.items():
        lg = Log(b.data_dir / "logs" / f"{topic}-0", LogConfig())
        views = lg.read(lg.log_start_offset, 1 << 30, min_one_message=True, max_offset=lg.log_end_offset)
        out[i] = [(r.offset, bytes(r.value)) for v in views for r in iter_all_records(v)]
        lg.close()
    return out
