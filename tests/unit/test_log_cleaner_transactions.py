"""The log cleaner and transactions (Kafka's CleanedTransactionMetadata): aborted records never win a key and are
removed, committed ones are deduplicated like any record, markers stay while their transaction has records left and
go after delete.retention.ms once it has none, the cleaned segment keeps its aborted-transaction index, and nothing
from the last stable offset on is cleaned while a transaction is open."""
from __future__ import annotations

from protocol.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT, read_header, split_and_validate
from protocol.records import build_records_batch, iter_all_records
from storage.cleaner.cleaner import DELETE_HORIZON_BIT
from storage.log.transaction_index import AbortedTxn
from tests.unit.test_log_cleaner import DAY, T0, Clock, batches, cleaner_for, make_log


def txn(lg, pid: int, recs, seq: int = 0):
    buf = bytearray(build_records_batch(recs, timestamp_ms=T0, producer_id=pid, producer_epoch=0, base_sequence=seq,
                                        attributes=TRANSACTIONAL_BIT))
    r = lg.append_as_leader(buf, split_and_validate(buf, 10**8), 0)
    assert r.error_code == 0, r
    lg.update_high_watermark(lg.log_end_offset)


def marker(lg, pid: int, commit: bool):
    assert lg.append_marker(pid, 0, 0, commit, 0).error_code == 0
    lg.update_high_watermark(lg.log_end_offset)


def dirty(lg, i: int) -> None:
    """New records in a new segment: what makes the cleaner run again."""
    buf = bytearray(build_records_batch([(b"z", b"%d" % i)] * 50, timestamp_ms=T0))
    lg.append_as_leader(buf, split_and_validate(buf, 10**8), 0)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()


def visible(lg) -> dict:
    """What a read_committed consumer ends up with per key: data records outside aborted transactions."""
    aborted = lg.collect_aborted_transactions(lg.log_start_offset, lg.log_end_offset)
    out = {}
    for h, raw in batches(lg):
        if h.attributes & CONTROL_BIT:
            continue
        if h.attributes & TRANSACTIONAL_BIT and any(a.producer_id == h.producer_id and a.first_offset <= h.base_offset
                                                    <= a.last_offset for a in aborted):
            continue
        for r in iter_all_records(raw):
            out[r.key] = r.value
    return out


def markers(lg) -> list[tuple[int, bool]]:
    return [(h.base_offset, bool(h.attributes & DELETE_HORIZON_BIT)) for h, _ in batches(lg)
            if h.attributes & CONTROL_BIT and h.records_count]


def test_aborted_records_are_removed_and_never_win_a_key(tmp_path):
    clock = Clock()
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6, delete_retention_ms=DAY)
    txn(lg, 1, [(b"a", b"committed"), (b"b", b"1")])          # 0-1
    marker(lg, 1, commit=True)                                 # 2
    txn(lg, 2, [(b"a", b"aborted")])                           # 3
    marker(lg, 2, commit=False)                                # 4
    before = visible(lg)
    assert before == {b"a": b"committed", b"b": b"1"}
    lg.roll()
    c = cleaner_for(lg)
    assert c.clean_once() is not None
    assert visible(lg) == before
    assert not any(h.producer_id == 2 and not h.attributes & CONTROL_BIT and h.records_count
                   for h, _ in batches(lg))                    # the aborted batch is gone
    # the ABORT marker stays in this pass (its transaction's batch was seen) with its index entry
    assert markers(lg) == [(2, False), (4, False)]
    assert lg.segments()[0].txn_index.entries == [AbortedTxn(2, 3, 4, 5)]

    # the aborted batch is kept as an empty header while producer 2 is active (its sequence state), and with it the
    # marker, as in Kafka; once the producer expires (producer.id.expiration.ms) the next passes drop the header,
    # then give the marker a delete horizon
    lg.producer_state.remove_expired(T0 + 10 * DAY, DAY)
    clock.now = T0 + 1
    for i in range(2):
        dirty(lg, i)
        assert c.clean_once() is not None
    assert (4, True) in markers(lg)
    clock.now = T0 + 1 + DAY + 1
    c.clean_once()
    assert [m for m, _ in markers(lg)] == [2]                  # the commit marker still has b=1 of its transaction
    assert {k: v for k, v in visible(lg).items() if not k.startswith(b"z")} == before
    assert lg.segments()[0].txn_index.entries == []


def test_commit_marker_goes_once_its_transaction_is_compacted_away(tmp_path):
    clock = Clock()
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6, delete_retention_ms=DAY)
    txn(lg, 1, [(b"a", b"1")])                                 # 0
    marker(lg, 1, commit=True)                                 # 1
    txn(lg, 3, [(b"a", b"2")])                                 # 2: replaces a=1
    marker(lg, 3, commit=True)                                 # 3
    lg.roll()
    c = cleaner_for(lg)
    c.clean_once()              # a=1 removed; the empty batch of active producer 1 keeps its marker, as in Kafka
    assert [m for m, _ in markers(lg)] == [1, 3]
    lg.producer_state.remove_expired(T0 + 10 * DAY, DAY)     # producer.id.expiration.ms passed
    clock.now = T0 + 1
    for i in range(2):
        dirty(lg, i)
        c.clean_once()          # the empty batch goes, then marker 1 has no batch before it: horizon
    assert (1, True) in markers(lg)
    clock.now = T0 + 2 + DAY
    c.clean_once()
    assert [m for m, _ in markers(lg)] == [3]
    assert visible(lg) == {b"a": b"2", b"z": b"1"}


def test_nothing_past_the_last_stable_offset_is_cleaned(tmp_path):
    clock = Clock()
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    txn(lg, 1, [(b"a", b"1")])                                 # 0: open
    lg.roll()
    for i in range(3):
        buf = bytearray(build_records_batch([(b"a", b"plain%d" % i)], timestamp_ms=T0))
        lg.append_as_leader(buf, split_and_validate(buf, 10**8), 0)
        lg.update_high_watermark(lg.log_end_offset)
        lg.roll()
    assert lg.last_stable_offset == 0
    c = cleaner_for(lg)
    c.clean_once()
    assert sum(1 for h, _ in batches(lg) if not h.attributes & CONTROL_BIT) == 4     # untouched
    marker(lg, 1, commit=True)
    lg.roll()
    c.clean_once()
    assert visible(lg) == {b"a": b"plain2"}


def test_cleaned_segment_keeps_its_transaction_index_across_a_restart(tmp_path):
    clock = Clock()
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    txn(lg, 2, [(b"x", b"aborted")])                           # 0
    txn(lg, 5, [(b"y", b"open-then-aborted")])                 # 1: pid 5 keeps a batch (last of an active producer)
    marker(lg, 2, commit=False)                                # 2
    marker(lg, 5, commit=False)                                # 3
    lg.roll()
    cleaner_for(lg).clean_once()
    entries = lg.segments()[0].txn_index.entries
    lg.close()
    again = make_log(tmp_path / "t-0", clock, segment_bytes=10**6)
    assert again.segments()[0].txn_index.entries == entries
    assert {read_header(raw).producer_id for h, raw in batches(again) if h.attributes & CONTROL_BIT} <= {2, 5}
    again.close()


def test_a_committed_transaction_after_an_aborted_one_of_the_same_producer_survives():
    """Found by the stateful test (these are its steps): the aborted transaction, its marker in an earlier group of
    segments, was still counted as ongoing when the cleaner walked a later group, which took the producer's next,
    committed transaction with it. Aborted transactions now count only within the range a walk covers, as Kafka
    collects them per range."""
    from tests.unit.test_log_transactions_state_machine import TxnLogMachine
    m = TxnLogMachine()
    try:
        m.transactional_batch(key=b"a", n=1, pid=1)
        for _ in range(4):
            m.fence(pid=1)                                     # aborts: the first one ends the transaction
        m.roll_and_clean()
        m.plain_batch(key=b"a")
        m.transactional_batch(key=b"a", n=1, pid=1)
        m.marker(commit=True, pid=1, stale=False)
        m.crash_and_reopen()
        m.roll_and_clean()
        assert visible(m.log) == {b"a": b"1-4-0"}
        m.read_committed_sees_the_committed_data()
    finally:
        m.teardown()


def test_a_marker_in_a_later_group_than_its_transaction_is_kept(tmp_path):
    """Found in review against Kafka's doClean: each group of a pass started a new walk, so a COMMIT marker whose
    batches were in the previous group (another cleaned segment) looked like one of an empty transaction and went
    after delete.retention.ms, leaving its records without a marker: a replica rebuilding producer state from the log
    then saw the transaction open for ever. One walk now spans the groups of a pass, as Kafka's."""
    clock = Clock()
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=1000, delete_retention_ms=DAY)
    txn(lg, 1, [(b"k%d" % i, b"x" * 100) for i in range(8)])   # 0-7: a segment so full that the marker's
    assert lg.active_segment.size + 80 > 1000                  # segment cannot join its group
    lg.roll()
    marker(lg, 1, commit=True)                                 # 8, the next segment
    lg.roll()
    c = cleaner_for(lg)
    for i in range(3):
        clock.now = T0 + i * (DAY + 1)
        dirty(lg, i)
        c.clean_once()
    assert [m for m, _ in markers(lg)] == [8]
    assert len(lg.segments()) > 2
    hw = lg.high_watermark
    lg.close()
    again = make_log(tmp_path / "t-0", clock, segment_bytes=1000, delete_retention_ms=DAY)
    again.update_high_watermark(hw)
    assert again.producer_state.ongoing == {}
    assert again.last_stable_offset == hw
    again.close()


def test_a_marker_that_is_its_producers_last_record_is_kept(tmp_path):
    """With transaction version 2 a marker bumps its producer's epoch, so the producer's state may have no data batch
    left, only that marker. The cleaner keeps such a marker (as an empty batch once it is past its delete horizon),
    as Kafka's isBatchLastRecordOfProducer does, so the producer's epoch survives a rebuild from the log. It used to
    be dropped and a rebuilt state knew the older epoch."""
    clock = Clock()
    lg = make_log(tmp_path / "t-0", clock, segment_bytes=10**6, delete_retention_ms=DAY)
    txn(lg, 1, [(b"a", b"1")])                                 # 0, epoch 0
    assert lg.append_marker(1, 1, 0, True, 0).error_code == 0  # 1: COMMIT with the bumped epoch 1
    lg.update_high_watermark(lg.log_end_offset)
    txn(lg, 3, [(b"a", b"2")])                                 # 2: replaces a=1
    marker(lg, 3, commit=True)                                 # 3
    assert lg.producer_state.producers[1].producer_epoch == 1 and lg.producer_state.producers[1].last_offset == -1
    lg.roll()
    c = cleaner_for(lg)
    clock.now = T0 + 1
    for i in range(3):
        dirty(lg, i)
        c.clean_once()
    clock.now = T0 + 2 + DAY                                   # every horizon passed
    for i in range(3, 5):
        dirty(lg, i)
        c.clean_once()
    kept = [(h.base_offset, h.producer_epoch) for h, _ in batches(lg) if h.producer_id == 1]
    assert kept == [(1, 1)], kept                              # only producer 1's marker, emptied
    assert visible(lg) == {b"a": b"2", b"z": b"4"}
    path = lg.dir
    lg.close()
    for snap in path.glob("*.snapshot"):
        snap.unlink()
    again = make_log(path, clock, segment_bytes=10**6, delete_retention_ms=DAY)
    try:
        assert again.producer_state.producers[1].producer_epoch == 1
    finally:
        again.close()
