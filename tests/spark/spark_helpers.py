"""Helpers of the Spark connector suite: broker settings, known records, waiting for tiering, reading plans.

tests/conftest.py is loaded here under its own module name: pytest imports every directory's conftest.py as the
module `conftest`, so `from conftest import ...` would be ambiguous from this directory.
"""
from __future__ import annotations

import importlib.util
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))
sys.path.insert(0, str(HERE.parent))

_spec = importlib.util.spec_from_file_location("strata_tests_root_conftest", HERE.parent / "conftest.py")
_root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_root)
ROOT, BrokerProcess, free_port = _root.ROOT, _root.BrokerProcess, _root.free_port

from helpers import admin_client, create_topic, produce_all, producer, wait_until  # noqa: E402,F401
from rawclient import RawClient  # noqa: E402

LATEST_TIERED = -5
TS0 = int(time.time() * 1000) - 3_600_000            # recent: inside the default retention.ms
SEGMENT_BYTES = 16384                                 # a few dozen small segments per topic
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1"}


def tiered_overrides(store_url: str, **extra) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.store.url": store_url,
            "remote.log.storage.manager.store.fsync": "false", "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200", "remote.log.metadata.topic.num.partitions": "3",
            "log.cleaner.enable": "false", **extra}


# ---- data -----------------------------------------------------------------------------------------------------------
def record(i: int) -> tuple:
    """Record i of a dataset: (key, value, headers, timestamp). Values are part random (so compressed batches still
    fill segments), some keys are null, some records carry headers (one with a null value)."""
    rnd = random.Random(i)
    key = None if i % 7 == 0 else f"k{i}".encode()
    value = f"v{i}:".encode() + rnd.randbytes(120) + b"x" * 80
    headers = [("h", str(i).encode()), ("n", None)] if i % 3 == 0 else None
    return key, value, headers, TS0 + i * 10


def produce_dataset(bootstrap: str, topic: str, n: int, *, codec: str = "none", partitions: int = 1,
                    start: int = 0, partition: int | None = None) -> dict:
    """Produce records start..start+n-1 (record i to partition i % partitions, or all to `partition`); return
    {(partition, offset): i}."""
    p = producer(bootstrap, **{"compression.type": codec, "batch.num.messages": 50, "enable.idempotence": True})
    out = {}
    for part in range(partitions):
        idx = [i for i in range(start, start + n) if i % partitions == part]
        msgs = produce_all(p, topic, [record(i) for i in idx], partition=part if partition is None else partition)
        out.update({(m.partition(), m.offset()): i for m, i in zip(msgs, idx)})
    return out


def create_tiered(b: BrokerProcess, topic: str, partitions: int = 1, **configs) -> None:
    create_topic(b.bootstrap, topic, partitions, {**TIERED, **configs})


def latest_tiered(b: BrokerProcess, topic: str, partition: int = 0) -> int:
    with RawClient(b.bootstrap, timeout=30) as c:
        resp = c.request(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": LATEST_TIERED}]}]})
    return resp.topics[0].partitions[0].offset


def wait_tiered(b: BrokerProcess, topic: str, upto: int, partitions: int = 1, timeout: float = 60) -> None:
    """Until offsets below `upto` of every partition are in the remote tier (copied; local copies may remain)."""
    wait_until(lambda: all(latest_tiered(b, topic, p) >= upto - 1 for p in range(partitions)), timeout=timeout,
               interval=0.1, what=f"{topic} tiered up to {upto}")


def rows_of(df) -> dict:
    """{(partition, offset): Row} of a DataFrame read from the connector."""
    return {(r.partition, r.offset): r for r in df.collect()}


def check_rows(rows: dict, expected: dict, topic: str, headers: bool = True) -> None:
    """Rows equal what was produced: same (partition, offset) set, keys, values, timestamps, headers."""
    assert sorted(rows) == sorted(expected), (len(rows), len(expected))
    for po, i in expected.items():
        r = rows[po]
        key, value, hdrs, ts = record(i)
        assert r.topic == topic and r.key == key and r.value == value, (po, i)
        assert r.timestampType == 0 and int(r.timestamp.timestamp() * 1000) == ts, (po, r.timestamp, ts)
        if headers:
            got = None if r.headers is None else [(h.key, h.value) for h in r.headers]
            assert got == hdrs, (po, got, hdrs)


def base_options(b: BrokerProcess, **extra) -> dict:
    return {"kafka.bootstrap.servers": b.bootstrap, **extra}


def plan(options: dict, filters=()):
    """The input partitions the connector plans for a batch read (the driver code Spark runs), after pushdown."""
    from spark_connector.source import StrataDataSource
    from pyspark.sql.datasource import CaseInsensitiveDict
    ds = StrataDataSource(CaseInsensitiveDict(options))
    reader = ds.reader(ds.schema())
    rest = list(reader.pushFilters(list(filters)))
    return reader.partitions(), rest


def kafka_source_jars() -> list[str]:
    """The jars of Spark's own Kafka source (`format("kafka")`) that PySpark lacks, resolved by
    deploy/apache-kafka/resolve.sh (a no-op once done, as `make test` does); [] without java or mvn, or if resolving
    fails (test_kafka_source.py then skips or fails saying why; the other suites do not need them)."""
    from apache_kafka import spark_jars, skip_reason
    try:
        return [] if skip_reason() else spark_jars()
    except Exception:
        return []
