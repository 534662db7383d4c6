"""replication.partition.Partition: the high watermark it owns, the acks rules, and the follower operations
(append as follower, truncate to an offset, end offset for a leader epoch) on a real log."""
from __future__ import annotations

import asyncio

import pytest

from metadata.image import PartitionImage
from protocol.errors import ApiError, ErrorCode
from protocol.record_batch import build_batch, split_and_validate
from protocol.records import iter_all_records
from replication.partition import AlterPartitionListener, Partition
from replication.replica_fetcher import truncation_offset
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


# ---- leadership, follower fetch state and the ISR (Kafka's Partition.makeLeader / updateFollowerFetchState /
# ---- maybeShrinkIsr / makeFollower) ---------------------------------------------------------------------------

def _replicated(tmp_path, replicas=(1, 2, 3), isr=(1, 2, 3), *, leader_epoch=1, partition_epoch=1, now=0.0,
                name="r-0", listener=None, **cfg):
    """Broker 1 leading `replicas` with `isr`; the AlterPartition proposals it makes are recorded in `calls`."""
    calls: list[tuple[int, ...]] = []
    p = Partition("t", 0, Log(tmp_path / name, LogConfig(**cfg)), local_broker_id=1,
                  alter_isr=lambda part, new_isr: calls.append(tuple(new_isr)), isr_listener=listener)
    p.make_leader(PartitionImage(tuple(replicas), tuple(isr), 1, leader_epoch, partition_epoch), now)
    return p, calls


def _append(p: Partition, n: int, acks: int = -1) -> None:
    for i in range(n):
        assert p.append_records_to_leader(*_batch(b"v%d" % i), required_acks=acks).error_code == 0


def test_make_leader_starts_the_new_epoch_at_the_log_end(tmp_path):
    p = _leader(tmp_path)
    p.append_records_to_leader(*_batch(b"a", b"b"), required_acks=1)          # epoch 0: offsets 0-1
    p.make_leader(PartitionImage((1, 2), (1, 2), 1, 3, 2), now=0.0)
    assert (p.leader_epoch, p.partition_epoch, p.replicas, p.isr) == (3, 2, (1, 2), (1, 2))
    # before any append at epoch 3, OffsetForLeaderEpoch already answers with the log end
    assert p.last_offset_for_leader_epoch(3) == (3, 2)
    assert p.last_offset_for_leader_epoch(0) == (0, 2)
    assert p.last_offset_for_leader_epoch(2) == (0, 2)                        # largest epoch <= 2 is 0
    assert p.log.epoch_start_offset(3) == 2
    assert p.append_records_to_leader(*_batch(b"c"), required_acks=1).base_offset == 2
    assert [(e.epoch, e.start_offset) for e in p.log.leader_epoch_cache.entries] == [(0, 0), (3, 2)]
    assert p.last_offset_for_leader_epoch(3) == (3, 3)


async def test_follower_fetches_move_the_high_watermark_and_complete_acks_all(tmp_path):
    p, calls = _replicated(tmp_path)
    _append(p, 3)
    assert (p.log_end_offset, p.high_watermark) == (3, 0)
    fut = p.wait_for_high_watermark(3)
    parked_fetch = asyncio.get_running_loop().create_future()
    p.waiters.append(parked_fetch)
    assert fut is not None and not fut.done()
    p.update_follower_fetch_state(2, 3, 1.0)
    assert p.high_watermark == 0 and not fut.done()                           # broker 3 has nothing yet
    p.update_follower_fetch_state(3, 2, 1.0)
    assert p.high_watermark == 2 and not fut.done()                           # min over the ISR
    assert parked_fetch.done()                                                # the HW moved: fetches wake up
    p.update_follower_fetch_state(3, 3, 1.1)
    assert p.high_watermark == 3
    assert fut.done() and fut.result() == 0
    assert p.wait_for_high_watermark(3) is None                               # there already
    assert calls == [] and p.pending_isr is None                             # everyone was in the ISR


def test_caught_up_follower_is_proposed_for_the_isr_and_counts_for_the_hw_meanwhile(tmp_path):
    p, calls = _replicated(tmp_path, isr=(1, 2))
    _append(p, 3)
    p.update_follower_fetch_state(2, 3, 1.0)
    assert p.high_watermark == 3
    p.update_follower_fetch_state(3, 1, 1.0)                                  # below the HW: not in sync
    assert calls == [] and p.pending_isr is None
    p.update_follower_fetch_state(3, 3, 1.1)
    assert calls == [(1, 2, 3)] and p.pending_isr == (1, 2, 3)
    assert p.isr == (1, 2)                                                    # not before the controller says so
    p.update_follower_fetch_state(3, 3, 1.2)
    assert calls == [(1, 2, 3)]                                               # one AlterPartition in flight
    # the maximal ISR: while the expansion is pending the HW waits for broker 3 too
    _append(p, 2)
    p.update_follower_fetch_state(2, 5, 1.3)
    assert p.high_watermark == 3
    p.update_follower_fetch_state(3, 5, 1.3)
    assert p.high_watermark == 5
    p.alter_isr_done(0, PartitionImage((1, 2, 3), (1, 2, 3), 1, 1, 2))
    assert (p.isr, p.pending_isr, p.partition_epoch) == ((1, 2, 3), None, 2)
    p.update_follower_fetch_state(9, 5, 1.4)                                  # not a replica: never proposed
    assert calls == [(1, 2, 3)]


def test_follower_joins_the_isr_only_from_the_leader_epoch_start(tmp_path):
    p, calls = _replicated(tmp_path, isr=(1, 2), leader_epoch=1)
    _append(p, 3)                                                             # HW 0: broker 2 has not fetched
    p.make_leader(PartitionImage((1, 2, 3), (1, 2), 1, 2, 2), now=0.0)        # epoch 2 starts at offset 3
    assert p.high_watermark == 0
    p.update_follower_fetch_state(3, 0, 1.0)                                  # at the HW, below the epoch start
    assert calls == []
    p.update_follower_fetch_state(2, 3, 1.0)
    assert p.high_watermark == 3
    p.update_follower_fetch_state(3, 3, 1.1)
    assert calls == [(1, 2, 3)]


def test_shrink_drops_a_follower_that_did_not_catch_up_within_the_lag(tmp_path):
    p, calls = _replicated(tmp_path, now=100.0)
    _append(p, 3)
    p.update_follower_fetch_state(2, 3, 105.0)                                # caught up at 105
    p.update_follower_fetch_state(3, 1, 105.0)                                # behind since the election (100)
    assert p.high_watermark == 1
    p.maybe_shrink_isr(109.5, 10.0)
    assert calls == []
    p.maybe_shrink_isr(110.5, 10.0)
    assert calls == [(1, 2)] and p.pending_isr == (1, 2)
    assert p.high_watermark == 1                                              # broker 3 still counts while pending
    p.maybe_shrink_isr(200.0, 10.0)
    assert calls == [(1, 2)]                                                  # one change at a time
    p.alter_isr_done(0, PartitionImage((1, 2, 3), (1, 2), 1, 1, 2))
    assert (p.isr, p.pending_isr) == ((1, 2), None)
    assert p.high_watermark == 3                                              # the committed ISR is 1, 2


def test_committed_isr_changes_are_counted_once_whichever_news_comes_first(tmp_path):
    """Kafka's IsrShrinksPerSec/IsrExpandsPerSec count a change when the controller commits it; the image and the
    AlterPartition response both bring it, in either order. A refused change counts as FailedIsrUpdatesPerSec."""
    counts = AlterPartitionListener()
    p, calls = _replicated(tmp_path, now=100.0, listener=counts)
    p.maybe_shrink_isr(111.0, 10.0)                                           # 2 and 3 never fetched
    assert calls == [(1,)] and (counts.shrinks, counts.expands) == (0, 0)     # proposed, not committed
    p.update_isr_state(PartitionImage((1, 2, 3), (1,), 1, 1, 2))              # the image first ...
    p.alter_isr_done(0, PartitionImage((1, 2, 3), (1,), 1, 1, 2))             # ... then the response
    assert (counts.shrinks, counts.expands, counts.failed) == (1, 0, 0)
    _append(p, 1)
    p.update_follower_fetch_state(2, 1, 112.0)
    assert calls[-1] == (1, 2)
    p.alter_isr_done(0, PartitionImage((1, 2, 3), (1, 2), 1, 1, 3))           # the response first ...
    p.update_isr_state(PartitionImage((1, 2, 3), (1, 2), 1, 1, 3))            # ... then the image
    assert (counts.shrinks, counts.expands, counts.failed) == (1, 1, 0)
    p.update_follower_fetch_state(3, 1, 113.0)
    p.alter_isr_done(ErrorCode.invalid_update_version)
    assert (counts.shrinks, counts.expands, counts.failed) == (1, 1, 1)
    assert p.isr == (1, 2) and p.pending_isr == (1, 2, 3)                   # stale: the image will tell
    p.update_isr_state(PartitionImage((1, 2, 3), (1, 2), 1, 1, 4))           # another change was committed
    assert p.isr == (1, 2) and p.pending_isr is None and counts.expands == 1


async def test_an_ambiguous_alter_partition_failure_keeps_the_maximal_isr_and_resends(tmp_path):
    """A lost connection, or NOT_CONTROLLER answered by a controller that had already committed the change: the
    expansion may be in effect, so broker 3 must keep counting for the high watermark (acks=all must wait for it)
    until the controller's answer or the image settles it, and the proposal is sent again (issue 22, fault 6)."""
    p, calls = _replicated(tmp_path, isr=(1, 2), now=0.0)
    _append(p, 3)
    p.update_follower_fetch_state(2, 3, 1.0)
    p.update_follower_fetch_state(3, 3, 1.0)
    proposed = p.pending_isr
    assert calls == [(1, 2, 3)] and proposed == (1, 2, 3)
    for error in (ErrorCode.unknown_server_error, ErrorCode.not_controller):
        p.alter_isr_done(error)
        assert p.pending_isr is proposed and p.maximal_isr == (1, 2, 3)
        _append(p, 1)
        p.update_follower_fetch_state(2, p.log_end_offset, 2.0)
        assert p.high_watermark < p.log_end_offset                             # still waits for broker 3
        await asyncio.sleep(0.25)
        assert calls[-1] == (1, 2, 3)                                          # sent again
    assert len(calls) == 3
    p.update_isr_state(PartitionImage((1, 2, 3), (1, 2, 3), 1, 1, 2))          # the image: it was committed
    assert p.isr == (1, 2, 3) and p.pending_isr is None
    p.alter_isr_done(ErrorCode.not_controller, proposed=proposed)               # a late answer to the old proposal
    assert p.pending_isr is None
    await asyncio.sleep(0.25)
    assert len(calls) == 3


@pytest.mark.parametrize("error", [ErrorCode.operation_not_attempted, ErrorCode.ineligible_replica])
async def test_a_refused_alter_partition_goes_back_to_the_committed_isr(tmp_path, error):
    p, calls = _replicated(tmp_path, isr=(1, 2), now=0.0)
    _append(p, 2)
    p.update_follower_fetch_state(3, 2, 1.0)
    p.alter_isr_done(error, proposed=p.pending_isr)
    assert p.pending_isr is None and p.maximal_isr == (1, 2)
    await asyncio.sleep(0.25)
    assert calls == [(1, 2, 3)]                                                # not sent again


def test_slow_follower_is_caught_up_as_of_its_previous_fetch(tmp_path):
    """Kafka's lastFetchLeaderLogEndOffset rule: a follower that reaches the leader's end as of its previous fetch
    was caught up at that fetch's time, even if the leader appended meanwhile."""
    p, calls = _replicated(tmp_path, now=0.0)
    _append(p, 3)
    p.update_follower_fetch_state(2, 0, 5.0)                                  # leader end 3 at t=5
    _append(p, 2)
    p.update_follower_fetch_state(2, 3, 6.0)                                  # reached 3: caught up as of t=5
    p.maybe_shrink_isr(14.9, 10.0)                                            # broker 3 never fetched since t=0
    assert calls == [(1, 2)]


def test_follower_at_the_leader_log_end_is_not_out_of_sync(tmp_path):
    p, calls = _replicated(tmp_path, isr=(1, 2), now=0.0)
    _append(p, 3)
    p.update_follower_fetch_state(2, 3, 1.0)                                  # has everything; the topic goes idle
    p.maybe_shrink_isr(100.0, 10.0)
    assert calls == [] and p.isr == (1, 2)


async def test_make_follower_fails_parked_acks_all_and_refuses_leader_appends(tmp_path):
    p, _ = _replicated(tmp_path, replicas=(1, 2), isr=(1, 2))
    _append(p, 1)
    fut = p.wait_for_high_watermark(1)
    parked_fetch = asyncio.get_running_loop().create_future()
    p.waiters.append(parked_fetch)
    p.make_follower(PartitionImage((1, 2), (1, 2), 2, 2, 2))
    assert fut.done() and fut.result() == ErrorCode.not_leader_or_follower
    assert parked_fetch.done() and p.hw_waiters == []
    assert not p.is_leader and (p.leader_id, p.leader_epoch) == (2, 2)
    for acks in (1, -1):
        r = p.append_records_to_leader(*_batch(b"x"), required_acks=acks)
        assert r.error_code == ErrorCode.not_leader_or_follower
    assert p.log_end_offset == 1
    assert p.not_leader_error() == ErrorCode.not_leader_or_follower
    assert p.acks_all_error() == ErrorCode.not_leader_or_follower


def test_acks_all_error_when_the_isr_shrank_below_min_insync_replicas(tmp_path):
    p, _ = _replicated(tmp_path, replicas=(1, 2), isr=(1, 2), min_insync_replicas=2)
    assert p.acks_all_error() == 0
    p.alter_isr_done(0, PartitionImage((1, 2), (1,), 1, 1, 2))
    assert p.isr == (1,)
    assert p.acks_all_error() == ErrorCode.not_enough_replicas_after_append


async def test_acks_all_error_counts_a_pending_isr_expansion(tmp_path):
    p, calls = _replicated(tmp_path, min_insync_replicas=3)
    _append(p, 1)                                                             # ISR 1,2,3: accepted
    fut = p.wait_for_high_watermark(1)
    p.alter_isr_done(0, PartitionImage((1, 2, 3), (1, 2), 1, 1, 2))          # broker 3 was dropped meanwhile
    p.update_follower_fetch_state(3, 1, 1.0)                                  # ... and caught up again
    assert calls == [(1, 2, 3)] and p.high_watermark == 0
    p.update_follower_fetch_state(2, 1, 1.0)                                  # the HW passes the batch
    assert fut.done() and fut.result() == 0
    assert p.acks_all_error() == 0                                            # maximal ISR 1,2,3 >= 3


# ---- follower truncation (Kafka's AbstractFetcherThread.getOffsetTruncationState) ---------------------------------

def _write(p: Partition, epoch: int, *values: bytes) -> None:
    """Append one single-record batch per value, as leader at `epoch`."""
    p.leader_epoch = epoch
    for v in values:
        assert p.append_records_to_leader(*_batch(v), required_acks=1).error_code == 0


def _epochs(p: Partition) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in p.log.leader_epoch_cache.entries]


def _diverging(leader: Partition, follower: Partition):
    """What the leader answers a follower's fetch (Fetch v12+, as broker/handlers/fetch.py and Kafka's
    Partition.fetchRecords): the diverging epoch and end offset, or None to send records."""
    latest = follower.log.leader_epoch_cache.latest_epoch()
    if latest is None:
        return None
    epoch, end = leader.last_offset_for_leader_epoch(latest)
    if epoch < latest or end < follower.log_end_offset:
        return epoch, end
    return None


def test_truncation_offset_without_a_leader_end_offset_is_the_high_watermark(tmp_path):
    p = _leader(tmp_path)
    p.isr = (1, 2)
    _write(p, 0, b"a", b"b", b"c", b"d")
    p.update_follower_end_offset(2, 2)
    assert (p.log_end_offset, p.high_watermark) == (4, 2)
    assert truncation_offset(p, 3, -1) == (2, True)
    assert truncation_offset(p, -1, -1) == (2, True)
    # the leader end offset without an epoch (no epochs on the leader's side): the smaller of the two ends
    assert truncation_offset(p, -1, 3) == (3, True)
    assert truncation_offset(p, -1, 10) == (4, True)


def test_truncation_offset_when_the_follower_knows_the_leaders_epoch(tmp_path):
    p = _leader(tmp_path)
    _write(p, 0, b"a", b"b")                                                  # epoch 0: 0-1
    _write(p, 2, b"c", b"d", b"e")                                            # epoch 2: 2-4
    assert _epochs(p) == [(0, 0), (2, 2)] and p.log_end_offset == 5
    assert truncation_offset(p, 2, 4) == (4, True)                            # the leader's epoch 2 ended first
    assert truncation_offset(p, 2, 7) == (5, True)                            # ours did
    assert truncation_offset(p, 0, 3) == (2, True)                            # our epoch 0 ends at 2
    assert truncation_offset(p, 0, 1) == (1, True)
    assert p.truncate_to(4) and _epochs(p) == [(0, 0), (2, 2)] and p.log_end_offset == 4


def test_truncating_at_the_end_drops_an_epoch_that_has_no_record(tmp_path):
    """A follower that led an epoch without appending (its start is our log end) and follows a leader that never
    had that epoch: the divergence points at our log end, nothing is removed, but the empty epoch goes (Kafka's
    UnifiedLog.truncateTo), so that the next fetch sends the epoch the leader knows and gets records."""
    leader = Partition("t", 0, Log(tmp_path / "L", LogConfig()), local_broker_id=1)
    follower = Partition("t", 0, Log(tmp_path / "F", LogConfig()), local_broker_id=2)
    _write(leader, 0, b"a", b"b")
    _copy_to_follower(leader, follower)
    follower.make_leader(PartitionImage((2, 1), (2,), 2, 1, 1), now=0.0)     # leads epoch 1 at offset 2, no append
    _write(leader, 2, b"c")                                                   # the other leads epoch 2 from offset 2
    assert _epochs(follower) == [(0, 0), (1, 2)]
    div = _diverging(leader, follower)
    assert div == (0, 2)
    offset, complete = truncation_offset(follower, *div)
    assert (offset, complete) == (2, True)
    assert not follower.truncate_to(offset)                                  # no record removed...
    assert _epochs(follower) == [(0, 0)] and follower.log_end_offset == 2    # ...but the empty epoch is gone
    assert _diverging(leader, follower) is None
    _copy_to_follower(leader, follower)
    assert _values(follower) == [b"a", b"b", b"c"]


def test_truncation_offset_when_the_follower_lacks_the_leaders_epoch_is_incomplete(tmp_path):
    p = _leader(tmp_path)
    _write(p, 0, b"a")                                                        # epoch 0: 0
    _write(p, 1, b"b", b"c")                                                  # epoch 1: 1-2
    _write(p, 3, b"d", b"e")                                                  # epoch 3: 3-4
    # the leader's largest epoch <= 3 is 2, which we never had: our largest below it is 1, ending at 3
    assert truncation_offset(p, 2, 4) == (3, False)
    assert truncation_offset(p, 2, 2) == (3, False)                           # our own end, not the leader's


def test_truncation_offset_for_epochs_the_follower_does_not_track(tmp_path):
    p = _leader(tmp_path)
    _write(p, 3, b"a", b"b")                                                  # our log starts at epoch 3
    # an epoch older than any we know: everything we have is of a later epoch than what the leader has there
    assert truncation_offset(p, 1, 5) == (0, True)
    q = _leader(tmp_path, "q-0")
    _write(q, 0, b"a", b"b", b"c")
    q.log.leader_epoch_cache.clear()                                          # no epochs tracked (Kafka's None)
    assert truncation_offset(q, 1, 1) == (1, True)
    assert truncation_offset(q, 1, 9) == (3, True)


def test_two_leader_changes_make_the_follower_truncate_twice(tmp_path):
    """KIP-279: each replica led alternately without hearing of the other's epochs. The follower truncates to the
    end of its own epoch below the leader's (incomplete), fetches again and truncates again; truncating once to
    the leader's end offset would keep records the leader never had."""
    leader = Partition("t", 0, Log(tmp_path / "L", LogConfig()), local_broker_id=1)
    follower = Partition("t", 0, Log(tmp_path / "F", LogConfig()), local_broker_id=2)
    _write(leader, 0, b"m0")
    _copy_to_follower(leader, follower)                                       # both have offset 0 of epoch 0
    _write(follower, 1, b"f1", b"f2")                                         # F leads epoch 1: 1-2, never replicated
    _write(leader, 2, b"l1", b"l2")                                           # L leads epoch 2: 1-2
    _write(follower, 3, b"f3", b"f4")                                         # F leads epoch 3: 3-4, never replicated
    _write(leader, 4, b"l3")                                                  # L leads epoch 4: 3; F follows it
    assert _epochs(leader) == [(0, 0), (2, 1), (4, 3)]
    assert _epochs(follower) == [(0, 0), (1, 1), (3, 3)]

    steps = []
    for _ in range(5):
        div = _diverging(leader, follower)
        if div is None:
            break
        offset, complete = truncation_offset(follower, *div)
        steps.append((div, offset, complete))
        follower.truncate_to(offset)
        if len(steps) == 1:
            # the leader's end for its epoch 2 is 3, but offsets 1-2 here are of epoch 1, which it never had
            assert _values(follower) == [b"m0", b"f1", b"f2"]
    assert steps == [((2, 3), 3, False), ((0, 1), 1, True)]
    assert follower.log_end_offset == 1 and _epochs(follower) == [(0, 0)]
    _copy_to_follower(leader, follower)
    assert _values(follower) == _values(leader) == [b"m0", b"l1", b"l2", b"l3"]
    assert _epochs(follower) == _epochs(leader)
    assert _diverging(leader, follower) is None


def test_new_leader_answers_offset_not_available_while_its_high_watermark_lags(tmp_path):
    """Kafka's Partition.fetchOffsetForTimestamp: after a leader change the new leader knows only the HW its
    predecessor last sent it; until the followers fetch from it, latest (and lookups that land at or above the HW)
    is OFFSET_NOT_AVAILABLE, so a client retries instead of seeing the end of the log move backwards."""
    p, _ = _replicated(tmp_path, replicas=(1, 2), isr=(1, 2))
    _append(p, 3)
    p.update_follower_fetch_state(2, 2, 1.0)
    assert p.high_watermark == 2 and p.fetch_offset_for_timestamp(-1)[:2] == (0, 2)   # HW 2, LEO 3: fine
    p.make_follower(PartitionImage((1, 2), (1, 2), 2, 2, 2))
    p.make_leader(PartitionImage((1, 2), (1, 2), 1, 3, 3), now=2.0)            # leads again, epoch starts at 3
    assert p.high_watermark == 2
    assert p.fetch_offset_for_timestamp(-1)[0] == ErrorCode.offset_not_available
    assert p.fetch_offset_for_timestamp(2**62)[0] == ErrorCode.offset_not_available  # no match: it may be above
    assert p.fetch_offset_for_timestamp(0)[:2] == (0, 0)                        # found below the HW: fine
    assert p.fetch_offset_for_timestamp(-2)[:2] == (0, 0)                       # earliest is not affected
    p.update_follower_fetch_state(2, 3, 2.1)
    assert p.high_watermark == 3 and p.fetch_offset_for_timestamp(-1)[:2] == (0, 3)


async def test_a_follower_wakes_parked_consumer_fetches_when_its_high_watermark_moves(tmp_path):
    leader, _ = _replicated(tmp_path, replicas=(1, 2), isr=(1, 2), name="L")
    follower = Partition("t", 0, Log(tmp_path / "F", LogConfig()), local_broker_id=2)
    follower.make_follower(PartitionImage((1, 2), (1, 2), 1, 1, 1))
    _append(leader, 2)
    _copy_to_follower(leader, follower)                                       # the leader's HW is still 0
    parked = asyncio.get_running_loop().create_future()
    follower.waiters.append(parked)
    follower.update_follower_high_watermark(leader.high_watermark)
    assert follower.high_watermark == 0 and not parked.done()
    leader.update_follower_fetch_state(2, 2, 1.0)
    follower.update_follower_high_watermark(leader.high_watermark)
    assert follower.high_watermark == 2 and parked.done()
    views, _ = follower.read(0, 1 << 20, min_one_message=True)              # consumers read up to the follower's HW
    assert [bytes(r.value) for v in views for r in iter_all_records(v)] == [b"v0", b"v1"]


@pytest.mark.parametrize("image_first", [False, True], ids=["refusal-first", "image-first"])
def test_a_proposal_naming_a_replica_a_reassignment_removed_does_not_stall_acks_all(tmp_path, image_first):
    """Seen in the slow control-race suite: the leader's AlterPartition also completed a reassignment that removed
    broker 3; the answer carried the new ISR and epoch but not the replicas, so broker 3 (still fetching, its image
    behind) was proposed again and refused with INVALID_REQUEST. Kept pending, that proposal made the high watermark
    wait for broker 3 forever and acks=all stalled; the image at the same partition epoch brings the replicas and
    ends it, in either order."""
    p, calls = _replicated(tmp_path, replicas=(1, 2, 3), isr=(1, 3), now=0.0)
    p.alter_isr_done(0, PartitionImage((1, 2, 3), (1, 2), 1, 1, 3))          # the committed answer, epoch 3
    _append(p, 2)
    p.update_follower_fetch_state(2, 2, 1.0)
    p.update_follower_fetch_state(3, 2, 1.0)                                  # broker 3 is still fetching
    assert calls[-1] == (1, 2, 3) and p.pending_isr == (1, 2, 3)
    image = PartitionImage((1, 2), (1, 2), 1, 1, 3)                           # the completed move, same epoch
    if image_first:
        p.update_isr_state(image)
        p.alter_isr_done(ErrorCode.invalid_request, proposed=(1, 2, 3))
    else:
        p.alter_isr_done(ErrorCode.invalid_request, proposed=p.pending_isr)
        assert p.pending_isr == (1, 2, 3)                                     # nothing says 3 left yet
        p.update_isr_state(image)
    assert p.pending_isr is None and p.replicas == (1, 2)
    _append(p, 1)
    p.update_follower_fetch_state(2, 3, 2.0)
    assert p.high_watermark == 3                                              # no longer waits for broker 3


async def test_delete_records_waits_for_live_replicas_and_times_out(tmp_path):
    """Kafka's DelayedDeleteRecords: answered once every replica on a live broker has moved its log start, else
    REQUEST_TIMED_OUT after the request's timeout (the waiter is dropped); a fenced broker's replica does not count."""
    from replication.partition import wait_for_all
    p, _ = _replicated(tmp_path, replicas=(1, 2, 3), isr=(1, 2, 3), now=0.0)
    alive = {1, 2, 3}
    p.alive_brokers = lambda: alive
    _append(p, 5)
    for r in (2, 3):
        p.update_follower_fetch_state(r, 5, 1.0, log_start=0)
    assert p.delete_records_on_leader(3) == 3 and p.low_watermark() == 0
    fut = p.wait_for_low_watermark(3)
    assert await wait_for_all([(p, fut)], 0.05) == [ErrorCode.request_timed_out]
    assert p.low_watermark_waiters == []
    fut = p.wait_for_low_watermark(3)
    p.update_follower_fetch_state(2, 5, 2.0, log_start=3)                    # broker 2 deleted too
    assert not fut.done()
    alive.discard(3)                                                           # broker 3 is fenced
    p.update_follower_fetch_state(2, 5, 3.0, log_start=3)
    assert await wait_for_all([(p, fut)], 1.0) == [0] and p.low_watermark() == 3
