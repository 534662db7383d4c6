"""One transactional id's state (Kafka's TransactionMetadata and TxnTransitMetadata) and its records in
`__transaction_state` (TransactionLogKey v0, TransactionLogValue v0/v1, version-prefixed as Kafka's MessageUtil).

A change is prepared as a `TxnTransit` (the whole next state), written to the log, and only then applied
(`complete`); while it is being written the id has a pending state and every other request for it gets
CONCURRENT_TRANSACTIONS, as in Kafka, so one transactional id has one operation at a time.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

from protocol.wire import read_uvarint, uvarint

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
               "PrepareEpochFence")
# Kafka's TransactionState.validPreviousStates
_VALID_PREVIOUS = {
    EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_COMMIT: {ONGOING},
    PREPARE_ABORT: {ONGOING, PREPARE_EPOCH_FENCE, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},  # the last 3: v2's abort
    COMPLETE_COMMIT: {PREPARE_COMMIT},
    COMPLETE_ABORT: {PREPARE_ABORT},
    DEAD: {EMPTY, COMPLETE_ABORT, COMPLETE_COMMIT},
    PREPARE_EPOCH_FENCE: {ONGOING},
}
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing: an id at 32766 rotates to a new producer id."""
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TxnTransit:
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: int
    partitions: frozenset
    txn_start_ms: int
    txn_last_update_ms: int
    client_txn_version: int = 0


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60000
    state: int = EMPTY
    partitions: set = field(default_factory=set)      # {(topic, partition)}
    txn_start_ms: int = -1
    txn_last_update_ms: int = -1
    client_txn_version: int = 0
    pending_state: int | None = None
    has_failed_epoch_fence: bool = False

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    # ---- transitions (Kafka's prepare*) ---------------------------------------------------------------------
    def _transit(self, state: int, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int, partitions,
                 start_ms: int, now: int, next_producer_id: int = NO_PRODUCER_ID,
                 client_version: int = 0) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: transition to {STATE_NAMES[state]} while "
                                    f"{STATE_NAMES[self.pending_state]} is pending")
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state_name} -> {STATE_NAMES[state]}")
        self.pending_state = state
        # the previous producer id changes only with the producer id (a rotation, an epoch overflow), as Kafka 4.1's
        prev = self.producer_id if producer_id != self.producer_id else self.prev_producer_id
        return TxnTransit(producer_id, prev, next_producer_id, epoch, last_epoch, timeout_ms, state,
                          frozenset(partitions), start_ms, now, client_version)

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._transit(PREPARE_EPOCH_FENCE, self.producer_id, epoch, NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             self.partitions, self.txn_start_ms, self.txn_last_update_ms)

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                         now: int, client_version: int = 0) -> TxnTransit | int:
        """The transit, or PRODUCER_FENCED's code when `expected_epoch` is neither the current nor the last epoch."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch      # a retry of a call that succeeded
        else:
            return 90                                                     # PRODUCER_FENCED
        return self._transit(EMPTY, self.producer_id, epoch, last, timeout_ms, (), -1, now,
                             client_version=client_version)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now: int,
                                     record_last_epoch: bool, client_version: int = 0) -> TxnTransit:
        return self._transit(EMPTY, new_producer_id, 0, self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms, (), -1, now, client_version=client_version)

    def prepare_add_partitions(self, added, now: int, client_version: int = 0) -> TxnTransit:
        start = now if self.state in (EMPTY, COMPLETE_ABORT, COMPLETE_COMMIT) else self.txn_start_ms
        return self._transit(ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, self.partitions | set(added), start, now,
                             client_version=client_version)

    def prepare_abort_or_commit(self, state: int, now: int, client_version: int = 0,
                                next_producer_id: int = NO_PRODUCER_ID) -> TxnTransit:
        """Transaction version 2 bumps the epoch with every end (the markers carry the new one); when the epoch is
        exhausted `next_producer_id` is the id the producer continues with once the transaction completes."""
        epoch, last = self.producer_epoch, self.last_producer_epoch
        if client_version >= 2:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        start = self.txn_start_ms if self.txn_start_ms >= 0 else now      # v2's abort of no transaction
        return self._transit(state, self.producer_id, epoch, last, self.txn_timeout_ms, self.partitions, start, now,
                             next_producer_id, client_version)

    def prepare_complete(self, now: int) -> TxnTransit:
        state = COMPLETE_COMMIT if self.state == PREPARE_COMMIT else COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        pid, epoch = self.ended_as()             # a new producer id at epoch 0 when version 2's epoch overflowed
        # the last epoch stays (Kafka 4.1): after a version 2 end it is the epoch before the bump, so a producer that
        # never saw EndTxn's answer recovers with InitProducerId naming it (KIP-360)
        return self._transit(state, pid, epoch, self.last_producer_epoch, self.txn_timeout_ms, (), self.txn_start_ms,
                             now, client_version=self.client_txn_version)

    def ended_as(self) -> tuple[int, int]:
        """(producer id, epoch) the producer continues with after this transaction ends (EndTxn v5's answer)."""
        if self.client_txn_version >= 2 and self.next_producer_id != NO_PRODUCER_ID:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    def prepare_dead(self) -> TxnTransit:
        return self._transit(DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, (), self.txn_start_ms, self.txn_last_update_ms)

    def complete(self, t: TxnTransit) -> None:
        """The transit was written: it is the state now (Kafka's completeTransitionTo)."""
        self.producer_id, self.prev_producer_id, self.next_producer_id = t.producer_id, t.prev_producer_id, \
            t.next_producer_id
        self.producer_epoch, self.last_producer_epoch = t.producer_epoch, t.last_producer_epoch
        self.txn_timeout_ms, self.state, self.partitions = t.txn_timeout_ms, t.state, set(t.partitions)
        self.txn_start_ms, self.txn_last_update_ms = t.txn_start_ms, t.txn_last_update_ms
        self.client_txn_version = t.client_txn_version
        self.pending_state = None

    def abort_pending(self) -> None:
        self.pending_state = None

    def copy(self) -> "TransactionMetadata":
        return replace(self, partitions=set(self.partitions))


class IllegalTransition(Exception):
    """A transition Kafka's state machine does not allow (a bug, never a client's error)."""


# ---- records ------------------------------------------------------------------------------------------------------
_I16 = struct.Struct(">h")
_VALUE_HEAD = struct.Struct(">qhib")      # producer id, epoch, timeout, status
_VALUE_TAIL = struct.Struct(">qq")        # last update, start


class CorruptTxnRecord(ValueError):
    pass


def key_bytes(transactional_id: str) -> bytes:
    b = transactional_id.encode()
    return _I16.pack(0) + _I16.pack(len(b)) + b


def value_bytes(t: TxnTransit, version: int = 0) -> bytes:
    """TransactionLogValue v0, or v1 (flexible, with the tagged previous/next producer ids and the client's
    transaction version, each written only when not its default) once `transaction.version` is 1 or more, as
    Kafka's TransactionLog.valueToBytes. Empty has null partitions."""
    flexible = version >= 1
    out = bytearray(_I16.pack(1 if flexible else 0))
    out += _VALUE_HEAD.pack(t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state)
    if t.state == EMPTY:
        out += uvarint(0) if flexible else struct.pack(">i", -1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(t.partitions):
            by_topic.setdefault(topic, []).append(p)
        out += uvarint(len(by_topic) + 1) if flexible else struct.pack(">i", len(by_topic))
        for topic, parts in by_topic.items():
            b = topic.encode()
            if flexible:
                out += uvarint(len(b) + 1) + b + uvarint(len(parts) + 1) + struct.pack(f">{len(parts)}i", *parts)
                out += uvarint(0)
            else:
                out += _I16.pack(len(b)) + b + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    out += _VALUE_TAIL.pack(t.txn_last_update_ms, t.txn_start_ms)
    if flexible:
        tags = [(tag, data) for tag, data, default in (
            (0, struct.pack(">q", t.prev_producer_id), t.prev_producer_id == NO_PRODUCER_ID),
            (1, struct.pack(">q", t.next_producer_id), t.next_producer_id == NO_PRODUCER_ID),
            (2, _I16.pack(t.client_txn_version), t.client_txn_version == 0)) if not default]
        out += uvarint(len(tags))
        for tag, data in tags:
            out += uvarint(tag) + uvarint(len(data)) + data
    return bytes(out)


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key of another version (skipped, as Kafka's UnknownKey)."""
    if len(data) < 4:
        raise CorruptTxnRecord("short key")
    (version,) = _I16.unpack_from(data, 0)
    if version != 0:
        return None
    (n,) = _I16.unpack_from(data, 2)
    if n < 0 or 4 + n > len(data):
        raise CorruptTxnRecord("bad transactional id length")
    return data[4:4 + n].decode()


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    """TransactionLogValue v0 or v1 (flexible: compact strings and arrays, tagged previous/next producer ids and
    the client's transaction version)."""
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version not in (0, 1):
            raise CorruptTxnRecord(f"unknown value version {version}")
        flexible = version == 1
        pos = 2
        pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(data, pos)
        pos += _VALUE_HEAD.size
        if flexible:
            n, pos = read_uvarint(data, pos)
            n -= 1
        else:
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
        partitions = set()
        for _ in range(max(n, 0)):
            if flexible:
                ln, pos = read_uvarint(data, pos)
                ln -= 1
            else:
                (ln,) = _I16.unpack_from(data, pos)
                pos += 2
            topic = data[pos:pos + ln].decode()
            pos += ln
            if flexible:
                k, pos = read_uvarint(data, pos)
                k -= 1
            else:
                (k,) = struct.unpack_from(">i", data, pos)
                pos += 4
            for _ in range(k):
                partitions.add((topic, struct.unpack_from(">i", data, pos)[0]))
                pos += 4
            if flexible:
                pos = _skip_tags(data, pos)[0]
        last_update, start = _VALUE_TAIL.unpack_from(data, pos)
        pos += _VALUE_TAIL.size
        prev_pid, next_pid, client_version = NO_PRODUCER_ID, NO_PRODUCER_ID, 0
        if flexible:
            _, tags = _skip_tags(data, pos)
            if 0 in tags:
                prev_pid = struct.unpack(">q", tags[0])[0]
            if 1 in tags:
                next_pid = struct.unpack(">q", tags[1])[0]
            if 2 in tags:
                client_version = _I16.unpack(tags[2])[0]
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        raise CorruptTxnRecord(str(e)) from None
    if not 0 <= status < len(STATE_NAMES):
        raise CorruptTxnRecord(f"unknown transaction status {status}")
    return TransactionMetadata(transactional_id, pid, prev_pid, next_pid, epoch, NO_PRODUCER_EPOCH, timeout, status,
                               partitions if status != EMPTY else set(), start, last_update, client_version)


def _skip_tags(data: bytes, pos: int) -> tuple[int, dict[int, bytes]]:
    n, pos = read_uvarint(data, pos)
    tags = {}
    for _ in range(n):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        tags[tag] = data[pos:pos + size]
        pos += size
    return pos, tags

