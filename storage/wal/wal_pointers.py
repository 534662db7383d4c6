"""Where a partition's recent batches are in the fast store (KIP-1176): the leader's pointer file, kept beside the
partition's segments so that a follower lagging by many uploads still gets pointers without the leader holding
them all in memory.

Fixed-size entries in offset order, found by binary search with pread, like an offset index:

    base offset i64 | last offset i64 | upload id u64 | position u32 | size u32 | CRC32C u32 | leader epoch i32

The object an entry names is derived from the upload id (replication/remote_wal.py names it). Pointers are only
handed out while this broker leads the partition at the epoch it uploaded them in, so the file is emptied at every
leadership change and at start-up: it never needs recovery. Its head is dropped as the objects it names are
garbage collected, and the file is compacted when more than half of it is dead.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

_ENTRY = struct.Struct(">qqQIIIi")
_OFFSETS = struct.Struct(">qq")
SIZE = _ENTRY.size
FILE_NAME = "wal.pointers"


@dataclass(frozen=True, slots=True)
class WalPointer:
    base_offset: int
    last_offset: int
    upload_id: int
    position: int
    size: int
    crc: int
    leader_epoch: int


class WalPointerIndex:
    def __init__(self, dir: Path):
        self.path = Path(dir) / FILE_NAME
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._first = 0           # entries below this one are dead (their objects are gone)
        self._count = 0           # entries in the file, dead ones included
        self._last: WalPointer | None = None
        self._head: WalPointer | None = None   # the entry at _first, read once per change of _first

    def __len__(self) -> int:
        return self._count - self._first

    @property
    def last(self) -> WalPointer | None:
        return self._last if len(self) else None

    def _read(self, i: int) -> WalPointer:
        return WalPointer(*_ENTRY.unpack(os.pread(self._fd, SIZE, i * SIZE)))

    def first(self) -> WalPointer | None:
        if not len(self):
            return None
        if self._head is None:
            self._head = self._read(self._first)
        return self._head

    def append(self, p: WalPointer) -> None:
        os.pwrite(self._fd, _ENTRY.pack(p.base_offset, p.last_offset, p.upload_id, p.position, p.size, p.crc,
                                        p.leader_epoch), self._count * SIZE)
        self._count += 1
        self._last = p

    def _search(self, offset: int) -> int:
        """Index of the first live entry whose last offset is at or past `offset` (== count when none)."""
        lo, hi = self._first, self._count
        if self._last is not None and hi > lo and self._last.last_offset < offset:
            return hi
        while lo < hi:
            mid = (lo + hi) // 2
            if _OFFSETS.unpack(os.pread(self._fd, 16, mid * SIZE))[1] < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def from_offset(self, offset: int, max_bytes: int) -> list[WalPointer]:
        """Consecutive entries from the one holding `offset`, within `max_bytes` (at least one). Empty when no
        entry holds it: the offset is in a gap (a failed upload), below the first entry, or past the last."""
        i = self._search(offset)
        out: list[WalPointer] = []
        total = 0
        expect = offset
        while i < self._count:
            p = self._read(i)
            if p.base_offset > expect or (out and total + p.size > max_bytes):
                break
            out.append(p)
            total += p.size
            expect = p.last_offset + 1
            i += 1
        return out

    def drop_below_upload(self, upload_id: int) -> None:
        """Forget the head entries whose objects (upload ids below `upload_id`) were deleted."""
        while self._first < self._count and self._read(self._first).upload_id < upload_id:
            self._first += 1
            self._head = None
        self._maybe_compact()

    def drop_below_offset(self, offset: int) -> None:
        """Forget entries wholly below `offset` (the local log start moved past them)."""
        first = max(self._first, self._search(offset))
        if first != self._first:
            self._first, self._head = first, None
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if self._first and self._first * 2 >= self._count:
            live = os.pread(self._fd, (self._count - self._first) * SIZE, self._first * SIZE)
            os.pwrite(self._fd, live, 0)
            os.ftruncate(self._fd, len(live))
            self._count -= self._first
            self._first = 0

    def clear(self) -> None:
        os.ftruncate(self._fd, 0)
        self._first = self._count = 0
        self._last = self._head = None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
