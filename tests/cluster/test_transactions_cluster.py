"""Transactions on a real three-broker cluster: `__transaction_state` replicated (RF 3), the coordinator following its
partition's leader, markers sent to leaders on other brokers, and kill -9 of the coordinator's broker and of a
partition leader in the middle of transactions. A read_committed consumer must then see every record of each
committed transaction exactly once and no record of an aborted one; a fenced zombie producer writes nothing."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import create
from tests.integration.rawclient import RawClient

TXN_OVERRIDES = {"transaction.state.log.num.partitions": "3",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture
def txn_cluster(tmp_path):
    c = Cluster(tmp_path, 3, overrides=TXN_OVERRIDES).start()
    yield c
    stop_and_check(c)


def coordinator_of(cluster: Cluster, tid: str, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for b in cluster.brokers.values():
            if not b.alive():
                continue
            try:
                with RawClient(b.bootstrap) as raw:
                    r = raw.request(10, 4, {"key_type": 1, "coordinator_keys": [tid]})
                c = r.coordinators[0]
                if c.error_code == 0 and cluster.brokers[c.node_id].alive():
                    return c.node_id
            except Exception:
                pass
        time.sleep(0.2)
    raise AssertionError(f"no coordinator for {tid}")


class TxnWorkload:
    """Transactions of `size` numbered records over a topic's partitions, from a thread. A transaction counts as
    committed when commit_transaction returned, as aborted when abort_transaction did (after an abortable error, or
    every `abort_every`-th transaction on purpose); a fatal error (fenced) starts a new producer instance."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, tid: str, size: int = 20, abort_every: int = 4):
        self.bootstrap, self.topic, self.partitions, self.tid = bootstrap, topic, partitions, tid
        self.size, self.abort_every = size, abort_every
        self.committed: list[list[bytes]] = []
        self.aborted: list[list[bytes]] = []
        self.unknown: list[list[bytes]] = []         # the producer died with the outcome unknown (fatal error)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _new(self) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid, "linger.ms": 5,
                         "transaction.timeout.ms": 30000, "message.timeout.ms": 30000})

    def _producer(self) -> Producer:
        p = self._new()
        while not self._stop.is_set():
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                self.errors.append(f"init: {e}")
                if not e.args[0].retriable():
                    p = self._new()
                time.sleep(0.5)
        return p

    def _run(self) -> None:
        p = self._producer()
        n = 0
        while not self._stop.is_set():
            batch = [b"%s-%06d" % (self.tid.encode(), n * self.size + i) for i in range(self.size)]
            n += 1
            try:
                p.begin_transaction()
                for i, v in enumerate(batch):
                    p.produce(self.topic, value=v, partition=i % self.partitions)
                if n % self.abort_every == 0:
                    p.abort_transaction(60)
                    self.aborted.append(batch)
                    continue
                while True:
                    try:
                        p.commit_transaction(60)
                        self.committed.append(batch)
                        break
                    except KafkaException as e:
                        if e.args[0].retriable():
                            continue
                        raise
            except KafkaException as e:
                err = e.args[0]
                self.errors.append(str(err))
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(60)
                        self.aborted.append(batch)
                        continue
                    except KafkaException as e2:
                        self.errors.append(f"abort: {e2}")
                self.unknown.append(batch)
                p = self._producer()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(180)

    def wait_for_commits(self, n: int, timeout: float = 120) -> None:
        target = len(self.committed) + n
        deadline = time.monotonic() + timeout
        while len(self.committed) < target:
            assert time.monotonic() < deadline, f"transactions stalled at {len(self.committed)} committed: " \
                                                f"{self.errors[-5:]}"
            time.sleep(0.1)


def read_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 90) -> list[bytes]:
    """Everything a read_committed consumer gets, until it reached every partition's last stable offset."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rc-" + uuid.uuid4().hex, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.assign(tps)
    deadline = time.monotonic() + timeout
    ends = {}
    while time.monotonic() < deadline and len(ends) < partitions:
        for tp in tps:
            try:
                ends[tp.partition] = c.get_watermark_offsets(tp, timeout=5)[1]
            except KafkaException:
                pass
    out = []

    def behind() -> bool:     # the position passes the markers too, which are never delivered
        return any(tp.offset < ends.get(tp.partition, 0) for tp in c.position(tps))
    while time.monotonic() < deadline and behind():
        out += [m.value() for m in c.consume(500, 0.5) if m.error() is None]
    c.close()
    return out


def check(workload: TxnWorkload, got: list[bytes]) -> None:
    seen = set(got)
    assert len(seen) == len(got), "a record was read twice"
    for batch in workload.committed:
        missing = [v for v in batch if v not in seen]
        assert not missing, f"committed transaction lost {len(missing)} records: {missing[:3]}"
    for batch in workload.aborted:
        assert not seen & set(batch), "an aborted transaction's records were read"
    for batch in workload.unknown:   # all or nothing
        assert len(seen & set(batch)) in (0, len(batch)), "a transaction was partly committed"
    expected = {v for b in workload.committed + workload.unknown for v in b}
    assert seen <= expected


def kill_and_restart(cluster: Cluster, broker_id: int) -> None:
    cluster.brokers[broker_id].kill9()
    time.sleep(1)
    cluster.brokers[broker_id].start()


def run_rounds(cluster: Cluster, rounds: int) -> None:
    topic = "txn-" + uuid.uuid4().hex[:8]
    create(cluster, topic, partitions=3, configs={"min.insync.replicas": "2"})
    tid = "w-" + topic
    with TxnWorkload(cluster.bootstrap, topic, 3, tid) as w:
        w.wait_for_commits(3)
        for r in range(rounds):
            victim = coordinator_of(cluster, tid) if r % 2 == 0 else cluster.leader(topic, r % 3)
            kill_and_restart(cluster, victim)
            w.wait_for_commits(3)
            for p in range(3):
                cluster.wait_for_isr(topic, 3, p)
        w.wait_for_commits(2)
    assert w.committed, w.errors
    got = read_committed(cluster.bootstrap, topic, 3)
    print(f"{rounds} rounds: {len(w.committed)} transactions committed, {len(w.aborted)} aborted, "
          f"{len(w.unknown)} of unknown outcome, {len(got)} records read; errors: {w.errors[-10:]}")
    check(w, got)


def test_transactions_survive_kill_9_of_coordinator_and_leader(txn_cluster):
    run_rounds(txn_cluster, 2)


@pytest.mark.slow
def test_transactions_survive_ten_rounds_of_kill_9(txn_cluster):
    run_rounds(txn_cluster, 10)


def test_zombie_fenced_across_brokers(txn_cluster):
    """The coordinator sits on one broker, the partition's leader on another: a new instance's InitProducerId
    fences the old one there too, and the old one's open transaction is aborted by markers sent across."""
    c = txn_cluster
    topic = "txn-" + uuid.uuid4().hex[:8]
    create(c, topic, partitions=1)
    tid = "z-" + topic
    zombie = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid, "linger.ms": 5})
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(30)
    fresh = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid, "linger.ms": 5})
    fresh.init_transactions(60)
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh", partition=0)
    fresh.commit_transaction(60)
    with pytest.raises(KafkaException):
        zombie.produce(topic, value=b"late", partition=0)
        zombie.commit_transaction(20)
    assert read_committed(c.bootstrap, topic, 1) == [b"fresh"]


def test_a_coordinator_that_cannot_load_is_a_clear_error_not_a_hang(tmp_path):
    """One broker of a cluster, with transaction.state.log.replication.factor 3: `__transaction_state` is never
    created with fewer replicas (as Kafka), so no coordinator can load and FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE. A transactional producer fails init_transactions with a retriable timeout within the
    time it was given, and a plain producer is unaffected (issue 24: it used to be a hang)."""
    from confluent_kafka import KafkaError
    c = Cluster(tmp_path, 1).start()
    try:
        topic = "stuck-" + uuid.uuid4().hex[:8]
        create(c, topic, partitions=1, rf=1)
        p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "stuck"})
        t0 = time.monotonic()
        with pytest.raises(KafkaException) as e:
            p.init_transactions(5)
        took = time.monotonic() - t0
        err = e.value.args[0]
        assert err.code() == KafkaError._TIMED_OUT and err.retriable(), err
        assert took < 15, took                   # the given timeout and some slack: never unbounded
        plain = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        plain.produce(topic, value=b"x", partition=0)
        assert plain.flush(10) == 0
        assert "__transaction_state" not in plain.list_topics(timeout=10).topics
    finally:
        stop_and_check(c)
