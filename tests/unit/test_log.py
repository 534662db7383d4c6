"""storage.log.log.Log: appends, reads, rolling, timestamps, retention, DeleteRecords, clean close/reopen."""
from __future__ import annotations

import gc
import random

import pytest

from protocol import compression
from protocol.record_batch import (
    TIMESTAMP_TYPE_BIT, build_batch, compute_crc, read_header, split_and_validate,
)
from protocol.records import Record, build_records_batch, iter_all_records
from storage.log.log import Log, OffsetOutOfRangeError
from storage.log.log_config import LogConfig
from storage.log.log_segment import LogSegment


class Clock:
    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(n: int = 1, *, ts: int = 1000, value: bytes = b"value", **kw) -> bytearray:
    return bytearray(build_batch([(b"k%d" % i, value) for i in range(n)], timestamp_ms=ts, **kw))


def append(log: Log, buf, epoch: int = 0):
    """Append as a single-replica leader does: the partition layer then raises the high watermark to the log end."""
    r = log.append_as_leader(buf, split_and_validate(buf, 10**8), epoch)
    log.update_high_watermark(log.log_end_offset)
    return r


def records(views) -> list[Record]:
    return [r for v in views for r in iter_all_records(v)]


def offsets(views) -> list[int]:
    return [r.offset for r in records(views)]


def total(views) -> int:
    return sum(len(v) for v in views)


@pytest.fixture
def clock():
    return Clock()


def test_round_trip_assigns_offsets(tmp_path, clock):
    log = Log(tmp_path / "t-0", LogConfig(), time_ms=clock)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    buf = batch(3, value=b"a")
    r1 = log.append_as_leader(buf, split_and_validate(buf, 10**8), 0)
    assert (log.log_end_offset, log.high_watermark) == (3, 0)       # the partition layer moves the HW, not the log
    r2 = append(log, batch(2, value=b"b"))
    assert (r1.base_offset, r1.last_offset, r1.log_append_time, r1.error_code) == (0, 2, -1, 0)
    assert (r2.base_offset, r2.last_offset) == (3, 4)
    assert log.log_end_offset == log.high_watermark == 5
    assert log.update_high_watermark(99) == 5 and log.update_high_watermark(-1) == 0   # clamped to the log
    log.update_high_watermark(5)
    recs = records(log.read(0, 1 << 20))
    assert [(r.offset, r.key, r.value) for r in recs] == [
        (0, b"k0", b"a"), (1, b"k1", b"a"), (2, b"k2", b"a"), (3, b"k0", b"b"), (4, b"k1", b"b")]
    # The stored batches carry the leader epoch and still pass validation (CRC untouched by offsets).
    view = log.read(3, 1 << 20)[0]
    h = read_header(view)
    assert (h.base_offset, h.partition_leader_epoch) == (3, 0)
    assert split_and_validate(bytearray(view), 10**8)
    assert log.read(5, 1 << 20) == []
    assert log.size_bytes() == sum(s.size for s in log.segments())


def test_read_starting_mid_batch_returns_containing_batch(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig())
    append(log, batch(5))
    append(log, batch(5))
    views = log.read(7, 1 << 20)
    assert offsets(views) == list(range(5, 10))      # whole batch 5..9, as Kafka
    assert offsets(log.read(4, 1 << 20)) == list(range(0, 10))


def test_sequential_reads_follow_appends_and_truncation(tmp_path):
    """A consumer's next fetch starts where its last read ended (the segment remembers that place): reads after
    appends, after a truncation that moved the batch boundaries, and from the middle of a batch stay exact."""
    log = Log(tmp_path / "t-0", LogConfig())
    append(log, batch(3))
    append(log, batch(4))
    assert offsets(log.read(0, 1 << 20)) == list(range(0, 7))
    assert log.read(7, 1 << 20) == []
    append(log, batch(2))
    assert offsets(log.read(7, 1 << 20)) == [7, 8]
    log.truncate_to(3)                                  # drops 3..8; 3 is appended again in other batch sizes
    append(log, batch(1, value=b"x" * 50))
    append(log, batch(6, value=b"y"))
    assert offsets(log.read(3, 1 << 20)) == list(range(3, 10))
    assert offsets(log.read(7, 1 << 20)) == list(range(4, 10))     # 7 is inside the batch 4..9 now
    assert [r.value for r in records(log.read(3, 1 << 20))][:2] == [b"x" * 50, b"y"]


def test_max_bytes_min_one_message_and_max_offset(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig())
    sizes = []
    for i in range(10):
        buf = batch(2, value=b"x" * (50 + i))
        sizes.append(len(buf))
        append(log, buf)
    # Budget fits exactly the first three batches.
    views = log.read(0, sum(sizes[:3]))
    assert total(views) == sum(sizes[:3]) and offsets(views) == list(range(6))
    views = log.read(0, sum(sizes[:3]) - 1)
    assert offsets(views) == list(range(4))
    # First batch bigger than max_bytes: returned whole with min_one_message, nothing without.
    assert offsets(log.read(2, 10)) == [2, 3]
    assert log.read(2, 10, min_one_message=False) == []
    assert log.read(2, 0, min_one_message=False) == []
    # max_offset (exclusive, e.g. the high watermark): no batch starting at or beyond it.
    assert offsets(log.read(0, 1 << 20, max_offset=6)) == list(range(6))
    assert offsets(log.read(0, 1 << 20, max_offset=5)) == list(range(6))   # batch 4..5 starts below 5
    assert log.read(6, 1 << 20, max_offset=6) == []


def test_out_of_range(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig())
    append(log, batch(3))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert log.read(3, 100) == []
    log.delete_records(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert offsets(log.read(2, 100))[0] == 0     # the batch containing 2 starts before the log start
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(4)


def test_roll_by_segment_bytes(tmp_path):
    cfg = LogConfig(segment_bytes=1000, index_interval_bytes=100)
    log = Log(tmp_path / "t-0", cfg)
    size = len(batch(2))
    for _ in range(30):
        append(log, batch(2))
    segs = log.segments()
    per = 1000 // size
    assert len(segs) == -(-30 // per)
    assert all(s.size <= 1000 for s in segs)
    assert [s.base_offset for s in segs] == [i * per * 2 for i in range(len(segs))]
    files = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert files == [f"{s.base_offset:020d}.log" for s in segs]
    # Sealed segments were trimmed to their real size; each roll wrote a producer snapshot.
    for s in segs[:-1]:
        assert s.log_path.stat().st_size == s.size
        assert s.next_offset == s.base_offset + per * 2
    assert len(list((tmp_path / "t-0").glob("*.snapshot"))) == min(3, len(segs) - 1)
    assert offsets(log.read(0, 1 << 20)) == list(range(60))


def test_roll_by_segment_ms(tmp_path, clock):
    log = Log(tmp_path / "t-0", LogConfig(segment_ms=60_000), time_ms=clock)
    append(log, batch())
    clock.now += 60_000
    append(log, batch())
    assert len(log.segments()) == 1
    clock.now += 1
    append(log, batch())
    assert [s.base_offset for s in log.segments()] == [0, 2]
    clock.now += 10 * 60_000                     # an idle empty-but-for-nothing log does not roll by itself
    assert len(log.segments()) == 2


def test_roll_when_index_full(tmp_path):
    cfg = LogConfig(segment_index_bytes=8 * 4, index_interval_bytes=0)
    log = Log(tmp_path / "t-0", cfg)
    for _ in range(20):
        append(log, batch())
    assert len(log.segments()) > 1
    assert all(s.offset_index.entries <= 4 for s in log.segments())
    assert offsets(log.read(0, 1 << 20)) == list(range(20))


def test_random_reads_across_many_segments(tmp_path):
    rnd = random.Random(7)
    cfg = LogConfig(segment_bytes=4096, index_interval_bytes=256)
    log = Log(tmp_path / "t-0", cfg)
    spans = []
    for _ in range(400):
        n = rnd.randint(1, 5)
        r = append(log, batch(n, value=bytes(rnd.randint(1, 120))))
        spans.append((r.base_offset, r.last_offset))
    assert len(log.segments()) > 10
    assert any(s.offset_index.entries > 2 for s in log.segments())
    for _ in range(300):
        target = rnd.randrange(log.log_end_offset)
        views = log.read(target, 1, min_one_message=True)
        first = read_header(views[0])
        assert first.base_offset <= target <= first.last_offset
        assert (first.base_offset, first.last_offset) in spans
        # A larger budget continues with whole, contiguous batches, across segment boundaries.
        got = offsets(log.read(target, rnd.randint(1, 20_000)))
        assert got == list(range(first.base_offset, first.base_offset + len(got)))


def test_fetch_offset_by_timestamp_record_level(tmp_path):
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=64)
    log = Log(tmp_path / "t-0", cfg)
    # Batches of 4 records with distinct timestamps inside each batch: t = 1000 + 10 * offset.
    for b in range(30):
        base = b * 4
        recs = [Record(base + i, 1000 + 10 * (base + i), b"k", b"v" * 30, []) for i in range(4)]
        codec = compression.NONE if b % 2 == 0 else compression.GZIP
        buf = bytearray(build_records_batch(recs, codec=codec, base_offset=base))
        assert append(log, buf).base_offset == base
    assert len(log.segments()) > 2
    for offset in (0, 1, 2, 3, 5, 41, 42, 66, 118, 119):
        ts = 1000 + 10 * offset
        assert log.fetch_offset_by_timestamp(ts) == (offset, ts)
        assert log.fetch_offset_by_timestamp(ts - 5) == (offset, ts)   # first record >= target
    assert log.fetch_offset_by_timestamp(0) == (0, 1000)
    assert log.fetch_offset_by_timestamp(1000 + 10 * 119 + 1) is None
    assert log.max_timestamp_entry() == (119, 1000 + 10 * 119)
    # Records below the log start offset are not returned.
    log.delete_records(42)
    assert log.fetch_offset_by_timestamp(1000) == (42, 1420)


def test_max_timestamp_entry_first_record_with_max(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig())
    assert log.max_timestamp_entry() is None
    append(log, batch(2, ts=500))
    recs = [Record(i, ts, None, b"v", []) for i, ts in enumerate([700, 900, 800])]
    append(log, bytearray(build_records_batch(recs)))
    append(log, batch(1, ts=900))
    assert log.max_timestamp_entry() == (3, 900)


def test_log_append_time_rewrites_batch(tmp_path, clock):
    cfg = LogConfig(message_timestamp_type="LogAppendTime")
    log = Log(tmp_path / "t-0", cfg, time_ms=clock)
    buf = batch(3, ts=5)
    r = append(log, buf)
    assert r.log_append_time == clock.now
    view = log.read(0, 1 << 20)[0]
    h = read_header(view)
    assert h.attributes & TIMESTAMP_TYPE_BIT and h.max_timestamp == clock.now
    assert compute_crc(view, 0, h.size) == h.crc
    split_and_validate(bytearray(view), 10**8)                 # still a valid batch
    assert [r.timestamp for r in records([view])] == [clock.now] * 3
    assert log.fetch_offset_by_timestamp(clock.now) == (0, clock.now)
    # CreateTime logs leave the batch alone.
    log2 = Log(tmp_path / "t-1", LogConfig(), time_ms=clock)
    assert append(log2, batch(1, ts=5)).log_append_time == -1
    assert read_header(log2.read(0, 100)[0]).max_timestamp == 5


def test_retention_by_time(tmp_path, clock):
    cfg = LogConfig(segment_bytes=1000, retention_ms=1000)
    log = Log(tmp_path / "t-0", cfg, time_ms=clock)
    for i in range(40):
        append(log, batch(2, ts=clock.now - 5000 + i * 100))   # old data
    old_segments = log.segments()
    assert len(old_segments) > 2
    for i in range(5):
        append(log, batch(2, ts=clock.now))                     # fresh data
    before = log.segments()
    n = log.delete_old_segments()
    after = log.segments()
    assert n >= len(old_segments) - 1
    assert log.log_start_offset == after[0].base_offset > 0
    assert after[0].max_timestamp_so_far > clock.now - 1000
    for s in before[:n]:
        assert not s.log_path.exists() and not s.index_path.exists() and not s.time_index_path.exists()
    assert (tmp_path / "t-0" / "log-start-offset").read_text().strip() == str(log.log_start_offset)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # Everything expires: the active segment is rolled empty, the log stays usable at the same end.
    clock.now += 10_000
    leo = log.log_end_offset
    log.delete_old_segments()
    assert [s.base_offset for s in log.segments()] == [leo]
    assert log.log_start_offset == log.log_end_offset == leo
    assert log.read(leo, 100) == []
    assert append(log, batch(ts=clock.now)).base_offset == leo
    assert log.delete_old_segments() == 0                       # fresh data stays


def test_retention_by_bytes(tmp_path):
    cfg = LogConfig(segment_bytes=1000, retention_bytes=2500, retention_ms=-1)
    log = Log(tmp_path / "t-0", cfg)
    for _ in range(40):
        append(log, batch(2))
    size_before = log.size_bytes()
    n = log.delete_old_segments()
    assert n > 0
    assert log.size_bytes() <= size_before
    # Deleting one more segment would go below retention.bytes.
    assert log.size_bytes() - log.segments()[0].size < 2500 <= log.size_bytes() or len(log.segments()) == 1
    assert log.log_start_offset == log.segments()[0].base_offset
    assert offsets(log.read(log.log_start_offset, 1 << 20))[-1] == 79
    assert log.delete_old_segments() == 0
    # Unlimited retention deletes nothing.
    log.update_config(LogConfig(segment_bytes=1000, retention_bytes=-1, retention_ms=-1))
    for _ in range(40):
        append(log, batch(2))
    assert log.delete_old_segments() == 0


def test_delete_records(tmp_path):
    cfg = LogConfig(segment_bytes=1000)
    log = Log(tmp_path / "t-0", cfg)
    for _ in range(30):
        append(log, batch(2))
    segs = log.segments()
    target = segs[2].base_offset + 1
    assert log.delete_records(target) == target
    assert log.log_start_offset == target
    assert log.segments()[0] is segs[2]                          # segments wholly below deleted
    assert not segs[0].log_path.exists() and not segs[1].log_path.exists()
    assert log.delete_records(3) == target                        # never moves backwards
    assert log.delete_records(-1) == log.high_watermark == 60     # -1 = high watermark
    assert len(log.segments()) == 1 and log.read(60, 100) == []
    assert append(log, batch()).base_offset == 60
    log.close()
    log = Log(tmp_path / "t-0", cfg, clean_shutdown=True)
    assert log.log_start_offset == 60 and log.log_end_offset == 61


def test_read_view_survives_segment_deletion(tmp_path, clock):
    cfg = LogConfig(segment_bytes=1000, retention_ms=1000)
    log = Log(tmp_path / "t-0", cfg, time_ms=clock)
    for i in range(10):
        append(log, batch(2, value=b"payload-%d" % i, ts=clock.now - 10_000))
    views = log.read(0, 1 << 20)
    expected = [bytes(v) for v in views]
    clock.now += 1
    assert log.delete_old_segments() > 0
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    for _ in range(50):                                            # remaps and rolls on the new active segment
        append(log, batch(2, value=b"z" * 200, ts=clock.now))
    gc.collect()
    assert [bytes(v) for v in views] == expected
    assert [r.value for r in records(views)][:2] == [b"payload-0"] * 2
    log.delete()
    assert [bytes(v) for v in views] == expected                   # even after the directory is gone
    assert not (tmp_path / "t-0").exists()


def test_read_view_survives_active_segment_growth_and_roll(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=3 * 1024 * 1024))
    append(log, batch(1, value=b"first"))
    view = log.read(0, 100)[0]
    first = bytes(view)
    for _ in range(40):                                            # grows the mapping several times
        append(log, batch(1, value=b"x" * 100_000))
    log.roll()
    append(log, batch(1))
    assert bytes(view) == first
    assert records(log.read(0, 100))[0].value == b"first"


def test_flush_messages_and_flush_ms(tmp_path, clock):
    log = Log(tmp_path / "t-0", LogConfig(flush_messages=3), time_ms=clock)
    append(log, batch(2))
    assert log._unflushed_messages == 2
    append(log, batch(1))
    assert log._unflushed_messages == 0
    log.update_config(LogConfig(flush_ms=1000))
    append(log, batch(1))
    log.maybe_flush()
    assert log._unflushed_messages == 1
    clock.now += 1000
    log.maybe_flush()
    assert log._unflushed_messages == 0


def test_clean_close_reopen_is_equal_and_does_not_scan(tmp_path, monkeypatch):
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=128)
    d = tmp_path / "t-0"
    log = Log(d, cfg)
    for i in range(50):
        append(log, batch(3, ts=1000 + i), epoch=i // 20)
    append(log, batch(1, producer_id=9, producer_epoch=0, base_sequence=0), epoch=2)
    before = [bytes(v) for v in log.read(0, 1 << 30)]
    segs = [(s.base_offset, s.size, s.next_offset) for s in log.segments()]
    active = log.segments()[-1]
    assert active.log_path.stat().st_size > active.size         # preallocated while open
    log.close()
    assert active.log_path.stat().st_size == active.size        # trimmed on close
    assert (d / f"{log.log_end_offset:020d}.snapshot").exists()

    def no_scan(self, *a, **kw):
        raise AssertionError(f"{self} was scanned on a clean reopen")
    monkeypatch.setattr(LogSegment, "recover", no_scan)
    log2 = Log(d, cfg, clean_shutdown=True)
    assert [(s.base_offset, s.size, s.next_offset) for s in log2.segments()] == segs
    assert log2.log_end_offset == 151 and log2.log_start_offset == 0
    assert [bytes(v) for v in log2.read(0, 1 << 30)] == before
    assert log2.leader_epoch_cache.entries == [(0, 0), (1, 60), (2, 120)]
    assert 9 in log2.producer_snapshot()
    assert log2.fetch_offset_by_timestamp(1049) == (147, 1049)
    monkeypatch.undo()
    assert append(log2, batch(1)).base_offset == 151
    assert offsets(log2.read(150, 1 << 20)) == [150, 151]


def test_leader_epoch_cache_follows_appends(tmp_path):
    d = tmp_path / "t-0"
    log = Log(d, LogConfig())
    append(log, batch(2), epoch=0)
    append(log, batch(2), epoch=0)
    append(log, batch(1), epoch=3)
    assert log.leader_epoch_cache.entries == [(0, 0), (3, 4)]
    assert not (d / "leader-epoch-checkpoint").exists()             # written on roll, flush or close, not per append
    log.roll()
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 4\n"
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (0, 4)
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 5)
    assert read_header(log.read(4, 100)[0]).partition_leader_epoch == 3


def test_epochs_not_yet_checkpointed_survive_a_crash(tmp_path):
    """An epoch assigned since the last checkpoint starts in the active segment, which recovery rescans."""
    d = tmp_path / "t-0"
    log = Log(d, LogConfig())
    append(log, batch(2), epoch=0)
    log.roll()                                                       # checkpoint: [(0, 0)]
    append(log, batch(2), epoch=0)
    append(log, batch(1), epoch=5)                                   # only in memory
    log.active_segment.flush()                                       # the data is on disk, the checkpoint is not
    reopened = Log(d, LogConfig(), clean_shutdown=False)             # kill -9: no close()
    assert reopened.leader_epoch_cache.entries == [(0, 0), (5, 4)]
    assert reopened.end_offset_for_epoch(0) == (0, 4)


def test_batch_larger_than_segment_is_rejected(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=200))
    r = append(log, batch(1, value=b"x" * 300))
    assert r.error_code == 18 and log.log_end_offset == 0


def test_out_of_int32_sizes_are_clamped_like_kafka(tmp_path):
    # Kafka types segment.bytes / segment.index.bytes as int32; a long must not make the log unopenable.
    cfg = LogConfig(segment_index_bytes=2**62, segment_bytes=2**62)
    log = Log(tmp_path / "t-0", cfg)
    assert append(log, batch(2)).base_offset == 0
    log.close()
    assert offsets(Log(tmp_path / "t-0", cfg, clean_shutdown=True).read(0, 1 << 20)) == [0, 1]
