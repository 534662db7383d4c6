"""The aborted-transaction index of one segment (Kafka's TransactionIndex, the `.txnindex` file).

One entry per transaction aborted by a marker in the segment, in marker order: Kafka's AbortedTxn layout, 34 bytes
big-endian (int16 version 0, int64 producer id, int64 first offset, int64 last offset (the marker's), int64 last
stable offset when the marker was written). A read_committed Fetch collects the entries overlapping the range it
returns, so the consumer can drop the aborted records; the last stable offset tells the search it may stop.

The file exists only once a segment has an entry. Appends are idempotent by last offset, so a recovery that replays
markers the file already holds adds nothing.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from storage.log.files import fsync, read_small

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size        # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class TransactionIndex:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._entries: list[AbortedTxn] | None = None      # read on first use

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = read_small(self.path)
            except FileNotFoundError:
                data = b""
            n = len(data) // ENTRY_SIZE                    # a torn last entry (crash mid-write) is dropped
            out = []
            for i in range(n):
                version, pid, first, last, lso = _ENTRY.unpack_from(data, i * ENTRY_SIZE)
                if version != 0 or (out and last <= out[-1].last_offset):
                    break                                  # garbage after a crash: keep what precedes it
                out.append(AbortedTxn(pid, first, last, lso))
            self._entries = out
            if len(data) != len(out) * ENTRY_SIZE:
                self._rewrite()
        return self._entries

    def append(self, txn: AbortedTxn) -> bool:
        """Add an entry (False, nothing written, when an entry at or beyond its marker is already there)."""
        entries = self.entries
        if entries and entries[-1].last_offset >= txn.last_offset:
            return False
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.pack())
        finally:
            os.close(fd)
        entries.append(txn)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or beyond `offset` (the log was truncated there)."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self._entries = keep
            self._rewrite()

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        return collect_aborted(self.entries, fetch_offset, upper_bound)

    def flush(self) -> None:
        if self._entries:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                fsync(fd)
            finally:
                os.close(fd)

    def to_bytes(self) -> bytes:
        """The file's content (what tiered storage uploads as the segment's TRANSACTION index)."""
        return b"".join(e.pack() for e in self.entries)

    def _rewrite(self) -> None:
        if not self._entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(self.to_bytes())
            f.flush()
            fsync(f.fileno())
        os.replace(tmp, self.path)

    def delete(self) -> None:
        self._entries = []
        self.path.unlink(missing_ok=True)


def collect_aborted(entries, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's TransactionIndex.collectAbortedTxns over one index's entries: the aborted transactions overlapping
    [fetch_offset, upper_bound), and whether the search is complete (an entry's last stable offset reached the upper
    bound: every transaction with records below it had ended when that marker was written, so no later entry, here
    or in a later segment, can overlap)."""
    out = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
            out.append(e)
        if e.last_stable_offset >= upper_bound:
            return out, True
    return out, False


def parse_entries(data: bytes) -> list[AbortedTxn]:
    """Entries of an index file's bytes (a remote segment's TRANSACTION index)."""
    return [AbortedTxn(*_ENTRY.unpack_from(data, i * ENTRY_SIZE)[1:]) for i in range(len(data) // ENTRY_SIZE)]
