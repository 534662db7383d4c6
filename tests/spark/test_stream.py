"""Streaming reads: trigger(availableNow=True) with maxOffsetsPerTrigger reads every record exactly once across
restarts from the checkpoint, picks up partitions added in between, and handles deleted data per failOnDataLoss."""
from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions

from spark_helpers import admin_client, create_tiered, create_topic, produce_dataset, wait_tiered, wait_until

pytestmark = pytest.mark.spark


def run_available_now(spark, options: dict, checkpoint, out) -> list[int]:
    """One availableNow run into a parquet sink (exactly-once with the checkpoint); the rows of each micro-batch."""
    q = (spark.readStream.format("strata").options(**options).load()
         .selectExpr("partition", "offset", "value")
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination()
    finally:
        q.stop()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def written(spark, out) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in spark.read.parquet(str(out)).select("partition", "offset").collect()]


def test_available_now_exactly_once_across_restarts(spark, tiered_broker, tmp_path):
    topic = "spark-stream-once"
    create_tiered(tiered_broker, topic, partitions=2)
    expected = produce_dataset(tiered_broker.bootstrap, topic, 300, codec="gzip", partitions=2)
    wait_tiered(tiered_broker, topic, 50, partitions=2)
    options = {"kafka.bootstrap.servers": tiered_broker.bootstrap, "subscribe": topic,
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": "70"}
    ckpt, out = tmp_path / "checkpoint", tmp_path / "out"

    batches = run_available_now(spark, options, ckpt, out)
    assert sum(batches) == 300 and max(batches) <= 70 and len(batches) >= 5, batches
    assert sorted(written(spark, out)) == sorted(expected)

    # nothing new: a restart reads nothing
    assert run_available_now(spark, options, ckpt, out) == []

    # more records, and a third partition created while the query is not running
    expected.update(produce_dataset(tiered_broker.bootstrap, topic, 200, codec="gzip", partitions=2, start=300))
    admin = admin_client(tiered_broker.bootstrap)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=15)
    wait_until(lambda: len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == 3)
    added = produce_dataset(tiered_broker.bootstrap, topic, 40, start=1000, partition=2)
    assert {p for p, _ in added} == {2}
    expected.update(added)
    batches = run_available_now(spark, options, ckpt, out)
    assert sum(batches) == 240 and max(batches) <= 70, batches

    rows = written(spark, out)
    assert len(rows) == len(set(rows)) == 540              # exactly once: no duplicates, nothing missing
    assert sorted(rows) == sorted(expected)


def test_deleted_data_fails_or_is_skipped_per_fail_on_data_loss(spark, tiered_broker, tmp_path):
    topic = "spark-stream-dataloss"
    create_topic(tiered_broker.bootstrap, topic, 1)
    produce_dataset(tiered_broker.bootstrap, topic, 20)
    base = {"kafka.bootstrap.servers": tiered_broker.bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    strict = {**base, "failOnDataLoss": "true"}
    lenient = {**base, "failOnDataLoss": "false"}
    assert sum(run_available_now(spark, strict, tmp_path / "c1", tmp_path / "o1")) == 20
    assert sum(run_available_now(spark, lenient, tmp_path / "c2", tmp_path / "o2")) == 20

    produce_dataset(tiered_broker.bootstrap, topic, 20, start=20)          # offsets 20..39
    admin = admin_client(tiered_broker.bootstrap)
    [fut] = admin.delete_records([TopicPartition(topic, 0, 30)]).values()  # offsets 20..29 are gone
    assert fut.result(timeout=15).low_watermark == 30

    with pytest.raises(Exception) as e:                                    # restarted from the checkpoint at 20
        run_available_now(spark, strict, tmp_path / "c1", tmp_path / "o1")
    assert f"Cannot fetch offset 20 of {topic}-0: the earliest available offset is 30" in str(e.value)
    assert "failOnDataLoss" in str(e.value)
    assert sorted(written(spark, tmp_path / "o1")) == [(0, o) for o in range(20)]    # nothing written meanwhile

    assert run_available_now(spark, lenient, tmp_path / "c2", tmp_path / "o2") == [10]
    assert sorted(written(spark, tmp_path / "o2")) == [(0, o) for o in list(range(20)) + list(range(30, 40))]


def test_min_offsets_per_trigger_holds_micro_batches_back_until_enough_offsets(spark, tiered_broker):
    """minOffsetsPerTrigger with a long maxTriggerDelay: the query's first trigger always runs a batch (Spark's
    delayBatch); later triggers that see fewer new offsets report them as the latest but run no batch; the batch
    that runs once enough are there reads all of them."""
    topic = "spark-stream-min-offsets"
    create_topic(tiered_broker.bootstrap, topic, 1)
    produce_dataset(tiered_broker.bootstrap, topic, 10)
    sizes, q = start_recording(spark, topic, tiered_broker, minOffsetsPerTrigger="25", maxTriggerDelay="1h")
    try:
        wait_until(lambda: sizes == [10], timeout=120, what="the first micro-batch")
        produce_dataset(tiered_broker.bootstrap, topic, 10, start=10)
        # a trigger sees offsets up to 20 (15 fewer than needed) and runs no batch
        wait_until(lambda: any(latest_offset(p) == {topic: {"0": 20}} for p in q.recentProgress), timeout=60,
                   what="a trigger that saw offset 20")
        assert sizes == [10]
        produce_dataset(tiered_broker.bootstrap, topic, 20, start=20)
        wait_until(lambda: sum(sizes) == 40, timeout=60, what="the second micro-batch")
        assert sizes == [10, 30]
    finally:
        stop_recording(spark, q)


def test_max_trigger_delay_lets_a_small_batch_through(spark, tiered_broker):
    topic = "spark-stream-max-delay"
    create_topic(tiered_broker.bootstrap, topic, 1)
    produce_dataset(tiered_broker.bootstrap, topic, 10)
    sizes, q = start_recording(spark, topic, tiered_broker, minOffsetsPerTrigger="1000", maxTriggerDelay="2s")
    try:
        wait_until(lambda: sizes == [10], timeout=120, what="the first micro-batch")
        produce_dataset(tiered_broker.bootstrap, topic, 5, start=10)
        wait_until(lambda: sum(sizes) == 15, timeout=60, what="a batch of 5 after maxTriggerDelay")
        assert sizes == [10, 5]
    finally:
        stop_recording(spark, q)


def start_recording(spark, topic: str, broker, **options):
    """A streaming query with a 100 ms processing-time trigger; the number of rows of each micro-batch it runs."""
    sizes: list[int] = []
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")     # progress for every trigger
    q = (spark.readStream.format("strata")
         .options(**{"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
                     "startingOffsets": "earliest", **options}).load()
         .writeStream.foreachBatch(lambda df, _: sizes.append(df.count()))
         .trigger(processingTime="100 milliseconds").start())
    return sizes, q


def stop_recording(spark, q) -> None:
    q.stop()
    spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def latest_offset(progress) -> dict | None:
    import json
    latest = progress["sources"][0].get("latestOffset") if progress.get("sources") else None
    return json.loads(latest) if isinstance(latest, str) else latest
