"""Spark reads a WAL-enabled RF=3 topic on a three-broker cluster (issue 15 item 2): what is not tiered comes from
the fast store's WAL objects, with pointers the planner gets from each leader, up to the high watermark; the brokers
serve no record bytes to the executors. Collected objects fall back to Fetch, and the answer stays exact. With
kafka.isolation.level=read_committed the leader also names the aborted transactions (DescribeWalPointers v1), and
the fast-store read returns exactly the committed records below the last stable offset."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.cluster.helpers import create  # noqa: E402
from tests.cluster.test_wal import WAL, metric, produce, wal_cluster  # noqa: E402
from spark_helpers import plan, produce_transactions  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spark-wal")
    c = wal_cluster(tmp)
    yield c, tmp / "fast"
    c.stop()


@pytest.fixture(scope="module")
def wal_topic(cluster):
    c, fast = cluster
    topic = "spark-wal"
    create(c, topic, partitions=3, configs=WAL)
    produce(c.bootstrap, topic, 3000, size=120)
    return c, topic, fast


def bytes_out(c) -> float:
    return sum(metric(b, "kafka_server_brokertopicmetrics_bytes_out_total") for b in c.brokers.values())


def test_the_recent_log_is_read_from_the_fast_store(spark, wal_topic):
    c, topic, _ = wal_topic
    options = {"kafka.bootstrap.servers": c.bootstrap, "subscribe": topic}
    ranges, _ = plan(options)
    assert sum(r.end - r.start for r in ranges) == 3000
    assert sum(r.sources()["wal"] for r in ranges) == 3000 and sum(r.sources()["fetch"] for r in ranges) == 0
    before = bytes_out(c)
    rows = spark.read.format("strata").options(**options).load().select("offset", "value").collect()
    assert sorted(int(bytes(r.value).rstrip(b".")) for r in rows) == list(range(3000))
    assert bytes_out(c) == before                     # no record bytes from the brokers to the executors


def test_collected_wal_objects_fall_back_to_fetch(spark, wal_topic):
    c, topic, fast = wal_topic
    options = {"kafka.bootstrap.servers": c.bootstrap, "subscribe": topic}
    df = spark.read.format("strata").options(**options).load()
    shutil.rmtree(fast / "wal")                       # as if garbage collected after planning... or before
    before = bytes_out(c)
    rows = df.select("offset", "value").collect()
    assert sorted(int(bytes(r.value).rstrip(b".")) for r in rows) == list(range(3000))
    assert bytes_out(c) > before


def test_read_committed_from_the_fast_store(spark, cluster):
    """Interleaved transactions on a WAL topic (spark_helpers.produce_transactions): the WAL chunks are not indexed,
    so the aborted transactions come from the leader with the pointers; read_committed ends at the last stable
    offset (an ABORT marker is its last offset below) and drops aborted records, read_uncommitted keeps them."""
    c, _ = cluster
    topic = "spark-wal-txn"
    create(c, topic, configs=WAL)
    dataset = produce_transactions(c.bootstrap, topic, rounds=6)
    committed = {"kafka.bootstrap.servers": c.bootstrap, "subscribe": topic, "kafka.isolation.level": "read_committed"}
    [r], _ = plan(committed)
    assert (r.start, r.end) == (0, dataset.lso) and r.sources()["wal"] == dataset.lso, r
    assert len(r.txn[0]) == 1 + 3 + 1 and r.txn[1] == ()     # A's, B's three, C's: the leader's local entries
    before = bytes_out(c)
    df = spark.read.format("strata").options(**committed).load()
    assert [bytes(x.value) for x in df.orderBy("offset").select("value").collect()] == dataset.committed()
    assert bytes_out(c) == before
    uncommitted = {**committed, "kafka.isolation.level": "read_uncommitted"}
    [r], _ = plan(uncommitted)
    rows = spark.read.format("strata").options(**uncommitted).load().orderBy("offset").select("value").collect()
    assert [bytes(x.value) for x in rows] == dataset.data(r.end)
