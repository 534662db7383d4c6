"""Wrong options fail with Spark's Kafka source messages, on the driver, before any task runs; where the store
location comes from by default (the broker's DescribeConfigs, with an absolute URL) and how options override it."""
from __future__ import annotations

import logging
import re
import uuid

import pytest
from pyspark.errors import PySparkException
from py4j.protocol import Py4JJavaError

from spark_connector.options import StrataOptionError, parse_read_options, parse_write_options

pytestmark = pytest.mark.spark

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:1"}


@pytest.mark.parametrize("options, streaming, message", [
    ({}, False, "One of the following options must be specified for Kafka source: assign, subscribe, "
                "subscribePattern"),
    ({"subscribe": "a", "subscribePattern": "a.*"}, False, "Only one of the following options can be specified"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, True, "Only one of the following options can be specified"),
    ({"subscribe": " , "}, False, "No topics to subscribe to"),
    ({"subscribePattern": "("}, False, "Invalid regular expression"),
    ({"assign": '["a"]'}, False, 'Expected e.g. {"topicA":[0,1],"topicB":[0,1]}'),
    ({"subscribe": "a", "startingOffsets": "latest"}, False,
     "starting offset can't be latest for batch queries on Kafka"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False,
     "startingOffsets for a-0 can't be latest for batch queries on Kafka"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, False, "ending offset can't be earliest for batch queries"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False,
     "endingOffsets for a-0 can't be earliest for batch queries on Kafka"),
    ({"subscribe": "a", "endingOffsets": "latest"}, True, "ending offset not valid in streaming queries"),
    ({"subscribe": "a", "startingOffsets": "{bad json"}, False, "Invalid value for option 'startingOffsets'"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, False, "'startingTimestamp', must be a long"),
    ({"subscribe": "a", "minPartitions": "0"}, False, "Invalid value '0' for option 'minPartitions'"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "ten"}, True, "'maxOffsetsPerTrigger', must be a positive integer"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, False, "'failOnDataLoss', must be true or false"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, False,
     "Kafka option 'auto.offset.reset' is not supported"),
    ({"subscribe": "a", "strata.store.url": "ftp://x"}, False, "expected file:///path"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "0"}, True, "'minOffsetsPerTrigger', must be a positive integer"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, True,
     "The value of minOffsetPerTrigger(10) is higher than the maxOffsetsPerTrigger(5)."),
    ({"subscribe": "a", "maxTriggerDelay": "soon"}, True, "'maxTriggerDelay': time must be specified as seconds (s)"),
    ({"subscribe": "a", "maxTriggerDelay": "5 weeks"}, True, "'maxTriggerDelay': time must be specified"),
    ({"subscribe": "a", "fetchOffset.numRetries": "0"}, False, "'fetchOffset.numRetries', must be a positive"),
    ({"subscribe": "a", "fetchOffset.retryIntervalMs": "-1"}, False,
     "'fetchOffset.retryIntervalMs', must be a non-negative integer"),
    ({"subscribe": "a", "groupIdPrefix": " "}, False, "Option 'groupIdPrefix' is empty"),
    ({"subscribe": "a", "kafka.isolation.level": "serializable"}, None,
     "Invalid value serializable for configuration isolation.level (option 'kafka.isolation.level'): String must be "
     "one of: read_uncommitted, read_committed"),
])
def test_bad_read_options(options, streaming, message):
    with pytest.raises(StrataOptionError) as e:
        parse_read_options({**BOOT, **options}, streaming=streaming)
    assert message in str(e.value)


def test_bootstrap_servers_required():
    with pytest.raises(StrataOptionError, match="Option 'kafka.bootstrap.servers' must be specified"):
        parse_read_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(StrataOptionError, match="Option 'kafka.bootstrap.servers' must be specified"):
        parse_write_options({"topic": "a"})


def test_precedence_and_defaults():
    o = parse_read_options({**BOOT, "subscribe": "a,b", "startingTimestamp": "5", "startingOffsets": "earliest",
                            "strata.store.url": "s3://bucket/p", "strata.store.endpoint.url": "http://x",
                            "kafka.security.protocol": "PLAINTEXT"}, streaming=False)
    assert o.topics == ("a", "b") and o.starting.kind == "timestamp" and o.starting.timestamp == 5
    assert o.ending.kind == "latest" and o.fail_on_data_loss and not o.include_headers and o.direct_read
    assert o.client.store_options == (("endpoint_url", "http://x"),)
    assert dict(o.client.kafka_conf) == {"security.protocol": "PLAINTEXT"}
    assert parse_read_options({**BOOT, "subscribe": "a"}, streaming=True).starting.kind == "latest"


def test_trigger_and_offset_retry_options():
    o = parse_read_options({**BOOT, "subscribe": "a"}, streaming=True)
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (None, 15 * 60_000)          # Spark's 15m
    assert (o.client.fetch_offset_retries, o.client.fetch_offset_retry_interval_ms) == (3, 10)
    for raw, ms in (("250", 250), ("100ms", 100), ("50s", 50_000), ("2m", 120_000), ("2min", 120_000),
                    ("1h", 3_600_000), ("1d", 86_400_000), ("1500us", 1), (" 10S ", 10_000)):
        assert parse_read_options({**BOOT, "subscribe": "a", "maxTriggerDelay": raw},
                                  streaming=True).max_trigger_delay_ms == ms, raw
    o = parse_read_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "5",
                            "fetchOffset.numRetries": "7", "fetchOffset.retryIntervalMs": "0"}, streaming=True)
    assert (o.min_offsets_per_trigger, o.max_offsets_per_trigger) == (5, 5)
    assert (o.client.fetch_offset_retries, o.client.fetch_offset_retry_interval_ms) == (7, 0)


def test_streaming_only_options_are_ignored_by_batch_reads_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="strata.spark"):
        parse_read_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "1m"},
                           streaming=False)
    assert "minOffsetsPerTrigger option ignored in batch queries" in caplog.text
    assert "maxTriggerDelay option ignored in batch queries" in caplog.text


def test_consumer_group_ids(caplog):
    """KafkaSourceProvider's group ids: <prefix>-<uuid> per query (prefix spark-kafka-relation for batch,
    spark-kafka-source for streaming, or groupIdPrefix) with -executor / -driver; kafka.group.id as given."""
    from spark_connector.fetch_reader import consumer_conf
    from spark_connector.options import consumer_group_id, with_group_id
    uuid_re = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    batch = with_group_id(parse_read_options({**BOOT, "subscribe": "a"}, streaming=False), streaming=False)
    assert re.fullmatch(f"spark-kafka-relation-{uuid_re}-executor", consumer_conf(batch)["group.id"])
    assert consumer_group_id(batch, "driver") == batch.query_group_id + "-driver"
    assert consumer_conf(batch)["group.id"] == consumer_conf(batch)["group.id"]     # one id for every task
    stream = with_group_id(parse_read_options({**BOOT, "subscribe": "a"}, streaming=True), streaming=True)
    assert re.fullmatch(f"spark-kafka-source-{uuid_re}-executor", consumer_group_id(stream, "executor"))
    again = with_group_id(parse_read_options({**BOOT, "subscribe": "a"}, streaming=True), streaming=True)
    assert again.query_group_id != stream.query_group_id                           # per query
    prefixed = with_group_id(parse_read_options({**BOOT, "subscribe": "a", "groupIdPrefix": "etl"},
                                                streaming=True), streaming=True)
    assert re.fullmatch(f"etl-{uuid_re}-executor", consumer_group_id(prefixed, "executor"))
    with caplog.at_level(logging.WARNING, logger="strata.spark"):
        fixed = with_group_id(parse_read_options({**BOOT, "subscribe": "a", "kafka.group.id": "etl-group",
                                                  "groupIdPrefix": "etl"}, streaming=True), streaming=True)
    assert consumer_group_id(fixed, "executor") == consumer_group_id(fixed, "driver") == "etl-group"
    assert consumer_conf(fixed)["group.id"] == "etl-group"
    assert "Kafka option 'kafka.group.id' has been set on this query" in caplog.text
    assert "Option groupIdPrefix will be ignored as option kafka.group.id has been set." in caplog.text


def fails_before_any_task(spark, action) -> str:
    """Run `action`, which must fail; no Spark job may have been submitted meanwhile. Returns the error text."""
    sc = spark.sparkContext
    group = f"options-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "option validation")
    try:
        with pytest.raises((PySparkException, Py4JJavaError)) as e:
            action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
    return str(e.value)


def test_errors_surface_through_spark_before_any_task(spark, tiered_broker):
    boot = {"kafka.bootstrap.servers": tiered_broker.bootstrap}

    def read():
        return spark.read.format("strata")          # a DataFrameReader keeps its options: a fresh one each time
    # options every read shares are checked when the DataFrame is created
    msg = fails_before_any_task(spark, lambda: read().options(**boot, subscribe="a", subscribePattern="a.*").load())
    assert "Only one of the following options can be specified for Kafka source" in msg
    msg = fails_before_any_task(spark, lambda: read().options(subscribe="a").load())
    assert "Option 'kafka.bootstrap.servers' must be specified" in msg
    msg = fails_before_any_task(spark, lambda: spark.readStream.format("strata").options(**boot).load())
    assert "One of the following options must be specified for Kafka source" in msg
    # batch- or stream-only rules, and the topic-partitions, when the query is planned
    msg = fails_before_any_task(spark, lambda: read().options(**boot, subscribe="a", startingOffsets="latest")
                                .load().collect())
    assert "starting offset can't be latest for batch queries on Kafka" in msg
    msg = fails_before_any_task(spark, lambda: read().options(**boot, assign='{"spark-options-missing":[0]}')
                                .load().collect())
    assert "Assigned partitions ['spark-options-missing-0'] do not exist" in msg

    def stream():
        q = (spark.readStream.format("strata").options(**boot, subscribe="a", endingOffsets="latest").load()
             .writeStream.format("console").start())
        try:
            q.awaitTermination()
        finally:
            q.stop()
    assert "ending offset not valid in streaming queries" in fails_before_any_task(spark, stream)


def test_write_schema_and_mode_errors(spark, tiered_broker):
    boot = {"kafka.bootstrap.servers": tiered_broker.bootstrap}
    cases = [
        (spark.createDataFrame([("x",)], "value string"), {}, "append",
         "topic option required when no 'topic' attribute is present"),
        (spark.createDataFrame([("t", "x")], "topic string, key string"), {}, "append",
         "Required attribute 'value' not found"),
        (spark.createDataFrame([("t", 1)], "topic string, value int"), {}, "append",
         "value attribute type must be a StringType or BinaryType"),
        (spark.createDataFrame([("t", "v", "1")], "topic string, value string, partition string"), {}, "append",
         "partition attribute type must be an IntegerType"),
        (spark.createDataFrame([("t", "v")], "topic string, value string"), {}, "overwrite",
         "Save mode Overwrite is not allowed"),
    ]
    for df, extra, mode, message in cases:
        with pytest.raises((PySparkException, Py4JJavaError)) as e:
            df.write.format("strata").options(**boot, **extra).mode(mode).save()
        assert message in str(e.value), str(e.value)[-1500:]


def test_store_location_defaults_to_the_brokers_absolute_url(tiered_broker):
    """The shared broker runs with a relative file://./ URL; DescribeConfigs reports it absolute, so executors with
    any working directory open the same store. strata.store.url overrides it."""
    from spark_connector.cluster import Cluster
    from spark_connector.planning import store_location
    opts = parse_read_options({"kafka.bootstrap.servers": tiered_broker.bootstrap, "subscribe": "x"}, streaming=False)
    cluster = Cluster(opts.client)
    url, options = store_location(opts, cluster)
    assert url == f"file://{tiered_broker.store_path}"
    assert dict(options) == {"fsync": "false"}
    opts = parse_read_options({"kafka.bootstrap.servers": tiered_broker.bootstrap, "subscribe": "x",
                               "strata.store.url": "file:///elsewhere"}, streaming=False)
    assert store_location(opts, cluster) == ("file:///elsewhere", ())


def test_isolation_level(tmp_path):
    """kafka.isolation.level: read_uncommitted by default (Spark's, not librdkafka's read_committed), given to the
    executors' consumers, kept out of the other clients' properties; read_committed needs a broker."""
    from spark_connector.fetch_reader import consumer_conf
    from spark_connector.planning import plan_batch
    from spark_connector.pushdown import Bounds
    o = parse_read_options({**BOOT, "subscribe": "a"}, streaming=False)
    assert not o.client.read_committed and consumer_conf(o)["isolation.level"] == "read_uncommitted"
    o = parse_read_options({**BOOT, "subscribe": "a", "kafka.isolation.level": " Read_Committed",
                            "kafka.client.rack": "r"}, streaming=True)
    assert o.client.read_committed and consumer_conf(o)["isolation.level"] == "read_committed"
    assert dict(o.client.kafka_conf) == {"client.rack": "r"} and "isolation.level" not in o.client.conf()
    down = parse_read_options({**BOOT, "subscribe": "a", "kafka.isolation.level": "read_committed",
                               "strata.store.url": f"file://{tmp_path}", "endingOffsets": '{"a":{"0":5}}'},
                              streaming=False)
    with pytest.raises(StrataOptionError, match="read_committed needs a broker"):
        plan_batch(down, Bounds())
