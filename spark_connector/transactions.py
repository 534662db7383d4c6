"""kafka.isolation.level=read_committed on the direct read paths: which records belong to aborted transactions.

The planner ends every range at the last stable offset (ListOffsets with isolation READ_COMMITTED), so every
transaction with records in a range is decided and its marker is in the log, though possibly beyond the range.
Which transactions were aborted comes from Kafka's aborted-transaction index (`.txnindex`, AbortedTxn entries:
producer id, first offset, last offset = the ABORT marker's, last stable offset when it was written), which lives
in the segment holding the marker:

- tiered segments: the reader fetches the `.txnindex` objects of the segment it reads and of the later remote
  segments that have one (the planner lists them), until an entry's last stable offset reaches the piece's end
  (Kafka's TxnIndexSearchResult.isComplete: no later marker can belong to a transaction that overlaps it);
- the leader's local log (markers not tiered yet, and everything the fast store holds): the planner asks the leader
  (DescribeWalPointers v1) and ships the entries with the range.

Records are then dropped as Kafka's consumer does (CompletedFetch.nextFetchedBatch): aborted transactions ordered
by first offset; when a batch of a producer is reached whose last offset is at or past an aborted transaction's
first offset, that producer joins the aborted set; an ABORT marker of the producer removes it; a transactional
batch of a producer in the set is skipped. Control batches are never returned.
"""
from __future__ import annotations

import logging

from protocol.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT

log = logging.getLogger("strata.spark")
TXN_INDEX_SUFFIX = ".txnindex"          # storage.tiered.remote_storage_manager.IndexType.TRANSACTION


class AbortedFilter:
    """Kafka's consumer-side read_committed filter over the batches of one piece, in log order."""
    __slots__ = ("_pending", "_next", "_producers")

    def __init__(self, aborted):
        """`aborted`: (producer id, first offset, ...) of the aborted transactions that overlap the piece."""
        self._pending = sorted({(a[1], a[0]) for a in aborted})        # (first offset, producer id)
        self._next = 0
        self._producers: set[int] = set()

    def skip(self, last_offset: int, attrs: int, producer_id: int, batch) -> bool:
        """Whether the batch (its bytes from its base offset) is a control batch or a batch of an aborted
        transaction; updates the state with it. Call for every batch read, in order."""
        if producer_id >= 0:
            pending = self._pending
            while self._next < len(pending) and pending[self._next][0] <= last_offset:
                self._producers.add(pending[self._next][1])
                self._next += 1
            if attrs & CONTROL_BIT:
                if producer_id in self._producers and _is_abort(batch):
                    self._producers.discard(producer_id)
                return True
            if attrs & TRANSACTIONAL_BIT and producer_id in self._producers:
                return True
        return bool(attrs & CONTROL_BIT)


def _is_abort(batch) -> bool:
    from protocol.records import CONTROL_ABORT, read_control_marker
    marker = read_control_marker(batch)
    return marker is not None and marker[0] == CONTROL_ABORT


def overlapping(entries, start: int, end: int) -> list:
    """Entries (producer id, first offset, last offset, ...) of transactions with records in [start, end)."""
    return [e for e in entries if e[2] >= start and e[1] < end]


def search_indexes(indexes, start: int, end: int) -> tuple[list, bool]:
    """Kafka's collectAbortedTxns over txn indexes in segment order: `indexes` yields each segment's AbortedTxn
    entries (lazily: a segment's index is fetched only when needed). Returns the (producer id, first offset, last
    offset) of those overlapping [start, end) and whether the search completed (an entry's last stable offset
    reached `end`: no later index can hold one that overlaps)."""
    from storage.log.transaction_index import collect_aborted
    out = []
    for entries in indexes:
        found, complete = collect_aborted(entries, start, end)
        out += [(e.producer_id, e.first_offset, e.last_offset) for e in found]
        if complete:
            return out, True
    return out, False


# ---- planning (driver) ----------------------------------------------------------------------------------------------
def plan_read_committed(store, pieces: dict, segments: dict, answers: dict, refresh) -> tuple[dict, dict]:
    """What the direct pieces of read_committed ranges need: returns (pieces, {range key: txn}), txn as
    planning.OffsetRange.txn. `pieces`: {(topic, partition, start, end): pieces}; `segments`: the finished remote
    segments by (topic, partition); `answers`: cluster.wal_pointers with txn ranges (a partition missing there has
    no known aborted transactions: its pieces are all fetched, and the broker filters); `refresh(tps)` reads the
    remote segments of `tps` again.

    A segment may finish copying and leave the local log between the metadata read and the leader's answer; its
    entries would then be in neither list. The leader's local log start tells: past the end of the known remote
    segments, the metadata is read again (a segment leaves the local log only once its COPY_SEGMENT_FINISHED is
    committed to the metadata topic)."""
    from spark_connector.planning import Piece
    out: dict = {}
    for key, ps in pieces.items():
        if key[:2] not in answers and any(x.key_prefix for x in ps):
            log.warning("no aborted transactions from the leader of %s-%d (kafka.isolation.level=read_committed): "
                        "its offsets are fetched", key[0], key[1])
        out[key] = ps if key[:2] in answers else (Piece(key[2], key[3]),)
    remote = {key[:2] for key, ps in out.items() if any(x.key_prefix for x in ps)}
    stale = [tp for tp in sorted(remote)
             if answers[tp][3] > max((s.end for s in segments.get(tp, ())), default=-1) + 1]
    if stale:
        segments = {**segments, **refresh(stale)}
    with_index = txn_index_prefixes(store, {segments[tp][0].key_prefix.rsplit("/", 1)[0] + "/" for tp in remote})
    txn = {}
    for key, ps in out.items():
        if key[:2] not in answers:
            continue
        local = tuple(overlapping(answers[key[:2]][2] or (), key[2], key[3]))
        first = next((x.start for x in ps if x.key_prefix), None)
        indexes = () if first is None else tuple(
            (s.start, s.end, s.key_prefix) for s in segments.get(key[:2], ()) if s.end >= first and
            s.key_prefix in with_index)
        txn[key] = (local, indexes)
    return out, txn


def txn_index_prefixes(store, partition_prefixes) -> set[str]:
    """Key prefixes of the remote segments under `partition_prefixes` that have a .txnindex object (uploaded only
    for segments with an aborted transaction): one listing per partition instead of a GET per segment."""
    if not partition_prefixes:
        return set()
    from spark_connector.storeio import StoreClient
    url, options = store
    out = set()
    with StoreClient(url, dict(options)) as sc:
        for prefix in sorted(partition_prefixes):
            out.update(info.key[:-len(TXN_INDEX_SUFFIX)] for info in sc.list(prefix)
                       if info.key.endswith(TXN_INDEX_SUFFIX))
    return out
