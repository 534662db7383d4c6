"""Tiered storage (KIP-405) end to end: a real broker with remote.log.storage.system.enable=true, on BOTH object stores
(the local filesystem store, and S3 on a moto_server), driven by confluent-kafka, kafka-python and a raw client.

The scenarios follow Kafka's tiered-storage integration tests (storage/src/test/java/org/apache/kafka/tiered/storage/
integration): OffloadAndConsumeFromLeader, RollAndOffloadActiveSegment, EnableRemoteLogOnTopic, DisableRemoteLogOnTopic,
DeleteSegmentsByRetentionTime/Size, DeleteSegmentsDueToLogStartOffsetBreach, DeleteTopic, ListOffsets, plus a restart
that must reload `__remote_log_metadata`, and remote reads while the S3 endpoint hangs.

Batches are produced one per request with the raw client (deterministic segment boundaries: segment.bytes holds a few
batches), so each test writes a handful of segments: moto does ~100 PUT/s and every segment is 5 objects.
"""
from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from conftest import BrokerProcess, free_port
from moto_server import MotoServer, moto_server, private_moto_server  # noqa: F401  (fixtures)
from protocol.record_batch import build_batch
from storage.objectstore.object_store import list_all, open_object_store

try:
    from .helpers import admin_client, consume, consumer, wait_until
    from .rawclient import RawClient, decode_batches
except ImportError:  # tests/integration is not a package
    from helpers import admin_client, consume, consumer, wait_until
    from rawclient import RawClient, decode_batches

pytestmark = pytest.mark.integration

LIST_OFFSETS, DELETE_RECORDS = 2, 21
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5
VALUE = 3000                                   # bytes per record; one record per batch
SEGMENT_BYTES = 3 * (VALUE + 100)              # -> 3 batches per segment
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1"}
TS0 = int(time.time() * 1000) - 600_000        # recent: within the default retention.ms


# ---- brokers and stores --------------------------------------------------------------------------------------------
class Store:
    """The broker's remote store, seen from the test (object keys only)."""

    def __init__(self, url: str, options: dict):
        self.url, self.options = url, options

    def broker_overrides(self) -> dict[str, str]:
        out = {"remote.log.storage.manager.store.url": self.url}
        for k, v in self.options.items():
            out["remote.log.storage.manager.store." + k.replace("_", ".")] = str(v)
        return out

    def keys(self, topic: str | None = None) -> list[str]:
        async def run():
            store = open_object_store(self.url, **self.options)
            try:
                return [i.key for i in await list_all(store)]
            finally:
                await store.close()
        keys = [k for k in asyncio.run(run()) if not k.startswith(".strata")]
        if topic is None:
            return keys
        return [k for k in keys if k.split("/")[0][:-23] == topic and k.split("/")[0][-23] == "-"]

    def segments(self, topic: str) -> list[int]:
        """Start offsets of the remote segments of a topic (partition 0)."""
        return sorted(int(k.rsplit("/", 1)[1][:20]) for k in self.keys(topic)
                      if k.endswith(".log") and k.split("/")[1] == "0")


def tiered_overrides(store: Store, **extra) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200", "remote.log.metadata.topic.num.partitions": "3",
            "metrics.port": str(free_port()), "log.cleaner.enable": "false",
            **store.broker_overrides(), **extra}


def make_store(kind: str, tmp: Path, server: MotoServer | None = None, **options) -> Store:
    if kind == "local":
        return Store(f"file://{tmp}/objects", {"fsync": "false"})
    return Store(f"s3://{server.new_bucket()}/tiered",
                 server.store_options(max_attempts=2, retry_base_delay=0.05, connect_timeout=1, read_timeout=2,
                                      **options))


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def tiered(request, tmp_path_factory):
    """One tiered broker per store kind for the tests that only need fresh topics: (broker, store)."""
    tmp = tmp_path_factory.mktemp(f"tiered-{request.param}")
    server = request.getfixturevalue("moto_server") if request.param == "s3" else None
    store = make_store(request.param, tmp, server)
    b = BrokerProcess(tmp, tiered_overrides(store)).start()
    yield b, store
    rc = b.stop()
    text = b.log_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text, text[text.index("Traceback") - 300:][:4000]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store_kind(request):
    return request.param


# ---- client helpers ------------------------------------------------------------------------------------------------
def create(b, topic: str, **configs) -> None:
    with RawClient(b.bootstrap) as c:
        res = c.create_topic(topic, 1, {k: str(v) for k, v in configs.items()})
        assert res.error_code == 0, res


def create_error(b, topic: str, **configs):
    with RawClient(b.bootstrap) as c:
        return c.create_topic(topic, 1, {k: str(v) for k, v in configs.items()})


def produce(b, topic: str, n: int, start: int = 0) -> None:
    """n batches of one record each: value = f"v{offset}" padded, timestamp TS0 + offset."""
    with RawClient(b.bootstrap) as c:
        for i in range(start, start + n):
            value = f"v{i}".encode().ljust(VALUE, b".")
            p = c.produce(topic, 0, build_batch([(f"k{i}".encode(), value)], timestamp_ms=TS0 + i), acks=1)
            assert p.error_code == 0 and p.base_offset == i, p


def alter(b, topic: str, **configs) -> None:
    admin = admin_client(b.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(timeout=15)


def alter_error(b, topic: str, **configs) -> KafkaError | None:
    try:
        alter(b, topic, **configs)
        return None
    except Exception as e:
        return e.args[0]


def list_offsets(b, topic: str, spec: int) -> tuple[int, int, int]:
    """ListOffsets v9 -> (error, offset, leader epoch)."""
    with RawClient(b.bootstrap, timeout=40) as c:
        resp = c.request(LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": spec}]}]})
    [p] = resp.topics[0].partitions
    return p.error_code, p.offset, p.leader_epoch


def delete_records(b, topic: str, offset: int) -> int:
    with RawClient(b.bootstrap) as c:
        resp = c.request(DELETE_RECORDS, 2, {"topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "offset": offset}]}], "timeout": 10000})
    [p] = resp.topics[0].partitions
    assert p.error_code == 0, p
    return p.low_watermark


def local_segments(b, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in (b.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def fetch_raw(b, topic: str, offset: int, **kw):
    with RawClient(b.bootstrap, timeout=30) as c:
        resp = c.fetch(topic, 0, offset, max_wait_ms=100, **kw)
    assert resp.error_code == 0, resp
    return resp.responses[0].partitions[0]


def read_all_raw(b, topic: str, start: int, end: int, timeout: float = 30) -> list:
    """Records [start, end) through raw fetches (retrying the empty answers of a remote read still in flight)."""
    out, offset = [], start
    deadline = time.monotonic() + timeout
    while offset < end:
        assert time.monotonic() < deadline, f"read stuck at {offset}"
        p = fetch_raw(b, topic, offset)
        assert p.error_code == 0, p
        recs = [r for r in decode_batches(p.records or b"") if r.offset >= offset]
        out.extend(recs)
        if recs:
            offset = recs[-1].offset + 1
    return out


def check_values(records, start: int, end: int) -> None:
    assert [r.offset for r in records] == list(range(start, end))
    for r in records:
        assert bytes(r.value).rstrip(b".") == f"v{r.offset}".encode()


def consume_confluent(b, topic: str, start: int, count: int) -> None:
    msgs = consume(b.bootstrap, topic, count, offset=start, timeout=40)
    assert [m.offset() for m in msgs] == list(range(start, start + count))
    for m in msgs:
        assert m.value().rstrip(b".") == f"v{m.offset()}".encode()


def consume_kafka_python(b, topic: str, start: int, count: int) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, group_id=None,
                      fetch_max_wait_ms=100, request_timeout_ms=30000, consumer_timeout_ms=20000)
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek(tp, start)
        got = []
        deadline = time.monotonic() + 40
        while len(got) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(recs)
        assert [r.offset for r in got[:count]] == list(range(start, start + count))
        for r in got[:count]:
            assert r.value.rstrip(b".") == f"v{r.offset}".encode()
    finally:
        c.close()


def metric(b, name: str, topic: str) -> float:
    port = b.overrides["metrics.port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for m in re.finditer(rf'^{name}\{{([^}}]*)\}} (\S+)$', text, re.M):
        if f'topic="{topic}"' in m.group(1):
            total += float(m.group(2))
    return total


def wait_offloaded(b, store: Store, topic: str, upto: int, timeout: float = 30) -> None:
    """Until every offset below `upto` is in the remote tier and gone from the local log."""
    def done():
        return list_offsets(b, topic, LATEST_TIERED)[1] >= upto - 1 and local_segments(b, topic)[0] >= upto
    wait_until(done, timeout=timeout, interval=0.1, what=f"{topic} offloaded up to {upto}")


# ---- scenarios -------------------------------------------------------------------------------------------------------
def test_offload_and_consume_from_remote_tier(tiered, topic_name):
    """OffloadAndConsumeFromLeaderTest: closed segments go to the store, local keeps only the active segment, and both
    confluent-kafka and kafka-python read everything, most of it from the remote tier."""
    b, store = tiered
    create(b, topic_name, **TIERED)
    produce(b, topic_name, 10)                         # segments [0-2] [3-5] [6-8], active [9]
    wait_offloaded(b, store, topic_name, 9)
    assert store.segments(topic_name) == [0, 3, 6]
    assert local_segments(b, topic_name) == [9]
    suffixes = sorted(k.rsplit(".", 1)[1] for k in store.keys(topic_name) if "/00000000000000000000-" in k)
    assert suffixes == ["index", "leader_epoch_checkpoint", "log", "snapshot", "timeindex"]
    assert list_offsets(b, topic_name, EARLIEST)[:2] == (0, 0)
    assert list_offsets(b, topic_name, EARLIEST_LOCAL)[:2] == (0, 9)

    check_values(read_all_raw(b, topic_name, 0, 10), 0, 10)
    consume_confluent(b, topic_name, 0, 10)
    consume_kafka_python(b, topic_name, 0, 10)
    consume_confluent(b, topic_name, 4, 6)                 # from the middle of a remote segment
    assert metric(b, "kafka_server_brokertopicmetrics_remote_copy_bytes_total", topic_name) > 9 * VALUE
    assert metric(b, "kafka_server_brokertopicmetrics_remote_copy_requests_total", topic_name) == 3
    assert metric(b, "kafka_server_brokertopicmetrics_remote_fetch_bytes_total", topic_name) > 0
    assert metric(b, "kafka_server_brokertopicmetrics_remote_log_size_bytes", topic_name) > 9 * VALUE
    assert metric(b, "kafka_server_brokertopicmetrics_remote_copy_lag_segments", topic_name) == 0


def test_roll_and_offload_active_segment(tiered, topic_name):
    """RollAndOffloadActiveSegmentTest: local.retention.ms=1 rolls the active segment so that all of it is tiered."""
    b, store = tiered
    create(b, topic_name, **{"remote.storage.enable": "true"})      # 1 GiB segments: only the active one
    produce(b, topic_name, 4)
    alter(b, topic_name, **{"local.retention.ms": "1"})
    wait_offloaded(b, store, topic_name, 4)
    assert store.segments(topic_name) == [0]
    assert local_segments(b, topic_name) == [4]
    assert list_offsets(b, topic_name, EARLIEST_LOCAL)[1] == 4
    consume_confluent(b, topic_name, 0, 4)


def test_enable_tiering_on_existing_topic(tiered, topic_name):
    """EnableRemoteLogOnTopicTest: segments written before remote.storage.enable=true are offloaded too."""
    b, store = tiered
    create(b, topic_name, **{"segment.bytes": SEGMENT_BYTES})
    produce(b, topic_name, 7)
    time.sleep(0.5)
    assert store.segments(topic_name) == [] and local_segments(b, topic_name) == [0, 3, 6]
    alter(b, topic_name, **TIERED)
    produce(b, topic_name, 3, start=7)
    wait_offloaded(b, store, topic_name, 9)
    assert store.segments(topic_name) == [0, 3, 6]
    consume_confluent(b, topic_name, 0, 10)


def test_config_validation(tiered, broker, topic_name):
    """Kafka's LogConfig rules, answered with INVALID_CONFIG (40)."""
    b, _ = tiered
    assert create_error(b, topic_name, **{"remote.storage.enable": "true", "cleanup.policy": "compact"}).error_code == 40
    assert create_error(b, topic_name, **{"remote.storage.enable": "true", "retention.ms": "1000",
                                          "local.retention.ms": "2000"}).error_code == 40
    assert create_error(b, topic_name, **{"remote.storage.enable": "true", "retention.bytes": "1000",
                                          "local.retention.bytes": "-1"}).error_code == 40
    # the shared broker of the other tests has remote.log.storage.system.enable=false
    err = create_error(broker, topic_name, **{"remote.storage.enable": "true"})
    assert err.error_code == 40 and "Tiered Storage functionality is disabled" in err.error_message
    create(b, topic_name, **TIERED)
    e = alter_error(b, topic_name, **{"remote.storage.enable": "false"})
    assert e is not None and e.code() == KafkaError.INVALID_CONFIG and "remote.log.delete.on.disable" in e.str()
    e = alter_error(b, topic_name, **{"remote.storage.enable": "true", "cleanup.policy": "compact"})
    assert e is not None and e.code() == KafkaError.INVALID_CONFIG


def test_disable_copy_then_delete_on_disable(tiered, topic_name):
    """DisableRemoteLogOnTopicTest: remote.log.copy.disable stops offloading but keeps serving the remote tier; turning
    remote storage off with remote.log.delete.on.disable=true empties the store and the log starts locally."""
    b, store = tiered
    create(b, topic_name, **TIERED)
    produce(b, topic_name, 4)
    wait_offloaded(b, store, topic_name, 3)
    alter(b, topic_name, **{**TIERED, "remote.log.copy.disable": "true"})
    produce(b, topic_name, 6, start=4)                    # closes [3-5] and [6-8]; nothing new may be copied
    time.sleep(1.0)
    assert store.segments(topic_name) == [0]
    assert list_offsets(b, topic_name, LATEST_TIERED)[1] == 2
    consume_confluent(b, topic_name, 0, 10)
    alter(b, topic_name, **{**TIERED, "remote.log.copy.disable": "false"})
    wait_offloaded(b, store, topic_name, 9)
    assert store.segments(topic_name) == [0, 3, 6]
    alter(b, topic_name, **{**TIERED, "remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    wait_until(lambda: store.keys(topic_name) == [], timeout=20, what="remote data deleted")
    assert list_offsets(b, topic_name, EARLIEST)[1] == 9
    assert list_offsets(b, topic_name, LATEST_TIERED)[1:] == (-1, -1)
    consume_confluent(b, topic_name, 9, 1)


def test_delete_segments_by_retention_time(tiered, topic_name):
    """DeleteSegmentsByRetentionTimeTest: retention.ms deletes remote segments (record timestamps are old) and moves
    the log start offset. Every record is expired, so the active segment is rolled, offloaded and deleted too: the
    log ends empty at offset 10 and the next record gets offset 10."""
    b, store = tiered
    create(b, topic_name, **TIERED)
    produce(b, topic_name, 10)
    wait_offloaded(b, store, topic_name, 9)
    alter(b, topic_name, **{**TIERED, "retention.ms": "1000", "local.retention.ms": "1000"})
    wait_until(lambda: list_offsets(b, topic_name, EARLIEST)[1] == 10, timeout=30, what="log start moved to 10")
    wait_until(lambda: store.segments(topic_name) == [], timeout=30, what="remote segments deleted")
    assert list_offsets(b, topic_name, LATEST)[1] == 10
    alter(b, topic_name, **{**TIERED, "retention.ms": "604800000", "local.retention.ms": "-2"})   # Kafka's defaults
    produce(b, topic_name, 1, start=10)
    consume_confluent(b, topic_name, 10, 1)


def test_delete_segments_by_retention_size(tiered, topic_name):
    """DeleteSegmentsByRetentionSizeTest: retention.bytes counts local-only plus remote bytes; the oldest remote
    segments go until the partition fits."""
    b, store = tiered
    create(b, topic_name, **TIERED)
    produce(b, topic_name, 10)
    wait_offloaded(b, store, topic_name, 9)
    # ~30.7 kB in all (3 remote segments of ~9.2 kB, 1 local-only batch), 9.3 kB allowed: the oldest segments go
    # while the excess still covers a whole segment (21.4 - 9.2 - 9.2 >= 0, then 3 - 9.2 < 0 keeps [6-8])
    alter(b, topic_name, **{**TIERED, "retention.bytes": str(SEGMENT_BYTES)})
    wait_until(lambda: store.segments(topic_name) == [6], timeout=20, what="two oldest remote segments deleted")
    assert list_offsets(b, topic_name, EARLIEST)[1] == 6
    consume_confluent(b, topic_name, 6, 4)


def test_delete_records_across_tiers(tiered, topic_name):
    """DeleteSegmentsDueToLogStartOffsetBreachTest: DeleteRecords deletes remote segments wholly below the new log start;
    reads start mid-segment; deleting past the local log start empties the remote tier."""
    b, store = tiered
    create(b, topic_name, **TIERED)
    produce(b, topic_name, 10)
    wait_offloaded(b, store, topic_name, 9)
    assert delete_records(b, topic_name, 4) == 4
    assert list_offsets(b, topic_name, EARLIEST)[1] == 4
    wait_until(lambda: store.segments(topic_name) == [3, 6], timeout=20, what="segment [0-2] deleted")
    check_values(read_all_raw(b, topic_name, 4, 10), 4, 10)
    consume_confluent(b, topic_name, 4, 6)
    with RawClient(b.bootstrap) as c:
        p = c.fetch(topic_name, 0, 2, max_wait_ms=0).responses[0].partitions[0]
    assert p.error_code == 1 and p.log_start_offset == -1      # below the log start: OFFSET_OUT_OF_RANGE (as Kafka:
                                                               # no offsets with an error)
    assert delete_records(b, topic_name, 9) == 9
    wait_until(lambda: store.segments(topic_name) == [], timeout=20, what="remote tier emptied")
    assert list_offsets(b, topic_name, EARLIEST)[1] == 9
    assert list_offsets(b, topic_name, EARLIEST_LOCAL)[1] == 9
    assert list_offsets(b, topic_name, LATEST_TIERED)[1] == 8      # what was tiered, even though deleted since


def test_list_offsets_across_tiers(tiered, topic_name):
    """ListOffsetsTest: earliest, earliest-local, latest-tiered, latest, and timestamps answered from the remote time
    indexes and from the local log."""
    b, store = tiered
    create(b, topic_name, **TIERED)
    produce(b, topic_name, 10)                       # timestamps TS0 + offset
    wait_offloaded(b, store, topic_name, 9)
    assert list_offsets(b, topic_name, EARLIEST) == (0, 0, 0)
    assert list_offsets(b, topic_name, EARLIEST_LOCAL) == (0, 9, 0)
    assert list_offsets(b, topic_name, LATEST_TIERED) == (0, 8, 0)
    assert list_offsets(b, topic_name, LATEST) == (0, 10, 0)
    for ts, want in ((TS0 - 5, 0), (TS0, 0), (TS0 + 1, 1), (TS0 + 4, 4), (TS0 + 8, 8),   # remote
                     (TS0 + 9, 9), (TS0 + 10, -1)):                                      # local, none
        assert list_offsets(b, topic_name, ts)[:2] == (0, want), ts
    admin = admin_client(b.bootstrap)
    from confluent_kafka.admin import OffsetSpec
    tp = TopicPartition(topic_name, 0)
    got = admin.list_offsets({tp: OffsetSpec.for_timestamp(TS0 + 5)})[tp].result(timeout=15)
    assert got.offset == 5
    assert delete_records(b, topic_name, 3) == 3
    assert list_offsets(b, topic_name, EARLIEST)[1] == 3
    assert list_offsets(b, topic_name, TS0)[1] == 3              # nothing below the log start is found


def test_delete_topic_empties_remote_store(tiered, topic_name):
    """DeleteTopicTest: deleting a topic deletes its remote segments (DELETE_PARTITION_* and DELETE_SEGMENT_* events)."""
    b, store = tiered
    create(b, topic_name, **TIERED)
    produce(b, topic_name, 7)
    wait_offloaded(b, store, topic_name, 6)
    assert store.keys(topic_name)
    admin = admin_client(b.bootstrap)
    admin.delete_topics([topic_name], operation_timeout=10)[topic_name].result(timeout=15)
    wait_until(lambda: store.keys(topic_name) == [], timeout=20, what="remote data of the deleted topic gone")


@pytest.mark.slow
def test_restart_reloads_remote_metadata(store_kind, tmp_path, request, topic_name):
    """After a restart the broker rebuilds its view from __remote_log_metadata: offsets, remote reads and offloading
    carry on, and nothing already tiered is copied again."""
    server = request.getfixturevalue("moto_server") if store_kind == "s3" else None
    store = make_store(store_kind, tmp_path, server)
    b = BrokerProcess(tmp_path / "b", tiered_overrides(store)).start()
    try:
        create(b, topic_name, **TIERED)
        produce(b, topic_name, 7)
        wait_offloaded(b, store, topic_name, 6)
        b.restart()
        assert list_offsets(b, topic_name, EARLIEST)[1] == 0
        assert list_offsets(b, topic_name, LATEST_TIERED)[1] == 5
        assert list_offsets(b, topic_name, EARLIEST_LOCAL)[1] == 6
        consume_confluent(b, topic_name, 0, 7)
        produce(b, topic_name, 3, start=7)
        wait_offloaded(b, store, topic_name, 9)
        assert store.segments(topic_name) == [0, 3, 6]
        b.kill9()                                      # unclean: the metadata topic is recovered like any log
        b.start()
        assert list_offsets(b, topic_name, LATEST_TIERED)[1] == 8
        check_values(read_all_raw(b, topic_name, 0, 10), 0, 10)
    finally:
        b.stop()
    assert "Traceback" not in b.log_text(), b.log_text()[-4000:]


@pytest.mark.slow
@pytest.mark.s3
def test_remote_read_while_s3_is_down(private_moto_server, tmp_path, topic_name):
    """A remote read while the S3 endpoint hangs answers the partition with a retriable error (Kafka maps a
    RemoteStorageException to UNKNOWN_SERVER_ERROR; the Java client and librdkafka retry) or, while the read is still
    running past remote.fetch.max.wait.ms, with no records; the broker keeps serving local data, and remote reads
    work again once the endpoint is back."""
    server = private_moto_server
    store = make_store("s3", tmp_path, server)
    b = BrokerProcess(tmp_path / "b", tiered_overrides(store)).start()
    try:
        create(b, topic_name, **TIERED)
        produce(b, topic_name, 10)
        wait_offloaded(b, store, topic_name, 9)
        server.pause()
        try:
            errors, empties = 0, 0
            deadline = time.monotonic() + 20
            while errors == 0 and time.monotonic() < deadline:
                p = fetch_raw(b, topic_name, 0)
                if p.error_code == -1:
                    errors += 1
                else:
                    assert p.error_code == 0 and not p.records, p
                    empties += 1
            assert errors == 1, "no error reported for a remote read during the outage"
            p = fetch_raw(b, topic_name, 9)                    # local data is unaffected
            assert p.error_code == 0 and p.records
            c = consumer(b.bootstrap)
            c.assign([TopicPartition(topic_name, 0, 0)])
            seen_error = None
            deadline = time.monotonic() + 15
            while seen_error is None and time.monotonic() < deadline:
                for m in c.consume(num_messages=10, timeout=0.5):
                    assert m.error() is not None, "got data while S3 is down"
                    seen_error = m.error()
            c.close()
            assert seen_error is not None and not seen_error.fatal(), seen_error
        finally:
            server.resume()
        assert b.alive()
        consume_confluent(b, topic_name, 0, 10)
    finally:
        b.stop()
    assert "Traceback" not in b.log_text(), b.log_text()[-4000:]
