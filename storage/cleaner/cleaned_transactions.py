"""Transactions in a cleaning pass (Kafka's CleanedTransactionMetadata): which batches belong to aborted transactions
(their records go: they never counted), and when a transaction marker may go too.

Walking the batches in offset order with the aborted transactions of the range (from the transaction indexes, by
first offset): a transactional batch of a producer whose aborted transaction has begun is discardable; an ABORT
marker is kept, with its index entry in the cleaned segment, as long as any batch of its transaction was still seen
in this pass, and is discardable once none is; a COMMIT marker is discardable once no batch of its transaction is
left before it. A discardable marker is not dropped at once: like a tombstone it gets a delete horizon
(delete.retention.ms) first, so a consumer that read the transaction's records still sees it end.
"""
from __future__ import annotations

import heapq

from protocol.record_batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, compute_crc
from protocol.records import CONTROL_ABORT, CONTROL_COMMIT, CorruptRecordError, read_control_marker
from protocol.wire import read_varint, read_varlong, varint
from storage.log.transaction_index import AbortedTxn

DELETE_HORIZON_BIT = 0x40


class _AbortedInProgress:
    __slots__ = ("txn", "last_observed")

    def __init__(self, txn: AbortedTxn):
        self.txn = txn
        self.last_observed: int | None = None


class CleanedTransactions:
    def __init__(self, aborted: list[AbortedTxn], start: int = 0, end: int = 2**63 - 1):
        """`aborted`: the aborted transactions of the log; only those overlapping [start, end), the offsets this walk
        covers, count (Kafka collects them per range): one whose marker lies before `start` is over, and would
        otherwise stay "ongoing" and take the producer's later, committed batches with it."""
        self._aborted = [(a.first_offset, i, a) for i, a in enumerate(aborted)
                         if a.last_offset >= start and a.first_offset < end]
        heapq.heapify(self._aborted)
        self._ongoing_aborted: dict[int, _AbortedInProgress] = {}
        self._ongoing_committed: set[int] = set()
        self.index: list[AbortedTxn] = []        # entries of the cleaned segment's transaction index

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _, _, txn = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedInProgress(txn))

    def on_batch(self, h) -> bool:
        """A data batch: True when it belongs to an aborted transaction (its records can go)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(h.producer_id)
        if ongoing is not None:
            ongoing.last_observed = h.last_offset
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control(self, h, batch) -> bool:
        """A control batch (`batch`: its bytes): True when the marker can be discarded."""
        self._consume_up_to(h.last_offset)
        try:
            marker = read_control_marker(batch)
        except (CorruptRecordError, ValueError):
            return False
        if marker is None:
            return True                           # emptied by an earlier pass
        kind = marker[0]
        if kind == CONTROL_ABORT:
            ongoing = self._ongoing_aborted.pop(h.producer_id, None)
            if ongoing is not None and ongoing.last_observed is not None:
                self.index.append(ongoing.txn)    # records of it are still here: keep the marker and the entry
                return False
            return True
        if kind == CONTROL_COMMIT:
            if h.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(h.producer_id)
                return False
            return True
        return False


def with_delete_horizon(raw: bytes, h, horizon: int) -> bytearray:
    """An uncompressed batch (a marker) with its delete horizon set (KIP-534: attribute bit 6, baseTimestamp =
    horizon), each record's timestamp delta re-based so every reader sees the same record timestamps."""
    out = bytearray(HEADER_SIZE)
    pos = HEADER_SIZE
    for _ in range(h.records_count):
        length, body_at = read_varint(raw, pos)
        end = body_at + length
        ts_delta, ts_end = read_varlong(raw, body_at + 1)
        body = raw[body_at:body_at + 1] + varint(h.base_timestamp + ts_delta - horizon) + raw[ts_end:end]
        out += varint(len(body)) + body
        pos = end
    HEADER.pack_into(out, 0, h.base_offset, len(out) - LOG_OVERHEAD, h.partition_leader_epoch, 2, 0,
                     h.attributes | DELETE_HORIZON_BIT, h.last_offset_delta, horizon, h.max_timestamp, h.producer_id,
                     h.producer_epoch, h.base_sequence, h.records_count)
    out[17:21] = compute_crc(out, 0, len(out)).to_bytes(4, "big")
    return out
