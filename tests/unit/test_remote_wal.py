"""KIP-1176 pieces without a cluster: the WAL object format, the leader's pointer file, what a follower's fetch
gets, the follower's decoding of pointers and its skipping of batches it already has."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from protocol.record_batch import iter_batches
from protocol.records import build_records_batch
from protocol.replica_fetch import RemotePointer, decode_fetch_response, decode_wal_pointers, encode_wal_pointers
from protocol.wire import I16, I32, I64, array_len, string, tagged_fields
from replication.remote_wal import PartitionWal, RemoteWalManager
from replication.wal_follower import WalDownloadError, WalReader, skip_below
from replication.traffic_metrics import TrafficMetrics
from storage.objectstore.local import LocalObjectStore
from storage.wal import wal_object
from storage.wal.wal_pointers import WalPointer, WalPointerIndex
from storage.wal.wal_stores import WalStores


def batch(base: int, n: int = 3) -> bytes:
    return build_records_batch([(None, b"v%d" % i) for i in range(n)], base_offset=base, timestamp_ms=1)


def test_object_header_indexes_every_chunk_with_its_crc():
    tid = uuid.uuid4().bytes
    chunks = [(tid, 0, 5, 0, 2, batch(0)), (tid, 7, 5, 10, 12, batch(10)), (bytes(16), 1, 2, 3, 3, b"xyz")]
    parts, entries = wal_object.build(chunks)
    data = b"".join(parts)
    assert wal_object.parse_header(data) == entries
    for (t, p, e, base, last, payload), entry in zip(chunks, entries):
        assert (entry.topic_id, entry.partition, entry.leader_epoch, entry.base_offset, entry.last_offset) == \
            (t, p, e, base, last)
        assert data[entry.position:entry.position + entry.size] == payload
        assert wal_object.chunk_crc_ok(payload, entry.crc)
        assert not wal_object.chunk_crc_ok(payload[:-1] + b"!", entry.crc)


@pytest.mark.parametrize("damage", ["magic", "header"])
def test_damaged_header_is_refused(damage):
    parts, _ = wal_object.build([(bytes(16), 0, 0, 0, 0, b"abc")])
    data = bytearray(b"".join(parts))
    data[0 if damage == "magic" else 12] ^= 1
    with pytest.raises(wal_object.WalObjectError):
        wal_object.parse_header(bytes(data))


def ptr(base, last, upload, size=10):
    return WalPointer(base, last, upload, 100, size, 7, 1)


def test_pointer_file_finds_consecutive_pointers_and_stops_at_gaps(tmp_path):
    idx = WalPointerIndex(tmp_path)
    for p in (ptr(0, 9, 1), ptr(10, 19, 2), ptr(20, 29, 3), ptr(40, 49, 5)):   # 30..39: a failed upload
        idx.append(p)
    assert [p.base_offset for p in idx.from_offset(0, 1000)] == [0, 10, 20]
    assert [p.base_offset for p in idx.from_offset(15, 1000)] == [10, 20]    # a chunk holding the offset
    assert [p.base_offset for p in idx.from_offset(15, 15)] == [10]          # budget, but at least one
    assert idx.from_offset(30, 1000) == []                                    # in the gap
    assert [p.base_offset for p in idx.from_offset(40, 1000)] == [40]
    assert idx.from_offset(50, 1000) == []                                    # not uploaded yet
    idx.drop_below_upload(3)
    assert idx.from_offset(0, 1000) == [] and idx.first().base_offset == 20
    idx.drop_below_offset(45)
    assert idx.first().base_offset == 40 and len(idx) == 1
    idx.clear()
    assert len(idx) == 0 and idx.from_offset(40, 1000) == []
    idx.close()


def test_pointer_file_compacts_its_dead_head(tmp_path):
    idx = WalPointerIndex(tmp_path)
    for i in range(100):
        idx.append(ptr(i * 10, i * 10 + 9, i))
    idx.drop_below_upload(80)
    assert idx.path.stat().st_size == 20 * 40 and len(idx) == 20
    assert idx.from_offset(805, 10)[0].upload_id == 80
    idx.close()


class _Config:
    def __init__(self, **kw):
        from replication.remote_wal import WAL_DEFAULTS
        self.values = {**WAL_DEFAULTS, **{k.replace("_", "."): str(v) for k, v in kw.items()}}

    def get_int(self, key):
        return int(self.values[key])


class _Part:
    """What the combiner and PartitionWal see of a partition."""

    def __init__(self, tmp_path, manager):
        self.topic_id, self.index, self.is_leader, self.leader_epoch, self.closed = str(uuid.uuid4()), 0, True, 3, False
        self.high_watermark = 0
        self.wal = PartitionWal(manager, tmp_path)
        self.woken = 0

    def wake_waiters(self):
        self.woken += 1


def _manager(tmp_path, store_dir, **config):
    stores = WalStores({"": f"file://{store_dir}"}, {})
    return RemoteWalManager(_Config(**config), stores, TrafficMetrics(None), node_id=4)


async def test_follower_gets_pointers_after_upload_records_before_leadership_and_while_down(tmp_path):
    m = _manager(tmp_path, tmp_path / "fast", remote_wal_upload_interval_ms=10, remote_wal_fallback_failure_threshold=1)
    part = _Part(tmp_path, m)
    part.wal.became_leader(100)                  # offsets below 100 were written before this leadership
    m.start()
    try:
        now = time.monotonic()
        assert part.wal.serve(2, 50, 1000, now)[0] == "records"
        m.add(part, 3, 100, 102, batch(100))
        assert part.wal.serve(2, 100, 1000, now)[0] == "wait"          # still uploading
        deadline = time.monotonic() + 5
        while part.wal.serve(2, 100, 1000, now)[0] == "wait":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        what, pointers = part.wal.serve(2, 100, 1000, now)
        assert what == "pointers" and pointers[0].key.startswith("wal/4/") and part.woken >= 1
        data = await m.stores.local.get(pointers[0].key, pointers[0].position, pointers[0].position + pointers[0].size)
        assert data == batch(100)
        # a follower stuck on these pointers past the stall timeout gets records
        assert part.wal.serve(2, 100, 1000, now + 10)[0] == "records"
        # the store goes away: the next upload fails, the broker falls back to records for everyone
        (tmp_path / "fast").rename(tmp_path / "away")
        m.add(part, 3, 103, 105, batch(103))
        while m.healthy:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert part.wal.serve(3, 103, 1000, time.monotonic())[0] == "records"
        (tmp_path / "away").rename(tmp_path / "fast")
        m.add(part, 3, 106, 108, batch(106))
        while not m.healthy:
            assert time.monotonic() < deadline + 5
            await asyncio.sleep(0.01)
        assert part.wal.serve(3, 103, 1000, time.monotonic())[0] == "records"   # the failed upload's range
        assert part.wal.serve(3, 106, 1000, time.monotonic())[0] == "pointers"
    finally:
        await m.stop()
        await m.stores.close()
        part.wal.close()


async def test_objects_are_collected_once_the_isr_has_them_and_retention_passed(tmp_path):
    m = _manager(tmp_path, tmp_path / "fast", remote_wal_upload_interval_ms=1, remote_wal_retention_ms=0)
    part = _Part(tmp_path, m)
    part.wal.became_leader(0)
    m.start()
    try:
        m.add(part, 3, 0, 2, batch(0))
        while not m._live:
            await asyncio.sleep(0.01)
        assert await m.collect_once() == 0            # the high watermark has not passed the chunk
        part.high_watermark = 3
        assert await m.collect_once() == 1
        assert [o async for o in m.stores.local.list("wal/")] == []
        assert part.wal.serve(2, 0, 1000, time.monotonic())[0] == "records"     # its pointers went with it
    finally:
        await m.stop()
        await m.stores.close()
        part.wal.close()


async def test_an_upload_that_timed_out_but_landed_is_deleted_too(tmp_path):
    m = _manager(tmp_path, tmp_path / "fast", remote_wal_upload_interval_ms=1, remote_wal_retention_ms=0,
                 remote_wal_upload_timeout_ms=50)
    part = _Part(tmp_path, m)
    part.wal.became_leader(0)
    store = m.stores.local
    real_put = store.put

    async def slow_put(key, data):              # the PUT lands, but only after the leader stopped waiting (a
        async def later():                      # thread's write is not cancelled with the coroutine)
            await asyncio.sleep(0.2)
            await real_put(key, data)
        landing.append(asyncio.ensure_future(later()))
        await asyncio.sleep(10)
    landing: list = []
    store.put = slow_put
    m.start()
    try:
        m.add(part, 3, 0, 2, batch(0))
        while not m._orphans:
            await asyncio.sleep(0.01)
        assert part.wal.serve(2, 0, 1000, time.monotonic())[0] == "records"     # given up: records
        await asyncio.gather(*landing)
        assert [o.key async for o in store.list("wal/")] != []                  # ... yet it landed
        await m.collect_once()
        assert [o.key async for o in store.list("wal/")] == []
    finally:
        await m.stop()
        await m.stores.close()
        part.wal.close()


def test_pointers_round_trip_through_a_fetch_response_tag():
    ptrs = [RemotePointer("wal/1/00ff", 64, 100, 0xDEADBEEF, 10, 19, 4), RemotePointer("wal/1/0100", 64, 5, 1, 20,
                                                                                         20, 4)]
    assert decode_wal_pointers(encode_wal_pointers("a", ptrs), 0) == ("a", ptrs)
    # a whole Fetch v12 response with one partition carrying diverging epoch + pointers, and one with records
    recs = batch(7)
    body = I32.pack(0) + I16.pack(0) + I32.pack(0) + array_len(1, True) + string("t", True) + array_len(2, True)
    for index, records, tags in ((0, b"", {0: I32.pack(3) + I64.pack(42) + b"\x00",
                                           0x5354: encode_wal_pointers("", ptrs)}), (1, recs, {})):
        body += I32.pack(index) + I16.pack(0) + I64.pack(99) + I64.pack(99) + I64.pack(0) + b"\x00" + I32.pack(-1)
        body += array_len(len(records), True) + records + tagged_fields(tags)
    body += b"\x00" + b"\x00"
    resp = decode_fetch_response(memoryview(body))
    (topic, parts), = resp.responses
    assert topic == "t" and parts[0].diverging_epoch == (3, 42) and parts[0].wal_pointers == ptrs
    assert bytes(parts[1].records) == recs and parts[1].wal_pointers is None and parts[1].high_watermark == 99


def test_follower_skips_the_batches_it_already_has():
    chunk = memoryview(batch(0) + batch(3) + batch(6))
    assert [h.base_offset for _, h in iter_batches(bytearray(skip_below(chunk, 3)))] == [3, 6]
    assert [h.base_offset for _, h in iter_batches(bytearray(skip_below(chunk, 5)))] == [3, 6]
    assert len(skip_below(chunk, 9)) == 0


async def test_reader_checks_crcs_and_coalesces_adjacent_ranges(tmp_path):
    store = LocalObjectStore(tmp_path / "fast", fsync=False)
    parts, entries = wal_object.build([(bytes(16), 0, 1, 0, 2, batch(0)), (bytes(16), 1, 1, 0, 2, batch(0, 5))])
    await store.put("wal/1/0001", b"".join(parts))
    metrics = TrafficMetrics(None)
    stores = WalStores({"": f"file://{tmp_path / 'fast'}"}, {})
    reader = WalReader(stores, metrics)
    ptrs = [RemotePointer("wal/1/0001", e.position, e.size, e.crc, e.base_offset, e.last_offset, 1) for e in entries]
    (got,) = await reader.download_all([("", ptrs)])
    assert [bytes(g) for g in got] == [batch(0), batch(0, 5)]
    assert metrics.store_requests.labels("", "get")._value.get() == 1            # one ranged GET for both
    bad = [RemotePointer(p.key, p.position, p.size, p.crc ^ 1, p.base_offset, p.last_offset, 1) for p in ptrs]
    (err,) = await reader.download_all([("", bad)])
    assert isinstance(err, WalDownloadError) and err.reason == "crc"
    (err,) = await reader.download_all([("elsewhere", ptrs)])
    assert isinstance(err, WalDownloadError) and err.reason == "unknown_store"
    await stores.close()
    await store.close()


async def test_one_get_serves_neighbouring_chunks_of_several_partitions(tmp_path):
    """Chunks of different partitions that sit side by side in one object come with one GET; a damaged chunk fails
    only its own partition."""
    store = LocalObjectStore(tmp_path / "fast", fsync=False)
    parts, e = wal_object.build([(bytes(16), p, 1, 0, 2, batch(0, 2 + p)) for p in range(3)])
    await store.put("wal/1/0002", b"".join(parts))
    metrics = TrafficMetrics(None)
    stores = WalStores({"": f"file://{tmp_path / 'fast'}"}, {})
    reader = WalReader(stores, metrics)

    def ptrs(i, crc_flip=0):
        return [RemotePointer("wal/1/0002", e[i].position, e[i].size, e[i].crc ^ crc_flip, 0, 2, 1)]
    got = await reader.download_all([("", ptrs(0)), ("", ptrs(2)), ("", ptrs(1, crc_flip=1)), ("x", ptrs(1))])
    assert metrics.store_requests.labels("", "get")._value.get() == 1
    assert [bytes(c) for c in got[0]] == [batch(0, 2)] and [bytes(c) for c in got[1]] == [batch(0, 4)]
    assert isinstance(got[2], WalDownloadError) and got[2].reason == "crc"
    assert isinstance(got[3], WalDownloadError) and got[3].reason == "unknown_store"
    await stores.close()
    await store.close()
