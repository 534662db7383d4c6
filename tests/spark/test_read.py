"""Batch reads of tiered topics: everything that was produced comes back, with every codec, whether the early
segments are read straight from the object store (the default) or through Fetch (strata.directRead=false); offsets
and timestamps as options; pushdown of offset / partition / timestamp filters into the planned offset ranges."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from spark_helpers import (
    TS0, base_options, check_rows, create_tiered, plan, produce_dataset, record, rows_of, wait_tiered,
)

pytestmark = pytest.mark.spark

N = 1200


@pytest.fixture(scope="module")
def codec_topics(tiered_broker):
    """One tiered topic per codec, its early segments in the remote tier: {codec: (topic, expected)}."""
    out = {}
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        topic = f"spark-read-{codec}"
        create_tiered(tiered_broker, topic)
        out[codec] = (topic, produce_dataset(tiered_broker.bootstrap, topic, N, codec=codec))
    for codec, (topic, _) in out.items():
        wait_tiered(tiered_broker, topic, N // 2)
    return out


def remote_share(ranges) -> float:
    total = sum(r.end - r.start for r in ranges)
    return sum(p.end - p.start for r in ranges for p in r.pieces if p.key_prefix) / total


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_read_tiered_topic_every_codec(spark, tiered_broker, codec_topics, codec):
    topic, expected = codec_topics[codec]
    options = base_options(tiered_broker, subscribe=topic, includeHeaders="true")
    ranges, _ = plan(options)
    assert remote_share(ranges) >= 0.4, ranges             # the early part is read directly from the store
    df = spark.read.format("strata").options(**options).load()
    assert df.count() == N
    check_rows(rows_of(df), expected, topic)


def test_direct_read_off_reads_the_same_through_fetch(spark, tiered_broker, codec_topics):
    topic, expected = codec_topics["zstd"]
    options = base_options(tiered_broker, subscribe=topic, includeHeaders="true", **{"strata.directRead": "false"})
    ranges, _ = plan(options)
    assert remote_share(ranges) == 0
    check_rows(rows_of(spark.read.format("strata").options(**options).load()), expected, topic)


def test_schema_without_headers_and_min_partitions(spark, tiered_broker, codec_topics):
    topic, expected = codec_topics["lz4"]
    df = spark.read.format("strata").options(**base_options(tiered_broker, subscribe=topic, minPartitions="5")).load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert df.rdd.getNumPartitions() == 5                  # one partition split into 5 offset ranges
    check_rows(rows_of(df), expected, topic, headers=False)


def test_offsets_and_timestamps_options(spark, tiered_broker, codec_topics):
    topic, expected = codec_topics["gzip"]
    read = spark.read.format("strata").options(**base_options(tiered_broker, subscribe=topic))
    df = read.option("startingOffsets", f'{{"{topic}":{{"0":100}}}}').option(
        "endingOffsets", f'{{"{topic}":{{"0":250}}}}').load()
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100, 250))
    df = read.option("startingOffsets", f'{{"{topic}":{{"0":-2}}}}').option(
        "endingOffsets", f'{{"{topic}":{{"0":-1}}}}').load()
    assert df.count() == N
    # record i has timestamp TS0 + 10 i: starting at TS0 + 5000 (record 500) and ending at record 700
    df = read.option("startingTimestamp", str(TS0 + 5000)).option("endingOffsetsByTimestamp",
                                                                  f'{{"{topic}":{{"0":{TS0 + 7000}}}}}').load()
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(500, 700))


def test_log_append_time_topic(spark, tiered_broker):
    topic = "spark-read-logappendtime"
    create_tiered(tiered_broker, topic, **{"message.timestamp.type": "LogAppendTime"})
    expected = produce_dataset(tiered_broker.bootstrap, topic, 600, codec="lz4")
    wait_tiered(tiered_broker, topic, 300)
    options = base_options(tiered_broker, subscribe=topic)
    assert remote_share(plan(options)[0]) > 0
    rows = rows_of(spark.read.format("strata").options(**options).load())
    assert sorted(rows) == sorted(expected)
    assert {r.timestampType for r in rows.values()} == {1}
    # the broker's append time, not the producer's (which is an hour old)
    assert min(r.timestamp for r in rows.values()) > dt.datetime.fromtimestamp((TS0 + 1_800_000) / 1000)
    assert all(r.value == record(i)[1] for (_, _), r in rows.items() for i in [expected[(r.partition, r.offset)]])


# ---- pushdown --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def multi_partition_topic(tiered_broker):
    topic = "spark-pushdown"
    create_tiered(tiered_broker, topic, partitions=3)
    expected = produce_dataset(tiered_broker.bootstrap, topic, 1500, codec="snappy", partitions=3)
    wait_tiered(tiered_broker, topic, 200, partitions=3)
    return topic, expected


def test_pushdown_narrows_planned_ranges(tiered_broker, multi_partition_topic):
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

    topic, _ = multi_partition_topic
    options = base_options(tiered_broker, subscribe=topic, **{"strata.filterPushdown": "true"})
    full, _ = plan(options)
    assert sorted((r.partition, r.start, r.end) for r in full) == [(0, 0, 500), (1, 0, 500), (2, 0, 500)]

    ranges, rest = plan(options, [GreaterThanOrEqual(("offset",), 100), LessThan(("offset",), 140),
                                  EqualTo(("partition",), 1)])
    assert [(r.partition, r.start, r.end) for r in ranges] == [(1, 100, 140)]
    assert rest == []                                     # offset and partition filters are applied exactly

    ranges, rest = plan(options, [In(("partition",), (0, 2))])
    assert sorted((r.partition, r.start, r.end) for r in ranges) == [(0, 0, 500), (2, 0, 500)]

    # record i sits in partition i % 3 at offset i // 3 with timestamp TS0 + 10 i
    since = dt.datetime.fromtimestamp((TS0 + 10 * 900) / 1000, tz=dt.timezone.utc)
    ts_filter = GreaterThanOrEqual(("timestamp",), since)
    ranges, rest = plan(options, [ts_filter])
    assert sorted((r.partition, r.start, r.end) for r in ranges) == [(0, 300, 500), (1, 300, 500), (2, 300, 500)]
    assert rest == [ts_filter]                            # Spark still evaluates timestamp filters


def residual_filters(df) -> str:
    """The Filter nodes Spark keeps above the scan after pushdown (optimized logical plan)."""
    plan_text = df._jdf.queryExecution().optimizedPlan().toString()
    return "\n".join(line for line in plan_text.splitlines() if line.lstrip(" +-:").startswith("Filter"))


def test_pushdown_through_spark_gives_the_filtered_rows(spark, tiered_broker, multi_partition_topic):
    topic, expected = multi_partition_topic
    df = spark.read.format("strata").options(**base_options(tiered_broker, subscribe=topic,
                                                            **{"strata.filterPushdown": "true"})).load()
    got = df.where((F.col("offset") >= 100) & (F.col("offset") < 140) & (F.col("partition") == 1))
    assert residual_filters(got) == ""                    # both were pushed and are applied by the plan
    assert sorted((r.partition, r.offset) for r in got.collect()) == [(1, o) for o in range(100, 140)]

    since = dt.datetime.fromtimestamp((TS0 + 10 * 900) / 1000, tz=dt.timezone.utc)
    got = df.where(F.col("timestamp") >= F.lit(since)).select("partition", "offset")
    assert "timestamp" in residual_filters(got)
    assert sorted((r.partition, r.offset) for r in got.collect()) == \
        sorted(po for po, i in expected.items() if i >= 900)


def test_two_queries_on_one_dataframe_give_the_right_answers(spark, tiered_broker, multi_partition_topic):
    """Spark 4.3.0 reuses a filtered query's plan for a later unfiltered query on the same DataFrame; without
    strata.filterPushdown the plan does not depend on filters, so both answers are right (Spark filters)."""
    from pyspark.sql.datasource import EqualTo
    topic, expected = multi_partition_topic
    df = spark.read.format("strata").options(**base_options(tiered_broker, subscribe=topic)).load()
    assert df.where(F.col("offset") < 5).count() == 15
    assert df.where(F.col("offset") < 5).count() == 15
    assert df.count() == len(expected) == 1500
    assert sorted((r.partition, r.offset) for r in df.where(F.col("partition") == 2).select("partition", "offset")
                  .collect()) == [(2, o) for o in range(500)]
    options = base_options(tiered_broker, subscribe=topic)
    assert plan(options, [EqualTo(("partition",), 1)])[1] == [EqualTo(("partition",), 1)]   # nothing pushed


def test_with_filter_pushdown_spark_4_3_reuses_the_narrowed_plan(spark, tiered_broker, multi_partition_topic):
    """The reason strata.filterPushdown is opt-in: this fails once Spark keeps the pushed-down plan per scan (then
    the option can become the default)."""
    topic, _ = multi_partition_topic
    df = spark.read.format("strata").options(**base_options(tiered_broker, subscribe=topic,
                                                            **{"strata.filterPushdown": "true"})).load()
    assert df.where(F.col("offset") < 5).count() == 15
    assert df.count() == 15                                # the narrowed plan, reused: Spark's, not the data's
