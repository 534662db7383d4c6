"""Spark's own Kafka source (`format("kafka")`, spark-sql-kafka-0-10, the Java client: AdminClient for offsets,
KafkaConsumer on the executors) reading Strata topics, each result compared record by record with what confluent_kafka
produced and with the project's own connector (`format("strata")`) reading the same topic.

- batch: a tiered topic (its early segments served from the remote tier: Fetch for Spark's source, direct object
  store reads for the strata one) and a LogAppendTime topic in one read; keys, null keys, tombstones, headers (one
  with a null value), timestamps; then from a starting timestamp (ListOffsets by timestamp);
- streaming: trigger(availableNow=True) with maxOffsetsPerTrigger into a parquet sink; a restart with nothing new
  reads nothing; more records and a new partition, another run from the checkpoint: every record exactly once, the
  same rows as the strata source reads (its own streaming runs are test_stream.py's);
- a cluster of three Strata brokers (RF=3, each leading one partition) read by the Kafka source.

Spark's Kafka source jars (resolved by deploy/apache-kafka/resolve.sh: 4.2.0, Maven Central has no 4.3.0 yet) are
put on the classpath by the suite's `spark` fixture (conftest.py).
"""
from __future__ import annotations

import random
import time

import pytest
from confluent_kafka.admin import NewPartitions, NewTopic
from pyspark.sql import functions as F

from spark_helpers import TIERED, TS0, RawClient, admin_client, create_topic, kafka_source_jars, producer, \
    wait_tiered, wait_until
from tests.cluster.conftest import Cluster, stop_and_check

pytestmark = pytest.mark.spark

@pytest.fixture(scope="module")
def kafka_format(spark):
    """Spark's Kafka source is loadable in this session (or the test skips, saying why the jars are missing)."""
    import apache_kafka
    reason = apache_kafka.skip_reason()
    if reason:
        pytest.skip(reason)
    jars = kafka_source_jars()
    assert jars, "resolve.sh left no .cache/apache-kafka/spark-classpath.txt"
    configured = spark.sparkContext.getConf().get("spark.jars", "")
    assert all(j in configured for j in jars), (
        "the SparkSession was started without Spark's Kafka source jars (spark.jars): "
        f"{configured!r}; the suite's `spark` fixture adds them before the JVM starts")
    return "kafka"


# ---- data -----------------------------------------------------------------------------------------------------------
def rec(i: int) -> tuple:
    """Record i: (key, value, headers, timestamp). Some keys are null, every 11th value is a tombstone, every 13th key
    is empty, some records carry headers (a repeated key, a null and an empty value, a non-ASCII key)."""
    key = None if i % 7 == 0 else (b"" if i % 13 == 0 else f"k{i}".encode())
    value = None if i % 11 == 0 else f"v{i}:".encode() + random.Random(i).randbytes(150)   # fills segments
    headers = {0: [("h", str(i).encode()), ("n", None), ("h", b"")], 1: [("\u00fc", b"\x00\xff")]}.get(i % 3)
    return key, value, headers, TS0 + i * 10


def produce(bootstrap: str, topic: str, idx, partitions: int, codec: str = "none", partition: int | None = None,
            **conf) -> dict:
    """Produce records `idx` (record i to partition i % partitions, or all to `partition`), acks=all and
    idempotent; return {(partition, offset): (key, value, headers, timestamp)} from the delivery reports."""
    p = producer(bootstrap, **{"compression.type": codec, "batch.num.messages": 40, "enable.idempotence": True,
                               "linger.ms": 5, **conf})
    delivered, errors = {}, []

    def report(err, msg, i):
        if err:
            errors.append(err)
        else:
            delivered[(msg.partition(), msg.offset())] = i

    for i in idx:
        key, value, headers, ts = rec(i)
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts,
                  partition=i % partitions if partition is None else partition,
                  on_delivery=lambda err, msg, i=i: report(err, msg, i))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]
    assert len(delivered) == len(idx)
    return {po: rec(i) for po, i in delivered.items()}


def earliest_local(bootstrap: str, topic: str, partition: int) -> int:
    """ListOffsets -4 (KIP-405's earliest local offset): where the broker's local log starts."""
    with RawClient(bootstrap, timeout=30) as c:
        resp = c.request(2, 8, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": -4}]}]})
    return resp.topics[0].partitions[0].offset


def expected_rows(topic: str, produced: dict, timestamp_type: int = 0) -> dict:
    return {(topic, p, o): (key, value, None if not headers else tuple(headers), ts, timestamp_type)
            for (p, o), (key, value, headers, ts) in produced.items()}


def normalized(df) -> dict:
    """{(topic, partition, offset): (key, value, headers, timestamp ms, timestampType)} of a DataFrame with Spark's
    Kafka schema (timestamp as unix_millis: no float rounding); every (topic, partition, offset) exactly once."""
    rows = df.select("topic", "partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ts"),
                     "timestampType", "headers").collect()
    out = {}
    for r in rows:
        headers = None if r.headers is None else tuple((h.key, None if h.value is None else bytes(h.value))
                                                       for h in r.headers)
        out[(r.topic, r.partition, r.offset)] = (None if r.key is None else bytes(r.key),
                                                 None if r.value is None else bytes(r.value), headers, r.ts,
                                                 r.timestampType)
    assert len(out) == len(rows), "a (topic, partition, offset) read twice"
    return out


def read(spark, fmt: str, bootstrap: str, topics: str, **options):
    return (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topics)
            .option("includeHeaders", "true").options(**options).load())


def assert_same(got: dict, expected: dict, what: str) -> None:
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    assert not missing and not extra, f"{what}: {len(missing)} missing {missing[:5]}, {len(extra)} extra {extra[:5]}"
    wrong = [(k, got[k], expected[k]) for k in sorted(expected) if got[k] != expected[k]]
    assert not wrong, f"{what}: {len(wrong)} rows differ, first: {wrong[0]}"


# ---- batch ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch_topics(tiered_broker):
    """A tiered topic (3 partitions, zstd then lz4 batches, early segments in the remote tier) and a LogAppendTime
    topic (2 partitions); their expected rows, the append-time topic's timestamps bounded by the produce window."""
    b = tiered_broker.bootstrap
    tiered, appended = "spark-ksrc-tiered", "spark-ksrc-logappend"
    create_topic(b, tiered, 3, dict(TIERED))
    produced = produce(b, tiered, range(0, 600), 3, codec="zstd")
    produced.update(produce(b, tiered, range(600, 900), 3, codec="lz4"))
    create_topic(b, appended, 2, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    appended_rows = produce(b, appended, range(40), 2, codec="gzip")
    after = int(time.time() * 1000)
    wait_tiered(tiered_broker, tiered, 60, partitions=3, timeout=120)
    # and gone from the broker's disk: Spark's source reads the first offsets through the broker's remote tier
    wait_until(lambda: all(earliest_local(b, tiered, p) > 0 for p in range(3)), timeout=60, interval=0.2,
               what=f"{tiered}: local log start past 0 in every partition")
    return {"tiered": tiered, "appended": appended, "expected": expected_rows(tiered, produced),
            "appended_rows": expected_rows(appended, appended_rows, 1), "window": (before, after)}


def test_batch_read_matches_produced_and_strata_source(spark, kafka_format, tiered_broker, batch_topics):
    t = batch_topics
    topics = f"{t['tiered']},{t['appended']}"
    got = normalized(read(spark, kafka_format, tiered_broker.bootstrap, topics, startingOffsets="earliest",
                          endingOffsets="latest"))
    strata = normalized(read(spark, "strata", tiered_broker.bootstrap, topics, startingOffsets="earliest",
                             endingOffsets="latest"))
    assert_same(got, strata, "format(kafka) vs format(strata)")

    tiered_rows = {k: v for k, v in got.items() if k[0] == t["tiered"]}
    assert_same(tiered_rows, t["expected"], "format(kafka) vs produced")
    assert {p for _, p, _ in tiered_rows} == {0, 1, 2}

    # LogAppendTime: the broker's time replaces the producer's, for every record of a batch alike
    lo, hi = t["window"]
    appended = {k: v for k, v in got.items() if k[0] == t["appended"]}
    assert set(appended) == set(t["appended_rows"])
    for k, (key, value, headers, ts, tstype) in appended.items():
        e_key, e_value, e_headers, _, e_tstype = t["appended_rows"][k]
        assert (key, value, headers, tstype) == (e_key, e_value, e_headers, e_tstype), k
        assert lo - 1000 <= ts <= hi + 1000, (k, ts, lo, hi)


def test_batch_read_from_a_starting_timestamp(spark, kafka_format, tiered_broker, batch_topics):
    """startingTimestamp: each partition from its first offset with a timestamp at or after it (the Java
    AdminClient's ListOffsets by timestamp, answered from the time indexes, remote ones included)."""
    t = batch_topics
    start = TS0 + 750 * 10                                 # record 750 on: past the tiered offsets of every partition
    got = normalized(read(spark, kafka_format, tiered_broker.bootstrap, t["tiered"], startingTimestamp=str(start)))
    strata = normalized(read(spark, "strata", tiered_broker.bootstrap, t["tiered"], startingTimestamp=str(start)))
    expected = {k: v for k, v in t["expected"].items() if v[3] >= start}
    assert_same(got, expected, "format(kafka) from a timestamp vs produced")
    assert_same(strata, expected, "format(strata) from a timestamp vs produced")

    start = TS0 + 30 * 10                                  # inside the tiered part
    got = normalized(read(spark, kafka_format, tiered_broker.bootstrap, t["tiered"], startingTimestamp=str(start)))
    assert_same(got, {k: v for k, v in t["expected"].items() if v[3] >= start}, "format(kafka) from a tiered time")


# ---- streaming ------------------------------------------------------------------------------------------------------
def run_available_now(spark, fmt: str, options: dict, checkpoint, out) -> list[int]:
    """One availableNow run into a parquet sink (exactly once with its checkpoint); rows of each micro-batch."""
    q = (spark.readStream.format(fmt).options(**options).load()
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination()
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def test_streaming_available_now_exactly_once_across_restarts(spark, kafka_format, tiered_broker, tmp_path):
    b = tiered_broker.bootstrap
    topic = "spark-ksrc-stream"
    create_topic(b, topic, 2)
    produced = produce(b, topic, range(150), 2, codec="snappy")
    options = {"kafka.bootstrap.servers": b, "subscribe": topic, "startingOffsets": "earliest",
               "includeHeaders": "true", "maxOffsetsPerTrigger": "80"}
    ckpt, out = tmp_path / "checkpoint", tmp_path / "out"

    def written() -> dict:
        return normalized(spark.read.parquet(str(out)))

    sizes = run_available_now(spark, kafka_format, options, ckpt, out)
    assert sum(sizes) == 150 and max(sizes) <= 80 and len(sizes) >= 2, sizes
    assert_same(written(), expected_rows(topic, produced), "first run")

    assert run_available_now(spark, kafka_format, options, ckpt, out) == []     # nothing new: reads nothing

    # more records, and a third partition created while no query runs (read from its earliest offset)
    produced.update(produce(b, topic, range(150, 250), 2, codec="snappy"))
    admin = admin_client(b)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3, timeout=30)
    produced.update(produce(b, topic, range(1000, 1030), 3, partition=2))
    sizes = run_available_now(spark, kafka_format, options, ckpt, out)
    assert sum(sizes) == 130 and max(sizes) <= 80, sizes
    rows = written()
    assert_same(rows, expected_rows(topic, produced), "after the restart")
    assert_same(rows, normalized(read(spark, "strata", b, topic)), "format(kafka) stream vs format(strata)")


# ---- cluster --------------------------------------------------------------------------------------------------------
def test_three_broker_cluster(spark, kafka_format, tmp_path):
    """RF=3 on three Strata brokers: the Kafka source finds each partition's leader (Metadata, the AdminClient's
    ListOffsets to the leaders) and reads every record once, as the strata source does."""
    c = Cluster(tmp_path, 3).start()
    try:
        topic = "spark-ksrc-cluster"
        admin = c.admin()                                                 # kept: the future needs its handle
        assignment = [[leader] + [i for i in (1, 2, 3) if i != leader] for leader in (1, 2, 3)]
        admin.create_topics([NewTopic(topic, 3, replica_assignment=assignment)])[topic].result(timeout=30)
        for p in range(3):
            c.wait_for_isr(topic, 3, index=p)
        assert [c.leader(topic, p) for p in range(3)] == [1, 2, 3]       # partition p led by broker p + 1
        produced = produce(c.bootstrap, topic, range(300), 3, codec="lz4", acks="all")
        bootstrap = c.brokers[1].bootstrap                                # one bootstrap server: the rest found
        got = normalized(read(spark, kafka_format, bootstrap, topic))
        assert_same(got, expected_rows(topic, produced), "format(kafka) on a cluster vs produced")
        assert_same(normalized(read(spark, "strata", bootstrap, topic)), got, "format(strata) vs format(kafka)")
    finally:
        stop_and_check(c)
