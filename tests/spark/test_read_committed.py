"""kafka.isolation.level (issue 24 item 5): read_committed reads return exactly the committed records below the last
stable offset on every path, as Kafka's consumer would, and read_uncommitted every data record below the high
watermark, never a transaction marker.

One tiered topic holds interleaved transactions (spark_helpers.produce_transactions): one aborted with its records
segments before its marker, aborted ones whose marker is in the same or the next segment, one aborted with its
records tiered and its marker in the local (not tiered) segment, committed ones, plain records, and one transaction
left open, after which come plain and committed records the last stable offset keeps out. The last offset below
the last stable offset is an ABORT marker, so a Fetch read must end on offsets the consumer never returns.
The fast-store (WAL) path is in test_wal_read.py."""
from __future__ import annotations

import json

import pytest

from spark_helpers import TIERED, base_options, create_topic, plan, produce_transactions, wait_tiered

pytestmark = pytest.mark.spark

TOPIC = "spark-txn"
COMMITTED = {"kafka.isolation.level": "read_committed"}


@pytest.fixture(scope="module")
def txn_topic(tiered_broker):
    """TOPIC's TxnDataset, tiered up to the segment holding the last aborted transaction's records (its marker
    stays local)."""
    create_topic(tiered_broker.bootstrap, TOPIC, 1, TIERED)
    dataset = produce_transactions(tiered_broker.bootstrap, TOPIC)
    wait_tiered(tiered_broker, TOPIC, dataset.offsets(b"c0-")[-1] + 1)
    return dataset


def values(spark, options: dict) -> list[bytes]:
    rows = spark.read.format("strata").options(**options).load().select("offset", "value").collect()
    return [bytes(r.value) for r in sorted(rows, key=lambda r: r.offset)]


def test_read_committed_direct_reads_of_tiered_segments(spark, tiered_broker, txn_topic):
    lso = txn_topic.lso
    options = base_options(tiered_broker, subscribe=TOPIC, **COMMITTED)
    [r], _ = plan(options)
    assert (r.start, r.end) == (0, lso)                       # latest is the last stable offset
    assert r.sources()["remote"] > lso // 2, r
    local, indexes = r.txn
    # the last aborted transaction's marker is not tiered: its entry comes from the leader; the others from the
    # remote segments' .txnindex objects, the one the first segment's records need from several segments later
    assert [e[1:] for e in local] == [(txn_topic.offsets(b"c0-")[0], lso - 1)]
    assert len(indexes) >= 2
    assert values(spark, options) == txn_topic.committed()
    # ranges that start and end inside transactions
    assert values(spark, {**options, "minPartitions": "7"}) == txn_topic.committed()


def test_read_uncommitted_returns_every_data_record_but_no_marker(spark, tiered_broker, txn_topic):
    options = base_options(tiered_broker, subscribe=TOPIC, **{"kafkaConsumer.pollTimeoutMs": "20000"})
    [r], _ = plan(options)
    assert r.end > max(txn_topic.records)                     # the high watermark (past the last commit marker)
    assert values(spark, options) == txn_topic.data(r.end)
    assert getattr(r, "txn", None) is None                    # no aborted transactions to look up
    assert values(spark, {**options, "kafka.isolation.level": "read_uncommitted"}) == txn_topic.data(r.end)


def test_fetch_path_ends_on_markers_and_aborted_records(spark, tiered_broker, txn_topic):
    """Through Fetch the consumer skips markers and aborted records itself; a range whose last offsets are such
    ends on the consumer's position instead of waiting for offsets that never come (kafkaConsumer.pollTimeoutMs)."""
    lso = txn_topic.lso
    fetch = base_options(tiered_broker, subscribe=TOPIC, **{"strata.directRead": "false",
                                                            "kafkaConsumer.pollTimeoutMs": "20000"})
    assert values(spark, {**fetch, **COMMITTED}) == txn_topic.committed()
    ending = json.dumps({TOPIC: {"0": lso}})                 # lso - 1 is an ABORT marker
    assert values(spark, {**fetch, "endingOffsets": ending}) == txn_topic.data(lso)
    # ranges of a few offsets: some hold only aborted records or a marker, and return nothing
    aborted = txn_topic.offsets(b"c0-")[0]
    starting, ending = (json.dumps({TOPIC: {"0": o}}) for o in (aborted - 20, aborted + 10))
    got = values(spark, {**fetch, **COMMITTED, "startingOffsets": starting, "endingOffsets": ending,
                         "maxRecordsPerPartition": "5"})
    assert got == txn_topic.committed(aborted - 20, aborted + 10)


def test_read_committed_ending_offsets_beyond_the_last_stable_offset_fail(tiered_broker, txn_topic):
    from spark_connector.options import StrataOptionError
    ending = json.dumps({TOPIC: {"0": txn_topic.lso + 1}})
    with pytest.raises(StrataOptionError, match="beyond the last stable offset"):
        plan(base_options(tiered_broker, subscribe=TOPIC, endingOffsets=ending, **COMMITTED))


def test_streaming_read_committed_stops_at_the_last_stable_offset(spark, tiered_broker, txn_topic, tmp_path):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_connector.options import parse_read_options, with_group_id
    from spark_connector.stream import StrataStreamReader
    lso = txn_topic.lso
    options = base_options(tiered_broker, subscribe=TOPIC, startingOffsets="earliest", **COMMITTED)
    reader = StrataStreamReader(with_group_id(parse_read_options(options, streaming=True), streaming=True))
    try:
        assert reader.latestOffset(reader.initialOffset(), ReadAllAvailable()) == {TOPIC: {"0": lso}}
    finally:
        reader.stop()
    # availableNow in micro-batches whose bounds fall inside transactions: exactly the committed records
    q = (spark.readStream.format("strata").options(**options, maxOffsetsPerTrigger="150").load()
         .selectExpr("offset", "value").writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    try:
        q.awaitTermination()
    finally:
        q.stop()
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 3
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert [bytes(r.value) for r in sorted(rows, key=lambda r: r.offset)] == txn_topic.committed()


def test_spark_kafka_source_reads_the_same(spark, tiered_broker, txn_topic):
    """Spark's own Kafka source (the Java consumer and admin client, Fetch only) reading the same topic returns what
    the tests expect and what format("strata") returns, for both isolation levels: the connector's semantics are
    Spark's."""
    import apache_kafka

    from spark_helpers import kafka_source_jars
    reason = apache_kafka.skip_reason() or (None if kafka_source_jars() else "no Spark Kafka source jars")
    if reason:
        pytest.skip(reason)
    for level, expected in (("read_committed", txn_topic.committed()),
                            ("read_uncommitted", txn_topic.data(max(txn_topic.records) + 1))):
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", tiered_broker.bootstrap)
              .option("subscribe", TOPIC).option("kafka.isolation.level", level).load())
        rows = df.select("offset", "value").collect()
        assert [bytes(r.value) for r in sorted(rows, key=lambda r: r.offset)] == expected, level
        strata = base_options(tiered_broker, subscribe=TOPIC, **{"kafka.isolation.level": level,
                                                                 "kafkaConsumer.pollTimeoutMs": "20000"})
        assert values(spark, strata) == expected, level
