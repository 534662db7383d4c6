"""Sparse offset -> file position index of one log segment (Kafka's AbstractIndex and OffsetIndex).

On-disk format is Kafka's: 8-byte big-endian entries (offset relative to the segment base as u32, byte
position in the .log as u32). As Kafka, an entry is added every `index.interval.bytes` of appended data and
names the LAST offset of the batch that starts at that position, so a lookup that lands on an entry is
already inside the right batch.

The index of the active segment lives in memory (a bytearray of its entries; `segment.index.bytes` only bounds
how many it may hold, as Kafka's preallocated file does) and is written to its file, trimmed, when the segment is
rolled or closed. Nothing is lost by not writing it earlier: after a crash the active segment is always rescanned
and its indexes rebuilt. Kafka instead preallocates a 10 MiB sparse file and writes through a mmap; measured here,
the first write to each page of such a mapping cost about 0.5 ms on ext4, which with 1,000 partitions made index
upkeep most of the produce path (docs/benchmarks.md, "Many partitions"). Indexes of closed segments are mapped
read-only and lazily, on first lookup, so opening a log with thousands of segments touches no index file. Python's
mmap keeps a dup of the descriptor, so each mapped index costs one fd.
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from storage.log import files


class AbstractIndex:
    """An mmapped array of fixed-size entries sorted on every column; subclasses define the entry."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int, *, writable: bool):
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._writable = writable
        self._mm: mmap.mmap | None = None
        self._data = None                  # what entries are read from: the bytearray (writable) or the mmap
        self._entries = 0
        self._max_entries = 0
        self._loaded = False
        if writable:
            self._load()

    # ---- mapping -----------------------------------------------------------------------------------------
    def _load(self) -> None:
        size = self.ENTRY.size
        if self._writable:
            try:
                data = files.read_small(self.path)
            except FileNotFoundError:
                data = b""
            self._entries = len(data) // size
            self._data = bytearray(data[:self._entries * size])
            self._max_entries = max(self.max_index_size // size, self._entries)
            self._loaded = True
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:          # a closed segment without an index reads as empty
            self._entries = self._max_entries = 0
            self._loaded = True
            return
        try:
            self._entries = os.fstat(fd).st_size // size
            map_len = self._entries * size
            self._mm = mmap.mmap(fd, map_len, access=mmap.ACCESS_READ) if map_len else None
            self._data = self._mm
            self._max_entries = self._entries
        finally:
            os.close(fd)
        self._loaded = True

    def _ensure(self) -> None:
        if not self._loaded:
            self._load()

    def _unmap(self) -> None:
        self._data = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:            # never exported, but be safe: let GC unmap it
                pass
            self._mm = None
        self._loaded = False

    # ---- entries -----------------------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        self._ensure()
        return self._entries

    @property
    def max_entries(self) -> int:
        self._ensure()
        return self._max_entries

    def room(self) -> int:
        """Entries that still fit."""
        self._ensure()
        return self._max_entries - self._entries

    def is_full(self) -> bool:
        self._ensure()
        return self._entries >= self._max_entries

    def _raw(self, i: int) -> tuple:
        return self.ENTRY.unpack_from(self._data, i * self.ENTRY.size)

    def entry(self, i: int) -> tuple[int, int]:
        """Entry i with the offset made absolute; subclasses order the columns."""
        raise NotImplementedError

    def _floor(self, key: int, column: int) -> int:
        """Index of the largest entry whose `column` <= key, or -1 (binary search over the mmap)."""
        self._ensure()
        lo, hi = 0, self._entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if self.entry(mid)[column] <= key:
                found, lo = mid, mid + 1
            else:
                hi = mid - 1
        return found

    def _append_raw(self, *fields) -> bool:
        self._ensure()
        if not self._writable or self._entries >= self._max_entries:
            return False
        self._data += self.ENTRY.pack(*fields)
        self._entries += 1
        return True

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Drop every entry and make the index writable (in memory) again, to rebuild it from the log; the file is
        rewritten when the segment is sealed."""
        self._unmap()
        self._writable = True
        self._data = bytearray()
        self._entries = 0
        self._max_entries = self.max_index_size // self.ENTRY.size
        self._loaded = True

    def flush(self) -> None:
        """Nothing to do: the active index is rebuilt from the log after a crash; seal() writes it."""

    def seal(self) -> None:
        """Write the entries to the file (trimmed), fsync, and become read-only (mapped again lazily)."""
        if not self._writable:
            return
        self._ensure()
        data = self._data
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            files.fsync(fd)
        finally:
            os.close(fd)
        self._unmap()
        self._writable = False

    def close(self) -> None:
        self._unmap()

    def delete(self) -> None:
        self._unmap()
        self.path.unlink(missing_ok=True)

    def file_ok(self) -> bool:
        """Cheap check without mapping: the file exists and holds whole entries."""
        try:
            return os.stat(self.path).st_size % self.ENTRY.size == 0
        except FileNotFoundError:
            return False

    def sanity_check(self) -> bool:
        """Entries look like ours (Kafka's sanityCheck, plus the last two entries must be increasing)."""
        n = self.entries
        if n == 0:
            return True
        last = self.entry(n - 1)
        if self._last_entry_invalid(last):
            return False
        return n < 2 or self._increasing(self.entry(n - 2), last)

    def _last_entry_invalid(self, last: tuple[int, int]) -> bool:
        raise NotImplementedError

    def _increasing(self, prev: tuple[int, int], last: tuple[int, int]) -> bool:
        raise NotImplementedError


class OffsetIndex(AbstractIndex):
    ENTRY = struct.Struct(">II")   # relative offset, position

    def entry(self, i: int) -> tuple[int, int]:
        rel, pos = self._raw(i)
        return self.base_offset + rel, pos

    def last_entry(self) -> tuple[int, int]:
        n = self.entries
        return self.entry(n - 1) if n else (self.base_offset, 0)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base_offset, 0)."""
        i = self._floor(target_offset, 0)
        return self.entry(i) if i >= 0 else (self.base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with position <= `position` (a batch boundary)."""
        i = self._floor(position, 1)
        return self.entry(i) if i >= 0 else (self.base_offset, 0)

    def append(self, offset: int, position: int) -> bool:
        n = self.entries
        if n and offset <= self.entry(n - 1)[0]:
            return False
        return self._append_raw(offset - self.base_offset, position)

    def _last_entry_invalid(self, last):
        return last[0] <= self.base_offset

    def _increasing(self, prev, last):
        return last[0] > prev[0] and last[1] > prev[1]
