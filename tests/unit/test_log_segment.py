"""storage.log.log_segment, storage.log.offset_index and storage.log.time_index on real files."""
from __future__ import annotations

import os
import random
import struct

import pytest

from protocol import compression
from protocol.record_batch import assign_offset, build_batch, read_header, set_log_append_time, split_and_validate
from protocol.records import Record, build_records_batch, iter_records
from storage.log.log_config import LogConfig
from storage.log.log_segment import LogSegment, record_timestamps
from storage.log.offset_index import OffsetIndex
from storage.log.time_index import TimeIndex


# ---- offset index -------------------------------------------------------------------------------------------

def test_offset_index_lookup_seal_and_reopen(tmp_path):
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(p, 100, 8 * 10, writable=True)
    assert not p.exists() and idx.max_entries == 10                 # in memory until sealed; 10 fit
    assert idx.lookup(500) == (100, 0)
    for i in range(1, 6):
        assert idx.append(100 + 10 * i, 1000 * i)
    assert not idx.append(140, 9999)                                # offsets must grow
    assert idx.lookup(99) == (100, 0) and idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 1000) and idx.lookup(135) == (130, 3000) and idx.lookup(10**9) == (150, 5000)
    assert idx.lookup_position(2999) == (120, 2000) and idx.lookup_position(3000) == (130, 3000)
    assert idx.sanity_check()
    idx.seal()
    assert p.stat().st_size == 5 * 8
    assert struct.unpack(">II", p.read_bytes()[:8]) == (10, 1000)  # Kafka layout: relative offset, position
    ro = OffsetIndex(p, 100, 80, writable=False)
    assert ro.entries == 5 and ro.lookup(141) == (140, 4000) and not ro.append(200, 1)
    # Reopened as the active index it is extended again and keeps its entries.
    rw = OffsetIndex(p, 100, 80, writable=True)
    assert rw.entries == 5 and rw.append(160, 6000) and rw.max_entries == 10
    rw.close()


def test_offset_index_full_and_sanity(tmp_path):
    p = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(p, 0, 8 * 3, writable=True)
    for i in range(1, 4):
        assert idx.append(i, i * 10)
    assert idx.is_full() and not idx.append(4, 40)
    idx.close()
    p.write_bytes(b"\x00" * 24)                                    # an untrimmed, never-written tail
    assert not OffsetIndex(p, 0, 24, writable=False).sanity_check()
    assert OffsetIndex(tmp_path / "missing.index", 0, 24, writable=False).entries == 0


# ---- time index ---------------------------------------------------------------------------------------------

def test_time_index(tmp_path):
    p = tmp_path / "00000000000000000050.timeindex"
    ti = TimeIndex(p, 50, 12 * 4, writable=True)
    assert ti.lookup(123) == (-1, 50) and ti.last_entry() == (-1, 50)
    assert ti.maybe_append(1000, 55)
    assert not ti.maybe_append(1000, 60)                           # only when the max timestamp grows
    assert ti.maybe_append(2000, 60) and ti.maybe_append(3000, 70)
    assert ti.is_full()                                            # one slot kept for the final entry
    assert not ti.maybe_append(4000, 80)
    assert ti.maybe_append(4000, 80, skip_full_check=True)
    assert ti.lookup(999) == (-1, 50) and ti.lookup(2500) == (2000, 60) and ti.lookup(5000) == (4000, 80)
    ti.seal()
    assert p.stat().st_size == 48
    assert struct.unpack(">qI", p.read_bytes()[:12]) == (1000, 5)
    ro = TimeIndex(p, 50, 48, writable=False)
    assert ro.last_entry() == (4000, 80)                           # read without mapping the file
    assert ro.lookup(3000) == (3000, 70) and ro.sanity_check()


# ---- segment ------------------------------------------------------------------------------------------------

def _batch(offset: int, n: int, ts: int, value: bytes = b"v" * 20) -> tuple[bytearray, list]:
    buf = bytearray(build_batch([(None, value)] * n, timestamp_ms=ts))
    assign_offset(buf, 0, offset, 0)
    return buf, split_and_validate(buf, 10**6)


def _fill(seg: LogSegment, count: int, interval: int = 100) -> list[tuple[int, int, int]]:
    """Append `count` 3-record batches; returns (base offset, position, size) of each."""
    out = []
    offset = seg.base_offset
    for i in range(count):
        buf, hs = _batch(offset, 3, 1000 + i)
        pos = seg.append(buf, hs, index_interval_bytes=interval, segment_bytes=1 << 30, now_ms=0)
        out.append((offset, pos, len(buf)))
        offset += 3
    return out


def test_segment_append_translate_and_seal(tmp_path):
    seg = LogSegment.create(tmp_path, 1000, 1024)
    batches = _fill(seg, 40)
    assert seg.next_offset == 1120 and seg.size == sum(b[2] for b in batches)
    assert seg.offset_index.entries > 5
    assert seg.log_path.stat().st_size >= 256 * 1024 > seg.size    # grown in chunks, mapped
    for base, pos, _ in batches:
        for off in range(base, base + 3):
            found = seg.translate_offset(off)
            assert found[0] == pos and found[1].base_offset == base
    assert seg.translate_offset(1120) is None
    assert seg.max_timestamp_so_far == 1039 and seg.offset_of_max_timestamp_so_far == 1119
    seg.seal()
    assert not seg.active and seg.log_path.stat().st_size == seg.size
    reopened = LogSegment(tmp_path, 1000, max_index_size=1024, active=False)
    assert reopened.next_offset == 1120 and reopened.size == seg.size
    assert reopened.max_timestamp_so_far == 1039                  # from the sealed time index's final entry
    assert reopened.translate_offset(1061)[1].base_offset == 1060


def test_segment_batch_end(tmp_path):
    seg = LogSegment.create(tmp_path, 0, 1024)
    batches = _fill(seg, 20, interval=50)
    sz = batches[0][2]
    assert seg.batch_end(0, sz * 5, 1 << 62, False) == sz * 5
    assert seg.batch_end(0, sz * 5 - 1, 1 << 62, False) == sz * 4
    assert seg.batch_end(0, 1, 1 << 62, True) == sz
    assert seg.batch_end(0, 1, 1 << 62, False) == 0
    assert seg.batch_end(0, 1 << 30, 9, False) == sz * 3          # batch at 9 starts at the bound
    assert seg.batch_end(0, 1 << 30, 10, False) == sz * 4
    assert seg.batch_end(sz * 2, 1 << 30, 1 << 62, False) == seg.size


def test_segment_recover_rebuilds_indexes_and_truncates(tmp_path):
    seg = LogSegment.create(tmp_path, 0, 4096)
    _fill(seg, 30)
    entries, size = seg.offset_index.entries, seg.size
    expected = [seg.offset_index.entry(i) for i in range(entries)]
    seg.flush()
    seg._unmap()
    with open(seg.log_path, "r+b") as f:
        f.seek(size)
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x5a" + os.urandom(100))
    file_len = seg.log_path.stat().st_size                         # preallocated chunk + garbage
    assert file_len > size
    seen = []
    dropped = seg.recover(lambda h: seen.append(h.base_offset), index_interval_bytes=100)
    assert dropped == file_len - size
    assert seg.size == size and seg.next_offset == 90 and len(seen) == 30
    assert seg.log_path.stat().st_size == size
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == expected
    assert seg.translate_offset(50)[1].base_offset == 48
    # Appends continue right after the recovered point.
    buf, hs = _batch(90, 1, 5000)
    assert seg.append(buf, hs, index_interval_bytes=100, segment_bytes=1 << 30, now_ms=0) == size


def test_should_roll(tmp_path):
    seg = LogSegment.create(tmp_path, 0, 8 * 100)
    cfg = LogConfig(segment_bytes=1000, segment_ms=100)
    assert not seg.should_roll(cfg, 5000, 1, 0, 10**9)             # empty segments never roll
    buf, hs = _batch(0, 1, 0)
    seg.append(buf, hs, index_interval_bytes=4096, segment_bytes=1000, now_ms=1000)
    assert not seg.should_roll(cfg, 1000 - seg.size, 1, 1, 1100)
    assert seg.should_roll(cfg, 1001 - seg.size, 1, 1, 1100)
    assert seg.should_roll(cfg, 10, 1, 1, 1101)
    assert seg.should_roll(cfg, 10, 1, 2**31, 1000)               # relative offset overflow


# ---- record-level timestamps --------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP, compression.ZSTD])
def test_record_timestamps_match_the_record_decoder(codec):
    rnd = random.Random(codec)
    recs = [Record(100 + i * 2, 10**12 + rnd.randint(-10**6, 10**6), b"k" * rnd.randint(0, 300),
                   b"v" * rnd.randint(0, 3000), [("h", b"x")]) for i in range(50)]
    buf = bytearray(build_records_batch(recs, codec=codec, base_offset=100))
    h = read_header(buf)
    assert list(record_timestamps(memoryview(buf), h)) == [(r.offset, r.timestamp) for r in iter_records(buf)]
    set_log_append_time(buf, 0, len(buf), 777)
    h = read_header(buf)
    assert [ts for _, ts in record_timestamps(buf, h)] == [777] * 50
