"""Idempotent-producer state of one partition (Kafka's ProducerStateManager / ProducerAppendInfo).

Per producer id we keep the epoch and the metadata of its last 5 batches (the most a producer may have in
flight), which is enough to recognise a retried batch (duplicate: answer with the original offsets, write
nothing) and to reject sequence gaps (ErrorCode.out_of_order_sequence_number) and zombie epochs
(ErrorCode.invalid_producer_epoch).

Transactions (Kafka's ongoing/unreplicated transactions): each producer's entry knows the first offset of its open
transaction; a marker (control batch) completes it. The first unstable offset, below which every transaction is
decided and replicated, is the lowest first offset of the open transactions and of the completed ones whose marker
the high watermark has not passed yet; the log's last stable offset is that, capped at the high watermark.

Snapshots use Kafka's `.snapshot` file format (version 1: int16 version, uint32 CRC-32C of the rest,
int32 count, then 46-byte entries), named by the log offset they are valid at. Kafka writes one entry per
producer (its last batch); we write one entry per cached batch, oldest first, so all 5 batches survive a
restart. A Kafka reader keeps the last entry per producer id, i.e. exactly what Kafka itself would have
written. State after a snapshot is rebuilt by replaying batch headers from the log.
"""
from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from protocol.record_batch import BatchHeader
from storage.log.files import read_small, write_atomically
from protocol.errors import ErrorCode

SNAPSHOT_SUFFIX = ".snapshot"
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


_SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hI")       # version, crc
_COUNT = struct.Struct(">i")
# producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch, currentTxnFirstOffset
_ENTRY = struct.Struct(">qhiqiqiq")
_SEQ_MOD = 2**31


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class CorruptSnapshotError(Exception):
    pass


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_update_ms: int = 0          # wall clock of the last append (for producer.id.expiration.ms)
    current_txn_first_offset: int = -1     # first offset of the open transaction, -1 when there is none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].timestamp if self.batches else -1

    def find_duplicate(self, h: BatchHeader) -> BatchMetadata | None:
        if h.producer_epoch != self.producer_epoch:
            return None
        last_seq = h.last_sequence
        for b in self.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last_seq:
                return b
        return None

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        self.update_epoch(epoch)
        self.batches.append(meta)

    def update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended (Kafka's CompletedTxn): its first offset and the marker's offset."""
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _SEQ_MOD - 1)


class ProducerAppendInfo:
    """Validates the batches of one producer within one append against its current state, staging the
    updates so nothing changes unless the append is written (Kafka's ProducerAppendInfo, client origin)."""

    def __init__(self, producer_id: int, current: ProducerStateEntry | None):
        self.producer_id = producer_id
        self.current = current
        self.epoch = current.producer_epoch if current else NO_PRODUCER_EPOCH
        self.staged: list[BatchMetadata] = []
        self.txn_first_offset = current.current_txn_first_offset if current else -1

    def validate(self, h: BatchHeader, check_sequence: bool = True) -> tuple[int, str] | None:
        """(error_code, message) if the batch must be rejected. A coordinator's batch (transactional offset commits)
        is checked for its epoch only, as Kafka's Coordinator origin."""
        cur_epoch = self.current.producer_epoch if self.current else NO_PRODUCER_EPOCH
        if h.producer_epoch < self.epoch:
            return ErrorCode.invalid_producer_epoch, (f"producer {self.producer_id} epoch {h.producer_epoch} is older than "
                                            f"the current epoch {self.epoch}")
        if not check_sequence:
            return self._check_txn(h)
        if h.producer_epoch != self.epoch:
            if h.base_sequence != 0 and self.epoch != NO_PRODUCER_EPOCH:
                return ErrorCode.out_of_order_sequence_number, (f"producer {self.producer_id} bumped its epoch to "
                                                      f"{h.producer_epoch} with sequence {h.base_sequence}, not 0")
            return self._check_txn(h)
        if self.staged:
            last_seq = self.staged[-1].last_seq
        elif self.current is not None and self.current.producer_epoch == h.producer_epoch:
            last_seq = self.current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # With no known epoch (state expired or never seen) any sequence is accepted, as Kafka does.
        if cur_epoch != NO_PRODUCER_EPOCH and not in_sequence(last_seq, h.base_sequence):
            return ErrorCode.out_of_order_sequence_number, (f"out of order sequence for producer {self.producer_id} epoch "
                                                  f"{h.producer_epoch}: got {h.base_sequence}, expected "
                                                  f"{(last_seq + 1) % _SEQ_MOD}")
        return self._check_txn(h)

    def _check_txn(self, h: BatchHeader) -> tuple[int, str] | None:
        if self.txn_first_offset >= 0 and not h.is_transactional:
            return ErrorCode.invalid_txn_state, (f"expected a transactional write from producer {self.producer_id}: "
                                                 f"its transaction from offset {self.txn_first_offset} is open")
        return None

    def append(self, h: BatchHeader) -> None:
        """Stage a validated batch whose offsets are assigned."""
        if h.producer_epoch != self.epoch:
            self.staged.clear()
            self.epoch = h.producer_epoch
        self.staged.append(BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset,
                                         h.max_timestamp))
        if h.is_transactional and self.txn_first_offset < 0:
            self.txn_first_offset = h.base_offset          # a transaction begins here


class ProducerStateManager:
    def __init__(self, dir: Path, *, snapshots_to_keep: int = 3):
        self.dir = Path(dir)
        self.producers: dict[int, ProducerStateEntry] = {}
        self.snapshots_to_keep = snapshots_to_keep
        self.ongoing: dict[int, int] = {}                 # producer id -> first offset of its open transaction
        # KIP-890 part 1: producer id -> the guard of a verification with its coordinator in flight or done; a
        # transaction may only begin here with the guard, and a marker (the coordinator ended the transaction since)
        # voids it, so a late batch cannot open a transaction no coordinator knows of
        self.verifying: dict[int, object] = {}
        self.unreplicated: list[CompletedTxn] = []        # completed, marker not yet below the high watermark

    # ---- appends -----------------------------------------------------------------------------------------
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def find_duplicate(self, h: BatchHeader) -> BatchMetadata | None:
        entry = self.producers.get(h.producer_id)
        return entry.find_duplicate(h) if entry is not None else None

    def prepare(self, producer_id: int) -> ProducerAppendInfo:
        return ProducerAppendInfo(producer_id, self.producers.get(producer_id))

    def commit(self, info: ProducerAppendInfo, now_ms: int) -> None:
        entry = self.producers.get(info.producer_id)
        if entry is None:
            entry = self.producers[info.producer_id] = ProducerStateEntry(info.producer_id)
        if not info.staged and info.epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = info.epoch
        for meta in info.staged:
            entry.add_batch(info.epoch, meta)
        entry.last_update_ms = now_ms
        if info.txn_first_offset >= 0 and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = info.txn_first_offset
            self.ongoing[info.producer_id] = info.txn_first_offset

    def replay(self, h: BatchHeader, now_ms: int, marker: tuple[int, int] | None = None) -> CompletedTxn | None:
        """Apply a batch read back from the log or sent by the leader: no validation, as Kafka's Replication origin.
        A control batch's `marker` ((control type, coordinator epoch), protocol.records.read_control_marker)
        completes the producer's transaction; the CompletedTxn is returned."""
        if h.producer_id < 0:
            return None
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id)
        entry.last_update_ms = now_ms
        if h.is_control:
            if marker is None:           # an emptied control batch (the cleaner removed its transaction), kept for
                if h.producer_epoch > entry.producer_epoch:        # its producer's state: the epoch it carries
                    entry.update_epoch(h.producer_epoch)
                return None
            return self._complete(entry, h.producer_epoch, marker[1], h.base_offset, marker[0] == 0)
        entry.add_batch(h.producer_epoch, BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset,
                                                        h.last_offset, h.max_timestamp))
        if h.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self.ongoing[h.producer_id] = h.base_offset
        return None

    # ---- transaction markers -----------------------------------------------------------------------------
    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> tuple[int, str] | None:
        """A coordinator's marker against the producer's state (Kafka's appendEndTxnMarker, coordinator origin):
        an older producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if producer_epoch < entry.producer_epoch:
            return ErrorCode.invalid_producer_epoch, (f"marker for producer {producer_id} has epoch {producer_epoch}, "
                                                      f"older than {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.transaction_coordinator_fenced, (
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}")
        return None

    def start_verification(self, producer_id: int, producer_epoch: int) -> object | None:
        """A guard for a transactional batch about to be verified (Kafka's VerificationGuard), or None when the
        producer's transaction is open here already at that epoch (no verification needed). A batch at a newer epoch
        is verified even then: with transaction version 2 it begins the next transaction, while the marker of the
        previous one may still be on its way (Kafka's hasOngoingTransaction(producerId, producerEpoch))."""
        if self.has_ongoing_transaction(producer_id, producer_epoch):
            return None
        guard = self.verifying.get(producer_id)
        if guard is None:
            guard = self.verifying[producer_id] = object()
        return guard

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self.producers.get(producer_id)
        return producer_id in self.ongoing and entry is not None and entry.producer_epoch == producer_epoch

    def verified(self, producer_id: int, guard) -> bool:
        """Whether a transaction of the producer may begin with `guard`."""
        return guard is not None and self.verifying.get(producer_id) is guard

    def _complete(self, entry: ProducerStateEntry, epoch: int, coordinator_epoch: int, offset: int,
                  aborted: bool) -> CompletedTxn | None:
        self.verifying.pop(entry.producer_id, None)
        first = entry.current_txn_first_offset
        entry.update_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = -1
        self.ongoing.pop(entry.producer_id, None)
        if first < 0:
            return None                  # nothing was written in it: no effect on the LSO or the index
        txn = CompletedTxn(entry.producer_id, first, offset, aborted)
        self.unreplicated.append(txn)
        return txn

    def first_unstable_offset(self) -> int | None:
        """The lowest offset whose transaction is open or not yet replicated (None: every transaction is stable)."""
        lows = [t.first_offset for t in self.unreplicated]
        if self.ongoing:
            lows.append(min(self.ongoing.values()))
        return min(lows) if lows else None

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """Kafka's lastStableOffset(completedTxn), stored in the index entry: the first unstable offset of the other
        transactions, or the offset after the marker."""
        lows = [t.first_offset for t in self.unreplicated if t.producer_id != txn.producer_id]
        lows += [f for pid, f in self.ongoing.items() if pid != txn.producer_id]
        return min(lows) if lows else txn.last_offset + 1

    def on_high_watermark(self, hw: int) -> None:
        """Completed transactions whose marker the high watermark passed are stable."""
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= hw]

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction (DescribeProducers)."""
        return dict(self.ongoing)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for expiration_ms (producer.id.expiration.ms); returns how many."""
        dead = [pid for pid, e in self.producers.items()
                if now_ms - e.last_update_ms >= expiration_ms and e.current_txn_first_offset < 0]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    # ---- snapshots ---------------------------------------------------------------------------------------
    def snapshot_offsets(self, names: list[str] | None = None) -> list[int]:
        """Offsets of the snapshots in the directory (or in `names`, a listing the caller already has)."""
        if names is None:
            try:
                names = os.listdir(self.dir)
            except FileNotFoundError:
                return []
        n = len(SNAPSHOT_SUFFIX)
        return sorted(int(name[:-n]) for name in names
                      if len(name) == 20 + n and name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit())

    def take_snapshot(self, offset: int) -> Path:
        """Write the state as of log offset `offset` (everything below it applied); keeps a few latest."""
        body = bytearray(_COUNT.pack(0))
        n = 0
        for pid, e in self.producers.items():
            metas = e.batches or [BatchMetadata(NO_SEQUENCE, NO_SEQUENCE, -1, -1, -1)]
            for m in metas:
                body += _ENTRY.pack(pid, e.producer_epoch, m.last_seq, m.last_offset, m.offset_delta,
                                    m.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
                n += 1
        _COUNT.pack_into(body, 0, n)
        path = self.dir / snapshot_name(offset)
        write_atomically(path, _HEAD.pack(_SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body))
        for old in self.snapshot_offsets()[:-self.snapshots_to_keep]:
            self.delete_snapshot(old)
        return path

    def delete_snapshot(self, offset: int) -> None:
        (self.dir / snapshot_name(offset)).unlink(missing_ok=True)

    def delete_snapshots_after(self, offset: int, names: list[str] | None = None) -> list[int]:
        """Snapshots beyond the log end are from data that no longer exists (truncation). Returns the offsets of
        those left; `names`: the directory's listing, when the caller has it."""
        kept = []
        for off in self.snapshot_offsets(names):
            if off > offset:
                self.delete_snapshot(off)
            else:
                kept.append(off)
        return kept

    def load_snapshot(self, offset: int, now_ms: int) -> None:
        """Replace the state with the snapshot at `offset`; CorruptSnapshotError if it does not verify."""
        data = read_small(self.dir / snapshot_name(offset))
        if len(data) < _HEAD.size + _COUNT.size:
            raise CorruptSnapshotError(f"snapshot {offset} is truncated")
        version, crc = _HEAD.unpack_from(data, 0)
        if version != _SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"snapshot {offset} has unknown version {version}")
        body = memoryview(data)[_HEAD.size:]
        if crc32c.crc32c(body) != crc:
            raise CorruptSnapshotError(f"snapshot {offset} fails its CRC")
        (n,) = _COUNT.unpack_from(body, 0)
        if n < 0 or len(body) != _COUNT.size + n * _ENTRY.size:
            raise CorruptSnapshotError(f"snapshot {offset} has a bad entry count {n}")
        producers: dict[int, ProducerStateEntry] = {}
        for i in range(n):
            pid, epoch, last_seq, last_off, delta, ts, coord, txn = _ENTRY.unpack_from(body, _COUNT.size + i * _ENTRY.size)
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerStateEntry(pid, epoch, coordinator_epoch=coord, last_update_ms=now_ms)
            entry.current_txn_first_offset = txn if txn >= 0 else -1
            if last_off >= 0:
                entry.add_batch(epoch, BatchMetadata((last_seq - delta) % _SEQ_MOD if last_seq >= 0 else NO_SEQUENCE,
                                                     last_seq, last_off - delta, last_off, ts))
            else:
                entry.update_epoch(epoch)
        self.producers = producers
        self.ongoing = {pid: e.current_txn_first_offset for pid, e in producers.items()
                        if e.current_txn_first_offset >= 0}
        self.unreplicated = []

    def load_latest(self, max_offset: int, now_ms: int, names: list[str] | None = None,
                    at_most: int | None = None) -> int | None:
        """Load the newest valid snapshot at or below `max_offset` (deleting newer or corrupt ones), and at or below
        `at_most` when given (newer ones kept); returns its offset, or None (state cleared) if there is none.
        `names`: the directory's listing, when the caller has it (a snapshot gone since reads as corrupt and is
        skipped)."""
        kept = self.delete_snapshots_after(max_offset, names)
        for off in reversed([o for o in kept if at_most is None or o <= at_most]):
            try:
                self.load_snapshot(off, now_ms)
                return off
            except (CorruptSnapshotError, OSError, struct.error):
                self.delete_snapshot(off)
        self.clear()
        return None

    def clear(self) -> None:
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = []
        self.verifying = {}

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producers)
