"""Reading the tiered part of a topic with the broker STOPPED: the driver plans from a listing of the object store
(a segment counts once its .log exists), the executors read the segments directly."""
from __future__ import annotations

import json

import pytest
from pyspark.errors import PySparkException
from py4j.protocol import Py4JJavaError

from protocol.record_batch import iter_batches
from spark_helpers import BrokerProcess, check_rows, create_tiered, produce_dataset, rows_of, tiered_overrides, \
    wait_tiered

pytestmark = pytest.mark.spark

TOPIC = "spark-broker-down"


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A topic with two partitions whose early segments are tiered, then the broker is stopped:
    (bootstrap, store url, expected rows, {partition: first offset NOT in the remote tier})."""
    tmp = tmp_path_factory.mktemp("spark-broker-down")
    b = BrokerProcess(tmp, tiered_overrides(f"file://{tmp}/objects")).start()
    try:
        create_tiered(b, TOPIC, partitions=2)
        expected = produce_dataset(b.bootstrap, TOPIC, 1000, codec="zstd", partitions=2)
        wait_tiered(b, TOPIC, 200, partitions=2)
    finally:
        assert b.stop() == 0, b.log_text()[-3000:]
    # measured in the store once the broker has stopped: its remote log manager may copy further closed segments
    # between a ListOffsets and the stop
    tiered_end = stored_end(tmp / "objects", TOPIC, partitions=2)
    assert all(e >= 200 for e in tiered_end.values()), tiered_end
    yield b.bootstrap, f"file://{tmp}/objects", expected, tiered_end


def stored_end(root, topic: str, partitions: int) -> dict[int, int]:
    """{partition: 1 + the last offset of the last whole .log segment in a local store}."""
    ends = {}
    for p in range(partitions):
        [topic_dir] = root.glob(f"{topic}-" + "?" * 22)
        last = max((topic_dir / str(p)).glob("*.log"), key=lambda f: int(f.name.split("-")[0]))
        ends[p] = 1 + max(h.last_offset for _, h in iter_batches(last.read_bytes()))
    return ends


def options(bootstrap, store_url, **extra):
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC, "strata.store.url": store_url,
            "includeHeaders": "true", **extra}


def ending(ends: dict) -> str:
    return json.dumps({TOPIC: {str(p): e for p, e in ends.items()}})


def test_read_tiered_offsets_with_the_broker_stopped(spark, stopped):
    from spark_connector.cluster import reachable
    bootstrap, url, expected, tiered_end = stopped
    assert not reachable(bootstrap)
    df = spark.read.format("strata").options(**options(bootstrap, url, endingOffsets=ending(tiered_end))).load()
    want = {po: i for po, i in expected.items() if po[1] < tiered_end[po[0]]}
    assert len(want) >= 400
    check_rows(rows_of(df), want, TOPIC)

    # a range that starts and ends inside segments, split in several tasks
    start = {p: 37 for p in tiered_end}
    end = {p: e - 11 for p, e in tiered_end.items()}
    df = spark.read.format("strata").options(**options(bootstrap, url, startingOffsets=ending(start),
                                                       endingOffsets=ending(end), minPartitions="5")).load()
    assert df.rdd.getNumPartitions() >= 5
    check_rows(rows_of(df), {po: i for po, i in want.items() if start[po[0]] <= po[1] < end[po[0]]}, TOPIC)


def test_broker_stopped_needs_explicit_ending_offsets_and_store_url(spark, stopped):
    bootstrap, url, _, tiered_end = stopped
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        spark.read.format("strata").options(**options(bootstrap, url)).load().collect()
    assert f"The brokers at {bootstrap} are unreachable" in str(e.value) and "endingOffsets" in str(e.value)

    opts = options(bootstrap, url, endingOffsets=ending(tiered_end))
    del opts["strata.store.url"]
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        spark.read.format("strata").options(**opts).load().collect()
    assert "unreachable" in str(e.value) and "strata.store.url" in str(e.value)

    wrong = options(bootstrap, url + "-typo", endingOffsets=ending(tiered_end))
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        spark.read.format("strata").options(**wrong).load().collect()
    assert f"the object store directory {url[len('file://'):]}-typo" in str(e.value)
    assert "does not exist" in str(e.value)


def test_broker_stopped_offsets_beyond_the_remote_tier_fail(spark, stopped):
    bootstrap, url, _, tiered_end = stopped
    beyond = {p: e + 50 for p, e in tiered_end.items()}
    with pytest.raises((PySparkException, Py4JJavaError)) as e:
        spark.read.format("strata").options(**options(bootstrap, url, endingOffsets=ending(beyond))).load().count()
    assert "are not in the object store" in str(e.value) and "unreachable" in str(e.value)
    # with failOnDataLoss=false the tiered part is returned
    df = spark.read.format("strata").options(**options(bootstrap, url, endingOffsets=ending(beyond),
                                                       failOnDataLoss="false")).load()
    assert df.count() == sum(tiered_end.values())
