"""Helpers of the Spark connector suite: broker settings, known records, waiting for tiering, reading plans.

tests/conftest.py is loaded here under its own module name: pytest imports every directory's conftest.py as the
module `conftest`, so `from conftest import ...` would be ambiguous from this directory.
"""
from __future__ import annotations

import importlib.util
import random
import sys
import time
from dataclasses import dataclass
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


# ---- transactions (kafka.isolation.level) ---------------------------------------------------------------------------
@dataclass
class TxnDataset:
    """What produce_transactions wrote: {offset: (value, fate)} of every data record, fate one of 'committed',
    'aborted', 'open', 'plain' (non-transactional), and the last stable offset after it."""
    records: dict
    lso: int

    def committed(self, start: int = 0, end: int | None = None) -> list[bytes]:
        """What read_committed returns of [start, end) (end: the last stable offset), in offset order."""
        end = self.lso if end is None else end
        return [v for o, (v, fate) in sorted(self.records.items()) if start <= o < end and
                fate in ("committed", "plain")]

    def data(self, end: int) -> list[bytes]:
        """What read_uncommitted returns below `end`: every data record (markers are never returned)."""
        return [v for o, (v, _) in sorted(self.records.items()) if o < end]

    def offsets(self, tag: bytes) -> list[int]:
        """Offsets of the records of one transaction (values start with `tag`, e.g. b"c0-")."""
        return sorted(o for o, (v, _) in self.records.items() if v.startswith(tag))


def produce_transactions(bootstrap: str, topic: str, *, rounds: int = 12, per_txn: int = 30, size: int = 200,
                         partition: int = 0) -> TxnDataset:
    """Transactions interleaved on one partition, for read_committed reads. In log order:

    - producer A opens a transaction (20 records) that is aborted only after `rounds` transactions of producer B
      (committed and aborted in turn, plain records in between): its records sit segments before its marker;
    - producer C opens one (10 records), B commits enough to fill a segment or two, then C aborts: its marker lands
      in the last segment, which stays local (not tiered) while C's records may be tiered;
    - producer D opens a transaction and never ends it (timeout 15 minutes): the last stable offset stays at its
      first record; then plain records and a committed transaction of A, above the last stable offset.
    The range [0, lso) thus ends with C's ABORT marker, so the last offset of a read_committed range is a marker."""
    from confluent_kafka import Producer
    out: dict = {}

    def txn_producer(name: str) -> "Producer":
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{name}", "linger.ms": 5,
                      "batch.num.messages": 40, "transaction.timeout.ms": 900_000, "broker.address.family": "v4"})
        p.init_transactions(30)
        return p

    def send(p, values: list[bytes], fate: str) -> None:
        def cb(err, msg):
            assert err is None, err
            out[msg.offset()] = (msg.value(), fate)
        for v in values:
            p.produce(topic, value=v, partition=partition, on_delivery=cb)
        assert p.flush(30) == 0

    def values(tag: str, n: int) -> list[bytes]:
        return [f"{tag}-{i}:".encode().ljust(size, b".") for i in range(n)]

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                      "batch.num.messages": 40, "broker.address.family": "v4"})
    a, b, c, d = (txn_producer(x) for x in "abcd")
    a.begin_transaction()
    send(a, values("a0", 20), "aborted")
    for k in range(rounds):
        b.begin_transaction()
        send(b, values(f"b{k}", per_txn), "committed" if k % 2 == 0 else "aborted")
        if k % 2 == 0:
            b.commit_transaction(30)
        else:
            b.abort_transaction(30)
        send(plain, values(f"p{k}", 3), "plain")
    a.abort_transaction(30)
    c.begin_transaction()
    send(c, values("c0", 10), "aborted")
    for k in range(2):
        b.begin_transaction()
        send(b, values(f"bb{k}", SEGMENT_BYTES // size), "committed")
        b.commit_transaction(30)
    c.abort_transaction(30)
    d.begin_transaction()
    send(d, values("d0", 5), "open")
    lso = min(o for o, (_, fate) in out.items() if fate == "open")
    send(plain, values("tail", 5), "plain")
    a.begin_transaction()                   # A, committed, after the open one: above the last stable offset
    send(a, values("a1", 5), "committed")
    a.commit_transaction(30)
    return TxnDataset(out, lso)
