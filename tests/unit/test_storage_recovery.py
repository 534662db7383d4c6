"""Crash recovery of storage.log.log.Log: torn tails, garbage, bad CRCs, damaged indexes, real kill -9."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from protocol.record_batch import build_batch, read_header, split_and_validate
from protocol.records import iter_all_records
from storage.log.log import Log
from storage.log.log_config import LogConfig

ROOT = Path(__file__).resolve().parents[2]
CFG = LogConfig(segment_bytes=1500, index_interval_bytes=100)


def batch(i: int, *, pid: int = -1, seq: int = -1) -> bytearray:
    return bytearray(build_batch([(b"k", b"value-%03d" % i), (b"k", b"again-%03d" % i)], timestamp_ms=1000 + i,
                                 producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq))


def append(log: Log, buf, epoch: int = 0):
    """Append as a single-replica leader does: the partition layer then raises the high watermark to the log end."""
    r = log.append_as_leader(buf, split_and_validate(buf, 10**8), epoch)
    log.update_high_watermark(log.log_end_offset)
    return r


def values(log: Log, start: int | None = None) -> list[bytes]:
    start = log.log_start_offset if start is None else start
    return [r.value for v in log.read(start, 1 << 30) for r in iter_all_records(v)]


def crash(log: Log) -> None:
    """Drop the object without close(): no trim, no seal, no snapshot (the page cache keeps the data)."""
    del log
    gc.collect()


def fill(d: Path, n: int, **kw) -> tuple[Log, list[bytes]]:
    log = Log(d, CFG)
    for i in range(n):
        append(log, batch(i), **kw)
    return log, values(log)


def test_crash_without_close_recovers_everything(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 40)
    leo, nsegs = log.log_end_offset, len(log.segments())
    active = log.segments()[-1]
    assert active.log_path.stat().st_size > active.size          # zero-filled preallocated tail
    logical = active.size
    crash(log)
    log = Log(d, CFG, clean_shutdown=False)
    assert log.log_end_offset == leo and len(log.segments()) == nsegs
    assert log.segments()[-1].log_path.stat().st_size == logical  # the zero tail was cut
    assert values(log) == before
    assert append(log, batch(99)).base_offset == leo


def test_unclean_reopen_with_clean_flag_still_detects_torn_tail(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 40)
    leo = log.log_end_offset
    crash(log)
    log = Log(d, CFG, clean_shutdown=True)                       # wrong claim: the tail check catches it
    assert log.log_end_offset == leo and values(log) == before
    assert append(log, batch(99)).base_offset == leo


def _active_file_end(d: Path, log: Log) -> tuple[Path, int]:
    seg = log.segments()[-1]
    return seg.log_path, seg.size


def test_garbage_after_last_batch_is_truncated(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 30)
    leo = log.log_end_offset
    path, end = _active_file_end(d, log)
    log.close()
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(os.urandom(300))
    log = Log(d, CFG)
    assert log.log_end_offset == leo and values(log) == before
    assert path.stat().st_size == end
    assert append(log, batch(30)).base_offset == leo


def test_partial_batch_is_truncated(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 30)
    leo = log.log_end_offset
    path, end = _active_file_end(d, log)
    crash(log)
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(batch(30)[:40])                                  # a torn write (even shorter than a header)
    log = Log(d, CFG)
    assert log.log_end_offset == leo and values(log) == before
    crash(log)
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(batch(30)[:-5])                                  # header complete, body torn
    log = Log(d, CFG)
    assert log.log_end_offset == leo and path.stat().st_size == end


def test_bad_crc_truncates_at_first_bad_batch(tmp_path):
    d = tmp_path / "t-0"
    log = Log(d, CFG)
    positions = []
    for i in range(30):
        r = append(log, batch(i, pid=5, seq=2 * i))
        positions.append((r.base_offset, log.segments()[-1].size))
    seg = log.segments()[-1]
    in_active = [(off, end) for off, end in positions if off >= seg.base_offset]
    (victim_offset, _), (_, victim_end) = in_active[2], in_active[2]
    victim_pos = in_active[1][1]                                 # end of the previous batch
    crash(log)
    with open(seg.log_path, "r+b") as f:                         # flip one byte of the victim's record data
        f.seek(victim_end - 3)
        b = f.read(1)
        f.seek(victim_end - 3)
        f.write(bytes([b[0] ^ 0x01]))
    log = Log(d, CFG)
    assert log.log_end_offset == victim_offset
    assert log.segments()[-1].size == victim_pos
    assert values(log) == [v for i in range(victim_offset // 2) for v in (b"value-%03d" % i, b"again-%03d" % i)]
    # Producer state was rebuilt to the recovered point: the lost batch is new again, the one before is a dup.
    i = victim_offset // 2
    assert append(log, batch(i - 1, pid=5, seq=2 * (i - 1))).duplicate
    r = append(log, batch(i, pid=5, seq=2 * i))
    assert not r.duplicate and r.error_code == 0 and r.base_offset == victim_offset


def test_missing_index_of_sealed_segment_is_rebuilt(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 60)
    segs = log.segments()
    assert len(segs) >= 4
    victim = segs[1]
    entries = victim.offset_index.entries
    assert entries > 0
    log.close()
    victim.index_path.unlink()
    victim.time_index_path.write_bytes(b"\x00" * 5)              # not a whole number of entries
    log = Log(d, CFG, clean_shutdown=True)
    seg = log.segments()[1]
    assert seg.offset_index.entries == entries
    assert victim.index_path.stat().st_size == entries * 8
    assert values(log) == before
    for off in range(seg.base_offset, seg.next_offset):
        h = read_header(log.read(off, 1)[0])
        assert h.base_offset <= off <= h.last_offset


def test_garbage_index_of_sealed_segment_is_rebuilt_lazily(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 60)
    victim = log.segments()[2]
    entries = victim.offset_index.entries
    log.close()
    victim.index_path.write_bytes(b"\x00" * 8 * 3)               # whole entries, but nonsense
    victim.time_index_path.write_bytes(b"\x00" * 12 * 2)
    log = Log(d, CFG, clean_shutdown=True)
    assert values(log) == before
    seg = log.segments()[2]
    assert seg.offset_index.entries == entries and seg.offset_index.sanity_check()
    assert seg.time_index.sanity_check()
    assert log.fetch_offset_by_timestamp(1000 + seg.base_offset // 2) == (seg.base_offset, 1000 + seg.base_offset // 2)


def test_corrupt_sealed_segment_without_index_drops_later_segments(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 60)
    segs = log.segments()
    victim = segs[1]
    log.close()
    victim.index_path.unlink()
    with open(victim.log_path, "r+b") as f:                      # break the 3rd batch of segment 1
        pos = 0
        for _ in range(2):
            f.seek(pos + 8)
            pos += 12 + int.from_bytes(f.read(4), "big")
        f.seek(pos + 40)
        f.write(b"\xff\xff")
    log = Log(d, CFG, clean_shutdown=True)
    assert [s.base_offset for s in log.segments()] == [segs[0].base_offset, victim.base_offset]
    assert log.log_end_offset == victim.base_offset + 4
    assert not segs[2].log_path.exists()
    assert values(log) == before[:victim.base_offset + 4]
    assert append(log, batch(0)).base_offset == victim.base_offset + 4


def test_log_start_offset_and_leader_epochs_survive_crash(tmp_path):
    d = tmp_path / "t-0"
    log = Log(d, CFG)
    for i in range(40):
        append(log, batch(i), epoch=i // 10)
    log.delete_records(23)
    epochs = log.leader_epoch_cache.entries
    assert epochs[0] == (1, 23)
    crash(log)
    log = Log(d, CFG)
    assert log.log_start_offset == 23
    assert log.leader_epoch_cache.entries == epochs
    # Without the checkpoint, epochs are re-learned from the batches of the recovered segment.
    crash(log)
    (d / "leader-epoch-checkpoint").unlink()
    log = Log(d, CFG)
    latest = log.leader_epoch_cache.latest_entry()
    assert latest is not None and latest.epoch == 3 and latest.start_offset == 60


def test_stray_files_are_cleaned(tmp_path):
    d = tmp_path / "t-0"
    log, _ = fill(d, 5)
    log.close()
    (d / "leader-epoch-checkpoint.tmp").write_text("junk")
    (d / "00000000000000099999.index").write_bytes(b"")
    log = Log(d, CFG, clean_shutdown=True)
    assert not (d / "leader-epoch-checkpoint.tmp").exists()
    assert not (d / "00000000000000099999.index").exists()
    assert log.log_end_offset == 10


def test_real_kill_9(tmp_path):
    d = tmp_path / "t-0"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from protocol.record_batch import build_batch, split_and_validate
        from storage.log.log import Log
        from storage.log.log_config import LogConfig
        log = Log({str(d)!r}, LogConfig(segment_bytes=5000, index_interval_bytes=200))
        for i in range(300):
            b = bytearray(build_batch([(None, b"m%d" % i)], timestamp_ms=i, producer_id=1, producer_epoch=0,
                                      base_sequence=i))
            log.append_as_leader(b, split_and_validate(b, 10**6), 0)
        print(log.log_end_offset, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "300"
    log = Log(d, LogConfig(segment_bytes=5000, index_interval_bytes=200))
    assert log.log_end_offset == 300
    assert values(log) == [b"m%d" % i for i in range(300)]
    b = bytearray(build_batch([(None, b"m299")], timestamp_ms=0, producer_id=1, producer_epoch=0, base_sequence=299))
    r = log.append_as_leader(b, split_and_validate(b, 10**6), 0)
    assert r.duplicate and r.base_offset == 299
    assert log.fetch_offset_by_timestamp(150) == (150, 150)


# ---- issue 26: corruption found at start-up -------------------------------------------------------------------------

def test_garbage_indexes_of_the_active_segment_after_a_clean_shutdown_are_rebuilt(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 40)
    active = log.segments()[-1]
    leo, entries = log.log_end_offset, active.offset_index.entries
    assert entries > 2
    log.close()
    active.index_path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x10\x00" * 2)     # an entry past the end of the log
    active.time_index_path.write_bytes(os.urandom(12 * 3 + 4))                  # not whole entries
    log = Log(d, CFG, clean_shutdown=True)
    seg = log.segments()[-1]
    assert log.log_end_offset == leo and values(log) == before
    assert seg.offset_index.entries == entries and seg.time_index.sanity_check()
    for off in range(seg.base_offset, leo):
        h = read_header(log.read(off, 1)[0])
        assert h.base_offset <= off <= h.last_offset
    assert log.fetch_offset_by_timestamp(1000 + seg.base_offset // 2 + 1) == (seg.base_offset + 2,
                                                                               1000 + seg.base_offset // 2 + 1)


def test_zero_filled_tail_with_a_clean_shutdown_marker_is_truncated(tmp_path):
    d = tmp_path / "t-0"
    log, before = fill(d, 30)
    leo = log.log_end_offset
    path, end = _active_file_end(d, log)
    log.close()
    with open(path, "ab") as f:                                  # preallocated, never written (a torn write)
        f.write(b"\x00" * 8192)
    log = Log(d, CFG, clean_shutdown=True)
    assert log.log_end_offset == leo and values(log) == before and path.stat().st_size == end
    assert append(log, batch(30)).base_offset == leo


def _break_batch_length(seg_path: Path, nth: int, length: int) -> tuple[int, int]:
    """Overwrite the length field of the `nth` batch of a segment; -> (its base offset, its position)."""
    with open(seg_path, "r+b") as f:
        pos = 0
        for _ in range(nth):
            f.seek(pos + 8)
            pos += 12 + int.from_bytes(f.read(4), "big")
        f.seek(pos)
        base = int.from_bytes(f.read(8), "big")
        f.write(length.to_bytes(4, "big", signed=True))
    return base, pos


@pytest.mark.parametrize("length", [-16, 3, 2**31 - 16])
def test_a_batch_with_an_impossible_length_in_a_flushed_segment_answers_corrupt_message(tmp_path, length):
    """A sealed segment is not rescanned at start-up (as Kafka: it was flushed, below the recovery point); a read
    that meets a batch header that cannot be right answers CORRUPT_MESSAGE (Kafka's FileLogInputStream throws
    CorruptRecordException) instead of looping, serving a torn batch or skipping silently to the next segment."""
    from protocol.errors import ErrorCode
    from storage.log.log_segment import CorruptSegmentError
    d = tmp_path / "t-0"
    log, before = fill(d, 60)
    victim = log.segments()[1]
    log.close()
    base, _ = _break_batch_length(victim.log_path, 2, length)
    log = Log(d, CFG, clean_shutdown=True)
    assert values(log, 0)[:victim.base_offset] == before[:victim.base_offset]
    views = log.read(base - 2, 1)                           # the good batch before it
    assert [r.offset for v in views for r in iter_all_records(v)] == [base - 2, base - 1]
    for off in (base, base + 1, base + 2):
        with pytest.raises(CorruptSegmentError) as e:
            log.read(off, 1 << 20)
        assert e.value.error_code == ErrorCode.corrupt_message
    nxt = log.segments()[2].base_offset
    assert values(log, nxt) == before[nxt:]
