"""Transactions and tiered storage (KIP-405): each segment is uploaded with its transaction index
(`IndexType.TRANSACTION`), and a read_committed consumer reading from the remote tier, after the local segments are
gone, still drops the aborted transactions' records, as it does from the local log."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import BrokerProcess

try:
    from .helpers import wait_until
    from .test_tiered_storage import EARLIEST, EARLIEST_LOCAL, create, list_offsets, make_store, tiered_overrides
except ImportError:  # tests/integration is not a package
    from helpers import wait_until
    from test_tiered_storage import EARLIEST, EARLIEST_LOCAL, create, list_offsets, make_store, tiered_overrides

pytestmark = pytest.mark.integration


def read(bootstrap: str, topic: str, isolation: str, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "r-" + uuid.uuid4().hex, "isolation.level": isolation,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "broker.address.family": "v4"})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    for _ in range(120):
        out += [m.value() for m in c.consume(100, 0.5) if m.error() is None]
        if len(out) >= expect:
            break
    for _ in range(4):          # nothing more may come
        out += [m.value() for m in c.consume(100, 0.25) if m.error() is None]
    c.close()
    return out


def test_read_committed_from_the_remote_tier_drops_aborted_records(tmp_path):
    store = make_store("local", tmp_path)
    b = BrokerProcess(tmp_path / "b", tiered_overrides(store)).start()
    try:
        topic = "tt-" + uuid.uuid4().hex[:8]
        create(b, topic, **{"remote.storage.enable": "true", "segment.bytes": "4000",
                            "local.retention.bytes": "1"})
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tt-" + topic, "linger.ms": 0,
                      "broker.address.family": "v4", "batch.num.messages": 1})
        p.init_transactions(30)
        committed = []
        for t in range(8):
            p.begin_transaction()
            values = [b"t%d-%d-" % (t, i) + b"x" * 900 for i in range(3)]
            for v in values:
                p.produce(topic, value=v, partition=0)
                p.flush(10)
            if t % 2:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
                committed += values
        # until every aborted transaction (the last ends with its marker at 4 * 5 + 3) lives only in the remote tier
        wait_until(lambda: list_offsets(b, topic, EARLIEST_LOCAL)[1] > 23, timeout=60,
                   what="segments tiered and deleted locally")
        assert list_offsets(b, topic, EARLIEST)[1] == 0
        assert any(k.endswith(".txnindex") for k in store.keys(topic))
        got = read(b.bootstrap, topic, "read_committed", len(committed))
        assert sorted(got) == sorted(committed)
        assert len(read(b.bootstrap, topic, "read_uncommitted", 24)) == 24
    finally:
        b.stop()
    assert "Traceback" not in b.log_text()
