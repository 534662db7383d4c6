"""One transactional id's state and its `__transaction_state` records: TransactionLogValue v1 exactly as Apache Kafka
4.1 writes it (records captured from a Kafka 4.1.1 broker re-encode to the same bytes), and transaction version 2's
transitions (an epoch bump per end, a new producer id when the epoch is exhausted)."""
from __future__ import annotations

import pytest

from broker.transactions import state as S

# (key, value) records read from a Kafka 4.1.1 broker's __transaction_state: Ongoing by a TV2 producer (with the
# client's transaction.version tag), PrepareCommit holding a __consumer_offsets partition, CompleteCommit, Empty
# after InitProducerId (null partitions, start -1), and TV1 PrepareAbort / CompleteAbort (no tags).
KAFKA_RECORDS = [
    ("000000107032313739353737303332362d74786e",
     "0001000000000000000400000000ea6001020f7032313739353737303332362d74020000000000000001a21c409c89000001a21c409c89"
     "0102020002"),
    ("000000107032313739353737303332362d74786e",
     "0001000000000000000400010000ea600203135f5f636f6e73756d65725f6f666673657473020000000d000f7032313739353737303332"
     "362d74020000000000000001a21c409e88000001a21c409c890102020002"),
    ("000000107032313739353737303332362d74786e",
     "0001000000000000000400010000ea600401000001a21c409e8a000001a21c409c890102020002"),
    ("000000107032313739353737303332362d74786e",
     "0001000000000000000400030000ea600000000001a21c40a4b1ffffffffffffffff0102020002"),
    ("000000107032313739353737303332362d74786e",
     "0001000000000000000400010000ea6003020f7032313739353737303332362d74020000000100000001a21c40a2a4000001a21c40a29a"
     "00"),
    ("000000107032313739353737303332362d74786e",
     "0001000000000000000400010000ea600501000001a21c40a2a5000001a21c40a29a00"),
]


def transit_of(m: S.TransactionMetadata) -> S.TxnTransit:
    return S.TxnTransit(m.producer_id, m.prev_producer_id, m.next_producer_id, m.producer_epoch, m.last_producer_epoch,
                        m.txn_timeout_ms, m.state, frozenset(m.partitions), m.txn_start_ms, m.txn_last_update_ms,
                        m.client_txn_version)


@pytest.mark.parametrize("key,value", KAFKA_RECORDS)
def test_kafka_records_decode_and_encode_to_the_same_bytes(key, value):
    tid = S.decode_key(bytes.fromhex(key))
    assert tid == "p21795770326-txn"
    m = S.decode_value(tid, bytes.fromhex(value))
    assert m.producer_id == 4 and m.txn_timeout_ms == 60000
    assert S.value_bytes(transit_of(m), version=1).hex() == value


def test_kafka_records_fields():
    states = [S.decode_value("t", bytes.fromhex(v)) for _, v in KAFKA_RECORDS]
    assert [m.state_name for m in states] == ["Ongoing", "PrepareCommit", "CompleteCommit", "Empty", "PrepareAbort",
                                              "CompleteAbort"]
    assert [m.client_txn_version for m in states] == [2, 2, 2, 2, 0, 0]
    assert states[1].partitions == {("__consumer_offsets", 13), ("p21795770326-t", 0)}
    assert states[3].txn_start_ms == -1 and states[3].partitions == set()
    assert [m.producer_epoch for m in states] == [0, 1, 1, 3, 1, 1]


def _apply(m: S.TransactionMetadata, t: S.TxnTransit) -> None:
    decoded = S.decode_value(m.transactional_id, S.value_bytes(t, version=1))
    m.complete(t)
    # what a coordinator loading the log would see (the last epoch is not in the record, as in Kafka)
    assert transit_of(decoded) == S.TxnTransit(t.producer_id, t.prev_producer_id, t.next_producer_id,
                                               t.producer_epoch, S.NO_PRODUCER_EPOCH, t.txn_timeout_ms, t.state,
                                               t.partitions if t.state != S.EMPTY else frozenset(), t.txn_start_ms,
                                               t.txn_last_update_ms, t.client_txn_version)


def test_version_2_bumps_the_epoch_with_each_end_and_rotates_when_exhausted():
    m = S.TransactionMetadata("t", 7)
    _apply(m, m.prepare_increment_producer_epoch(60000, None, 1))
    assert (m.producer_id, m.producer_epoch, m.prev_producer_id) == (7, 0, S.NO_PRODUCER_ID)
    _apply(m, m.prepare_add_partitions({("a", 0)}, 2, client_version=2))
    _apply(m, m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3, client_version=2))
    assert (m.state_name, m.producer_epoch, m.last_producer_epoch) == ("PrepareCommit", 1, 0)
    assert m.ended_as() == (7, 1)
    _apply(m, m.prepare_complete(4))
    assert (m.state_name, m.producer_id, m.producer_epoch, m.partitions) == ("CompleteCommit", 7, 1, set())
    # an abort with no transaction open still bumps (Kafka 4.1's EndTxn v5 from Empty or Complete*)
    _apply(m, m.prepare_abort_or_commit(S.PREPARE_ABORT, 5, client_version=2))
    _apply(m, m.prepare_complete(6))
    assert (m.state_name, m.producer_epoch) == ("CompleteAbort", 2)
    # version 1 ends keep the epoch
    _apply(m, m.prepare_add_partitions({("a", 0)}, 7))
    _apply(m, m.prepare_abort_or_commit(S.PREPARE_ABORT, 8))
    _apply(m, m.prepare_complete(9))
    assert m.producer_epoch == 2
    # exhausted: the end bumps to the last epoch and names the next producer id, which the completion takes
    m.producer_epoch = S.MAX_EPOCH - 1
    assert S.epoch_exhausted(m.producer_epoch)
    _apply(m, m.prepare_add_partitions({("a", 0)}, 10, client_version=2))
    _apply(m, m.prepare_abort_or_commit(S.PREPARE_COMMIT, 11, client_version=2, next_producer_id=8))
    assert (m.producer_id, m.producer_epoch, m.next_producer_id) == (7, S.MAX_EPOCH, 8)
    assert m.ended_as() == (8, 0)
    _apply(m, m.prepare_complete(12))
    assert (m.producer_id, m.producer_epoch, m.prev_producer_id, m.next_producer_id) == (8, 0, 7, S.NO_PRODUCER_ID)
