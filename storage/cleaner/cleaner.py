"""One cleaning pass over one log: Kafka's Cleaner, with its OffsetMap, CleanerConfig and CleanerStats. Which log is
cleaned when, and the threads that run the pass, are storage/log_cleaner.py.

One pass (Kafka's Cleaner.doClean):

1. **Offset map** (`OffsetMap`): key -> offset of its latest record over the dirty section, oldest segment first.
   Its capacity is Kafka's: `log.cleaner.dedupe.buffer.size / log.cleaner.threads / 24 bytes` slots at load
   factor 0.9 (a 16-byte hash and an 8-byte offset per slot); keys are stored whole in a dict, so the memory used
   is Python's, not the buffer. When it fills, the map stops inside a segment; that pass cleans up to there
   (the "end offset") and the rest stays dirty for the next pass.
2. **Groups**: the segments below the end offset, from the start of the log, are grouped so that the originals of
   one group add up to at most `segment.bytes` (and their indexes to `segment.index.bytes`, their offsets to a
   32-bit range): each group becomes one cleaned segment, so small cleaned segments merge as the log is cleaned
   again (Kafka's groupSegmentsBySize).
3. **Copy** each group into `<base>.log.cleaned` (+ `.index.cleaned`, `.timeindex.cleaned`), batch by batch
   (Kafka's MemoryRecords.filterTo with the cleaner's filter): a record is kept if its offset is past the map's
   latest offset, or it has a key, its offset is the key's latest (or the key is not in the map), and it has a
   value or is a tombstone still within its delete horizon. Records without a key are dropped (a compacted topic
   refuses them at produce). Offsets are never changed: a rewritten batch keeps its base offset, last offset delta,
   producer id/epoch/base sequence, partition leader epoch and attribute bits; only the record count shrinks.
   A batch whose records all survive is copied byte for byte; otherwise the surviving records' bytes are re-used
   as they are (their offset and timestamp deltas still hold) and the section is compressed again with the batch's
   own codec. A batch left empty is dropped, unless it is the last batch of a producer id that is still active,
   which is kept as an empty batch header (Kafka: BatchRetention.RETAIN_EMPTY) so idempotence state survives a
   rebuild from the log. Transactions (cleaned_transactions.py): records of aborted transactions are left out of the
   map and dropped; a marker stays while records of its transaction remain, then gets a delete horizon like a
   tombstone and goes after it; the cleaned segment gets the index entries of the aborted transactions it still
   holds. Nothing from the last stable offset on is cleaned.
4. **Tombstones** (KIP-534): the first pass that keeps a tombstone in a batch without a delete horizon rewrites the
   batch with attribute bit 6 (hasDeleteHorizonMs) set and baseTimestamp = now + `delete.retention.ms` (record
   timestamp deltas are re-based, so every record's timestamp is unchanged for every reader). Later passes drop
   the batch's tombstones once the horizon has passed.
5. **Swap** each cleaned segment in, then write the checkpoint (the end offset) after the last group.
"""
from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from protocol import compression
from protocol.record_batch import (
    CONTROL_BIT, HEADER, HEADER_SIZE, LOG_OVERHEAD, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, BatchHeader, compute_crc,
    read_header,
)
from protocol.records import CorruptRecordError, scan_records
from protocol.wire import varint
from storage.cleaner.cleaned_segment import SWAP_SUFFIX, _CleanedSegment, install_txn_index
from storage.cleaner.cleaned_transactions import CleanedTransactions, with_delete_horizon
from storage.log.files import fsync_dir
from storage.log.log_segment import INDEX_SUFFIX, INT32_MAX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LogSegment, file_name

# Broker settings with Kafka's names and defaults (broker.config.BROKER_DEFAULTS includes them).
CLEANER_DEFAULTS: dict[str, str] = {
    "log.cleaner.enable": "true",
    "log.cleaner.threads": "1",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": "134217728",
}
DELETE_HORIZON_BIT = 0x40          # batch attribute bit 6: baseTimestamp is the delete horizon (KIP-534)
LONG_MAX = 2**63 - 1
_BYTES_PER_ENTRY = 24              # Kafka's SkimpyOffsetMap: MD5 (16 bytes) + offset (8 bytes) per slot
_EMPTY_BATCH_ATTRS = TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT
_U32 = struct.Struct(">I")
_MB = 1024 * 1024


class _Aborted(Exception):
    """The cleaner is stopping or the log was closed/deleted: give the pass up quietly."""


class _LogChanged(Exception):
    """Segments being cleaned were deleted or replaced meanwhile (retention, DeleteRecords): redo later."""


# ---- configuration ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's CleanerConfig (the settings Strata uses)."""
    num_threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    dedupe_buffer_load_factor: float = 0.9
    backoff_ms: int = 15_000
    enable_cleaner: bool = True

    @classmethod
    def from_broker_config(cls, config) -> "CleanerConfig":
        def get(key: str) -> str:
            value = config.get(key) if config is not None else None
            return str(value) if value not in (None, "") else CLEANER_DEFAULTS[key]
        threads = int(get("log.cleaner.threads"))
        if threads < 1:
            raise ValueError(f"log.cleaner.threads must be at least 1, got {threads}")
        return cls(num_threads=threads, dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size")),
                   backoff_ms=int(get("log.cleaner.backoff.ms")),
                   enable_cleaner=get("log.cleaner.enable").strip().lower() == "true")

    @property
    def memory_per_thread(self) -> int:
        return min(self.dedupe_buffer_size // self.num_threads, INT32_MAX)


# ---- offset map --------------------------------------------------------------------------------------------------------

class OffsetMap:
    """key -> offset of the key's latest record in the dirty section, with Kafka's SkimpyOffsetMap capacity
    (`memory // 24` slots, filled to `load_factor`) and its `latest_offset` (last offset put or fast-forwarded to).
    Keys are the record key bytes themselves (no hash collisions)."""

    def __init__(self, memory: int, load_factor: float = 0.9):
        self.slots = max(1, memory // _BYTES_PER_ENTRY)
        self.max_entries = max(1, int(self.slots * load_factor))
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        self._map[key] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self._map.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        self._map = {}
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self._map)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def is_full_for(self, key: bytes) -> bool:
        return len(self._map) >= self.max_entries and key not in self._map


# ---- statistics --------------------------------------------------------------------------------------------------------

@dataclass
class CleanerStats:
    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    batches_rewritten: int = 0
    segments_cleaned: int = 0
    map_entries: int = 0
    map_utilization: float = 0.0
    start: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    end: float = 0.0

    @property
    def elapsed(self) -> float:
        return (self.end or time.monotonic()) - self.start

    @property
    def mb_per_sec(self) -> float:
        """Kafka's figure ("MB of log processed ... MB/sec"): log bytes cleaned per second of the whole pass."""
        return self.bytes_read / _MB / max(self.elapsed, 1e-9)

    @property
    def map_seconds(self) -> float:
        return max((self.map_done or self.start) - self.start, 0.0)

    def summary(self) -> str:
        shrink = 100.0 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0.0
        copy_s = max(self.elapsed - self.map_seconds, 1e-9)
        return (f"{self.bytes_read / _MB:.1f} MB of log ({self.segments_cleaned} segments) processed in "
                f"{self.elapsed:.2f}s ({self.mb_per_sec:.1f} MB/s); indexed {self.map_bytes_read / _MB:.1f} MB in "
                f"{self.map_seconds:.2f}s ({self.map_bytes_read / _MB / max(self.map_seconds, 1e-9):.1f} MB/s), "
                f"{self.map_entries} keys ({100 * self.map_utilization:.1f}% of the map's slots); cleaned "
                f"{self.bytes_read / _MB:.1f} MB in {copy_s:.2f}s ({self.bytes_read / _MB / copy_s:.1f} MB/s) to "
                f"{self.bytes_written / _MB:.1f} MB ({shrink:.0f}% smaller), {self.records_retained}/"
                f"{self.records_read} records kept")


# ---- what to clean -----------------------------------------------------------------------------------------------------

@dataclass
class LogToClean:
    """One candidate log (Kafka's LogToClean): its clean and cleanable bytes and offsets."""
    name: str
    log: object                      # storage.log.log.Log
    first_dirty_offset: int
    first_uncleanable_offset: int    # base offset of the first segment that may not be cleaned
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False
    tombstones_due: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass
class _Source:
    """A sealed segment as the worker thread sees it: its files and offsets, snapshotted on the loop. `seg` is only
    compared by identity at swap time."""
    seg: LogSegment
    base_offset: int
    next_base: int                   # base offset of the following segment: every offset here is below it
    size: int
    path: Path
    index_path: Path
    time_index_path: Path


def _last_of_producer(active: tuple[int, int] | None, h: BatchHeader) -> bool:
    """Whether the batch holds an active producer's state (Kafka's isBatchLastRecordOfProducer): its last data batch
    (the sequence), or, when no data batch is left (a marker bumped the epoch: transaction version 2), a marker of its
    current epoch."""
    if active is None:
        return False
    last_offset, epoch = active
    if last_offset >= 0:
        return h.last_offset == last_offset
    return bool(h.attributes & CONTROL_BIT) and h.producer_epoch == epoch


@dataclass
class CleaningTask:
    """Everything one pass needs, captured on the event loop by `Cleaner.prepare`."""
    log: object
    name: str
    dir: Path
    first_dirty_offset: int
    first_uncleanable_offset: int
    sources: list[_Source]           # every segment below the first uncleanable offset, oldest first
    now: int
    delete_retention_ms: int
    segment_bytes: int
    max_index_size: int
    index_interval_bytes: int
    # producer id -> (last offset of its last data batch or -1, its epoch) (Kafka: lastRecordsOfActiveProducers)
    active_producers: dict[int, tuple[int, int]]
    aborted: list = field(default_factory=list)   # aborted transactions of the range (transaction indexes)
    txns: CleanedTransactions | None = None        # of the walk in progress (the map's, then the groups')
    clean_txns: CleanedTransactions | None = None  # the groups' walk
    stats: CleanerStats = field(default_factory=CleanerStats)
    end_offset: int = -1             # offsets below it are clean after this pass
    earliest_horizon: int | None = None  # of the tombstones this pass keeps (future horizons only)

    def note_horizon(self, horizon: int) -> None:
        if horizon > self.now and (self.earliest_horizon is None or horizon < self.earliest_horizon):
            self.earliest_horizon = horizon


# ---- the segments being read -------------------------------------------------------------------------------------------

class _SegmentFile:
    """The worker's own read-only mapping of a sealed segment's .log, independent of LogSegment's mapping: the loop
    may unmap or delete the segment meanwhile (an unlinked file stays readable while mapped)."""

    def __init__(self, src: _Source):
        self.src = src
        self.mm: mmap.mmap | None = None
        self.mtime: float | None = None

    def __enter__(self):
        try:
            fd = os.open(self.src.path, os.O_RDONLY)
        except FileNotFoundError:
            raise _LogChanged(f"{self.src.path.name} is gone") from None
        try:
            st = os.fstat(fd)
            if st.st_size < self.src.size:
                raise _LogChanged(f"{self.src.path.name} shrank from {self.src.size} to {st.st_size} bytes")
            self.mtime = st.st_mtime
            if self.src.size:
                self.mm = mmap.mmap(fd, self.src.size, access=mmap.ACCESS_READ)
                if hasattr(self.mm, "madvise"):
                    try:
                        self.mm.madvise(mmap.MADV_SEQUENTIAL)
                    except (OSError, ValueError, AttributeError):
                        pass
        finally:
            os.close(fd)
        return self.mm if self.mm is not None else b""

    def __exit__(self, *exc) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None


def _batches(buf, size: int, name: str):
    """(position, header) of each batch of a sealed segment; anything that does not frame is corruption."""
    pos = 0
    while pos < size:
        if size - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{name}: {size - pos} stray bytes at position {pos}")
        h = read_header(buf, pos)
        if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > size:
            raise CorruptRecordError(f"{name}: bad batch header at position {pos}")
        yield pos, h
        pos += h.size


def _section(raw: bytes, codec: int) -> bytes:
    body = raw[HEADER_SIZE:]
    if codec == compression.NONE:
        return body
    try:
        return compression.decompress(codec, body)
    except compression.CompressionError as e:
        raise CorruptRecordError(str(e)) from e


def _empty_batch(h: BatchHeader) -> bytearray:
    """A records-free batch keeping a producer's last offset, sequence and epoch (Kafka's writeEmptyHeader)."""
    buf = bytearray(HEADER_SIZE)
    HEADER.pack_into(buf, 0, h.base_offset, HEADER_SIZE - LOG_OVERHEAD, h.partition_leader_epoch, 2, 0,
                     h.attributes & _EMPTY_BATCH_ATTRS, h.last_offset_delta, -1, h.max_timestamp, h.producer_id,
                     h.producer_epoch, h.base_sequence, 0)
    _U32.pack_into(buf, 17, compute_crc(buf, 0, HEADER_SIZE))
    return buf


# ---- the cleaner -------------------------------------------------------------------------------------------------------

class Cleaner:
    """Cleans one log at a time (Kafka's Cleaner); one per cleaner thread, owning its offset map. `prepare` and
    `swap` run on the event loop, the rest in the worker thread (or all inline: `clean`)."""

    def __init__(self, config: CleanerConfig = CleanerConfig(), stopping: threading.Event | None = None):
        self.config = config
        self.offset_map = OffsetMap(config.memory_per_thread, config.dedupe_buffer_load_factor)
        self._stopping = stopping or threading.Event()

    # ---- on the loop -------------------------------------------------------------------------------------------------
    def prepare(self, ltc: LogToClean, now: int) -> CleaningTask:
        lg = ltc.log
        segs = lg.segments()
        sources = []
        for i, seg in enumerate(segs[:-1]):
            if seg.base_offset >= ltc.first_uncleanable_offset:
                break
            sources.append(_Source(seg, seg.base_offset, segs[i + 1].base_offset, seg.size, seg.log_path,
                                   seg.index_path, seg.time_index_path))
        cfg = lg.config
        producers = {pid: (e.last_offset, e.producer_epoch) for pid, e in lg.producer_state.producers.items()}
        aborted = lg.collect_aborted_transactions(sources[0].base_offset, ltc.first_uncleanable_offset) \
            if sources else []
        return CleaningTask(lg, ltc.name, lg.dir, ltc.first_dirty_offset, ltc.first_uncleanable_offset, sources, now,
                            cfg.delete_retention_ms, min(cfg.segment_bytes, INT32_MAX),
                            min(cfg.segment_index_bytes, INT32_MAX), cfg.index_interval_bytes, producers, aborted)

    def swap(self, task: CleaningTask, group: list[_Source], cleaned: _CleanedSegment) -> bool:
        """Install a cleaned segment in place of `group` (files, then the Log's segment list). False if the log
        moved on meanwhile: the cleaned files are discarded and the pass must stop."""
        lg = task.log
        old = [s.seg for s in group]

        def install() -> LogSegment:
            d, base = task.dir, cleaned.base_offset
            swap_path = d / (file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
            os.replace(cleaned.txn_index_path, d / (file_name(base, TXN_INDEX_SUFFIX) + SWAP_SUFFIX))
            os.replace(cleaned.log_path, swap_path)          # the commit point
            fsync_dir(d)
            for seg in old[1:]:
                seg.delete()
            old[0].release()                                 # its files are replaced by the renames below
            install_txn_index(d, base)
            os.replace(cleaned.index_path, d / file_name(base, INDEX_SUFFIX))
            os.replace(cleaned.time_index_path, d / file_name(base, TIME_INDEX_SUFFIX))
            os.replace(swap_path, d / file_name(base, LOG_SUFFIX))
            fsync_dir(d)
            return LogSegment(d, base, max_index_size=task.max_index_size, active=False,
                              index_interval_bytes=task.index_interval_bytes)

        if lg.replace_segments(old, install):
            task.stats.segments_cleaned += len(old)
            return True
        cleaned.discard()
        return False

    # ---- in the worker thread ----------------------------------------------------------------------------------------
    def _check(self, task: CleaningTask) -> None:
        if self._stopping.is_set() or getattr(task.log, "_closed", False):
            raise _Aborted()

    def build_offset_map(self, task: CleaningTask) -> None:
        """Map the dirty section [first dirty, first uncleanable) until done or the map is full; sets end_offset."""
        m = self.offset_map
        m.clear()
        start, end = task.first_dirty_offset, task.first_uncleanable_offset
        mapped = [s for s in task.sources if s.next_base > start and s.base_offset < end]
        task.txns = CleanedTransactions(task.aborted, mapped[0].base_offset if mapped else start, end)   # aborted
        # records never enter the map
        for src in task.sources:
            if src.next_base <= start or src.base_offset >= end:
                continue
            self._check(task)
            if self._map_segment(task, src, start, min(src.next_base, end)):
                break
        if m.latest_offset < start - 1:
            # nothing dirty (a pass for due tombstones): the clean section is deduplicated already, so the map
            # "covers" it and only its expired tombstones go
            m.latest_offset = start - 1
        task.end_offset = m.latest_offset + 1
        task.stats.map_entries = m.size
        task.stats.map_utilization = m.utilization
        task.stats.map_done = time.monotonic()

    def _map_segment(self, task: CleaningTask, src: _Source, start: int, next_start: int) -> bool:
        """Kafka's buildOffsetMapForSegment; True if the map filled up inside this segment."""
        m = self.offset_map
        d = m._map
        cap = m.max_entries
        stats = task.stats
        with _SegmentFile(src) as buf:
            for pos, h in _batches(buf, src.size, src.path.name):
                stats.map_bytes_read += h.size
                if h.attributes & CONTROL_BIT:
                    task.txns.on_control(h, buf[pos:pos + h.size])
                elif task.txns.on_batch(h):
                    pass                                  # an aborted transaction's: its keys do not count
                elif h.last_offset < start:
                    continue
                elif h.records_count > 0:
                    section = _section(buf[pos:pos + h.size], h.attributes & 0x07)
                    base = h.base_offset
                    spans = scan_records(section, 0, len(section), h.records_count)
                    stats.map_records_read += len(spans)
                    for span in spans:
                        key = span[6]
                        if key is None:
                            continue
                        offset = base + span[5]
                        if offset < start:
                            continue
                        if len(d) >= cap and key not in d:
                            return True
                        d[key] = offset
                        m.latest_offset = offset
                m.latest_offset = h.last_offset
                if self._stopping.is_set():
                    raise _Aborted()
        m.latest_offset = next_start - 1        # offsets gap up to the next segment: fast-forward
        return False

    def group_segments(self, task: CleaningTask) -> list[list[_Source]]:
        """Kafka's groupSegmentsBySize over the segments below the end offset (from the start of the log)."""
        segs = [s for s in task.sources if s.base_offset < task.end_offset]

        def index_sizes(s: _Source) -> tuple[int, int]:
            out = []
            for p in (s.index_path, s.time_index_path):
                try:
                    out.append(os.stat(p).st_size)
                except FileNotFoundError:
                    out.append(0)
            return out[0], out[1]

        sizes = [index_sizes(s) for s in segs]
        groups: list[list[_Source]] = []
        i = 0
        while i < len(segs):
            group = [segs[i]]
            log_size, (idx, tidx) = segs[i].size, sizes[i]
            i += 1
            while i < len(segs):
                s, (si, st) = segs[i], sizes[i]
                if not (log_size + s.size <= task.segment_bytes and idx + si <= task.max_index_size
                        and tidx + st <= task.max_index_size
                        and (s.size == 0 or s.next_base - 1 - group[0].base_offset <= INT32_MAX)):
                    break
                group.append(s)
                log_size, idx, tidx = log_size + s.size, idx + si, tidx + st
                i += 1
            groups.append(group)
        return groups

    def clean_group(self, task: CleaningTask, group: list[_Source]) -> _CleanedSegment:
        """Copy the kept records of `group` into one fsynced `.cleaned` segment (Kafka's cleanSegments, minus the
        swap)."""
        self._check(task)
        out = _CleanedSegment(task.dir, group[0].base_offset, task.index_interval_bytes)
        if task.clean_txns is None:          # one walk over the groups of a pass, in order (Kafka's doClean): a
            # marker in a later group than its transaction's batches still knows them
            task.clean_txns = CleanedTransactions(task.aborted, group[0].base_offset)
        task.txns = task.clean_txns
        task.txns.index = []                 # the aborted transactions this cleaned segment keeps
        try:
            mtime = None
            for src in group:
                self._check(task)
                mtime = self._clean_into(task, src, out)
            out.txn_index = b"".join(e.pack() for e in task.txns.index)
            out.finish(mtime)
            self._check(task)
        except BaseException:
            out.discard()
            raise
        return out

    def _clean_into(self, task: CleaningTask, src: _Source, out: _CleanedSegment) -> float | None:
        stats = task.stats
        with (f := _SegmentFile(src)) as buf:
            for pos, h in _batches(buf, src.size, src.path.name):
                raw = buf[pos:pos + h.size]
                if compute_crc(raw, 0, h.size) != h.crc:
                    raise CorruptRecordError(f"{src.path.name}: CRC mismatch in the batch at offset {h.base_offset}")
                stats.bytes_read += h.size
                kept = self._filter_batch(task, raw, h)
                if kept is not None:
                    data, max_ts = kept
                    out.append(data, h.last_offset, max_ts)
                    stats.bytes_written += len(data)
                if self._stopping.is_set():
                    raise _Aborted()
            return f.mtime

    def _filter_batch(self, task: CleaningTask, raw: bytes, h: BatchHeader):
        """(bytes to write, their max timestamp), or None to drop the batch."""
        stats = task.stats
        attrs = h.attributes
        has_horizon = bool(attrs & DELETE_HORIZON_BIT)
        last_of_producer = _last_of_producer(task.active_producers.get(h.producer_id), h)
        if attrs & CONTROL_BIT:                   # a transaction marker (Kafka's checkBatchRetention)
            if not task.txns.on_control(h, raw):
                return raw, h.max_timestamp
            if not has_horizon:                   # discardable: first it gets a delete horizon, like a tombstone
                horizon = min(task.now + task.delete_retention_ms, LONG_MAX)
                task.note_horizon(horizon)
                stats.batches_rewritten += 1
                return with_delete_horizon(raw, h, horizon), h.max_timestamp
            if task.now < h.base_timestamp:
                task.note_horizon(h.base_timestamp)
                return raw, h.max_timestamp
            return (_empty_batch(h), h.max_timestamp) if last_of_producer else None
        if task.txns.on_batch(h):                 # an aborted transaction's records: gone
            stats.records_read += h.records_count
            return (_empty_batch(h), h.max_timestamp) if last_of_producer and h.records_count else \
                (raw, h.max_timestamp) if last_of_producer else None
        retain_deletes = not has_horizon or task.now < h.base_timestamp
        if h.records_count == 0:                  # an empty batch kept earlier for its producer's state
            return (raw, h.max_timestamp) if last_of_producer else None
        codec = attrs & 0x07
        section = _section(raw, codec)
        spans = scan_records(section, 0, len(section), h.records_count)
        latest = self.offset_map.latest_offset
        get = self.offset_map._map.get
        base = h.base_offset
        kept = []
        tombstones = False
        for span in spans:
            offset = base + span[5]
            if offset <= latest:
                key = span[6]
                if key is None or offset < get(key, -1) or (span[7] and not retain_deletes):
                    continue
            kept.append(span)
            if span[7]:
                tombstones = True
        stats.records_read += len(spans)
        stats.records_retained += len(kept)
        if not kept:
            return (_empty_batch(h), h.max_timestamp) if last_of_producer else None
        need_horizon = tombstones and not has_horizon
        if len(kept) == len(spans) and not need_horizon:
            if tombstones:
                task.note_horizon(h.base_timestamp)
            return raw, h.max_timestamp

        stats.batches_rewritten += 1
        base_ts = h.base_timestamp
        parts: list[bytes] = []
        if need_horizon:
            new_base_ts = min(task.now + task.delete_retention_ms, LONG_MAX)
            for start, attrs_at, ts_end, stop, ts_delta, _o, _k, _t in kept:
                body = section[attrs_at:attrs_at + 1] + varint(base_ts + ts_delta - new_base_ts) + section[ts_end:stop]
                parts.append(varint(len(body)))
                parts.append(body)
            attrs |= DELETE_HORIZON_BIT
        else:
            new_base_ts = base_ts
            run_start = run_end = -1
            for span in kept:                     # whole records, consecutive ones in one slice
                if span[0] != run_end:
                    if run_end >= 0:
                        parts.append(section[run_start:run_end])
                    run_start = span[0]
                run_end = span[3]
            parts.append(section[run_start:run_end])
        if tombstones:
            task.note_horizon(new_base_ts)
        body = b"".join(parts)
        max_ts = h.max_timestamp if attrs & TIMESTAMP_TYPE_BIT else max(base_ts + s[4] for s in kept)
        payload = compression.compress(codec, body) if codec else body
        batch = bytearray(HEADER_SIZE)
        batch += payload
        HEADER.pack_into(batch, 0, base, len(batch) - LOG_OVERHEAD, h.partition_leader_epoch, 2, 0, attrs,
                         h.last_offset_delta, new_base_ts, max_ts, h.producer_id, h.producer_epoch, h.base_sequence,
                         len(kept))
        _U32.pack_into(batch, 17, compute_crc(batch, 0, len(batch)))
        return batch, max_ts

    # ---- everything inline -------------------------------------------------------------------------------------------
    def clean(self, ltc: LogToClean, now: int) -> CleaningTask:
        """One whole pass on the calling thread (tests, benchmarks). Raises _LogChanged if a swap was refused."""
        task = self.prepare(ltc, now)
        self.build_offset_map(task)
        for group in self.group_segments(task):
            cleaned = self.clean_group(task, group)
            if not self.swap(task, group, cleaned):
                raise _LogChanged(f"{task.name} changed while it was being cleaned")
        task.stats.end = time.monotonic()
        return task
