"""storage.cleaner.log_cleaner: compaction of Log segments (Kafka's LogCleaner semantics), crash safety of the swap."""
from __future__ import annotations

import asyncio
import os
import random

import pytest

from protocol import compression
from protocol.record_batch import build_batch, read_header, split_and_validate
from protocol.records import Record, build_records_batch, has_null_key, iter_all_records, iter_records
from storage.cleaner import cleaner
from storage.cleaner.cleaned_segment import complete_interrupted_swaps
from storage.cleaner.cleaner import DELETE_HORIZON_BIT, CleanerConfig, OffsetMap
from storage.log.log import Log
from storage.cleaner.log_cleaner import CHECKPOINT_FILE, LogCleaner, read_checkpoint
from storage.log.log_config import TOPIC_CONFIGS, LogConfig, parse_value
from storage.log.log_segment import LogSegment

T0 = 1_700_000_000_000
DAY = 86_400_000


class Clock:
    def __init__(self, now: int = T0):
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def make_log(path, clock, **cfg) -> Log:
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("segment_bytes", 2048)
    cfg.setdefault("index_interval_bytes", 256)
    return Log(path, LogConfig(**cfg), time_ms=clock)


def append(lg: Log, recs, *, codec=compression.NONE, ts: int | None = None, **kw):
    buf = bytearray(build_records_batch(recs, codec=codec, timestamp_ms=T0 if ts is None else ts, **kw))
    r = lg.append_as_leader(buf, split_and_validate(buf, 10**8), 0)
    lg.update_high_watermark(lg.log_end_offset)          # as a single-replica partition does
    assert r.error_code == 0, r
    return r


def read_all(lg: Log) -> list[Record]:
    recs = [r for v in lg.read(lg.log_start_offset, 1 << 30) for r in iter_all_records(v, verify_crc=True)]
    offs = [r.offset for r in recs]
    assert offs == sorted(set(offs)), "offsets must stay unique and increasing"
    return recs


def batches(lg: Log):
    out = []
    for v in lg.read(lg.log_start_offset, 1 << 30):
        pos = 0
        while pos < len(v):
            h = read_header(v, pos)
            out.append((h, bytes(v[pos:pos + h.size])))
            pos += h.size
    return out


def latest_by_key(recs) -> dict:
    out = {}
    for r in recs:
        out[r.key] = (r.offset, r.value)
    return out


def cleaner_for(lg: Log, **kw) -> LogCleaner:
    return LogCleaner(CleanerConfig(**kw), logs=lambda: [(lg.dir.name, lg)])


def fill(lg: Log, n_batches: int, keys: int, *, per_batch: int = 5, codec=compression.NONE, seed: int = 1,
         ts: int | None = None) -> dict:
    """Random updates; returns the expected key -> (offset, value) after compaction."""
    rnd = random.Random(seed)
    expected = {}
    for i in range(n_batches):
        recs = [(b"key-%03d" % rnd.randrange(keys), b"value-%d-%d-" % (i, j) + b"x" * rnd.randrange(40))
                for j in range(per_batch)]
        r = append(lg, recs, codec=codec, ts=ts)
        for j, (k, v) in enumerate(recs):
            expected[k] = (r.base_offset + j, v)
    return expected


# ---- the basics --------------------------------------------------------------------------------------------------------

def test_keys_compacted_to_latest_value_across_segments(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock)
    expected = fill(lg, 200, 30)
    original = {r.offset: r for r in read_all(lg)}
    assert len(lg.segments()) > 10
    active_base = lg.active_segment.base_offset
    size_before = lg.size_bytes()

    task = cleaner_for(lg).clean_once()
    assert task is not None and task.end_offset == active_base
    recs = read_all(lg)
    assert latest_by_key(recs) == expected
    # below the active segment, one record per key: its latest
    cleaned = [r for r in recs if r.offset < active_base]
    assert len({r.key for r in cleaned}) == len(cleaned)
    for r in cleaned:
        assert expected[r.key][0] >= r.offset
    # offsets, timestamps, keys and values are the originals
    for r in recs:
        assert original[r.offset] == r
    assert lg.size_bytes() < size_before / 3
    assert read_checkpoint(lg.dir) == active_base
    assert (lg.dir / CHECKPOINT_FILE).exists()


def test_clean_log_survives_reopen_clean_and_unclean(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock)
    expected = fill(lg, 120, 25)
    cleaner_for(lg).clean_once()
    recs = read_all(lg)
    assert latest_by_key(recs) == expected
    lg.close()
    lg = Log(lg.dir, lg.config, time_ms=clock, clean_shutdown=True)
    assert read_all(lg) == recs
    lg.close()
    for p in lg.dir.glob("*.index"):                  # damaged indexes of cleaned segments are rebuilt
        p.write_bytes(b"\x00" * 5)
    lg = Log(lg.dir, lg.config, time_ms=clock)
    assert read_all(lg) == recs


def test_rewritten_batches_keep_offsets_and_producer_metadata(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    append(lg, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], producer_id=5, producer_epoch=2, base_sequence=0)
    append(lg, [(b"b", b"2")], producer_id=5, producer_epoch=2, base_sequence=3)
    append(lg, [(b"z", b"end")])
    lg.roll()
    cleaner_for(lg).clean_once()
    (h0, raw0), (h1, _), (h2, _) = batches(lg)[:3]
    assert (h0.base_offset, h0.last_offset_delta, h0.records_count) == (0, 2, 2)      # b@1 removed, a@0 c@2 kept
    assert (h0.producer_id, h0.producer_epoch, h0.base_sequence) == (5, 2, 0)
    assert [(r.offset, r.key) for r in iter_records(raw0, verify_crc=True)] == [(0, b"a"), (2, b"c")]
    assert (h1.base_offset, h1.records_count, h1.base_sequence) == (3, 1, 3)
    assert h2.base_offset == 4


def test_reads_holding_old_segment_views_stay_valid(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock)
    fill(lg, 100, 10)
    views = lg.read(0, 1 << 30)
    old = [r for v in views for r in iter_all_records(v)]
    cleaner_for(lg).clean_once()
    assert [r for v in views for r in iter_all_records(v)] == old
    assert len(read_all(lg)) < len(old)


def test_cleaned_segments_are_grouped_below_segment_bytes(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=4096)
    fill(lg, 300, 8)
    n0 = len(lg.segments())
    c = cleaner_for(lg)
    c.clean_once()
    # pass 1: every original was nearly segment.bytes, so each became its own (small) cleaned segment
    assert len(lg.segments()) == n0
    second = lg.active_segment.base_offset
    fill(lg, 300, 8, seed=2)
    c.clean_once()
    # pass 2: the small cleaned segments of pass 1 were grouped into one
    assert len([s for s in lg.segments() if s.base_offset < second]) == 1
    fill(lg, 300, 8, seed=3)
    c.clean_once()
    sealed = lg.segments()[:-1]
    assert all(s.size <= 4096 for s in lg.segments())
    assert len([s for s in sealed if s.base_offset < second]) == 1
    assert len(sealed) < n0 + 3
    assert len(set(s.base_offset for s in lg.segments())) == len(lg.segments())


def test_records_without_key_are_dropped(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    append(lg, [(None, b"orphan"), (b"k", b"v")])
    lg.roll()
    append(lg, [(b"k", b"v2")])
    lg.roll()
    cleaner_for(lg).clean_once()
    assert [(r.offset, r.key, r.value) for r in read_all(lg)] == [(2, b"k", b"v2")]


# ---- codecs ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", sorted(compression.CODEC_NAMES))
def test_compressed_batches_are_recompressed_with_their_codec(tmp_path, clock, codec):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=8192)
    expected = fill(lg, 150, 20, per_batch=8, codec=codec)
    original = {r.offset: r for r in read_all(lg)}
    task = cleaner_for(lg).clean_once()
    assert task.stats.batches_rewritten > 0
    recs = read_all(lg)
    assert latest_by_key(recs) == expected
    assert all(original[r.offset] == r for r in recs)
    for h, raw in batches(lg):
        assert h.compression == codec
        list(iter_records(raw, verify_crc=True))


# ---- tombstones --------------------------------------------------------------------------------------------------------

def test_tombstones_kept_until_the_delete_horizon_then_removed(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6, delete_retention_ms=DAY)
    append(lg, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], ts=T0 - 10)
    append(lg, [(b"a", None), (b"c", b"2")], ts=T0 - 5)           # a deleted
    lg.roll()
    c = cleaner_for(lg)
    assert c.clean_once() is not None
    recs = read_all(lg)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (1, b"b", b"1", T0 - 10), (3, b"a", None, T0 - 5), (4, b"c", b"2", T0 - 5)]
    h = [h for h, _ in batches(lg) if h.base_offset == 3][0]
    assert h.attributes & DELETE_HORIZON_BIT and h.base_timestamp == T0 + DAY
    assert h.records_count == 2 and h.last_offset_delta == 1

    # more dirty data before the horizon: the tombstone stays, its horizon is not moved
    clock.now = T0 + DAY // 2
    append(lg, [(b"d", b"1" * 1000)])
    lg.roll()
    assert c.clean_once() is not None
    assert (3, b"a", None) in [(r.offset, r.key, r.value) for r in read_all(lg)]
    h = [h for h, _ in batches(lg) if h.base_offset == 3][0]
    assert h.base_timestamp == T0 + DAY

    # past the horizon the tombstone goes, even without new data (Strata re-cleans when a horizon is due)
    clock.now = T0 + DAY - 1
    assert c.grab_filthiest_log() is None
    clock.now = T0 + DAY + 1
    assert c.clean_once() is not None
    recs = read_all(lg)
    assert [(r.key, r.value) for r in recs] == [(b"b", b"1"), (b"c", b"2"), (b"d", b"1" * 1000)]
    assert [r.timestamp for r in recs][:2] == [T0 - 10, T0 - 5]
    assert c.clean_once() is None                                  # nothing left to do


def test_tombstone_in_dirty_section_removes_older_values_at_once(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    for i in range(5):
        append(lg, [(b"k", b"v%d" % i)])
    append(lg, [(b"k", None)])
    lg.roll()
    cleaner_for(lg).clean_once()
    assert [(r.offset, r.value) for r in read_all(lg)] == [(5, None)]


# ---- when to clean -----------------------------------------------------------------------------------------------------

def test_dirty_ratio_threshold(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=1024)
    fill(lg, 100, 10)
    c = cleaner_for(lg)
    assert c.clean_once() is not None
    clean_size = sum(s.size for s in lg.segments()[:-1])
    # a little dirty data: ratio below 0.5, nothing happens
    lg.roll()
    append(lg, [(b"key-000", b"x" * 100)])
    lg.roll()
    ltc = c.log_to_clean("t", lg, clock())
    assert 0 < ltc.cleanable_ratio < 0.5
    assert c.clean_once() is None
    # enough dirty data: cleaned
    while c.log_to_clean("t", lg, clock()).cleanable_ratio < 0.5:
        append(lg, [(b"key-001", b"y" * 300)])
    lg.roll()
    assert c.clean_once() is not None
    assert sum(s.size for s in lg.segments()[:-1]) <= clean_size + 400
    # the ratio is per topic: 0.9 holds this log back, 0.1 lets it go
    append(lg, [(b"key-002", b"z" * 300)] * 1)
    lg.roll()
    r = c.log_to_clean("t", lg, clock()).cleanable_ratio
    assert 0.1 < r < 0.9
    lg.update_config(LogConfig(**{**lg.config.__dict__, "min_cleanable_dirty_ratio": 0.9}))
    assert c.clean_once() is None
    lg.update_config(LogConfig(**{**lg.config.__dict__, "min_cleanable_dirty_ratio": 0.1}))
    assert c.clean_once() is not None


def test_only_compacted_logs_are_cleaned(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, cleanup_policy="delete")
    fill(lg, 50, 5)
    assert cleaner_for(lg).clean_once() is None
    lg.update_config(LogConfig(**{**lg.config.__dict__, "cleanup_policy": "compact,delete"}))
    assert cleaner_for(lg).clean_once() is not None


def test_compact_delete_also_applies_time_retention(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, cleanup_policy="compact,delete", retention_ms=3_600_000)
    for i in range(60):
        append(lg, [(b"old-%d-%d" % (i, j), b"x" * 50) for j in range(3)], ts=T0 - 7_200_000)
    expected = fill(lg, 60, 5, ts=T0, seed=9)
    cleaner_for(lg).clean_once()
    assert lg.delete_old_segments() > 0
    recs = read_all(lg)
    assert recs and all(r.timestamp == T0 for r in recs)
    assert latest_by_key(recs) == expected
    compact_only = make_log(tmp_path / "t-1", clock, retention_ms=3_600_000)
    fill(compact_only, 60, 5, ts=T0 - 7_200_000)
    assert compact_only.delete_old_segments() == 0


def test_min_compaction_lag_is_respected(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6, min_compaction_lag_ms=60_000)
    append(lg, [(b"k", b"old")], ts=T0 - 120_000)
    append(lg, [(b"k", b"older-lagged")], ts=T0 - 110_000)
    lg.roll()
    append(lg, [(b"k", b"recent")], ts=T0 - 1_000)                # within the lag: this segment is uncleanable
    lg.roll()
    append(lg, [(b"k", b"active")], ts=T0)
    c = cleaner_for(lg)
    task = c.clean_once()
    assert task is not None and task.end_offset == 2
    assert [(r.offset, r.value) for r in read_all(lg)] == [(1, b"older-lagged"), (2, b"recent"), (3, b"active")]
    clock.now = T0 + 60_000
    lg.roll()
    assert c.clean_once() is not None
    assert [(r.offset, r.value) for r in read_all(lg)] == [(3, b"active")]


def test_min_compaction_lag_holds_back_everything_recent(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, min_compaction_lag_ms=60_000)
    fill(lg, 50, 5, ts=T0)
    assert cleaner_for(lg).clean_once() is None
    clock.now = T0 + 60_001
    assert cleaner_for(lg).clean_once() is not None


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=1024, max_compaction_lag_ms=3_600_000)
    fill(lg, 100, 10, ts=T0)
    c = cleaner_for(lg)
    assert c.clean_once() is not None
    lg.roll()
    append(lg, [(b"key-000", b"late")], ts=T0 + 1000)
    lg.roll()
    assert c.log_to_clean("t", lg, clock()).cleanable_ratio < 0.5
    assert c.clean_once() is None
    clock.now = T0 + 1000 + 3_600_001
    ltc = c.log_to_clean("t", lg, clock())
    assert ltc.need_compaction_now
    assert c.clean_once() is not None
    assert latest_by_key(read_all(lg))[b"key-000"][1] == b"late"


def test_offset_map_full_cleans_in_several_passes(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=2048, min_cleanable_dirty_ratio=0.01)
    expected = fill(lg, 60, 40)
    lg.roll()
    c = cleaner_for(lg, dedupe_buffer_size=24 * 12)              # 12 slots, 10 keys per pass
    assert c.cleaners[0].offset_map.max_entries == 10
    ends = []
    while (task := c.clean_once()) is not None:
        ends.append(task.end_offset)
        assert len(ends) < 200
    assert len(ends) > 3 and ends == sorted(ends) and ends[-1] == lg.active_segment.base_offset
    recs = read_all(lg)
    assert latest_by_key(recs) == expected
    assert len(recs) == len(expected)


def test_offset_map_capacity_follows_kafka():
    m = OffsetMap(24 * 1000, 0.9)
    assert (m.slots, m.max_entries) == (1000, 900)
    m.put(b"a", 5)
    assert (m.get(b"a"), m.get(b"b"), m.latest_offset, m.size) == (5, -1, 5, 1)
    assert CleanerConfig.from_broker_config({"log.cleaner.threads": "2"}).memory_per_thread == 134217728 // 2


# ---- producer state ----------------------------------------------------------------------------------------------------

def test_last_batch_of_an_active_producer_is_kept_empty(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    append(lg, [(b"a", b"1"), (b"b", b"1")], producer_id=9, producer_epoch=1, base_sequence=0)
    append(lg, [(b"a", b"2"), (b"b", b"2")], producer_id=9, producer_epoch=1, base_sequence=2)
    append(lg, [(b"a", b"3"), (b"b", b"3")])                      # overwrites everything producer 9 wrote
    lg.roll()
    cleaner_for(lg).clean_once()
    bs = batches(lg)
    # the producer's first batch is gone, its last one is an empty header with the same offsets and sequence
    assert [(h.base_offset, h.records_count) for h, _ in bs] == [(2, 0), (4, 2)]
    h = bs[0][0]
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta) == (9, 1, 2, 1)
    assert list(iter_records(bs[0][1], verify_crc=True)) == []
    assert [(r.offset, r.value) for r in read_all(lg)] == [(4, b"3"), (5, b"3")]

    # rebuilt from the log alone (no snapshots), the producer's state still knows its last batch: a retry of it
    # is answered as a duplicate, the next sequence is accepted
    lg.close()
    for p in lg.dir.glob("*.snapshot"):
        p.unlink()
    lg = Log(lg.dir, lg.config, time_ms=clock)
    assert lg.producer_snapshot()[9].last_seq == 3
    retry = bytearray(build_records_batch([(b"a", b"2"), (b"b", b"2")], producer_id=9, producer_epoch=1,
                                          base_sequence=2, timestamp_ms=T0))
    r = lg.append_as_leader(retry, split_and_validate(retry, 10**6), 0)
    assert r.duplicate and r.base_offset == 2
    append(lg, [(b"c", b"1")], producer_id=9, producer_epoch=1, base_sequence=4)


def test_expired_producer_batches_are_dropped(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    append(lg, [(b"a", b"1")], producer_id=9, producer_epoch=0, base_sequence=0)
    append(lg, [(b"a", b"2")])
    lg.roll()
    lg.producer_state.producers.clear()                          # producer.id.expiration.ms passed
    cleaner_for(lg).clean_once()
    assert [(h.base_offset, h.records_count) for h, _ in batches(lg)] == [(1, 1)]


# ---- races with the rest of the log ------------------------------------------------------------------------------------

def test_swap_refused_when_retention_deleted_the_segments(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, cleanup_policy="compact,delete")
    fill(lg, 100, 10)
    c = cleaner_for(lg)
    ltc = c.grab_filthiest_log()
    cl = c.cleaners[0]
    task = cl.prepare(ltc, clock())
    cl.build_offset_map(task)
    groups = cl.group_segments(task)
    cleaned = cl.clean_group(task, groups[0])
    assert cleaned.log_path.exists()
    lg.delete_records(lg.segments()[3].base_offset)             # DeleteRecords drops the first segments
    assert not cl.swap(task, groups[0], cleaned)
    assert not cleaned.log_path.exists() and not list(lg.dir.glob("*.cleaned"))
    c._in_progress.clear()
    assert c.clean_once() is not None                           # the next pass is fine
    read_all(lg)


def test_cleaning_concurrently_with_appends_on_the_event_loop(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=4096)
    expected = fill(lg, 300, 30)

    async def main():
        c = LogCleaner(CleanerConfig(backoff_ms=5), logs=lambda: [("t-0", lg)])
        c.start()
        try:
            rnd = random.Random(7)
            for i in range(400):
                recs = [(b"key-%03d" % rnd.randrange(30), b"live-%d" % i)]
                r = append(lg, recs)
                expected[recs[0][0]] = (r.base_offset, recs[0][1])
                assert latest_by_key(read_all(lg)) == expected if i % 50 == 0 else True
                await asyncio.sleep(0.001)
            for _ in range(500):
                if c.passes >= 3:
                    break
                await asyncio.sleep(0.01)
            assert c.passes >= 3
        finally:
            c.stop()

    asyncio.run(main())
    assert latest_by_key(read_all(lg)) == expected
    assert not list(lg.dir.glob("*.cleaned")) and not list(lg.dir.glob("*.swap"))


def test_stop_abandons_a_pass_and_leaves_no_files(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock)
    expected = fill(lg, 100, 10)
    c = cleaner_for(lg)
    ltc = c.grab_filthiest_log()
    cl = c.cleaners[0]
    task = cl.prepare(ltc, clock())
    cl.build_offset_map(task)
    c._stopping.set()
    with pytest.raises(cleaner._Aborted):
        cl.clean_group(task, cl.group_segments(task)[0])
    assert not list(lg.dir.glob("*.cleaned"))
    assert latest_by_key(read_all(lg)) == expected


# ---- crash safety ------------------------------------------------------------------------------------------------------

class SimulatedCrash(Exception):
    pass


def reopen_after_crash(lg: Log, clock) -> Log:
    """Drop the Log without closing it (as kill -9 would) and open the directory again."""
    cfg, d = lg.config, lg.dir
    return Log(d, cfg, time_ms=clock, clean_shutdown=False)


def test_crash_before_commit_leaves_cleaned_files_that_are_discarded(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock)
    expected = fill(lg, 150, 20)
    original = read_all(lg)
    c = cleaner_for(lg)
    cl = c.cleaners[0]
    task = cl.prepare(c.grab_filthiest_log(), clock())
    cl.build_offset_map(task)
    for group in cl.group_segments(task)[:3]:
        cl.clean_group(task, group)
    assert len(list(lg.dir.glob("*.log.cleaned"))) == 3
    lg2 = reopen_after_crash(lg, clock)
    assert not list(lg2.dir.glob("*.cleaned"))
    assert read_all(lg2) == original
    assert latest_by_key(read_all(lg2)) == expected


# The swap's file operations, in order: os.replace (.cleaned -> .swap: the commit point), LogSegment.delete of each
# replaced segment after the first, os.replace of the two indexes, os.replace (.swap -> .log).
# os.replace calls of a swap: 1 the transaction index to .swap, 2 the log to .swap (the commit point), then the
# transaction index (when it has entries), indexes and the log into place
CRASH_POINTS = [("replace", 1), ("replace", 2), ("delete", 1), ("delete", 2), ("replace", 3), ("replace", 4),
                ("replace", 5)]


@pytest.mark.parametrize("op,n", CRASH_POINTS)
def test_crash_during_swap_recovers_a_readable_log(tmp_path, clock, monkeypatch, op, n):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=2048)
    expected = fill(lg, 150, 20)
    lg.roll()
    original = {r.offset: r for r in read_all(lg)}
    c = LogCleaner(CleanerConfig(), logs=lambda: [("t-0", lg)])
    cl = c.cleaners[0]
    c.clean_once()                                        # a first pass: small segments the next pass groups
    expected = {**expected, **fill(lg, 150, 20, seed=3)}
    lg.roll()
    original.update({r.offset: r for r in read_all(lg)})
    ltc = c.grab_filthiest_log()
    task = cl.prepare(ltc, clock())
    cl.build_offset_map(task)
    groups = cl.group_segments(task)
    assert len(groups[0]) >= 3
    cleaned = cl.clean_group(task, groups[0])

    counts = {"replace": 0, "delete": 0}
    real_replace, real_delete = os.replace, LogSegment.delete

    def crash_replace(a, b):
        counts["replace"] += 1
        if op == "replace" and counts["replace"] == n:
            raise SimulatedCrash(f"before replace {n}")
        return real_replace(a, b)

    def crash_delete(seg):
        counts["delete"] += 1
        if op == "delete" and counts["delete"] == n:
            raise SimulatedCrash(f"before delete {n}")
        return real_delete(seg)

    monkeypatch.setattr(cleaner.os, "replace", crash_replace)
    monkeypatch.setattr(LogSegment, "delete", crash_delete)
    with pytest.raises(SimulatedCrash):
        cl.swap(task, groups[0], cleaned)
    monkeypatch.undo()
    committed = not (op == "replace" and n <= 2)
    assert bool(list(lg.dir.glob("*.log.swap"))) == committed

    lg2 = reopen_after_crash(lg, clock)
    assert not list(lg2.dir.glob("*.swap")) and not list(lg2.dir.glob("*.cleaned"))
    recs = read_all(lg2)
    assert latest_by_key(recs) == expected
    assert all(original[r.offset] == r for r in recs)
    first_group = [r for r in recs if r.offset < groups[0][-1].next_base]
    if committed:        # the swap was completed on open: the first group is deduplicated
        assert len({r.key for r in first_group}) == len(first_group)
    assert lg2.log_end_offset == lg.log_end_offset
    # and the reopened log cleans fine
    c2 = LogCleaner(CleanerConfig(), logs=lambda: [("t-0", lg2)])
    lg2.roll()
    append(lg2, [(b"key-000", b"after")])
    lg2.roll()
    c2.clean_once(now=clock())
    expected[b"key-000"] = (lg2.log_end_offset - 1, b"after")
    assert latest_by_key(read_all(lg2)) == expected


def test_complete_interrupted_swaps_on_a_bare_directory(tmp_path, clock):
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    append(lg, [(b"a", b"1"), (b"b", b"1")])
    lg.roll()
    append(lg, [(b"a", b"2")])
    lg.roll()
    append(lg, [(b"c", b"1")])
    lg.close()
    d = lg.dir
    # a cleaned segment covering offsets 0-2 ("b"@1, "a"@2) committed as .swap; segment 2 still on disk
    swap = build_records_batch([Record(1, T0, b"b", b"1", []), Record(2, T0, b"a", b"2", [])], base_offset=0)
    (d / "00000000000000000000.log.swap").write_bytes(swap)
    assert complete_interrupted_swaps(d) == 1
    assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000000.log", "00000000000000000003.log"]
    assert not (d / "00000000000000000000.index").exists()
    lg2 = Log(d, lg.config, time_ms=clock)
    assert [(r.offset, r.key, r.value) for r in read_all(lg2)] == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")]


# ---- configuration and produce-side helpers ----------------------------------------------------------------------------

def test_new_topic_configs_parse_and_default():
    lc = LogConfig.resolve({}, {})
    assert (lc.min_cleanable_dirty_ratio, lc.min_compaction_lag_ms, lc.max_compaction_lag_ms) == (0.5, 0, 2**63 - 1)
    lc = LogConfig.resolve({"log.cleaner.min.cleanable.ratio": "0.25"}, {"min.compaction.lag.ms": "5"})
    assert (lc.min_cleanable_dirty_ratio, lc.min_compaction_lag_ms) == (0.25, 5)
    for name, bad in (("min.cleanable.dirty.ratio", "1.5"), ("min.cleanable.dirty.ratio", "x"),
                      ("min.compaction.lag.ms", "-1"), ("max.compaction.lag.ms", "0")):
        with pytest.raises(ValueError):
            parse_value(TOPIC_CONFIGS[name], bad)


def test_has_null_key_all_codecs():
    for codec in compression.CODEC_NAMES:
        assert not has_null_key(build_records_batch([(b"k", b"v"), (b"k2", None)], codec=codec))
        assert has_null_key(build_records_batch([(b"k", b"v"), (None, b"v")], codec=codec))
    assert has_null_key(build_batch([(None, b"v")]))
