"""Writes with Spark's Kafka sink columns (topic, key, value, headers, partition; the `topic` option overrides the
column), batch and streaming, read back with the connector; delivery errors fail the job."""
from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from py4j.protocol import Py4JJavaError

from spark_helpers import create_topic, rows_of

pytestmark = pytest.mark.spark

SCHEMA = "topic string, key string, value binary, headers array<struct<key:string,value:binary>>, partition int"


def read_topic(spark, bootstrap, topic):
    return rows_of(spark.read.format("strata").option("kafka.bootstrap.servers", bootstrap)
                   .option("subscribe", topic).option("includeHeaders", "true").load())


def test_batch_write_then_read_back(spark, tiered_broker):
    topic = "spark-write-batch"
    create_topic(tiered_broker.bootstrap, topic, 2)
    data = [(topic, f"k{i}" if i % 5 else None, f"value-{i}".encode(),
             [("i", str(i).encode())] if i % 2 else None, i % 2) for i in range(300)]
    df = spark.createDataFrame(data, SCHEMA).repartition(3)
    df.write.format("strata").option("kafka.bootstrap.servers", tiered_broker.bootstrap).mode("append").save()

    rows = read_topic(spark, tiered_broker.bootstrap, topic)
    assert len(rows) == 300
    got = {r.value: r for r in rows.values()}
    for _, key, value, headers, partition in data:
        r = got[value]
        assert r.partition == partition and r.key == (key.encode() if key else None)
        assert (None if r.headers is None else [(h.key, h.value) for h in r.headers]) == headers


def test_topic_option_overrides_the_column(spark, tiered_broker):
    topic = "spark-write-option"
    create_topic(tiered_broker.bootstrap, topic, 1)
    df = spark.createDataFrame([("not-this-topic", f"v{i}") for i in range(50)], "topic string, value string")
    (df.write.format("strata").option("kafka.bootstrap.servers", tiered_broker.bootstrap).option("topic", topic)
     .mode("append").save())
    rows = read_topic(spark, tiered_broker.bootstrap, topic)
    assert sorted(r.value for r in rows.values()) == sorted(f"v{i}".encode() for i in range(50))


def test_stream_write_copies_a_topic(spark, tiered_broker, tmp_path):
    src, dst = "spark-write-stream-src", "spark-write-stream-dst"
    create_topic(tiered_broker.bootstrap, src, 2)
    create_topic(tiered_broker.bootstrap, dst, 2)
    data = [(src, f"k{i}", f"v{i}".encode(), None, i % 2) for i in range(200)]
    (spark.createDataFrame(data, SCHEMA).write.format("strata")
     .option("kafka.bootstrap.servers", tiered_broker.bootstrap).mode("append").save())

    q = (spark.readStream.format("strata").option("kafka.bootstrap.servers", tiered_broker.bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "60")
         .load().selectExpr("key", "value", "partition")
         .writeStream.format("strata").option("kafka.bootstrap.servers", tiered_broker.bootstrap)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    rows = read_topic(spark, tiered_broker.bootstrap, dst)
    assert sorted((r.partition, r.key, r.value) for r in rows.values()) == \
        sorted((p, k.encode(), v) for _, k, v, _, p in data)


def test_delivery_errors_fail_the_job(spark, tiered_broker):
    topic = "spark-write-error"
    create_topic(tiered_broker.bootstrap, topic, 1)
    df = spark.createDataFrame([(topic, None, b"x", None, 7)], SCHEMA)       # partition 7 does not exist
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        (df.write.format("strata").option("kafka.bootstrap.servers", tiered_broker.bootstrap)
         .option("kafka.message.timeout.ms", "3000").mode("append").save())
    assert "could not be delivered" in str(e.value) or "producing to" in str(e.value), str(e.value)[-2000:]
    assert "partition" in str(e.value).lower()
