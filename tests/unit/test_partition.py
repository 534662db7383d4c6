"""replication.partition.Partition: the high watermark it owns, the acks rules, and the follower operations
(append as follower, truncate to an offset, end offset for a leader epoch) on a real log."""
from __future__ import annotations

import pytest

from protocol.errors import ApiError, ErrorCode
from protocol.record_batch import build_batch, split_and_validate
from protocol.records import iter_all_records
from replication.partition import Partition
from storage.log.log import Log, UnexpectedAppendOffsetError
from storage.log.log_config import LogConfig


def _batch(*values: bytes, producer_id: int = -1, seq: int = 0):
    buf = bytearray(build_batch([(None, v) for v in values], producer_id=producer_id, producer_epoch=0,
                                base_sequence=seq if producer_id >= 0 else -1))
    return buf, split_and_validate(buf, 10**6)


def _leader(tmp_path, name="t-0", **cfg) -> Partition:
    return Partition("t", 0, Log(tmp_path / name, LogConfig(**cfg)), local_broker_id=1)


def _values(part: Partition, start: int = 0) -> list[bytes]:
    views, _ = part.read(start, 1 << 20, min_one_message=True, fetch_only_committed=False)
    return [bytes(r.value) for v in views for r in iter_all_records(v)]


def _copy_to_follower(leader: Partition, follower: Partition) -> None:
    """What a follower fetch does: the leader's batches from the follower's log end, appended as they are."""
    views, _ = leader.read(follower.log_end_offset, 1 << 20, min_one_message=True, fetch_only_committed=False)
    for v in views:
        buf = bytearray(v)
        follower.append_records_to_follower(buf, leader.high_watermark)


def test_single_replica_high_watermark_follows_appends(tmp_path):
    p = _leader(tmp_path)
    assert p.append_records_to_leader(*_batch(b"a", b"b"), required_acks=1).base_offset == 0
    assert (p.log_end_offset, p.high_watermark) == (2, 2)
    assert _values(p) == [b"a", b"b"]


def test_high_watermark_is_the_smallest_end_offset_in_the_isr(tmp_path):
    p = _leader(tmp_path)
    p.isr = (1, 2)
    p.append_records_to_leader(*_batch(b"a", b"b", b"c"), required_acks=-1)
    assert p.high_watermark == 0                        # the follower has nothing yet
    views, _ = p.read(0, 1 << 20, min_one_message=True)
    assert views == []                                  # consumers see only what the ISR has
    assert p.update_follower_end_offset(2, 2) and p.high_watermark == 2
    assert not p.update_follower_end_offset(2, 1) and p.high_watermark == 2     # never goes back
    p.update_follower_end_offset(2, 3)
    assert p.high_watermark == 3


def test_acks_all_needs_min_insync_replicas(tmp_path):
    p = _leader(tmp_path, min_insync_replicas=2)
    r = p.append_records_to_leader(*_batch(b"a"), required_acks=-1)
    assert r.error_code == ErrorCode.not_enough_replicas and p.log_end_offset == 0
    assert p.append_records_to_leader(*_batch(b"a"), required_acks=1).error_code == 0
    p.isr = (1, 2)
    assert p.append_records_to_leader(*_batch(b"b"), required_acks=-1).error_code == 0


def test_leader_epoch_checks(tmp_path):
    p = _leader(tmp_path)
    p.leader_epoch = 5
    assert p.check_leader_epoch(-1) == 0 and p.check_leader_epoch(5) == 0
    assert p.check_leader_epoch(4) == ErrorCode.fenced_leader_epoch
    assert p.check_leader_epoch(6) == ErrorCode.unknown_leader_epoch


def test_follower_append_keeps_offsets_epochs_and_producer_state(tmp_path):
    leader = _leader(tmp_path)
    leader.append_records_to_leader(*_batch(b"a", b"b", producer_id=7), required_acks=1)
    leader.leader_epoch = 3
    leader.append_records_to_leader(*_batch(b"c", producer_id=7, seq=2), required_acks=1)
    follower = Partition("t", 0, Log(tmp_path / "f", LogConfig()), local_broker_id=2)
    _copy_to_follower(leader, follower)
    assert (follower.log_end_offset, follower.high_watermark) == (3, 3)
    assert _values(follower) == [b"a", b"b", b"c"]
    assert [(e.epoch, e.start_offset) for e in follower.log.leader_epoch_cache.entries] == [(0, 0), (3, 2)]
    assert follower.log.producer_state.last_entry(7).last_seq == 2
    assert follower.last_offset_for_leader_epoch(0) == (0, 2)
    assert follower.last_offset_for_leader_epoch(3) == (3, 3)
    # offsets that do not continue the log are refused, never appended
    buf, _ = _batch(b"x")
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_records_to_follower(buf)                # base offset 0 < log end 3
    buf[-1] ^= 0xFF                                             # a damaged batch: detected by its CRC
    buf[0:8] = (3).to_bytes(8, "big")
    with pytest.raises(ApiError) as e:
        follower.append_records_to_follower(buf)
    assert e.value.error_code == ErrorCode.corrupt_message
    assert follower.log_end_offset == 3 and _values(follower) == [b"a", b"b", b"c"]


def test_truncate_divergent_tail_then_catch_up(tmp_path):
    """KIP-101: a follower with records of an epoch the new leader never had truncates to the leader's end offset
    for that epoch, then copies the leader's log; both end byte-identical."""
    old = _leader(tmp_path, "old", segment_bytes=200)
    for v in (b"a", b"b", b"c"):
        old.append_records_to_leader(*_batch(v), required_acks=1)          # epoch 0: offsets 0-2
    new = Partition("t", 0, Log(tmp_path / "new", LogConfig(segment_bytes=200)), local_broker_id=2)
    _copy_to_follower(old, new)                                           # the new leader got offsets 0-2
    old.leader_epoch = 1
    for v in (b"lost-1", b"lost-2", b"lost-3"):
        old.append_records_to_leader(*_batch(v), required_acks=1)          # epoch 1: 3-5, never replicated
    assert len(old.log.segments()) > 1
    new.leader_epoch = 2                                                   # the new leader, epoch 2
    new.append_records_to_leader(*_batch(b"d"), required_acks=1)            # offset 3
    epoch, end = new.last_offset_for_leader_epoch(1)                       # what the old leader asks
    assert (epoch, end) == (0, 3)
    assert old.truncate_to(end)
    assert old.log_end_offset == 3 and _values(old) == [b"a", b"b", b"c"]
    assert [(e.epoch, e.start_offset) for e in old.log.leader_epoch_cache.entries] == [(0, 0)]
    _copy_to_follower(new, old)
    assert _values(old) == _values(new) == [b"a", b"b", b"c", b"d"]
    assert b"".join(bytes(v) for v in old.log.read(0, 1 << 20)) == b"".join(bytes(v) for v in new.log.read(0, 1 << 20))
    # and it survives a reopen (indexes and epochs were rebuilt, not just the in-memory view)
    old.log.close()
    reopened = Log(tmp_path / "old", LogConfig(segment_bytes=200), clean_shutdown=True)
    assert reopened.log_end_offset == 4
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [(0, 0), (2, 3)]


def test_truncate_below_the_first_segment_starts_empty_there(tmp_path):
    p = _leader(tmp_path)
    p.append_records_to_leader(*_batch(b"a", b"b"), required_acks=1)
    assert not p.truncate_to(5)                                            # beyond the end: nothing
    assert p.truncate_to(0) and (p.log_end_offset, p.high_watermark) == (0, 0)
    assert p.append_records_to_leader(*_batch(b"z"), required_acks=1).base_offset == 0


def test_delete_records_rules(tmp_path):
    p = _leader(tmp_path)
    p.append_records_to_leader(*_batch(b"a", b"b", b"c"), required_acks=1)
    with pytest.raises(ApiError) as e:
        p.delete_records_on_leader(4)
    assert e.value.error_code == ErrorCode.offset_out_of_range
    assert p.delete_records_on_leader(2) == 2 and p.delete_records_on_leader(-1) == 3
    compacted = _leader(tmp_path, "c-0", cleanup_policy="compact")
    with pytest.raises(ApiError) as e:
        compacted.delete_records_on_leader(0)
    assert e.value.error_code == ErrorCode.policy_violation
