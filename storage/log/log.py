"""One partition's local log: the local part of Kafka's UnifiedLog (LocalLog + LogLoader).

A directory `<log.dirs>/<topic>-<partition>` holds segments named by their 20-digit base offset
(`.log`, `.index`, `.timeindex`), producer-state `.snapshot`s, `leader-epoch-checkpoint` and
`log-start-offset`. Only the last segment is written; older ones were fsynced when rolled, so after a
crash only the last segment (plus any segment whose index files are damaged) is rescanned. After a clean
shutdown nothing is scanned beyond the tail of the active segment past its last index entry.

Everything is synchronous and single-threaded (the broker calls it from its event loop).
"""
from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from protocol.errors import ErrorCode
from protocol.record_batch import TIMESTAMP_TYPE_BIT, BatchHeader, assign_offset, read_header, set_log_append_time
from storage.cleaner.cleaned_segment import complete_interrupted_swaps
from storage.log.files import fsync_dir, read_small, write_atomically
from storage.log.io_errors import handles_io_errors as _io
from storage.log.leader_epoch import LeaderEpochFileCache
from storage.log.log_config import LogConfig
from storage.log.log_segment import INT32_MAX, LOG_SUFFIX, CorruptSegmentError, LogSegment
from storage.log.producer_state import (CompletedTxn, CorruptSnapshotError, ProducerAppendInfo, ProducerStateManager,
                                        snapshot_name)
from storage.log.transaction_index import AbortedTxn
from protocol.records import CorruptRecordError, build_control_batch, read_control_marker

log = logging.getLogger("strata.log")

LOG_START_OFFSET_FILE = "log-start-offset"
_U32 = struct.Struct(">I")
_STRAY_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")


def _wall_ms() -> int:
    return int(time.time() * 1000)


_UNCHECKED = object()       # append_as_leader without KIP-890 verification (tests, verification turned off)


class UnexpectedAppendOffsetError(Exception):
    """A follower append whose offsets do not continue the log (Kafka's UnexpectedAppendOffsetException)."""


class OffsetOutOfRangeError(Exception):
    """A fetch/delete offset outside [log_start_offset, log_end_offset]."""
    error_code = ErrorCode.offset_out_of_range


@dataclass
class AppendResult:
    base_offset: int          # offset of the first record (for a duplicate: the ORIGINAL base offset)
    last_offset: int
    log_append_time: int      # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    error_code: int = 0
    error_message: str | None = None
    duplicate: bool = False


class Log:
    """One partition's local log (the local part of Kafka's UnifiedLog)."""

    def __init__(self, dir: Path, config: LogConfig, *, clean_shutdown: bool = False,
                 time_ms: Callable[[], int] = _wall_ms, producer_id_expiration_ms: int = 86_400_000,
                 remote_log_enabled: bool = False, on_io_error: Callable[[Path, OSError], None] | None = None):
        self.dir = Path(dir)
        self.failed: OSError | None = None     # the I/O error that took this log offline (see _io)
        self.on_io_error = on_io_error
        self.config = config
        # Tiered storage (KIP-405): with remote_log_enabled the log start offset covers the remote tier too, local
        # segments are deleted only once copied (highest_offset_in_remote_storage, kept by the RemoteLogManager)
        # and local retention uses local.retention.*; see storage/tiered/remote_log_manager.py.
        self.remote_log_enabled = remote_log_enabled
        self.highest_offset_in_remote_storage = -1
        self._time_ms = time_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        try:
            os.mkdir(self.dir)                     # one system call when it exists (Path.mkdir adds a stat)
        except FileExistsError:
            pass
        except FileNotFoundError:
            self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.leader_epoch_cache = LeaderEpochFileCache(self.dir)
        except ValueError:
            (self.dir / "leader-epoch-checkpoint").unlink()
            self.leader_epoch_cache = LeaderEpochFileCache(self.dir)
        self.producer_state = ProducerStateManager(self.dir)
        if remote_log_enabled:
            self.set_remote_log_enabled(True)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        self._unflushed_messages = 0
        self._last_flush_ms = time_ms()
        self._load(clean_shutdown)

    # ---- loading and recovery ----------------------------------------------------------------------------
    def _load(self, clean: bool) -> None:
        now = self._time_ms()
        # One directory listing (a broker opens thousands of logs at start-up: per-file pathlib globbing was most of
        # the time). A committed log cleaner swap (.swap) is completed first; then .cleaned/.swap are strays.
        names = os.listdir(self.dir)
        if any(n.endswith(".swap") for n in names):
            complete_interrupted_swaps(self.dir)
            names = os.listdir(self.dir)
        for n in names:
            if n.endswith(_STRAY_SUFFIXES):
                os.unlink(os.path.join(self.dir, n))
        bases = sorted(int(n[:20]) for n in names
                       if len(n) == 20 + len(LOG_SUFFIX) and n.endswith(LOG_SUFFIX) and n[:20].isdigit())
        present = set(bases)
        for n in names:                  # indexes whose .log is gone (crash mid-delete)
            stem, dot, suffix = n.partition(".")
            if suffix in ("index", "timeindex", "txnindex") and stem.isdigit() and int(stem) not in present:
                os.unlink(os.path.join(self.dir, n))
        ckpt_start = self._read_log_start_offset() if LOG_START_OFFSET_FILE in names else 0
        interval = self.config.index_interval_bytes
        isize = min(self.config.segment_index_bytes, INT32_MAX)
        segs = [LogSegment(self.dir, b, max_index_size=isize, active=(i == len(bases) - 1),
                           index_interval_bytes=interval) for i, b in enumerate(bases)]
        fresh = not segs
        if fresh:
            segs = [LogSegment.create(self.dir, ckpt_start, isize, interval)]
        # Sealed segments were fsynced on roll; only damaged index files make us rescan one.
        i = 0
        while i < len(segs) - 1:
            seg = segs[i]
            if not (seg.offset_index.file_ok() and seg.time_index.file_ok()):
                if seg.recover():
                    for later in segs[i + 1:]:
                        later.delete()
                    seg.close()
                    segs = segs[:i] + [LogSegment(self.dir, seg.base_offset, max_index_size=isize, active=True,
                                                  index_interval_bytes=interval)]
                    clean = False
                    break
            i += 1
        self._segments = segs
        self._bases = [s.base_offset for s in segs]
        active = segs[-1]
        if not fresh and not (clean and active.load_clean()):      # a new log has nothing to recover
            active.recover(self._recovered_batch_epoch)
        leo = active.next_offset
        if active.size:
            ts = active.first_batch_max_timestamp()
            active.rolling_base_ms = min(ts, now) if ts >= 0 else now
        self.log_end_offset = leo
        self.leader_epoch_cache.truncate_from_end(leo)
        start = max(ckpt_start, segs[0].base_offset)
        if self.remote_log_enabled and ckpt_start < segs[0].base_offset:
            start = ckpt_start                # [log start, local log start) lives in the remote tier
        if start > leo:
            self.truncate_fully_and_start_at(start)
        self.log_start_offset = start
        # The partition layer owns the high watermark (replication/partition.py) and raises it as replicas catch
        # up; the log keeps it only to never delete, tier or clean beyond it. Kafka restores it from the
        # replication-offset checkpoint; until a partition advances it, it starts at the log start.
        self.high_watermark = start
        self.leader_epoch_cache.truncate_from_start(start)
        self._load_producer_state(now, names)
        # Loading read the active segment through a mapping (and Python's mmap holds a dup of the descriptor): drop
        # it, so an idle partition costs one open file, not two; the first read maps it again. With 10,000+
        # partitions the two descriptors each ran past a 20,000 open-file limit.
        for seg in self._segments:
            seg.drop_mapping()

    def _recovered_batch_epoch(self, h: BatchHeader) -> None:
        """During recovery, re-learn leader epochs from batch headers (as Kafka's LogSegment.recover)."""
        epoch = h.partition_leader_epoch
        last = self.leader_epoch_cache.latest_entry()
        if epoch >= 0 and (last is None or epoch > last.epoch or (epoch == last.epoch and h.base_offset < last.start_offset)):
            self.leader_epoch_cache.assign(epoch, h.base_offset)

    def _load_producer_state(self, now: int, names: list[str] | None = None, replay_from: int | None = None) -> None:
        """Latest snapshot at or below the log end (and `replay_from`), then replay the batch headers after it (a
        marker's record too: it completes its transaction, and an abort is put back in the segment's transaction
        index if missing)."""
        self.active_segment.txn_index.truncate_to(self.log_end_offset)    # entries of a tail recovery cut off
        snap = self.producer_state.load_latest(self.log_end_offset, now, names, replay_from)
        start = self._segments[0].base_offset if snap is None else snap
        if start >= self.log_end_offset:
            return
        for seg in self._segments[self._segment_index(start):]:
            try:
                found = seg.translate_offset(start)
            except CorruptSegmentError as e:      # a damaged sealed segment: its reads answer CORRUPT_MESSAGE
                log.error("%s: producer state not replayed past a corrupt batch: %s", self.dir.name, e)
                return
            if found is None:
                continue
            for pos, h in seg.batches(found[0]):
                if h.base_offset >= start:
                    self._replay(seg, h, now, seg.slice(pos, pos + h.size) if h.is_control else None)

    def _replay(self, seg: LogSegment, h: BatchHeader, now: int, batch=None) -> None:
        """Producer state from a batch read back or replicated; `batch`: a control batch's bytes."""
        marker = None
        if batch is not None:
            try:
                marker = read_control_marker(batch)
            except (CorruptRecordError, ValueError) as e:
                log.warning("%s: unreadable control batch at %d: %s", self.dir.name, h.base_offset, e)
        txn = self.producer_state.replay(h, now, marker)
        if txn is not None:
            self._index_completed(seg, txn)

    def _index_completed(self, seg: LogSegment, txn: CompletedTxn) -> None:
        """An aborted transaction goes into the transaction index of the segment holding its marker, with the last
        stable offset then (Kafka's updateTxnIndex); either kind then waits for the high watermark to be stable."""
        if txn.is_aborted:
            seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                            self.producer_state.last_stable_offset_after(txn)))
        self.producer_state.on_high_watermark(self.high_watermark)

    def _read_log_start_offset(self) -> int:
        try:
            return max(0, int(read_small(self.dir / LOG_START_OFFSET_FILE).decode().strip()))
        except (FileNotFoundError, ValueError):
            return 0

    def _set_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = offset
        write_atomically(self.dir / LOG_START_OFFSET_FILE, f"{offset}\n".encode())
        self.leader_epoch_cache.truncate_from_start(offset)

    @_io
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset` (log start beyond the recovered end)."""
        for seg in self._segments:
            seg.delete()
        self._segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_end_offset = self.high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.delete_snapshots_after(-1)
        self.producer_state.clear()

    @_io
    def restart_at(self, offset: int, log_start: int | None = None, epochs=(), producer_snapshot=None) -> None:
        """A follower whose log is all below the leader's (local) log start starts over there (Kafka's
        truncateFullyAndStartAt). For a tiered log (KIP-405) the log start can stay lower, `log_start`: the
        offsets between live in the remote tier; `epochs` ((epoch, start offset) from the remote segment below
        `offset`) rebuild the leader-epoch history so the follower can take part in KIP-101 truncation, and
        `producer_snapshot` (that segment's `.snapshot`, the producer state at `offset`) the idempotence state."""
        self.truncate_fully_and_start_at(offset)
        for epoch, start in epochs:
            if start < offset:
                self.leader_epoch_cache.assign(epoch, start)
        if producer_snapshot:
            write_atomically(self.producer_state.dir / snapshot_name(offset), producer_snapshot)
            try:
                self.producer_state.load_snapshot(offset, self._time_ms())
            except CorruptSnapshotError as e:
                log.warning("%s: producer snapshot from the remote tier refused: %s", self.dir.name, e)
                self.producer_state.delete_snapshot(offset)
        start = offset if log_start is None or not self.remote_log_enabled else min(log_start, offset)
        self._set_log_start_offset(start)

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.create(self.dir, base_offset, min(self.config.segment_index_bytes, INT32_MAX),
                                 self.config.index_interval_bytes)

    def fail(self, error: OSError, *, report: bool = True) -> None:
        """Take the log offline after `error` (called by the log cleaner too): the first failure is logged and
        reported through `on_io_error`; the broker marks the other logs of a failed dir with `report=False`."""
        if self.failed is not None:
            return
        self.failed = error
        if report:
            log.error("%s: offline after an I/O error: %s", self.dir.name, error)
            if self.on_io_error is not None:
                self.on_io_error(self.dir, error)

    # ---- accessors ---------------------------------------------------------------------------------------
    def update_config(self, config: LogConfig) -> None:
        """Takes effect at the next append/roll (index sizes at the next roll)."""
        self.config = config

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def local_log_start_offset(self) -> int:
        """First offset held locally; equals log_start_offset unless older data lives in the remote tier."""
        return max(self.log_start_offset, self._segments[0].base_offset)

    def set_remote_log_enabled(self, enabled: bool) -> None:
        """Tiering on/off for this log. While on, producer snapshots are kept for every local segment (the copy
        task uploads the one at each segment's end) and removed with the segments, as Kafka does."""
        self.remote_log_enabled = enabled
        self.producer_state.snapshots_to_keep = 2**31 if enabled else 3

    @property
    def remote_copy_enabled(self) -> bool:
        """Kafka's remoteLogEnabledAndRemoteCopyEnabled (KIP-950 remote.log.copy.disable)."""
        return self.remote_log_enabled and not self.config.remote_log_copy_disable

    def only_local_log_segments_size(self) -> int:
        """Bytes of local segments not yet in the remote tier (Kafka's onlyLocalLogSegmentsSize)."""
        hi = self.highest_offset_in_remote_storage
        return sum(s.size for s in self._segments if s.base_offset >= hi)

    @_io
    def update_log_start_offset_from_remote_tier(self, offset: int) -> None:
        """Remote retention deleted segments up to offset-1: move the log start (never beyond the high watermark);
        local segments below it go at the next retention pass."""
        offset = min(offset, self.high_watermark)
        if offset > self.log_start_offset:
            self._set_log_start_offset(offset)

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def producer_snapshot(self):
        """Producer id -> ProducerStateEntry (for DescribeProducers and tests)."""
        return self.producer_state.active_producers()

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # ---- appends -----------------------------------------------------------------------------------------
    @_io
    def append_as_leader(self, records, headers: list[BatchHeader], leader_epoch: int,
                         coordinator_origin: bool = False, verification_guard=_UNCHECKED) -> AppendResult:
        """Append validated batches: assign offsets (headers are updated in place too), apply LogAppendTime,
        check idempotence, roll if needed, write, index, and track producer and leader-epoch state."""
        now = self._time_ms()
        cfg = self.config
        total = headers[0].size if len(headers) == 1 else sum(h.size for h in headers)
        segment_bytes = min(cfg.segment_bytes, INT32_MAX)
        if not headers or total > segment_bytes:
            return AppendResult(-1, -1, -1, self.log_start_offset, ErrorCode.record_list_too_large,
                                f"batch of {total} bytes exceeds segment.bytes {cfg.segment_bytes}")
        log_append_time = cfg.message_timestamp_type == "LogAppendTime"
        pos, offset = 0, self.log_end_offset
        for h in headers:
            assign_offset(records, pos, offset, leader_epoch)
            h.base_offset, h.partition_leader_epoch = offset, leader_epoch
            if log_append_time:
                set_log_append_time(records, pos, h.size, now)
                h.max_timestamp, h.attributes = now, h.attributes | TIMESTAMP_TYPE_BIT
                h.crc = _U32.unpack_from(records, pos + 17)[0]
            offset += h.last_offset_delta + 1
            pos += h.size

        infos: dict[int, ProducerAppendInfo] = {}
        for h in headers:
            if h.producer_id < 0:
                continue
            dup = self.producer_state.find_duplicate(h) if not coordinator_origin else None
            if dup is not None:
                return AppendResult(dup.first_offset, dup.last_offset, dup.timestamp if log_append_time else -1,
                                    self.log_start_offset, duplicate=True)
            info = infos.get(h.producer_id)
            if info is None:
                info = infos[h.producer_id] = self.producer_state.prepare(h.producer_id)
            err = info.validate(h, check_sequence=not coordinator_origin)
            if err is None and h.is_transactional and verification_guard is not _UNCHECKED and \
                    (info.txn_first_offset < 0 or h.producer_epoch != info.epoch) and \
                    not self.producer_state.verified(h.producer_id, verification_guard):
                err = (ErrorCode.invalid_txn_state, f"transactional batch of producer {h.producer_id} is not part of an "
                                                    f"ongoing transaction verified with its coordinator")
            if err is not None:
                return AppendResult(-1, -1, -1, self.log_start_offset, err[0], err[1])
            info.append(h)

        last_offset = offset - 1
        active = self.active_segment
        if active.should_roll(cfg, total, len(headers), last_offset, now):
            self.roll()
            active = self.active_segment
        data = records if len(records) == total else memoryview(records)[:total]
        active.append(data, headers, index_interval_bytes=cfg.index_interval_bytes, segment_bytes=segment_bytes,
                      now_ms=now)
        first = headers[0].base_offset
        latest = self.leader_epoch_cache.latest_epoch()
        if leader_epoch >= 0 and (latest is None or leader_epoch > latest):
            self.leader_epoch_cache.assign(leader_epoch, first)   # a leader never writes in an older epoch
        for info in infos.values():
            self.producer_state.commit(info, now)
        self.log_end_offset = offset
        self._unflushed_messages += offset - first
        if self._unflushed_messages >= cfg.flush_messages:
            self.flush()
        return AppendResult(first, last_offset, now if log_append_time else -1, self.log_start_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Set by the partition layer (Kafka's UnifiedLog.updateHighWatermark): clamped to [log start, log end]."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark(self.high_watermark)
        return self.high_watermark

    # ---- transactions ------------------------------------------------------------------------------------
    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided and replicated: what read_committed consumers may read (Kafka's
        lastStableOffset: the first unstable offset, capped at the high watermark)."""
        first = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        return hw if first is None or first >= hw else max(first, self.log_start_offset)

    @_io
    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      leader_epoch: int) -> AppendResult:
        """Write a transaction marker as leader (Kafka's appendAsLeader with the coordinator origin): a control batch
        ending the producer's transaction here. A marker from an older producer epoch is INVALID_PRODUCER_EPOCH, one
        from an older coordinator epoch TRANSACTION_COORDINATOR_FENCED; nothing is written then."""
        err = self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if err is not None:
            return AppendResult(-1, -1, -1, self.log_start_offset, err[0], err[1])
        now = self._time_ms()
        batch = bytearray(build_control_batch(producer_id, producer_epoch, coordinator_epoch, commit, now))
        offset = self.log_end_offset
        assign_offset(batch, 0, offset, leader_epoch)
        h = read_header(batch)
        active = self.active_segment
        if active.should_roll(self.config, len(batch), 1, offset, now):
            self.roll()
            active = self.active_segment
        active.append(batch, [h], index_interval_bytes=self.config.index_interval_bytes,
                      segment_bytes=min(self.config.segment_bytes, INT32_MAX), now_ms=now)
        latest = self.leader_epoch_cache.latest_epoch()
        if leader_epoch >= 0 and (latest is None or leader_epoch > latest):
            self.leader_epoch_cache.assign(leader_epoch, offset)
        self.log_end_offset = offset + 1
        self._replay(active, h, now, batch)
        self._unflushed_messages += 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(offset, offset, -1, self.log_start_offset)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound) from the local segments' indexes (Kafka's
        collectAbortedTransactions): a read_committed Fetch returns them so the consumer drops their records."""
        out: list[AbortedTxn] = []
        for seg in self._segments[self._segment_index(fetch_offset):]:
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    @_io
    def append_as_follower(self, records, headers: list[BatchHeader]) -> AppendResult:
        """Append batches as the leader wrote them (offsets, leader epochs and timestamps kept): Kafka's
        UnifiedLog.appendAsFollower. Offsets must not go backwards (a gap is allowed: compacted leaders); producer
        state and the leader-epoch cache are rebuilt from the headers, so a follower can become leader."""
        now = self._time_ms()
        cfg = self.config
        if not headers:
            return AppendResult(-1, -1, -1, self.log_start_offset)
        first = headers[0].base_offset
        if first < self.log_end_offset:
            raise UnexpectedAppendOffsetError(f"follower append at {first} below the log end offset "
                                              f"{self.log_end_offset} of {self.dir.name}")
        prev = first
        for h in headers:
            if h.base_offset < prev:
                raise UnexpectedAppendOffsetError(f"batch offsets go backwards at {h.base_offset} in {self.dir.name}")
            prev = h.last_offset + 1
        total = sum(h.size for h in headers)
        segment_bytes = min(cfg.segment_bytes, INT32_MAX)
        last_offset = headers[-1].last_offset
        active = self.active_segment
        if active.should_roll(cfg, total, len(headers), last_offset, now) or \
                last_offset - active.base_offset > INT32_MAX:
            self.roll()
        data = records if len(records) == total else memoryview(records)[:total]
        active = self.active_segment
        active.append(data, headers, index_interval_bytes=cfg.index_interval_bytes,
                      segment_bytes=segment_bytes, now_ms=now)
        self.log_end_offset = last_offset + 1
        pos = 0
        for h in headers:
            epoch = h.partition_leader_epoch
            latest = self.leader_epoch_cache.latest_epoch()
            if epoch >= 0 and (latest is None or epoch > latest):
                self.leader_epoch_cache.assign(epoch, h.base_offset)
            if h.producer_id >= 0:
                self._replay(active, h, now, memoryview(records)[pos:pos + h.size] if h.is_control else None)
            pos += h.size
        self._unflushed_messages += sum(h.records_count for h in headers)
        if self._unflushed_messages >= cfg.flush_messages:
            self.flush()
        return AppendResult(first, last_offset, -1, self.log_start_offset)

    @_io
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and beyond `offset` (a follower's divergent tail, KIP-101/279). Whole batches go;
        segments above it are deleted, indexes, producer state and the leader-epoch cache follow, and the high
        watermark never stays above the new end. Returns True if anything was removed.

        Truncating at or beyond the end removes no record but still drops leader-epoch entries that start at the
        end, as Kafka's UnifiedLog.truncateTo does: a broker made leader that appended nothing before losing the
        role has its epoch's start at its log end; left there, every fetch sends that epoch as last_fetched_epoch,
        the leader answers the same diverging epoch, and the follower loops without ever fetching a record."""
        if offset >= self.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(max(offset, self.log_start_offset))
            return True
        keep = self._segment_index(offset)
        for seg in self._segments[keep + 1:]:
            seg.delete()
        target = self._segments[keep]
        self._segments = self._segments[:keep + 1]
        self._bases = self._bases[:keep + 1]
        if not target.active:
            target.close()
            target = LogSegment(self.dir, target.base_offset, max_index_size=min(self.config.segment_index_bytes,
                                INT32_MAX), active=True, index_interval_bytes=self.config.index_interval_bytes)
            self._segments[-1] = target
        target.truncate_to(offset)
        self.log_end_offset = target.next_offset
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        now = self._time_ms()
        target.txn_index.truncate_to(offset)
        self.producer_state.delete_snapshots_after(self.log_end_offset)
        self.producer_state.clear()
        # from a snapshot at or below the high watermark: transactions completed above it are replayed, so they
        # stay unstable until the high watermark passes their markers again (a snapshot does not keep them)
        self._load_producer_state(now, replay_from=self.high_watermark)
        fsync_dir(self.dir)
        return True

    def assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        """A new leader's epoch starts at its log end (Kafka's maybeAssignEpochStartOffset), written before any
        batch of that epoch so OffsetForLeaderEpoch and diverging-epoch checks answer right away."""
        latest = self.leader_epoch_cache.latest_epoch()
        if epoch >= 0 and (latest is None or epoch > latest):
            self.leader_epoch_cache.assign(epoch, offset)

    def epoch_start_offset(self, epoch: int) -> int:
        """Where `epoch` starts in this log (0 when the cache does not know it)."""
        for e in self.leader_epoch_cache.entries:
            if e.epoch == epoch:
                return e.start_offset
        return 0

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101/279): (largest epoch <= `epoch`, the first offset after it), or
        (-1, -1) when unknown."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    @_io
    def roll(self) -> LogSegment:
        """Seal the active segment (fsynced) and start a new one at the log end; snapshot producer state."""
        active = self.active_segment
        if active.size == 0:
            return active
        active.seal()
        self.leader_epoch_cache.flush()       # epochs that start in the sealed segment are never rescanned
        seg = self._new_segment(self.log_end_offset)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self.producer_state.take_snapshot(self.log_end_offset)
        fsync_dir(self.dir)
        return seg

    # ---- reads -------------------------------------------------------------------------------------------
    @_io
    def read(self, fetch_offset: int, max_bytes: int, *, min_one_message: bool = True,
             max_offset: int | None = None) -> list[memoryview]:
        """Whole batches from the one containing fetch_offset, at most max_bytes (unless min_one_message and
        the first batch alone is larger), none starting at or beyond max_offset. Zero-copy mmap slices."""
        leo = self.log_end_offset
        start = self.local_log_start_offset
        if fetch_offset < start or fetch_offset > leo:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} is outside [{start}, {leo}] of {self.dir.name}")
        limit = leo if max_offset is None else min(max_offset, leo)
        out: list[memoryview] = []
        if fetch_offset >= limit:
            return out
        budget, min_one = max_bytes, min_one_message
        for seg in self._segments[self._segment_index(fetch_offset):]:
            if seg.base_offset >= limit:
                break
            found = seg.translate_offset(fetch_offset)
            if found is None:
                continue
            start, h = found
            if h.base_offset >= limit:
                break
            end = seg.batch_end(start, budget, limit, min_one)
            if end == start:
                break
            out.append(seg.slice(start, end))
            budget -= end - start
            min_one = False
            if end < seg.size or budget <= 0:
                break
        return out

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record at/after log start with timestamp >=
        `timestamp` (time index to skip ahead, then record-level timestamps), or None."""
        for seg in self._segments:
            if seg.max_timestamp_so_far < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, self.local_log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_entry(self) -> tuple[int, int] | None:
        """ListOffsets -3: (offset, timestamp) of the first record carrying the largest timestamp."""
        best = -1
        for seg in self._segments:
            best = max(best, seg.max_timestamp_so_far)
        return self.fetch_offset_by_timestamp(best) if best >= 0 else None

    # ---- deletion ----------------------------------------------------------------------------------------
    @_io
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset (-1 = high watermark); returns the low watermark."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(f"cannot delete records up to {offset}: high watermark is "
                                        f"{self.high_watermark}")
        if offset > self.log_start_offset:
            self._set_log_start_offset(offset)
            self._delete_segments(self._deletable(self._below_log_start))
        return self.log_start_offset

    def _below_log_start(self, seg: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= self.log_start_offset

    def _in_remote_tier(self, seg: LogSegment, nxt: LogSegment | None, upper: int) -> bool:
        """Kafka's isSegmentEligibleForDeletion: with remote copy on, only copied segments (or ones below the
        log start) may go."""
        if not self.remote_copy_enabled:
            return True
        return (0 < upper and upper - 1 <= self.highest_offset_in_remote_storage) or \
            (nxt is not None and self.log_start_offset >= nxt.base_offset)

    @_io
    def delete_old_segments(self) -> int:
        """Retention (Kafka's deleteOldSegments): segments below the log start, then, for cleanup.policy
        delete, by retention.ms (largest timestamp) and retention.bytes. Returns how many were deleted.

        Tiered logs (remote copy on) use local.retention.ms/bytes (-2 = the total retention) and delete a segment
        only once the remote tier holds it (or the log start passed it); only the local log start moves. The
        active segment is rolled when it alone breaches retention so the copy task can offload it."""
        now = self._time_ms()
        cfg = self.config
        n = self._delete_segments(self._deletable(self._below_log_start))
        if "delete" in cfg.cleanup_policy:
            tiered = self.remote_copy_enabled
            retention_ms = cfg.local_retention_ms_effective if tiered else cfg.retention_ms
            retention_bytes = cfg.local_retention_bytes_effective if tiered else cfg.retention_bytes
            if retention_ms >= 0:
                n += self._delete_segments(self._deletable(
                    lambda seg, nxt: now - seg.largest_timestamp > retention_ms))
            if retention_bytes >= 0:
                excess = self.size_bytes() - retention_bytes

                def over_size(seg: LogSegment, nxt) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True
                n += self._delete_segments(self._deletable(over_size))
        self.producer_state.remove_expired(now, self.producer_id_expiration_ms)
        return n

    def _deletable(self, predicate) -> list[LogSegment]:
        """Oldest segments matching `predicate`, stopping at the first that does not; only segments wholly
        below the high watermark; never the active segment when it is empty."""
        out = []
        segs = self._segments
        should_roll = False
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if (nxt is None and seg.size == 0) or self.high_watermark < upper or not predicate(seg, nxt):
                break
            if nxt is None and self.remote_log_enabled:
                should_roll = True            # the active segment breached retention: roll it so it can be tiered
            if not self._in_remote_tier(seg, nxt, upper):
                break
            out.append(seg)
        if should_roll:
            self.roll()
        return out

    def _delete_segments(self, doomed: list[LogSegment]) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self.roll()                       # always keep an active segment: roll a fresh empty one first
        ids = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in ids]
        self._bases = [s.base_offset for s in self._segments]
        for seg in doomed:
            seg.delete()
        first = self._segments[0].base_offset
        if self.remote_log_enabled:
            # only the local log start moves (it is derived from the first segment); the remote tier keeps the rest
            for off in self.producer_state.snapshot_offsets():
                if off < first:
                    self.producer_state.delete_snapshot(off)
        elif first > self.log_start_offset:
            self._set_log_start_offset(first)
        return len(doomed)

    # ---- compaction (storage/cleaner/) ------------------------------------------------------------------
    @_io
    def replace_segments(self, old: list[LogSegment], install: Callable[[], LogSegment]) -> bool:
        """Swap `old`, consecutive sealed segments of this log, for the one segment `install()` puts on disk and
        opens (the log cleaner's swap). Runs on the event loop like every mutator. Returns False, doing nothing,
        if the log is closed or `old` is no longer in it as it was (retention or a truncation got there first)."""
        segs = self._segments
        if self._closed or not old:
            return False
        i = next((k for k, s in enumerate(segs) if s is old[0]), -1)
        if i < 0 or i + len(old) >= len(segs) or any(segs[i + k] is not s for k, s in enumerate(old)):
            return False
        new = install()
        self._segments = segs[:i] + [new] + segs[i + len(old):]
        self._bases = [s.base_offset for s in self._segments]
        return True

    # ---- durability and lifecycle ------------------------------------------------------------------------
    @_io
    def flush(self) -> None:
        """fsync the active segment and its indexes (older segments were fsynced when rolled)."""
        self.active_segment.flush()
        self.leader_epoch_cache.flush()
        self._unflushed_messages = 0
        self._last_flush_ms = self._time_ms()

    @_io
    def maybe_flush(self) -> None:
        if self._unflushed_messages and self._time_ms() - self._last_flush_ms >= self.config.flush_ms:
            self.flush()

    @_io
    def close(self) -> None:
        """Seal every segment (active one trimmed to its size and fsynced) and snapshot producer state, so
        that a reopen with clean_shutdown=True scans nothing."""
        if self._closed:
            return
        self._closed = True
        for seg in self._segments:
            seg.close()
        self.leader_epoch_cache.flush()
        self.producer_state.take_snapshot(self.log_end_offset)

    def release(self) -> None:
        """Drop descriptors and mappings without writing anything (the log's dir failed: nothing more goes to it)."""
        self._closed = True
        for seg in self._segments:
            seg.release()

    def delete(self) -> None:
        """Remove the whole partition directory (outstanding read slices stay valid)."""
        self._closed = True
        for seg in self._segments:
            seg.release()
        shutil.rmtree(self.dir, ignore_errors=True)
