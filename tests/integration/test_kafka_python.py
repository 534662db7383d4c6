"""kafka-python 3.x against a real Strata broker: the default (idempotent, acks=all) producer with every codec,
manual-assignment consumers (incremental fetch sessions), ListOffsets helpers and KafkaAdminClient."""
from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError

try:
    from .helpers import CODEC_IDS, create_topic, stored_batches, wait_until
except ImportError:  # tests/integration is not a package
    from helpers import CODEC_IDS, create_topic, stored_batches, wait_until

pytestmark = pytest.mark.integration


def kp_producer(broker, **conf) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=broker.bootstrap, **conf)


def kp_consumer(broker, **conf) -> KafkaConsumer:
    base = dict(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=100)
    base.update(conf)
    return KafkaConsumer(**base)


def poll_n(c: KafkaConsumer, n: int, timeout: float = 30) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"got {len(out)}/{n} records in {timeout}s"
        for recs in c.poll(timeout_ms=200, max_records=n - len(out)).values():
            out.extend(recs)
    return out


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_default_producer_round_trip_with_codec_and_headers(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name)
    p = kp_producer(broker, compression_type=codec, linger_ms=20)
    assert p.config["enable_idempotence"] is True and p.config["acks"] == -1  # the 3.x defaults under test
    n = 200
    ts0 = int(time.time() * 1000) - 60_000
    futures = [p.send(topic_name, key=b"k%d" % i, value=(b"payload-%d;" % i) * 10, partition=0,
                      headers=[("seq", b"%d" % i), ("seq", b"dup"), ("empty", b"")], timestamp_ms=ts0 + i)
               for i in range(n)]
    p.flush(30)
    metas = [f.get(timeout=10) for f in futures]
    p.close()
    assert [m.offset for m in metas] == list(range(n))
    assert {(m.topic, m.partition) for m in metas} == {(topic_name, 0)}
    assert [m.timestamp for m in metas] == [ts0 + i for i in range(n)]

    c = kp_consumer(broker)
    try:
        tp = TopicPartition(topic_name, 0)
        c.assign([tp])
        recs = poll_n(c, n)
    finally:
        c.close()
    assert [r.offset for r in recs] == list(range(n))
    assert [r.key for r in recs] == [b"k%d" % i for i in range(n)]
    assert [r.value for r in recs] == [(b"payload-%d;" % i) * 10 for i in range(n)]
    assert [r.timestamp for r in recs] == [ts0 + i for i in range(n)]
    assert {r.timestamp_type for r in recs} == {0}  # CreateTime
    assert recs[7].headers == [("seq", b"7"), ("seq", b"dup"), ("empty", b"")]

    batches = stored_batches(broker, topic_name, min_records=n)
    assert {b["codec"] for b in batches} == {CODEC_IDS[codec or "none"]}
    assert all(b["producer_id"] >= 0 for b in batches), "default producer is idempotent: batches carry a pid"
    seq = 0
    for b in batches:
        assert b["base_sequence"] == seq
        seq += b["records_count"]


def test_assign_seek_and_incremental_fetches(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    p = kp_producer(broker, linger_ms=5)
    for part in range(3):
        for i in range(10):
            p.send(topic_name, value=b"%d-%d" % (part, i), partition=part)
    p.flush(30)

    c = kp_consumer(broker)
    try:
        tps = [TopicPartition(topic_name, part) for part in range(3)]
        c.assign(tps)
        c.seek(tps[0], 7)
        c.seek(tps[1], 0)
        c.seek(tps[2], 10)   # at the end: nothing yet
        first = poll_n(c, 3 + 10)
        got = {(r.partition, r.offset): r.value for r in first}
        assert got == {**{(0, i): b"0-%d" % i for i in range(7, 10)}, **{(1, i): b"1-%d" % i for i in range(10)}}
        assert c.position(tps[0]) == 10 and c.position(tps[1]) == 10 and c.position(tps[2]) == 10

        # later produces arrive through the same (incremental) fetch session, only the new records
        for i in range(10, 13):
            p.send(topic_name, value=b"2-%d" % i, partition=2)
        p.send(topic_name, value=b"0-10", partition=0)
        p.flush(30)
        second = poll_n(c, 4)
        assert sorted((r.partition, r.offset, r.value) for r in second) == [
            (0, 10, b"0-10"), (2, 10, b"2-10"), (2, 11, b"2-11"), (2, 12, b"2-12")]

        # seek backwards re-reads
        c.seek(tps[1], 4)
        again = poll_n(c, 6)
        assert [(r.partition, r.offset, r.value) for r in again] == [(1, i, b"1-%d" % i) for i in range(4, 10)]
        assert not any(c.poll(timeout_ms=300).values())
    finally:
        c.close()
        p.close()


def test_reassignment_drops_and_adds_partitions_in_the_fetch_session(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = kp_producer(broker, linger_ms=0)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    c = kp_consumer(broker)
    try:
        c.assign([tp0, tp1])
        for part in (0, 1):
            p.send(topic_name, value=b"a%d" % part, partition=part)
        p.flush(10)
        assert sorted((r.partition, r.value) for r in poll_n(c, 2)) == [(0, b"a0"), (1, b"a1")]

        c.assign([tp1])          # partition 0 leaves the session (forgotten topics)
        for part in (0, 1):
            p.send(topic_name, value=b"b%d" % part, partition=part)
        p.flush(10)
        got = poll_n(c, 1)
        time.sleep(0.3)
        got += [r for recs in c.poll(timeout_ms=300).values() for r in recs]
        assert [(r.partition, r.offset, r.value) for r in got] == [(1, 1, b"b1")]

        c.assign([tp0, tp1])     # back in the session, from offset 1
        c.seek(tp0, 1)
        c.seek(tp1, 2)
        got = poll_n(c, 1)
        assert [(r.partition, r.offset, r.value) for r in got] == [(0, 1, b"b0")]
    finally:
        c.close()
        p.close()


def test_small_fetch_sizes_make_progress_across_many_fetches(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    p = kp_producer(broker, linger_ms=0, batch_size=600)
    per = 150
    for i in range(per):
        for part in range(3):
            p.send(topic_name, key=b"%d" % part, value=b"%d:%04d:" % (part, i) + b"z" * 80, partition=part)
    p.flush(30)
    p.close()
    # 700 bytes per partition per fetch: every fetch returns only a few batches; the session moves on each time
    c = kp_consumer(broker, max_partition_fetch_bytes=700, fetch_max_bytes=1500)
    try:
        c.assign([TopicPartition(topic_name, part) for part in range(3)])
        recs = poll_n(c, 3 * per, timeout=60)
    finally:
        c.close()
    for part in range(3):
        mine = [r for r in recs if r.partition == part]
        assert [r.offset for r in mine] == list(range(per))
        assert [r.value[:7] for r in mine] == [b"%d:%04d:" % (part, i) for i in range(per)]


def test_offsets_for_times_beginning_and_end_offsets(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = kp_producer(broker, linger_ms=0)
    base = int(time.time() * 1000) - 300_000
    for i in range(8):
        p.send(topic_name, value=b"v%d" % i, partition=0, timestamp_ms=base + 100 * i).get(timeout=10)
    p.close()

    c = kp_consumer(broker)
    try:
        tp = TopicPartition(topic_name, 0)
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 8}
        found = c.offsets_for_times({tp: base + 250})[tp]
        assert (found.offset, found.timestamp) == (3, base + 300)
        found = c.offsets_for_times({tp: base - 1})[tp]
        assert (found.offset, found.timestamp) == (0, base)
        assert c.offsets_for_times({tp: base + 10_000})[tp] is None
    finally:
        c.close()


def _topic_configs(admin, topic, names=None):
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, names)], config_filter="all")
    return res["topic"][topic]


def test_admin_client_topic_lifecycle(broker, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = admin.create_topics({topic_name: {"num_partitions": 2, "replication_factor": 1,
                                                "configs": {"retention.ms": "3600000",
                                                            "cleanup.policy": "delete"}}})
        [t] = res["topics"]
        assert (t["name"], t["error_code"], t["num_partitions"]) == (topic_name, 0, 2)
        wait_until(lambda: topic_name in admin.list_topics(), what="topic listed")

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({topic_name: {"num_partitions": 1}})
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics({topic_name + "-rf3": {"num_partitions": 1, "replication_factor": 3}})

        cfg = _topic_configs(admin, topic_name)
        assert cfg["retention.ms"]["value"] == "3600000"
        assert cfg["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert cfg["segment.bytes"]["value"] == "1073741824"
        assert cfg["segment.bytes"]["config_source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
        # the default 'modified' filter lists only the overrides
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
        assert set(modified["topic"][topic_name]) == {"retention.ms", "cleanup.policy"}

        # incremental alter: SET one, DELETE another
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name, {
            "max.message.bytes": (AlterConfigOp.SET, "2000000"),
            "retention.ms": (AlterConfigOp.DELETE, None)})], incremental=True)
        assert out == {"topic": {topic_name: "OK"}}
        cfg = _topic_configs(admin, topic_name)
        assert (cfg["max.message.bytes"]["value"], cfg["max.message.bytes"]["config_source"]) == (
            "2000000", "DYNAMIC_TOPIC_CONFIG")
        assert cfg["retention.ms"]["value"] == "604800000"
        assert cfg["retention.ms"]["config_source"] != "DYNAMIC_TOPIC_CONFIG"

        # grow 2 -> 3 partitions, produce to the new one
        res = admin.create_partitions({topic_name: 3})
        assert [r.error_code for r in res.results] == [0]
        p = kp_producer(broker, linger_ms=0)
        try:
            wait_until(lambda: len(p.partitions_for(topic_name) or ()) == 3, what="3 partitions")
            metas = [p.send(topic_name, value=b"x%d" % i, partition=2).get(timeout=10) for i in range(10)]
        finally:
            p.close()
        assert [(m.partition, m.offset) for m in metas] == [(2, i) for i in range(10)]

        # delete records below offset 6 of partition 2
        tp = TopicPartition(topic_name, 2)
        res = admin.delete_records({tp: 6})
        assert res[tp]["low_watermark"] == 6
        c = kp_consumer(broker)
        try:
            assert c.beginning_offsets([tp]) == {tp: 6}
            c.assign([tp])
            c.seek_to_beginning(tp)
            recs = poll_n(c, 4)
            assert [(r.offset, r.value) for r in recs] == [(i, b"x%d" % i) for i in range(6, 10)]
        finally:
            c.close()

        res = admin.delete_topics([topic_name])
        assert [(t["name"], t["error_code"]) for t in res["topics"]] == [(topic_name, 0)]
        wait_until(lambda: topic_name not in admin.list_topics(), what="topic gone")
    finally:
        admin.close()


def test_admin_describe_cluster(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        desc = admin.describe_cluster()
    finally:
        admin.close()
    assert desc["controller_id"] == 1
    assert isinstance(desc["cluster_id"], str) and desc["cluster_id"]
    [b] = desc["brokers"]
    assert (b["broker_id"], b["host"], b["port"]) == (1, "127.0.0.1", broker.port)
