"""A broker upgraded over a data directory written by an earlier release starts and serves everything it had.

The tarball was written by tests/upgrade/make_datadir.py at the commit in its name (the single-broker layout with
`__strata_metadata.json`, before the metadata log); see that script for what it holds.
"""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource

from tests.conftest import BrokerProcess
from tests.integration.helpers import admin_client, producer, produce_all, wait_until

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent


def _consume(bootstrap: str, topic: str, partition: int, start: int, count: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}-{partition}",
                  "enable.auto.commit": False, "broker.address.family": "v4"})
    c.assign([TopicPartition(topic, partition, start)])
    out = []
    try:
        wait_until(lambda: out.extend(m for m in c.consume(100, 1) if not m.error()) or len(out) >= count,
                   what=f"{count} records of {topic}-{partition}")
    finally:
        c.close()
    return out


@pytest.fixture
def upgraded(tmp_path):
    with tarfile.open(HERE / "datadir-32c7839.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    b = BrokerProcess(tmp_path, {"remote.log.storage.system.enable": "true",
                                 "remote.log.storage.manager.store.url": f"file://{tmp_path / 'objects'}"}).start()
    yield b
    assert b.stop() == 0
    assert "Traceback" not in b.log_text(), b.log_text()[-5000:]


def test_upgraded_broker_serves_every_topic_record_offset_and_config(upgraded):
    b = upgraded
    admin = admin_client(b.bootstrap)
    md = admin.list_topics(timeout=10)
    assert {"plain", "compacted", "tiered"} <= set(md.topics)
    assert len(md.topics["plain"].partitions) == 3

    # plain: 100 records per partition, DeleteRecords moved partition 0's start to 10
    low, high = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm"}).get_watermark_offsets(
        TopicPartition("plain", 0), timeout=10)
    assert (low, high) == (10, 100)
    recs = _consume(b.bootstrap, "plain", 1, 0, 100)
    assert [r.value() for r in recs[:3]] == [b"plain-1", b"plain-4", b"plain-7"]
    assert recs[0].headers() == [("h", b"1")]

    # tiered: offsets 0-359 live in the remote tier only, 360-399 locally
    recs = _consume(b.bootstrap, "tiered", 0, 0, 400)
    assert [r.offset() for r in recs[:400]] == list(range(400))
    assert recs[0].value().startswith(b"tiered-0-") and recs[399].value().startswith(b"tiered-399-")

    # compacted: every key's latest value is there
    recs = _consume(b.bootstrap, "compacted", 0, 0, 50)
    latest = {r.key(): r.value() for r in recs}
    assert latest == {f"key{k}".encode(): f"v{40 + k}".encode() for k in range(10)}

    # the group's committed offsets
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "upgrade-group"})
    got = c.committed([TopicPartition("plain", 0), TopicPartition("plain", 1)], timeout=10)
    c.close()
    assert [(tp.partition, tp.offset) for tp in got] == [(0, 42), (1, 7)]

    # the config override
    res = ConfigResource(ConfigResource.Type.TOPIC, "plain")
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "123456789"

    # new writes continue after the old log ends, and a new producer id is not one the old broker handed out
    p = producer(b.bootstrap, enable_idempotence=True)
    msgs = produce_all(p, "plain", [(b"k", b"after-upgrade")], partition=2)
    assert msgs[0].offset() == 100
