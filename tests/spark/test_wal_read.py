"""Spark reads a WAL-enabled RF=3 topic on a three-broker cluster (issue 15 item 2): what is not tiered comes from
the fast store's WAL objects, with pointers the planner gets from each leader, up to the high watermark; the brokers
serve no record bytes to the executors. Collected objects fall back to Fetch, and the answer stays exact."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.cluster.helpers import create  # noqa: E402
from tests.cluster.test_wal import WAL, metric, produce, wal_cluster  # noqa: E402
from spark_helpers import plan  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def wal_topic(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spark-wal")
    c = wal_cluster(tmp)
    topic = "spark-wal"
    create(c, topic, partitions=3, configs=WAL)
    produce(c.bootstrap, topic, 3000, size=120)
    yield c, topic, tmp / "fast"
    c.stop()


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
