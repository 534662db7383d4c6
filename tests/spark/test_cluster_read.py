"""The connector on a cluster of three broker processes (racks a, b, c; RF=3; Kafka's RackAwareReplicaSelector):
offsets come from each partition's leader, Fetch reads go to the leader or, with kafka.client.rack, to the in-sync
replica of that rack, and a leader killed (kill -9) before or during a read costs nothing: planning waits for the
new leader, and a task that is reading when its leader dies carries on from the new one. Every result is compared
with what was produced, record by record."""
from __future__ import annotations

import logging
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from pyspark.sql import functions as F

from broker.replica_selector import RACK_AWARE
from spark_helpers import LATEST_TIERED, TIERED, check_rows, free_port, plan, produce_dataset, rows_of, \
    tiered_overrides, wait_until
from tests.cluster.conftest import Cluster, stop_and_check
from tests.integration.rawclient import RawClient

pytestmark = pytest.mark.spark

TOPIC = "spark-cluster"
N = 1500                                  # records of TOPIC, over 3 partitions
BYTES_OUT = "kafka_server_brokertopicmetrics_bytes_out_total"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three tiered brokers, and TOPIC: 3 partitions, partition p led by broker p + 1, early segments tiered."""
    root = tmp_path_factory.mktemp("spark-cluster")
    c = Cluster(root, 3, overrides={**tiered_overrides(f"file://{root / 'objects'}"),
                                    "replica.selector.class": RACK_AWARE})
    for b in c.brokers.values():
        b.overrides["metrics.port"] = str(free_port())
    c.start()
    try:
        create_led_by(c, TOPIC, [1, 2, 3], TIERED)
        c.expected = produce_dataset(c.bootstrap, TOPIC, N, codec="lz4", partitions=3)
        wait_until(lambda: all(latest_tiered(c, TOPIC, p) >= 100 for p in range(3)), timeout=90, interval=0.2,
                   what="offsets below 100 of every partition in the remote tier")
        # A leader applies its COPY_SEGMENT_FINISHED at once but publishes it to `__remote_log_metadata` (led by
        # another broker) asynchronously; the planner reads that topic up to its high watermark, as Kafka's RLMM.
        wait_until(lambda: all(r.pieces[0].key_prefix is not None and r.pieces[0].end >= 100
                               for r in plan(options(c))[0]), timeout=60, interval=0.5,
                   what="the tiered segments of every partition committed in __remote_log_metadata")
        yield c
    finally:
        stop_and_check(c)


def create_led_by(c: Cluster, topic: str, leaders: list[int], configs: dict | None = None) -> None:
    """An RF=3 topic whose partition p is led by leaders[p] (the first replica of its assignment)."""
    assignment = [[leader] + [b for b in sorted(c.brokers) if b != leader] for leader in leaders]
    admin = c.admin()
    [f] = admin.create_topics([NewTopic(topic, num_partitions=len(leaders), replica_assignment=assignment,
                                        config=configs or {})]).values()
    f.result(timeout=30)
    for p in range(len(leaders)):
        c.wait_for_isr(topic, 3, p)
    assert [c.leader(topic, p) for p in range(len(leaders))] == leaders


def latest_tiered(c: Cluster, topic: str, p: int) -> int:
    with RawClient(c.brokers[c.leader(topic, p)].bootstrap, timeout=30) as raw:
        resp = raw.request(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                            "timestamp": LATEST_TIERED}]}]})
    return resp.topics[0].partitions[0].offset


def served(c: Cluster) -> dict[int, float]:
    """Record bytes each live broker has sent to consumers (Kafka's BytesOutPerSec, as a Prometheus counter)."""
    out = {}
    for i, b in c.brokers.items():
        if b.alive():
            text = urllib.request.urlopen(f"http://127.0.0.1:{b.overrides['metrics.port']}/metrics",
                                          timeout=5).read().decode()
            out[i] = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(BYTES_OUT))
    return out


def restart(c: Cluster, broker: int, topics: dict[str, int]) -> None:
    """Start a killed broker again and wait until it is back in the ISR of `topics` ({topic: partitions})."""
    c.brokers[broker].start()
    c.wait_for_brokers(3)
    for topic, partitions in topics.items():
        for p in range(partitions):
            c.wait_for_isr(topic, 3, p)


def options(c: Cluster, **extra) -> dict:
    return {"kafka.bootstrap.servers": c.bootstrap, "subscribe": TOPIC, "includeHeaders": "true", **extra}


def test_offsets_come_from_every_leader_and_the_read_is_exact(spark, cluster):
    ranges, _ = plan(options(cluster))
    assert sorted((r.partition, r.start, r.end) for r in ranges) == [(p, 0, N // 3) for p in range(3)]
    for r in ranges:                       # the tiered start of every partition is read from the store
        assert r.pieces[0].key_prefix is not None and r.pieces[0].end >= 100, r
    check_rows(rows_of(spark.read.format("strata").options(**options(cluster)).load()), cluster.expected, TOPIC)


def test_fetch_reads_go_to_the_in_sync_replica_in_the_clients_rack(spark, cluster):
    """kafka.client.rack=b and every offset through Fetch: brokers 1 and 3 lead partitions 0 and 2 but only redirect
    (preferred_read_replica); broker 2 serves all three partitions, its tiered offsets included. The consumers use
    kafka.group.id and commit nothing."""
    group = "spark-cluster-etl"
    before = served(cluster)
    df = spark.read.format("strata").options(**options(cluster, **{
        "strata.directRead": "false", "kafka.client.rack": "b", "kafka.group.id": group})).load()
    rows = rows_of(df)
    check_rows(rows, cluster.expected, TOPIC)
    after = served(cluster)
    delta = {b: after[b] - before[b] for b in after}
    assert delta[1] == 0 and delta[3] == 0 and delta[2] > 0, delta      # (record bytes: lz4 batches)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=30)
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [-1001] * 3            # OFFSET_INVALID: nothing committed


def test_offset_lookups_are_attempted_fetch_offset_num_retries_times(cluster, caplog):
    """A partition with no live replica: each attempt retries for strata.brokerTimeoutMs, then the lookup is tried
    again fetchOffset.numRetries times in all, as Spark's KafkaOffsetReaderAdmin.withRetries, and fails."""
    topic = "spark-cluster-offline"
    admin = cluster.admin()
    [f] = admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[3]])]).values()
    f.result(timeout=30)
    wait_until(lambda: cluster.leader(topic) == 3, what=f"{topic} led by broker 3")
    produce_dataset(cluster.bootstrap, topic, 5)
    cluster.brokers[3].kill9()
    try:
        with caplog.at_level(logging.WARNING, logger="strata.spark"):
            try:
                ranges = plan({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
                               "fetchOffset.numRetries": "2", "fetchOffset.retryIntervalMs": "10",
                               "strata.brokerTimeoutMs": "2000"})
            except Exception as e:
                error = e
            else:
                raise AssertionError(f"planned {ranges} with the only replica down")
        attempts = [r.getMessage() for r in caplog.records if "getting Kafka offsets" in r.getMessage()]
        assert len(attempts) == 1 and attempts[0].startswith("Error in attempt 1 getting Kafka offsets"), attempts
        assert "ListOffsets" in attempts[0] and f"{topic}-0" in str(error), (attempts, error)
    finally:
        restart(cluster, 3, {TOPIC: 3})


def test_a_leader_killed_before_the_read_is_waited_for(spark, cluster):
    """kill -9 the leader of partition 1 and read at once: planning retries ListOffsets (and the metadata reads)
    until a new leader answers, the Fetch task reads from it, the direct pieces do not need it."""
    victim = cluster.leader(TOPIC, 1)
    cluster.brokers[victim].kill9()
    try:
        df = spark.read.format("strata").options(**options(cluster)).load()
        check_rows(rows_of(df), cluster.expected, TOPIC)
        assert cluster.leader(TOPIC, 1) not in (victim, -1)
    finally:
        restart(cluster, victim, {TOPIC: 3})


def gate(marker: str, go: str):
    """mapInArrow function: passes batches through; after the first one it creates `marker` and waits for `go`,
    so the test can act while the task is known to be in the middle of its range."""
    def fn(batches):
        import os
        import time as t
        first = True
        for b in batches:
            yield b
            if first:
                first = False
                open(marker, "w").close()
                deadline = t.monotonic() + 180
                while not os.path.exists(go) and t.monotonic() < deadline:
                    t.sleep(0.05)
    return fn


def test_a_leader_killed_mid_read_costs_the_task_nothing(spark, cluster, tmp_path):
    """One partition of 400,000 records read by Fetch; once the task has produced its first rows the leader is
    killed. The task (Spark runs it once: local mode has no task retries) continues from the new leader, which then
    serves most of the partition, and the result is complete and exact."""
    topic, n, size = "spark-cluster-kill", 400_000, 200
    controller = cluster.admin().list_topics(timeout=10).controller_id
    leader = next(b for b in sorted(cluster.brokers) if b != controller)
    create_led_by(cluster, topic, [leader])
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "batch.size": 1 << 20})
    pad = b"x" * (size - 8)
    for i in range(n):
        while True:
            try:
                p.produce(topic, f"{i:08d}".encode() + pad)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    marker, go = tmp_path / "first-rows", tmp_path / "go"
    df = spark.read.format("strata").options(**{
        "kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic, "strata.directRead": "false",
        # a small prefetch, so that most of the partition is still to be fetched when the leader dies
        "kafka.queued.max.messages.kbytes": "1024", "kafka.max.partition.fetch.bytes": "262144"}).load()
    expected_value = F.concat(F.lpad(F.col("offset").cast("string"), 8, "0"), F.lit(pad.decode())).cast("binary")
    summary = (df.mapInArrow(gate(str(marker), str(go)), df.schema)
               .agg(F.count("*").alias("rows"), F.countDistinct("offset").alias("offsets"),
                    F.min("offset").alias("first"), F.max("offset").alias("last"),
                    F.sum((F.col("value") != expected_value).cast("long")).alias("wrong")))
    result, errors = [], []

    def run():
        try:
            result.extend(summary.collect())
        except Exception as e:                   # noqa: BLE001 (re-raised in the test thread)
            errors.append(e)
    job = threading.Thread(target=run)
    job.start()
    try:
        wait_until(lambda: marker.exists() or errors, timeout=180, interval=0.05, what="the task's first rows")
        assert not errors, errors
        before = served(cluster)
        cluster.brokers[leader].kill9()
        killed_at = time.monotonic()
    finally:
        go.touch()
        job.join(600)
    assert not errors, errors[0]
    [r] = result
    assert (r.rows, r.offsets, r.first, r.last, r.wrong) == (n, n, 0, n - 1, 0)
    new_leader = cluster.leader(topic)
    after = served(cluster)
    assert new_leader != leader and after[new_leader] - before[new_leader] >= n * size // 4, (before, after)
    print(f"leader {leader} killed; new leader {new_leader} served {after[new_leader] - before[new_leader]:,.0f} "
          f"record bytes after the kill; job done {time.monotonic() - killed_at:.1f}s after it")
    restart(cluster, leader, {TOPIC: 3, topic: 1})
