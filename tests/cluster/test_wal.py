"""Active-segment replication through the fast object store (KIP-1176) on a three-broker cluster of processes:
followers get pointers from the leader and the bytes from the store, with no record bytes between brokers; kill -9,
a fast-store outage, damaged objects and lagging followers lose nothing acknowledged."""
from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from moto_server import moto_server  # noqa: F401  (fixture)
from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import AckedProducer, consume_all, create, kill_leaders, read_back_once_in_order
from tests.conftest import free_port

WAL = {"remote.wal.enable": "true"}


def wal_cluster(tmp_path: Path, store_url: str | None = None, store_options: dict | None = None,
                **overrides) -> Cluster:
    fast = {"remote.wal.storage.url": store_url if store_url is not None else f"file://{tmp_path / 'fast'}",
            "remote.wal.follower.stall.timeout.ms": "2000", "remote.wal.upload.timeout.ms": "1000",
            **{"remote.wal.storage." + k.replace("_", "."): str(v) for k, v in (store_options or {}).items()},
            **{k.replace("_", "."): str(v) for k, v in overrides.items()}}
    c = Cluster(tmp_path, 3, overrides=fast)
    for b in c.brokers.values():
        b.overrides["metrics.port"] = str(free_port())
    return c.start()


def metric(b, name: str, **labels) -> float:
    """The sum of a metric's samples on broker `b` whose labels include `labels`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.overrides['metrics.port']}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        if series != name and not series.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


def log_bytes(b, topic: str, index: int = 0) -> bytes:
    d = b.data_dir / "logs" / f"{topic}-{index}"
    return b"".join((d / n).read_bytes() for n in sorted(os.listdir(d)) if n.endswith(".log"))


def wal_objects(root: Path) -> list[Path]:
    return sorted(p for p in (root / "wal").rglob("*") if p.is_file()) if (root / "wal").exists() else []


def wait_until(check, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, n: int, start: int = 0, size: int = 100) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, str(i).encode().ljust(size, b"."))
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def followers(c: Cluster, topic: str) -> list[int]:
    leader = c.leader(topic)
    return [i for i in c.brokers if i != leader]


def lag_one_follower(c: Cluster, topic: str, n: int) -> int:
    """Create a WAL topic, stop one of its followers and produce `n` records without it; the follower's id."""
    create(c, topic, configs=WAL)
    lagging = followers(c, topic)[0]
    c.brokers[lagging].stop()
    produce(c.bootstrap, topic, n)
    return lagging


def check_replicas_identical(c: Cluster, topic: str) -> None:
    copies = {i: log_bytes(b, topic) for i, b in c.brokers.items()}
    assert len(set(copies.values())) == 1, {i: len(v) for i, v in copies.items()}


def run_replication_through_store(c: Cluster, topic: str) -> None:
    create(c, topic, configs=WAL)
    n, size = 3000, 200
    produce(c.bootstrap, topic, n, size=size)
    fs = followers(c, topic)
    leader = c.brokers[c.leader(topic)]
    wait_until(lambda: all(metric(c.brokers[f], "strata_wal_download_bytes_total") >= n * size for f in fs),
               what="followers to download what was produced")
    for f in fs:
        assert metric(c.brokers[f], "strata_replication_bytes_in_total") == 0        # no record bytes over the wire
    assert metric(leader, "strata_replication_bytes_out_total") == 0
    uploaded = metric(leader, "strata_wal_upload_bytes_total")
    assert uploaded >= n * size and metric(leader, "strata_wal_upload_objects_total") >= 1
    for f in fs:   # each follower downloads about what the leader uploaded (object headers are not downloaded)
        assert metric(c.brokers[f], "strata_wal_download_bytes_total") <= uploaded
    assert metric(leader, "strata_cost_dollars_total", item="wal_put") > 0
    assert metric(leader, "strata_cost_dollars_total", item="cross_zone_transfer") == 0
    got = consume_all(c.bootstrap, topic, n)
    assert [int(m.value().rstrip(b".")) for m in got] == list(range(n))
    stop_and_check(c)
    check_replicas_identical(c, topic)


def test_followers_replicate_a_wal_topic_from_the_fast_store(tmp_path, topic_name):
    run_replication_through_store(wal_cluster(tmp_path), topic_name)


@pytest.mark.s3
def test_followers_replicate_through_a_fast_store_on_s3(tmp_path, moto_server, topic_name):
    opts = moto_server.store_options(max_attempts=3, retry_base_delay=0.05, connect_timeout=1, read_timeout=2)
    c = wal_cluster(tmp_path, f"s3://{moto_server.new_bucket()}/fast", opts, remote_wal_upload_interval_ms=200)
    run_replication_through_store(c, topic_name)


def test_topics_without_wal_replicate_records_as_before(tmp_path, topic_name):
    c = wal_cluster(tmp_path)
    try:
        create(c, topic_name)
        produce(c.bootstrap, topic_name, 500)
        fs = followers(c, topic_name)
        wait_until(lambda: all(metric(c.brokers[f], "strata_replication_bytes_in_total") >= 500 * 100 for f in fs))
        assert all(metric(b, "strata_wal_upload_bytes_total") == 0 for b in c.brokers.values())
        leader = c.brokers[c.leader(topic_name)]
        assert metric(leader, "strata_cost_dollars_total", item="cross_zone_transfer") > 0   # racks a, b, c
    finally:
        stop_and_check(c)


def test_kill_9_of_a_wal_leader_loses_no_acknowledged_record(tmp_path, topic_name):
    c = wal_cluster(tmp_path)
    try:
        kill_leaders(c, topic_name, rounds=3, configs=WAL)
    finally:
        stop_and_check(c)


def test_fast_store_outage_falls_back_to_records_and_returns(tmp_path, topic_name):
    """The fast store disappears mid-stream: uploads fail, the leader switches to records (classic replication) and
    acks=all produce goes on; when the store is back, followers get pointers again. Nothing acknowledged is lost."""
    c = wal_cluster(tmp_path)
    fast = tmp_path / "fast"
    try:
        create(c, topic_name, configs=WAL)
        leader_id = c.leader(topic_name)
        leader = c.brokers[leader_id]
        with AckedProducer(c.bootstrap, topic_name) as prod:
            prod.wait_for_more(300)
            assert metric(leader, "strata_wal_mode") == 1
            fast.rename(tmp_path / "fast-away")                       # the store is gone: every PUT fails
            wait_until(lambda: metric(leader, "strata_wal_mode") == 0, what="fallback to records")
            before = {f: metric(c.brokers[f], "strata_replication_bytes_in_total") for f in followers(c, topic_name)}
            prod.wait_for_more(500)                                   # acks=all goes on with classic replication
            assert all(metric(c.brokers[f], "strata_replication_bytes_in_total") > before[f] for f in before)
            (tmp_path / "fast-away").rename(fast)
            wait_until(lambda: metric(leader, "strata_wal_mode") == 1, what="pointers again")
            records_in = {f: metric(c.brokers[f], "strata_replication_bytes_in_total") for f in before}
            downloaded = {f: metric(c.brokers[f], "strata_wal_download_bytes_total") for f in before}
            prod.wait_for_more(500)
            assert all(metric(c.brokers[f], "strata_wal_download_bytes_total") > downloaded[f] for f in before)
            assert c.leader(topic_name) == leader_id
        # once back on pointers, the records path carried at most what was in flight at the switch
        assert all(metric(c.brokers[f], "strata_replication_bytes_in_total") - records_in[f] < 64 * 1024
                   for f in before)
        read_back_once_in_order(c, topic_name, prod)
    finally:
        stop_and_check(c)
    check_replicas_identical(c, topic_name)


def test_lagging_follower_catches_up_from_pointers(tmp_path, topic_name):
    c = wal_cluster(tmp_path)
    try:
        lagging = lag_one_follower(c, topic_name, 5000)
        c.brokers[lagging].start()
        c.wait_for_isr(topic_name, 3)
        b = c.brokers[lagging]
        assert metric(b, "strata_wal_download_bytes_total") >= 5000 * 100
        assert metric(b, "strata_replication_bytes_in_total") == 0
    finally:
        stop_and_check(c)
    check_replicas_identical(c, topic_name)


def test_collected_objects_leave_a_lagging_follower_records_and_nothing_behind(tmp_path, topic_name):
    """With a short retention every object goes once the ISR has it; a follower that was away then catches up
    from records. After the topic is deleted no WAL object is left."""
    c = wal_cluster(tmp_path, remote_wal_retention_ms=500, remote_wal_gc_interval_ms=200)
    try:
        lagging = lag_one_follower(c, topic_name, 3000)
        wait_until(lambda: not wal_objects(tmp_path / "fast"), what="objects to be collected")
        c.brokers[lagging].start()
        c.wait_for_isr(topic_name, 3)
        assert metric(c.brokers[lagging], "strata_replication_bytes_in_total") >= 3000 * 100
        produce(c.bootstrap, topic_name, 1000, start=3000)
        admin = c.admin()                      # kept: a collected AdminClient fails its pending futures
        assert admin.delete_topics([topic_name])[topic_name].result(30) is None
        wait_until(lambda: not wal_objects(tmp_path / "fast"), what="nothing left after the topic's deletion")
    finally:
        stop_and_check(c)


def test_damaged_object_is_never_appended(tmp_path, topic_name):
    """A chunk whose bytes do not match their CRC is refused and fetched again; the leader sends records to a
    follower stuck on pointers it cannot use, and every copy ends up identical to the leader's."""
    c = wal_cluster(tmp_path)
    try:
        lagging = lag_one_follower(c, topic_name, 2000)
        objects = wal_objects(tmp_path / "fast")
        assert objects
        for path in objects:                       # flip the last byte of each object: inside its last chunk
            data = bytearray(path.read_bytes())
            data[-1] ^= 0xFF
            path.write_bytes(bytes(data))
        c.brokers[lagging].start()
        c.wait_for_isr(topic_name, 3)
        b = c.brokers[lagging]
        assert metric(b, "strata_wal_download_errors_total", reason="crc") >= 1
        assert metric(b, "strata_replication_bytes_in_total") > 0
    finally:
        stop_and_check(c)
    check_replicas_identical(c, topic_name)


def test_each_zone_uploads_to_its_own_store_and_followers_read_the_leaders(tmp_path, topic_name):
    """One fast store per rack (S3 Express One Zone buckets live in one zone): a leader uploads to its rack's store,
    and its followers in the other racks download from that store, which the pointers name."""
    racks = {f"remote_wal_storage_rack_{r}_url": f"file://{tmp_path / ('fast-' + r)}" for r in "abc"}
    c = wal_cluster(tmp_path, store_url="", **racks)
    try:
        create(c, topic_name, configs=WAL)
        leader = c.leader(topic_name)
        rack = "abc"[leader - 1]                               # Cluster puts broker i in rack "abc"[i - 1]
        produce(c.bootstrap, topic_name, 1000)
        fs = followers(c, topic_name)
        wait_until(lambda: all(metric(c.brokers[f], "strata_wal_download_bytes_total") >= 1000 * 100 for f in fs))
        assert wal_objects(tmp_path / f"fast-{rack}")
        assert not any(wal_objects(tmp_path / f"fast-{r}") for r in "abc" if r != rack)
        for f in fs:
            assert metric(c.brokers[f], "strata_wal_store_requests_total", store=rack, operation="get") >= 1
            assert metric(c.brokers[f], "strata_replication_bytes_in_total") == 0
    finally:
        stop_and_check(c)
