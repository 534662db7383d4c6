"""aiokafka against a real Strata broker: every codec (aiokafka frames snappy the xerial way), send_and_wait offsets,
explicit batches, the idempotent producer, and manual-assignment consumers; records written by aiokafka are read back
by librdkafka too."""
from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

try:
    from .helpers import CODEC_IDS, consume, create_topic, stored_batches
except ImportError:  # tests/integration is not a package
    from helpers import CODEC_IDS, consume, create_topic, stored_batches

pytestmark = pytest.mark.integration


async def fetch_n(c: AIOKafkaConsumer, n: int, timeout: float = 30) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"got {len(out)}/{n} records in {timeout}s"
        batch = await c.getmany(timeout_ms=200, max_records=n - len(out))
        for recs in batch.values():
            out.extend(recs)
    return out


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
async def test_produce_consume_each_codec(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name)
    n = 150
    ts0 = int(time.time() * 1000) - 120_000
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20)
    await p.start()
    try:
        futs = [await p.send(topic_name, key=b"k%d" % i, value=(b"aio-%d " % i) * 12, partition=0,
                             timestamp_ms=ts0 + i, headers=[("h", b"%d" % i), ("h", b"again")])
                for i in range(n)]
        metas = await asyncio.gather(*futs)
        last = await p.send_and_wait(topic_name, key=b"last", value=b"sent-and-waited", partition=0)
    finally:
        await p.stop()
    assert [m.offset for m in metas] == list(range(n))
    assert (last.topic, last.partition, last.offset) == (topic_name, 0, n)

    c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                         fetch_max_wait_ms=100)
    await c.start()
    try:
        tp = TopicPartition(topic_name, 0)
        c.assign([tp])
        c.seek(tp, 0)
        recs = await fetch_n(c, n + 1)
        assert await c.end_offsets([tp]) == {tp: n + 1}
    finally:
        await c.stop()
    assert [r.offset for r in recs] == list(range(n + 1))
    assert [(r.key, r.value) for r in recs[:n]] == [(b"k%d" % i, (b"aio-%d " % i) * 12) for i in range(n)]
    assert [r.timestamp for r in recs[:n]] == [ts0 + i for i in range(n)]
    assert list(recs[3].headers) == [("h", b"3"), ("h", b"again")]
    assert (recs[n].key, recs[n].value) == (b"last", b"sent-and-waited")

    batches = stored_batches(broker, topic_name, min_records=n + 1)
    assert {b["codec"] for b in batches} == {CODEC_IDS[codec or "none"]}

    # librdkafka reads aiokafka's batches as well (incl. xerial-framed snappy)
    got = consume(broker.bootstrap, topic_name, n + 1)
    assert [(m.offset(), m.key(), m.value()) for m in got[:3]] == [
        (i, b"k%d" % i, (b"aio-%d " % i) * 12) for i in range(3)]
    assert got[n].value() == b"sent-and-waited"


async def test_idempotent_send_and_wait_offsets_and_explicit_batch(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=0)
    await p.start()
    try:
        offsets = [(await p.send_and_wait(topic_name, value=b"s%d" % i, partition=1)).offset for i in range(5)]
        assert offsets == [0, 1, 2, 3, 4]

        batch = p.create_batch()
        for i in range(7):
            assert batch.append(key=None, value=b"b%d" % i, timestamp=None) is not None
        fut = await p.send_batch(batch, topic_name, partition=1)
        meta = await fut
        assert (meta.partition, meta.offset) == (1, 5)  # the batch's base offset

        after = await p.send_and_wait(topic_name, value=b"after", partition=1)
        assert after.offset == 12
        other = await p.send_and_wait(topic_name, value=b"p0", partition=0)
        assert (other.partition, other.offset) == (0, 0)
    finally:
        await p.stop()

    c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                         fetch_max_wait_ms=100)
    await c.start()
    try:
        tp = TopicPartition(topic_name, 1)
        c.assign([tp])
        c.seek(tp, 3)
        recs = await fetch_n(c, 10)
        assert [(r.offset, r.value) for r in recs] == (
            [(3, b"s3"), (4, b"s4")] + [(5 + i, b"b%d" % i) for i in range(7)] + [(12, b"after")])
        assert await c.beginning_offsets([tp]) == {tp: 0}
    finally:
        await c.stop()

    batches = stored_batches(broker, topic_name, 1, min_records=13)
    assert len({b["producer_id"] for b in batches}) == 1 and batches[0]["producer_id"] >= 0
    assert [b["base_sequence"] for b in batches] == [0, 1, 2, 3, 4, 5, 12]


async def test_consumer_waits_for_records_produced_later(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                         fetch_max_wait_ms=30_000, request_timeout_ms=60_000)
    await c.start()
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await p.start()
    try:
        tp = TopicPartition(topic_name, 0)
        c.assign([tp])
        c.seek(tp, 0)
        getter = asyncio.ensure_future(c.getone())
        await asyncio.sleep(1.0)
        assert not getter.done()
        await p.send_and_wait(topic_name, key=b"k", value=b"late", partition=0)
        t0 = time.monotonic()
        rec = await asyncio.wait_for(getter, 25)
        # without a wake-up the record would only arrive when the 30 s fetch_max_wait_ms expires
        assert time.monotonic() - t0 < 15, "the parked fetch was not woken by the append"
        assert (rec.offset, rec.key, rec.value) == (0, b"k", b"late")
    finally:
        await p.stop()
        await c.stop()
