"""One segment of a partition log: a `.log` file of whole record batches plus its two sparse indexes.

Kafka's LogSegment. The ACTIVE segment is written with pwrite(2) into a file grown in chunks (reserved with
posix_fallocate where the filesystem supports it, so a full disk fails the append with ENOSPC), the logical size is
kept in memory, and the file is trimmed to it when the segment is sealed (rolled or closed). A crash therefore
leaves a zero-filled tail, which recovery treats as a partial batch. An earlier version wrote through a writable
mmap: measured here, that cost 0.92 ms of broker CPU per produced MB against 0.72 ms with pwrite (page faults or
MADV_POPULATE_WRITE on every fresh page), and kept every written page resident in the broker (with 1,000 busy
partitions, hundreds of MB; docs/benchmarks.md, "Many partitions").

Reads hand out zero-copy memoryview slices of a read-only shared mapping of the file, which sees what pwrite
wrote (one page cache). A mapping with live slices is never closed:
`mmap.close()` raises BufferError then, and we just drop our reference so it is unmapped when the last
slice dies; unlinking or truncating the file does not invalidate pages below the logical size.
"""
from __future__ import annotations

import errno
import mmap
import os
import struct
from pathlib import Path
from typing import Callable, Iterator

from protocol.errors import ApiError, ErrorCode
from protocol.wire import read_varint, read_varlong
from protocol.record_batch import (
    HEADER_SIZE, LOG_OVERHEAD, BatchHeader, compute_crc, iter_batches, read_header,
)
from storage.log import files
from storage.log.offset_index import OffsetIndex
from storage.log.time_index import NO_TIMESTAMP, TimeIndex
from storage.log.transaction_index import TransactionIndex

LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX = ".log", ".index", ".timeindex", ".txnindex"

_MIN_GROW = 256 * 1024
_MAX_GROW = 16 * 1024 * 1024
_OFF_LEN = struct.Struct(">qi")            # baseOffset, batchLength
_I32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_MAX_TIMESTAMP_AT = 35
_I64 = struct.Struct(">q")
MAX_RELATIVE_OFFSET = 2**31 - 1
INT32_MAX = 2**31 - 1     # Kafka types segment.bytes and segment.index.bytes as int; index positions are u32


_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


class CorruptSegmentError(ApiError):
    """A batch header in a segment that cannot be right (a length below a v2 header's, or running past the end of
    the segment): reads there answer CORRUPT_MESSAGE, as Kafka's FileLogInputStream throws CorruptRecordException,
    instead of serving a torn batch, looping, or silently skipping to the next segment."""
    error_code = ErrorCode.corrupt_message


def _corrupt(seg: "LogSegment", pos: int, length: int) -> CorruptSegmentError:
    return CorruptSegmentError(message=f"{seg.log_path.name}: batch at position {pos} has length {length} "
                                       f"(segment size {seg.size})")


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A segment is `active` (writable mapping, preallocated indexes) or sealed (read-only, lazily mapped)."""

    def __init__(self, dir: Path, base_offset: int, *, max_index_size: int, active: bool,
                 index_interval_bytes: int = 4096):
        self.dir = Path(dir)
        self.index_interval_bytes = index_interval_bytes   # for rebuilding indexes (appends pass the current one)
        self.base_offset = base_offset
        self.log_path = self.dir / file_name(base_offset, LOG_SUFFIX)
        self.index_path = self.dir / file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = self.dir / file_name(base_offset, TIME_INDEX_SUFFIX)
        self.active = active
        self._fd: int | None = None
        if active:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            self._file_len = os.fstat(self._fd).st_size
        else:
            self._file_len = os.stat(self.log_path).st_size
        self.offset_index = OffsetIndex(self.index_path, base_offset, max_index_size, writable=active)
        self.time_index = TimeIndex(self.time_index_path, base_offset, max_index_size, writable=active)
        self.txn_index = TransactionIndex(self.dir / file_name(base_offset, TXN_INDEX_SUFFIX))   # read on first use
        self.size = self._file_len              # logical size; the Log fixes it for the active segment on load
        self._mm: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._next_offset: int | None = None    # computed lazily for sealed segments
        self._max_ts: int | None = None         # lazily from the time index's last entry
        self._offset_of_max_ts = base_offset
        self._bytes_since_index = 0
        self._indexes_checked = active
        self.rolling_base_ms: int | None = None  # clock time of the first append (segment.ms)
        self._read_hint: tuple[int, int] | None = None   # (offset, position) where the last read ended

    @classmethod
    def create(cls, dir: Path, base_offset: int, max_index_size: int, index_interval_bytes: int = 4096) -> "LogSegment":
        """A new, empty active segment (stale files of the same name are discarded)."""
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            (Path(dir) / file_name(base_offset, suffix)).unlink(missing_ok=True)
        seg = cls(dir, base_offset, max_index_size=max_index_size, active=True, index_interval_bytes=index_interval_bytes)
        seg.size, seg._next_offset, seg._max_ts = 0, base_offset, NO_TIMESTAMP
        return seg

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, active={self.active})"

    # ---- mapping -----------------------------------------------------------------------------------------
    def _map(self) -> memoryview | None:
        """Read-only view of the whole mapping (mapping the file on first use)."""
        if self._view is None:
            if self.active:
                if self._file_len == 0:
                    return None
                self._mm = mmap.mmap(self._fd, self._file_len, access=mmap.ACCESS_READ)
            else:
                if self.size == 0:
                    return None
                fd = os.open(self.log_path, os.O_RDONLY)
                try:
                    self._mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
                finally:
                    os.close(fd)
            self._view = memoryview(self._mm).toreadonly()
        return self._view

    def drop_mapping(self) -> None:
        """Unmap until the next read (outstanding slices stay valid)."""
        self._unmap()

    def _unmap(self) -> None:
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:
                pass
            self._view = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass                    # a fetch still holds a slice: GC unmaps it when the slice dies
            self._mm = None

    def slice(self, start: int, end: int) -> memoryview:
        return self._map()[start:end]

    def _ensure_capacity(self, needed: int, segment_bytes: int) -> None:
        cur = self._file_len
        if needed <= cur:
            return
        target = max(needed, min(max(2 * cur, _MIN_GROW), cur + _MAX_GROW, max(segment_bytes, needed)))
        try:
            os.posix_fallocate(self._fd, cur, target - cur)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                os.ftruncate(self._fd, cur)     # e.g. ENOSPC: give back what was reserved
                raise
            os.ftruncate(self._fd, target)      # the filesystem cannot reserve space: grow sparse
        self._unmap()
        self._file_len = target

    # ---- appends -----------------------------------------------------------------------------------------
    @property
    def max_timestamp_so_far(self) -> int:
        if self._max_ts is None:
            self._max_ts, self._offset_of_max_ts = self.time_index.last_entry()
        return self._max_ts

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        self.max_timestamp_so_far
        return self._offset_of_max_ts

    @property
    def largest_timestamp(self) -> int:
        """For retention.ms: the max record timestamp, else (no timestamps at all) the file's mtime."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return NO_TIMESTAMP

    def should_roll(self, config, n_bytes: int, n_batches: int, last_offset: int, now_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll; an empty segment never rolls (it would roll into itself)."""
        if self.size == 0:
            return False
        return (self.size + n_bytes > min(config.segment_bytes, INT32_MAX)
                or (self.rolling_base_ms is not None and now_ms - self.rolling_base_ms > config.segment_ms)
                or self.offset_index.room() < n_batches
                or self.time_index.room() <= n_batches
                or last_offset - self.base_offset > MAX_RELATIVE_OFFSET)

    def append(self, data, headers: list[BatchHeader], *, index_interval_bytes: int, segment_bytes: int,
               now_ms: int) -> int:
        """Copy `data` (whole batches, offsets already assigned) to the end; returns its position."""
        start = pos = self.size
        n = len(data)
        self._ensure_capacity(pos + n, segment_bytes)
        view, written = memoryview(data), 0
        while written < n:                       # pwrite may write less than asked (signals, huge writes)
            written += os.pwrite(self._fd, view[written:], pos + written)
        for h in headers:
            self._on_batch(h, pos, index_interval_bytes)
            pos += h.size
        self.size = start + n
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        return start

    def _on_batch(self, h: BatchHeader, pos: int, index_interval_bytes: int) -> None:
        """Index bookkeeping for one batch at `pos` (as Kafka: entry for a batch once interval bytes passed)."""
        if h.max_timestamp > self.max_timestamp_so_far:
            self._max_ts, self._offset_of_max_ts = h.max_timestamp, h.last_offset
        if self._bytes_since_index > index_interval_bytes:
            self.offset_index.append(h.last_offset, pos)
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts)
            self._bytes_since_index = 0
        self._bytes_since_index += h.size
        self._next_offset = h.last_offset + 1

    # ---- lookups -----------------------------------------------------------------------------------------
    def _check_indexes(self) -> None:
        """First use of a sealed segment: rebuild its indexes from the log if they look corrupt."""
        if not self._indexes_checked:
            self._indexes_checked = True
            if not (self.offset_index.sanity_check() and self.time_index.sanity_check()):
                self.recover(truncate=False)

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (Kafka's readNextOffset: index, then a short scan)."""
        if self._next_offset is None:
            self._check_indexes()
            pos = self.offset_index.last_entry()[1]
            nxt = self.base_offset
            view = self._map()
            size = self.size
            while view is not None and pos + HEADER_SIZE <= size:
                base, length = _OFF_LEN.unpack_from(view, pos)
                if length < _MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size:
                    raise _corrupt(self, pos, length)
                nxt = base + _I32.unpack_from(view, pos + _LAST_OFFSET_DELTA_AT)[0] + 1
                pos += LOG_OVERHEAD + length
            self._next_offset = nxt
        return self._next_offset

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset >= `offset`, or None."""
        self._check_indexes()                  # may rebuild (and remap) first: take the view after it
        view = self._map()
        if view is None:
            return None
        size = self.size
        hint = self._read_hint
        if hint is not None and hint[0] == offset and hint[1] + HEADER_SIZE <= size:
            # A consumer's next fetch starts where its last read ended: no index search.
            h = read_header(view, hint[1])
            if h.base_offset == offset:
                return hint[1], h
        pos = self.offset_index.lookup(offset)[1]
        while pos + HEADER_SIZE <= size:
            base, length = _OFF_LEN.unpack_from(view, pos)
            if length < _MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size:
                raise _corrupt(self, pos, length)
            if base + _I32.unpack_from(view, pos + _LAST_OFFSET_DELTA_AT)[0] >= offset:
                return pos, read_header(view, pos)
            pos += LOG_OVERHEAD + length
        return None

    def batch_end(self, start: int, budget: int, max_offset: int, min_one: bool) -> int:
        """End of the run of whole batches from `start` fitting in `budget` bytes, each starting below
        `max_offset`; with min_one the first batch is taken whatever its size."""
        view = self._map()
        size = self.size
        if size - start <= budget and self.next_offset <= max_offset:
            self._read_hint = (self.next_offset, size)       # all of it: where the next read will start
            return size
        pos = start
        if budget > 0:
            # Jump over whole batches with the index (entries sit on batch starts), then scan the rest.
            off, p = self.offset_index.lookup_position(start + budget)
            if start < p <= size and off < max_offset:
                pos = p
        while pos + HEADER_SIZE <= size:
            base, length = _OFF_LEN.unpack_from(view, pos)
            end = pos + LOG_OVERHEAD + length
            if length < _MIN_BATCH_LENGTH or end > size:
                if pos == start:
                    raise _corrupt(self, pos, length)
                break                       # serve the good batches before it; the next read raises
            if base >= max_offset or (end - start > budget and not (min_one and pos == start)):
                break
            pos = end
        return pos

    def batches(self, start_pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        view = self._map()
        if view is not None:
            yield from iter_batches(view, start_pos, self.size)

    def first_batch_max_timestamp(self) -> int:
        if self.size < HEADER_SIZE:
            return NO_TIMESTAMP
        if self._fd is not None and self._view is None:      # the active segment, not mapped: one pread
            return _I64.unpack(os.pread(self._fd, 8, _MAX_TIMESTAMP_AT))[0]
        view = self._map()
        if view is None:
            return NO_TIMESTAMP
        return _I64.unpack_from(view, _MAX_TIMESTAMP_AT)[0]

    def find_offset_by_timestamp(self, target: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at/after `start_offset` with timestamp >= target."""
        self._check_indexes()
        view = self._map()
        if view is None:
            return None
        ts_offset = self.time_index.lookup(target)[1]
        pos = self.offset_index.lookup(max(ts_offset, start_offset))[1]
        for p, h in iter_batches(view, pos, self.size):
            if h.max_timestamp >= target and h.last_offset >= start_offset:
                for offset, ts in record_timestamps(view[p:p + h.size], h):
                    if ts >= target and offset >= start_offset:
                        return offset, ts
        return None

    # ---- recovery ----------------------------------------------------------------------------------------
    def load_clean(self) -> bool:
        """Open the active segment after a clean shutdown: trust the indexes and find the end with a short
        scan from the last index entry. False if anything looks off (caller then recovers the segment)."""
        if not (self.offset_index.sanity_check() and self.time_index.sanity_check()):
            return False
        self.size = self._file_len
        pos = self.offset_index.last_entry()[1]
        if pos > self.size:
            return False
        nxt = self.base_offset
        self.max_timestamp_so_far
        # The tail after the last index entry (at most index.interval.bytes and a batch), read with one pread: a
        # mapping costs four system calls, and a broker opens thousands of logs at start-up.
        tail = os.pread(self._fd, self.size - pos, pos) if self.size > pos else b""
        start = pos
        while self.size - pos >= HEADER_SIZE:
            h = read_header(tail, pos - start)
            if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > self.size:
                return False
            if h.max_timestamp > self._max_ts:
                self._max_ts, self._offset_of_max_ts = h.max_timestamp, h.last_offset
            nxt = h.last_offset + 1
            pos += h.size
            self._bytes_since_index += h.size
        self._next_offset = nxt
        return pos == self.size

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None, *, truncate: bool = True,
                index_interval_bytes: int | None = None) -> int:
        """Scan the whole file, validating framing, magic, offsets and CRC-32C; rebuild both indexes up to
        the first bad batch and (if `truncate`) cut the file there. Returns the number of bytes dropped."""
        if index_interval_bytes is None:
            index_interval_bytes = self.index_interval_bytes
        self._read_hint = None
        self.offset_index.reset()
        self.time_index.reset()
        self._max_ts, self._offset_of_max_ts, self._bytes_since_index = NO_TIMESTAMP, self.base_offset, 0
        self._unmap()
        limit = self.size = self._file_len if self.active else os.stat(self.log_path).st_size
        view = self._map()
        pos, nxt = 0, self.base_offset
        while view is not None and limit - pos >= HEADER_SIZE:
            h = read_header(view, pos)
            if (h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > limit
                    or h.base_offset < nxt or h.last_offset_delta < 0
                    or h.last_offset - self.base_offset > MAX_RELATIVE_OFFSET
                    or compute_crc(view, pos, h.size) != h.crc):
                break
            self._on_batch(h, pos, index_interval_bytes)
            if on_batch is not None:
                on_batch(h)
            nxt = h.last_offset + 1
            pos += h.size
        self._next_offset = nxt
        self.size = pos
        dropped = limit - pos
        if truncate and dropped:
            self._unmap()
            if self.active:
                os.ftruncate(self._fd, pos)
                self._file_len = pos
            else:
                os.truncate(self.log_path, pos)
        if not self.active:
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)
            self.offset_index.seal()
            self.time_index.seal()
        self._indexes_checked = True
        return dropped

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is at or beyond `offset` (a batch is never split: truncation lands on
        a batch boundary, as Kafka's LogSegment.truncateTo) and rebuild the indexes. The segment must be active.
        Returns the bytes dropped."""
        assert self.active, "only the active segment is truncated"
        self._read_hint = None
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos = found[0]
        self._unmap()
        os.ftruncate(self._fd, pos)
        self._file_len = pos
        before = self.size
        self.recover()
        self.rolling_base_ms = None if self.size == 0 else self.rolling_base_ms
        return before - self.size

    # ---- durability and lifecycle ------------------------------------------------------------------------
    def flush(self) -> None:
        """fdatasync the log (covers pages dirtied through the mapping) and msync the indexes."""
        if self._fd is not None:
            os.fdatasync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()

    def seal(self) -> None:
        """On roll or close: record the final max timestamp, trim log and indexes to size, fsync, go read-only."""
        if not self.active:
            return
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)
        self.offset_index.seal()
        self.time_index.seal()
        self.txn_index.flush()
        self._unmap()
        os.ftruncate(self._fd, self.size)
        files.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        self._file_len = self.size
        self.active = False
        self.next_offset   # keep it: computing it later would need a scan

    def close(self) -> None:
        self.seal()
        self._unmap()
        self.offset_index.close()
        self.time_index.close()

    def release(self) -> None:
        """Drop mappings and descriptors without sealing (the directory is about to be removed)."""
        self._unmap()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        """Remove the files; outstanding read slices stay valid (the inode lives while mapped)."""
        self._unmap()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.offset_index.delete()
        self.time_index.delete()
        self.log_path.unlink(missing_ok=True)
        self.txn_index.delete()


# ---- record-level timestamps ------------------------------------------------------------------------------

def record_timestamps(batch, h: BatchHeader) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of one batch. Uncompressed batches are walked here (only the
    length, timestamp delta and offset delta varints of each record); compressed ones go through
    protocol.records. With LogAppendTime every record carries the batch maxTimestamp."""
    lat = h.max_timestamp if h.is_log_append_time else None
    if h.compression != 0:
        from protocol.records import iter_records
        try:
            for r in iter_records(batch):
                yield r.offset, r.timestamp
        except ValueError:                              # CorruptRecordError: nothing more to find here
            pass
        return
    pos, end = HEADER_SIZE, h.size
    try:
        for _ in range(h.records_count):
            if pos >= end:
                return
            length, body = read_varint(batch, pos)
            ts_delta, p = read_varlong(batch, body + 1)      # skip the record attributes byte
            offset_delta, _ = read_varint(batch, p)
            yield h.base_offset + offset_delta, (h.base_timestamp + ts_delta) if lat is None else lat
            pos = body + length
    except (IndexError, ValueError):
        return                                          # corrupt records section: nothing more to find
