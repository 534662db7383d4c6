"""Idempotent producers: duplicates, sequence gaps, epochs, snapshots (Kafka format) and restarts."""
from __future__ import annotations

import struct

import crc32c
import pytest

from protocol.record_batch import build_batch, split_and_validate
from protocol.records import iter_all_records
from storage.log.log import Log
from storage.log.log_config import LogConfig
from storage.log.producer_state import ProducerStateManager, in_sequence

PID = 4242


def pbatch(seq: int, n: int = 1, *, epoch: int = 0, pid: int = PID, value: bytes = b"v") -> bytearray:
    return bytearray(build_batch([(None, value)] * n, timestamp_ms=1000, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq))


def append(log: Log, buf):
    return log.append_as_leader(buf, split_and_validate(buf, 10**8), 0)


def values(log: Log) -> list[bytes]:
    return [r.value for v in log.read(log.log_start_offset, 1 << 30) for r in iter_all_records(v)]


@pytest.fixture
def log(tmp_path):
    return Log(tmp_path / "t-0", LogConfig(segment_bytes=600))


def test_in_sequence_wraps_at_int32():
    assert in_sequence(4, 5) and not in_sequence(4, 6) and not in_sequence(4, 4)
    assert in_sequence(2**31 - 1, 0) and in_sequence(-1, 0)


def test_duplicate_returns_original_offsets_and_is_not_written(log):
    append(log, bytearray(build_batch([(None, b"plain")])))          # offset 0, non-idempotent
    r1 = append(log, pbatch(0, 3, value=b"a"))
    r2 = append(log, pbatch(3, 2, value=b"b"))
    assert (r1.base_offset, r1.last_offset, r2.base_offset, r2.last_offset) == (1, 3, 4, 5)
    size, leo = log.size_bytes(), log.log_end_offset
    dup = append(log, pbatch(0, 3, value=b"a"))
    assert dup.duplicate and dup.error_code == 0 and (dup.base_offset, dup.last_offset) == (1, 3)
    dup = append(log, pbatch(3, 2, value=b"b"))
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (4, 5)
    assert (log.size_bytes(), log.log_end_offset) == (size, leo)
    assert values(log) == [b"plain"] + [b"a"] * 3 + [b"b"] * 2
    r3 = append(log, pbatch(5, 1, value=b"c"))
    assert not r3.duplicate and r3.base_offset == 6


def test_only_last_five_batches_are_deduplicated(log):
    for seq in range(7):
        append(log, pbatch(seq))
    for seq in range(2, 7):
        assert append(log, pbatch(seq)).duplicate
    r = append(log, pbatch(1))                       # evicted from the cache: an out-of-order sequence now
    assert r.error_code == 45 and not r.duplicate


def test_sequence_gap_is_out_of_order(log):
    append(log, pbatch(0, 2))
    r = append(log, pbatch(3))
    assert r.error_code == 45 and r.error_message and log.log_end_offset == 2
    assert append(log, pbatch(2)).base_offset == 2


def test_old_epoch_is_fenced(log):
    append(log, pbatch(0, epoch=5))
    r = append(log, pbatch(1, epoch=4))
    assert r.error_code == 47 and log.log_end_offset == 1
    assert append(log, pbatch(1, epoch=5)).error_code == 0


def test_epoch_bump_must_restart_at_zero(log):
    append(log, pbatch(0, 3, epoch=1))
    assert append(log, pbatch(3, epoch=2)).error_code == 45
    r = append(log, pbatch(0, epoch=2))
    assert r.error_code == 0 and r.base_offset == 3
    assert append(log, pbatch(0, 3, epoch=1)).error_code == 47    # the old epoch's duplicate is fenced now
    assert append(log, pbatch(1, epoch=2)).base_offset == 4


def test_unknown_producer_accepts_any_sequence(log):
    assert append(log, pbatch(1234, epoch=3)).error_code == 0        # state may have expired
    assert append(log, pbatch(1235, epoch=3)).error_code == 0
    assert append(log, pbatch(1237, epoch=3)).error_code == 45


def test_sequence_wraparound(log):
    append(log, pbatch(2**31 - 2, 2))                # covers 2^31-2 and 2^31-1
    r = append(log, pbatch(0, 1))
    assert r.error_code == 0
    assert append(log, pbatch(2**31 - 2, 2)).duplicate


def test_producers_are_independent(log):
    append(log, pbatch(0, pid=1))
    append(log, pbatch(0, pid=2))
    assert append(log, pbatch(0, pid=1)).duplicate
    assert append(log, pbatch(1, pid=2)).base_offset == 2


def test_snapshot_is_kafka_format_and_round_trips(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig())
    for seq in range(7):
        assert append(log, pbatch(seq * 2, 2, pid=7, epoch=3)).error_code == 0
    append(log, pbatch(0, pid=8, epoch=0))
    path = log.producer_state.take_snapshot(log.log_end_offset)
    assert path.name == f"{log.log_end_offset:020d}.snapshot"
    data = path.read_bytes()
    version, crc = struct.unpack_from(">hI", data, 0)
    assert version == 1 and crc == crc32c.crc32c(data[6:])
    (count,) = struct.unpack_from(">i", data, 6)
    entries = [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i) for i in range(count)]
    assert len(data) == 10 + 46 * count
    # Kafka keeps the last entry per producer id: that is the producer's newest batch.
    last = {e[0]: e for e in entries}
    assert last[7][:5] == (7, 3, 13, 13, 1) and last[8][:5] == (8, 0, 0, 14, 0)
    psm = ProducerStateManager(tmp_path / "t-0")
    assert psm.load_latest(log.log_end_offset, 0) == log.log_end_offset
    e = psm.producers[7]
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches] == \
        [(s * 2, s * 2 + 1, s * 2, s * 2 + 1) for s in range(2, 7)]


def test_corrupt_snapshot_is_skipped(tmp_path):
    d = tmp_path / "t-0"
    log = Log(d, LogConfig())
    append(log, pbatch(0))
    log.producer_state.take_snapshot(1)
    append(log, pbatch(1))
    log.close()
    snap = d / f"{2:020d}.snapshot"
    raw = bytearray(snap.read_bytes())
    raw[-1] ^= 0xFF
    snap.write_bytes(raw)
    log = Log(d, LogConfig(), clean_shutdown=True)   # falls back to snapshot 1 plus replay
    assert not snap.exists()
    assert append(log, pbatch(1)).duplicate and append(log, pbatch(0)).duplicate
    assert append(log, pbatch(2)).base_offset == 2


@pytest.mark.parametrize("clean", [True, False])
def test_duplicate_detected_after_restart(tmp_path, clean):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=500)
    log = Log(d, cfg)
    for seq in range(12):                              # spans several segments and snapshots
        append(log, pbatch(seq, value=b"x" * 40))
    if clean:
        log.close()
    del log
    log = Log(d, cfg, clean_shutdown=clean)
    for seq in range(7, 12):
        r = append(log, pbatch(seq, value=b"x" * 40))
        assert r.duplicate and r.base_offset == seq
    assert append(log, pbatch(13)).error_code == 45
    assert append(log, pbatch(12)).base_offset == 12


def test_state_rebuilt_from_log_without_any_snapshot(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=500)
    log = Log(d, cfg)
    for seq in range(10):
        append(log, pbatch(seq, epoch=2, value=b"y" * 40))
    del log
    for p in d.glob("*.snapshot"):
        p.unlink()
    log = Log(d, cfg)
    assert append(log, pbatch(9, epoch=2, value=b"y" * 40)).duplicate
    assert append(log, pbatch(3, epoch=1)).error_code == 47


def test_producer_expiration(tmp_path):
    now = [1_000_000]
    log = Log(tmp_path / "t-0", LogConfig(), time_ms=lambda: now[0], producer_id_expiration_ms=1000)
    append(log, pbatch(0))
    now[0] += 999
    log.delete_old_segments()
    assert PID in log.producer_snapshot()
    now[0] += 1
    log.delete_old_segments()
    assert PID not in log.producer_snapshot()
    assert append(log, pbatch(57)).error_code == 0     # unknown again: any sequence
