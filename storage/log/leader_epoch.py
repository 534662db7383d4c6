"""Leader epoch -> start offset history of one partition (Kafka's LeaderEpochFileCache).

Replication uses it to answer OffsetsForLeaderEpoch and to find where a follower's log diverges. It is
persisted as Kafka's `leader-epoch-checkpoint` text file (version line, count line, "epoch offset" lines),
rewritten atomically (temp file, fsync, rename).

A new epoch (`assign`) is only marked dirty: the log writes the file when it rolls, flushes or closes (Kafka 3.8+
also moved this write off the append path, KAFKA-15046). Writing it on the first append of every partition cost
two fsyncs per partition, which with 1,000 partitions (or a leader change moving many) dominated produce. Nothing
is lost: an epoch assigned since the last write starts in the active segment, and recovery after a crash rescans
the active segment and re-learns epochs from its batch headers. Truncations are rare and written at once.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import NamedTuple

from storage.log.files import read_small, write_atomically

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0
_VERSIONS = itertools.count()     # LeaderEpochFileCache.version: one counter for all caches


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Entries are kept sorted by both epoch and start offset (each strictly increasing)."""

    def __init__(self, dir: Path):
        self.path = Path(dir) / CHECKPOINT_FILE
        self._entries: list[EpochEntry] = self._read()
        self.version = next(_VERSIONS)   # new at every change of the entries, unique among caches (for memos)
        self.dirty = False

    def _read(self) -> list[EpochEntry]:
        try:
            lines = read_small(self.path).decode().split("\n")
        except FileNotFoundError:
            return []
        try:
            if int(lines[0]) != _VERSION:
                raise ValueError(f"unknown version {lines[0]}")
            n = int(lines[1])
            entries = [EpochEntry(*map(int, line.split())) for line in lines[2:2 + n]]
            if len(entries) != n:
                raise ValueError("short file")
        except (ValueError, IndexError, TypeError) as e:
            # Kafka fails the log dir here; the cache is a hint we can rebuild from batch headers instead.
            raise ValueError(f"malformed {self.path}: {e}") from None
        return entries

    def _flush(self) -> None:
        body = f"{_VERSION}\n{len(self._entries)}\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in self._entries)
        write_atomically(self.path, body.encode())
        self.dirty = False

    def flush(self) -> None:
        """Write the file if an assign changed the entries since the last write."""
        if self.dirty:
            self._flush()

    # ---- queries -----------------------------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in which `offset` was written (largest entry with start_offset <= offset)."""
        found = None
        for e in self._entries:
            if e.start_offset > offset:
                break
            found = e.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= requested, first offset of the next higher epoch).

        The latest epoch ends at the log end offset; an epoch above the latest is undefined (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        floor = None
        for e in self._entries:
            if e.epoch > requested_epoch:
                return (requested_epoch if floor is None else floor.epoch), e.start_offset
            floor = e
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

    # ---- updates -----------------------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns True if the cache changed.

        As Kafka: a no-op when `epoch` is already the latest (unless it starts earlier), and any entry with an
        epoch or start offset >= the new one is dropped first so both columns stay monotonic.
        """
        if epoch < 0 or start_offset < 0:
            return False
        last = self.latest_entry()
        if last is not None and last.epoch == epoch and start_offset >= last.start_offset:
            return False
        self._entries = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._entries.append(EpochEntry(epoch, start_offset))
        self.version = next(_VERSIONS)
        self.dirty = True
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated to end there)."""
        if end_offset >= 0 and self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries = [e for e in self._entries if e.start_offset < end_offset]
            self.version = next(_VERSIONS)
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to `start_offset`: the epoch covering it now starts there."""
        keep = [e for e in self._entries if e.start_offset > start_offset]
        covering = [e for e in self._entries if e.start_offset <= start_offset]
        if covering:
            keep.insert(0, EpochEntry(covering[-1].epoch, start_offset))
        if keep != self._entries:
            self._entries = keep
            self.version = next(_VERSIONS)
            self._flush()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self.version = next(_VERSIONS)
            self._flush()
