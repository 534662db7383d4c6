"""A log directory that fills up in a three-broker cluster (issue 26): the leader's log.dirs is a 4 MiB tmpfs.

Its write fails with ENOSPC, the broker takes the dir offline and shuts down (Kafka halts when its only log dir
fails), the controller moves leadership to another in-sync replica, and an acks=all producer continues there: no
acknowledged record is lost. Once space is freed the broker restarts, recovers its log and rejoins the ISR.
"""
from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.cluster.conftest import Cluster, stop_and_check
from tests.conftest import small_tmpfs_at



@pytest.fixture
def cluster_with_small_dir(tmp_path):
    with small_tmpfs_at(tmp_path / "broker-1" / "logs") as logs:
        c = Cluster(tmp_path, 3)
        try:
            c.start()
            yield c, logs
            stop_and_check(c)
        finally:
            c.stop()


def _read_all(bootstrap: str, topic: str, timeout: float = 60) -> dict[int, bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}", "check.crcs": True,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + timeout
        while len(out) < high and time.monotonic() < deadline:
            for m in c.consume(500, 1):
                assert m.error() is None, m.error()
                assert m.offset() not in out
                out[m.offset()] = m.value()
        assert len(out) == high, f"read {len(out)} of {high}"
        return out
    finally:
        c.close()


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_full_log_dir_moves_leadership_and_loses_nothing_acknowledged(cluster_with_small_dir, topic_name, role):
    """Broker 1, whose dir fills, leads the partition or follows it (its append as follower fails then)."""
    cluster, logs = cluster_with_small_dir
    admin = cluster.admin()
    replicas = [1, 2, 3] if role == "leader" else [2, 1, 3]
    for f in admin.create_topics([NewTopic(topic_name, num_partitions=1, replica_assignment=[replicas])]).values():
        f.result(timeout=30)
    cluster.wait_for_isr(topic_name, 3)
    assert cluster.leader(topic_name) == replicas[0]
    acked: dict[int, bytes] = {}
    errors = []

    def done(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err)

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 90000})
    # ~8 MB: twice what broker 1's dir holds, so it fills with the producer mid-stream
    for i in range(400):
        value = (b"%06d" % i) * 3400
        while True:
            try:
                p.produce(topic_name, value, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        time.sleep(0.005)
    assert p.flush(120) == 0
    b1 = cluster.brokers[1]
    deadline = time.monotonic() + 30
    while b1.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert b1.proc.poll() == 1, "broker 1 kept running on a full log dir:\n" + b1.log_text()[-3000:]
    assert "offline after an I/O error" in b1.log_text()
    assert errors == [], errors
    assert len(acked) == 400                       # the producer went on on the new leader
    assert cluster.leader(topic_name) in (2, 3)
    assert 1 not in cluster.partition(topic_name).isrs
    got = _read_all(cluster.bootstrap, topic_name)
    for offset, value in acked.items():
        assert got.get(offset) == value, f"acknowledged offset {offset} lost or changed"
    assert sorted(got.values()) == sorted(acked.values())    # idempotence: no duplicates either
    # Space freed: broker 1 restarts, recovers its log (no clean-shutdown marker) and catches up into the ISR.
    assert not (logs / ".kafka_cleanshutdown").exists()
    subprocess.run(["mount", "-o", "remount,size=64m", str(logs)], check=True)
    b1.stop()
    b1.start()
    assert sorted(cluster.wait_for_isr(topic_name, 3, timeout=90)) == [1, 2, 3]
    assert "unclean shutdown" in b1.log_text()
