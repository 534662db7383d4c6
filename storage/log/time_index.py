"""Sparse timestamp -> offset index of one log segment (Kafka's TimeIndex).

12-byte big-endian entries: timestamp i64, offset relative to the segment base u32. An entry (T, O) means
"the largest timestamp in this segment up to and including the batch ending at O is T, and O's batch is the
first to reach it". Entries are only added (at the offset index's interval) when the max timestamp grows,
so both columns increase and a binary search on the timestamp finds where to start scanning.

One slot is always kept free, as in Kafka, so that sealing a segment can record its final max timestamp:
the last entry of a sealed time index therefore gives the segment's largest timestamp without a scan.
"""
from __future__ import annotations

import os
import struct

from storage.log.offset_index import AbstractIndex

NO_TIMESTAMP = -1


class TimeIndex(AbstractIndex):
    ENTRY = struct.Struct(">qI")   # timestamp, relative offset

    def entry(self, i: int) -> tuple[int, int]:
        ts, rel = self._raw(i)
        return ts, self.base_offset + rel

    def is_full(self) -> bool:
        self._ensure()
        return self._entries >= self._max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, else (-1, base_offset). Reads 12 bytes if not mapped."""
        if not self._loaded:
            try:
                with open(self.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    n = size // self.ENTRY.size
                    if n == 0:
                        return NO_TIMESTAMP, self.base_offset
                    f.seek((n - 1) * self.ENTRY.size)
                    ts, rel = self.ENTRY.unpack(f.read(self.ENTRY.size))
                    return ts, self.base_offset + rel
            except (FileNotFoundError, struct.error):
                return NO_TIMESTAMP, self.base_offset
        n = self._entries
        return self.entry(n - 1) if n else (NO_TIMESTAMP, self.base_offset)

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, else (-1, base_offset)."""
        i = self._floor(target_ts, 0)
        return self.entry(i) if i >= 0 else (NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        n = self.entries
        if n:
            last_ts, last_off = self.entry(n - 1)
            if timestamp <= last_ts or offset < last_off:
                return False
        if not skip_full_check and self.is_full():
            return False
        return self._append_raw(timestamp, offset - self.base_offset)

    def _last_entry_invalid(self, last):
        return last[1] < self.base_offset

    def _increasing(self, prev, last):
        return last[0] > prev[0] and last[1] >= prev[1]
