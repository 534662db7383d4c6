"""The cleaner's output: `<base>.log.cleaned` and its two indexes, written by the worker thread, and the completion of
swaps a crash interrupted, which `Log._load` runs before it loads any segment.

Crash safety (kill -9 at any point leaves a readable log). The cleaned files are fsynced before anything is
renamed; then, on the loop: `.log.cleaned` -> `.log.swap` (the commit point) and a directory fsync; the replaced
segments after the first are deleted; the cleaned indexes are renamed over the first one's; `.log.swap` is renamed
over the first one's `.log`. On open, `complete_interrupted_swaps` (called first thing by `Log._load`) finishes any
committed swap: it deletes every segment whose base offset lies inside the swap segment's offsets, drops that base's
index files (the loader rebuilds them) and renames the `.swap` into place; uncommitted `.cleaned` files are deleted
by the loader. A pass interrupted before its checkpoint is simply done again.
"""
from __future__ import annotations

import logging
import mmap
import os
import struct
from pathlib import Path

from protocol.record_batch import iter_batches
from storage.log.files import fsync_dir
from storage.log.log_segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_name

log = logging.getLogger("strata.log_cleaner")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_OFFSET_ENTRY = struct.Struct(">II")   # offset index: relative offset, position
_TIME_ENTRY = struct.Struct(">qI")     # time index: timestamp, relative offset
_MB = 1024 * 1024


# ---- the cleaned segment being written -------------------------------------------------------------------------------

class _CleanedSegment:
    """`<base>.log.cleaned` and its two indexes, written sequentially by the worker thread with the index policy of
    LogSegment (an offset index entry, and a time index entry when the max timestamp grew, once
    index.interval.bytes have passed; the final max timestamp last)."""

    def __init__(self, dir: Path, base_offset: int, index_interval_bytes: int):
        self.dir = dir
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = dir / (file_name(base_offset, LOG_SUFFIX) + CLEANED_SUFFIX)
        self.index_path = dir / (file_name(base_offset, INDEX_SUFFIX) + CLEANED_SUFFIX)
        self.time_index_path = dir / (file_name(base_offset, TIME_INDEX_SUFFIX) + CLEANED_SUFFIX)
        self.txn_index_path = dir / (file_name(base_offset, TXN_INDEX_SUFFIX) + CLEANED_SUFFIX)
        self.txn_index = b""                     # the aborted transactions still holding records here
        self._f = open(self.log_path, "wb", buffering=_MB)
        self.size = 0
        self._since_index = 0
        self._offset_index = bytearray()
        self._time_index = bytearray()
        self._last_time_entry: tuple[int, int] | None = None
        self._max_ts = -1
        self._offset_of_max_ts = base_offset
        self.last_offset = base_offset - 1

    def append(self, data, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self._max_ts:
            self._max_ts, self._offset_of_max_ts = max_timestamp, last_offset
        if self._since_index > self.index_interval_bytes:
            self._offset_index += _OFFSET_ENTRY.pack(last_offset - self.base_offset, self.size)
            self._time_entry(self._max_ts, self._offset_of_max_ts)
            self._since_index = 0
        self._since_index += len(data)
        self._f.write(data)
        self.size += len(data)
        self.last_offset = last_offset

    def _time_entry(self, ts: int, offset: int) -> None:
        last = self._last_time_entry
        if last is not None and (ts <= last[0] or offset < last[1]):
            return
        self._time_index += _TIME_ENTRY.pack(ts, offset - self.base_offset)
        self._last_time_entry = (ts, offset)

    def finish(self, mtime: float | None) -> None:
        """Write the indexes and fsync all three files (before anything is renamed)."""
        if self._max_ts >= 0:
            self._time_entry(self._max_ts, self._offset_of_max_ts)
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        for path, data in ((self.index_path, self._offset_index), (self.time_index_path, self._time_index),
                           (self.txn_index_path, self.txn_index)):
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        if mtime is not None:        # keep the replaced segments' mtime (retention's fallback without timestamps)
            os.utime(self.log_path, (mtime, mtime))

    def discard(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass
        for p in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            try:
                p.unlink(missing_ok=True)
            except OSError:
                pass


def install_txn_index(dir: Path, base: int) -> None:
    """`<base>.txnindex.swap` (the cleaned segment's aborted transactions, possibly none) becomes `<base>.txnindex`.
    It is renamed to `.swap` before the commit point, so after a crash it is either still there or in place."""
    swap = dir / (file_name(base, TXN_INDEX_SUFFIX) + SWAP_SUFFIX)
    final = dir / file_name(base, TXN_INDEX_SUFFIX)
    try:
        empty = os.stat(swap).st_size == 0
    except FileNotFoundError:
        return
    if empty:
        final.unlink(missing_ok=True)
        swap.unlink()
    else:
        os.replace(swap, final)


# ---- recovery ----------------------------------------------------------------------------------------------------------

def _end_offset_of(path: Path, base: int) -> int:
    """One past the last offset of the whole batches in a segment file (base if there are none)."""
    end = base
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return end
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            for _, h in iter_batches(mm, 0, size):
                if h.magic != 2 or h.last_offset_delta < 0:
                    break
                end = h.last_offset + 1
    return end


def complete_interrupted_swaps(dir: Path) -> int:
    """Finish cleaner swaps a crash interrupted after their commit point (`<base>.log.swap` exists): delete the
    segments whose base offset falls inside the swap segment's offsets, drop the base's index files (the loader
    rebuilds them), and rename the swap into place. Returns how many were completed. `.cleaned` files (uncommitted)
    are left for the loader's stray-file sweep."""
    dir = Path(dir)
    suffix = LOG_SUFFIX + SWAP_SUFFIX
    done = 0
    for swap in sorted(dir.glob("*" + suffix)):
        stem = swap.name[:-len(suffix)]
        if len(stem) != 20 or not stem.isdigit():
            continue
        base = int(stem)
        end = _end_offset_of(swap, base)
        for p in list(dir.glob("*" + LOG_SUFFIX)):
            s = p.name[:-len(LOG_SUFFIX)]
            if len(s) == 20 and s.isdigit() and base < int(s) < end:
                for sfx in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    (dir / file_name(int(s), sfx)).unlink(missing_ok=True)
        for sfx in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            for extra in ("", SWAP_SUFFIX, CLEANED_SUFFIX):
                (dir / (file_name(base, sfx) + extra)).unlink(missing_ok=True)
        install_txn_index(dir, base)     # the cleaned segment's, renamed before the commit point; else in place
        os.replace(swap, dir / file_name(base, LOG_SUFFIX))
        log.warning("completed an interrupted log cleaner swap in %s: segment %d (offsets up to %d)",
                    dir.name, base, end - 1)
        done += 1
    if done:
        fsync_dir(dir)
    return done
