"""Log compaction: Kafka's LogCleaner (the cleaner threads) and LogCleanerManager (which log to clean next, and the
cleaner-offset checkpoints). One cleaning pass is storage/cleaner.py (Cleaner, OffsetMap, CleanerConfig); the cleaned
segment files and how a crash mid-swap is recovered are storage/cleaned_segment.py.

For every log whose `cleanup.policy` contains `compact` the cleaner keeps, per key, at least the record with the
latest offset. A log is split at the **first dirty offset** (kept per partition in `cleaner-offset-checkpoint`):
below it the log is clean (deduplicated by an earlier pass), from it up to the **first uncleanable offset** it is
dirty and cleanable. The uncleanable part is the active segment and every segment from the first one (at or after
the first dirty offset) whose largest timestamp is within `min.compaction.lag.ms` of now.

Which log: every `log.cleaner.backoff.ms` (when the previous round found nothing), the **filthiest** compacted log
whose cleanable ratio `dirty bytes / (clean + dirty bytes)` reaches `min.cleanable.dirty.ratio`, or whose oldest
dirty segment's first batch is older than `max.compaction.lag.ms` (Kafka: needCompactionNow). Strata adds one
trigger: a log whose tombstones reached their delete horizon (see storage/cleaner.py) in an earlier pass is cleaned
again even when no new data arrived, so deletes disappear on time on quiet topics (known per process; after a restart
the next dirty pass removes them).

Threads and the event loop. `Log` is single-threaded: every mutator runs on the broker's event loop. The cleaner
splits a pass accordingly: picking the log and snapshotting its segment list (`Cleaner.prepare`), swapping a
cleaned segment in (`Cleaner.swap` -> `Log.replace_segments`) and writing the checkpoint run on the loop; building
the offset map and copying groups (`build_offset_map`, `group_segments`, `clean_group`) run in a worker thread
(`log.cleaner.threads` of them) that only reads the sealed segments' files through its own read-only mmaps and
writes `.cleaned` files. Sealed segments never change, so the thread needs no lock; what it may race with is
retention or topic deletion removing segments, which the swap detects (`Log.replace_segments` checks that the
replaced segments are still, by identity, consecutive sealed segments of the open log) and which aborts the pass.
The old segments' mappings are dropped, not closed by force: a fetch still holding a memoryview keeps its mmap
(and the unlinked inode) alive until the view dies.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from storage.cleaner.cleaner import (LONG_MAX, _MB, Cleaner, CleanerConfig, CleanerStats, CleaningTask, LogToClean, _Aborted,
                             _LogChanged)
from storage.log.files import write_atomically

log = logging.getLogger("strata.log_cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


def _wall_ms() -> int:
    return int(time.time() * 1000)


# ---- checkpoint --------------------------------------------------------------------------------------------------------

def read_checkpoint(dir: Path) -> int | None:
    """The first dirty offset recorded by the last completed pass, or None."""
    try:
        return int((Path(dir) / CHECKPOINT_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_checkpoint(dir: Path, offset: int) -> None:
    write_atomically(Path(dir) / CHECKPOINT_FILE, f"{offset}\n".encode())


# ---- the manager and its threads ---------------------------------------------------------------------------------------

class LogCleaner:
    """Picks the filthiest compacted log and cleans it (Kafka's LogCleaner + LogCleanerManager).

    `start()`/`stop()` run `log.cleaner.threads` cleaner loops on the running event loop, each doing its file work
    in a worker thread; `clean_once()` does one pass inline (tests, benchmarks). `logs()` lists the (name, Log)
    pairs it may clean (the partition layer hands it that function; the cleaner never sees partitions).
    """

    def __init__(self, config=None, *, logs: Callable[[], Iterable[tuple[str, object]]],
                 time_ms: Callable[[], int] | None = None):
        self.config = config if isinstance(config, CleanerConfig) else CleanerConfig.from_broker_config(config)
        self._logs = logs
        self._time_ms = time_ms
        self._stopping = threading.Event()
        self.cleaners = [Cleaner(self.config, self._stopping) for _ in range(self.config.num_threads)]
        self._in_progress: set[int] = set()
        self._uncleanable: weakref.WeakSet = weakref.WeakSet()
        self._checkpoints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._horizons: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self.dirtiest_ratio = 0.0
        self.passes = 0
        self.last_stats: CleanerStats | None = None

    def _now(self, lg) -> int:
        if self._time_ms is not None:
            return self._time_ms()
        return getattr(lg, "_time_ms", _wall_ms)()

    # ---- choosing a log (LogCleanerManager) --------------------------------------------------------------------------
    def checkpoint(self, lg) -> int | None:
        if lg not in self._checkpoints:
            off = read_checkpoint(lg.dir)
            if off is None:
                return None
            self._checkpoints[lg] = off
        return self._checkpoints[lg]

    def cleanable_offsets(self, lg, now: int) -> tuple[int, int]:
        """(first dirty offset, first uncleanable offset): Kafka's cleanableOffsets."""
        start = lg.log_start_offset
        first_dirty = self.checkpoint(lg)
        if first_dirty is None or first_dirty < start or first_dirty > lg.log_end_offset:
            first_dirty = start
        segs = lg.segments()
        uncleanable = segs[-1].base_offset                 # never the active segment
        # nor anything from the last stable offset on: an open transaction's outcome is not known yet (Kafka)
        uncleanable = min(uncleanable, getattr(lg, "last_stable_offset", uncleanable))
        lag = max(lg.config.min_compaction_lag_ms, 0)
        if lag > 0:
            for i, seg in enumerate(segs[:-1]):
                if segs[i + 1].base_offset > first_dirty and seg.largest_timestamp > now - lag:
                    uncleanable = min(uncleanable, seg.base_offset)
                    break
        return first_dirty, max(first_dirty, uncleanable)

    def log_to_clean(self, name: str, lg, now: int) -> LogToClean:
        first_dirty, uncleanable = self.cleanable_offsets(lg, now)
        segs = lg.segments()
        bases = [s.base_offset for s in segs]
        first_uncleanable = segs[max(0, bisect.bisect_right(bases, uncleanable) - 1)].base_offset
        nexts = bases[1:] + [lg.log_end_offset + 1]
        clean = sum(s.size for s in segs if s.base_offset < first_dirty)
        lo = min(first_dirty, first_uncleanable)
        cleanable = sum(s.size for s, nxt in zip(segs, nexts) if s.base_offset < first_uncleanable and nxt > lo)
        ltc = LogToClean(name, lg, first_dirty, first_uncleanable, clean, cleanable)
        max_lag = max(lg.config.max_compaction_lag_ms, 0)
        if max_lag < LONG_MAX and cleanable:
            firsts = [s.first_batch_max_timestamp() for s, nxt in zip(segs[:-1], nexts) if nxt > first_dirty]
            firsts = [t for t in firsts if t > 0]
            ltc.need_compaction_now = bool(firsts) and min(firsts) < now - max_lag
        horizon = self._horizons.get(lg)
        ltc.tombstones_due = horizon is not None and horizon <= now
        return ltc

    def grab_filthiest_log(self, now: int | None = None) -> LogToClean | None:
        """The compacted log most in need of cleaning, marked in progress; None if none qualifies."""
        best = None
        dirtiest = 0.0
        for name, lg in self._logs():
            if (getattr(lg, "_closed", False) or getattr(lg, "failed", None) is not None
                    or "compact" not in lg.config.cleanup_policy
                    or id(lg) in self._in_progress or lg in self._uncleanable):
                continue
            t = self._now(lg) if now is None else now
            try:
                ltc = self.log_to_clean(name, lg, t)
            except Exception:
                log.exception("cannot size up %s for cleaning; marking it uncleanable", name)
                self._uncleanable.add(lg)
                continue
            if ltc.total_bytes == 0:
                continue
            dirtiest = max(dirtiest, ltc.cleanable_ratio)
            if not ((ltc.cleanable_bytes > 0 and (ltc.need_compaction_now
                                                  or ltc.cleanable_ratio >= lg.config.min_cleanable_dirty_ratio))
                    or (ltc.tombstones_due and ltc.clean_bytes > 0)):
                continue
            if best is None or ltc.cleanable_ratio > best.cleanable_ratio:
                best = ltc
        self.dirtiest_ratio = dirtiest
        if best is not None:
            self._in_progress.add(id(best.log))
        return best

    def _done(self, task: CleaningTask) -> None:
        lg = task.log
        task.stats.end = time.monotonic()
        self.passes += 1
        self.last_stats = task.stats
        if getattr(lg, "_closed", False):
            return
        write_checkpoint(task.dir, task.end_offset)
        self._checkpoints[lg] = task.end_offset
        if task.earliest_horizon is not None:
            self._horizons[lg] = task.earliest_horizon
        else:
            self._horizons.pop(lg, None)
        log.info("cleaned log %s up to offset %d: %s", task.name, task.end_offset, task.stats.summary())

    # ---- inline ------------------------------------------------------------------------------------------------------
    def clean_once(self, now: int | None = None) -> CleaningTask | None:
        """Clean the filthiest log on the calling thread; None if no log needed it (or it changed meanwhile)."""
        ltc = self.grab_filthiest_log(now)
        if ltc is None:
            return None
        cleaner = self.cleaners[0]
        try:
            log.info("beginning cleaning of log %s (ratio %.2f)", ltc.name, ltc.cleanable_ratio)
            task = cleaner.clean(ltc, self._now(ltc.log) if now is None else now)
            self._done(task)
            return task
        except (_LogChanged, _Aborted) as e:
            log.info("cleaning of %s given up: %s", ltc.name, e or type(e).__name__)
            return None
        except Exception:
            self._uncleanable.add(ltc.log)
            raise
        finally:
            self._in_progress.discard(id(ltc.log))
            cleaner.offset_map.clear()

    # ---- on the event loop -------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the cleaner loops on the running event loop (one worker thread each)."""
        loop = asyncio.get_running_loop()
        self._stopping.clear()
        self._executor = ThreadPoolExecutor(max_workers=self.config.num_threads, thread_name_prefix="log-cleaner")
        for i, cleaner in enumerate(self.cleaners):
            self._tasks.append(loop.create_task(self._run(i, cleaner), name=f"log-cleaner-{i}"))
        log.info("log cleaner started: %d thread(s), %d MB offset map each, backoff %d ms", self.config.num_threads,
                 self.config.memory_per_thread // _MB, self.config.backoff_ms)

    def stop(self) -> None:
        """Stop: running copies give up at their next batch and delete their .cleaned files; no swap is half done
        because swaps run on the loop."""
        self._stopping.set()
        for t in self._tasks:
            t.cancel()
        self._tasks.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def _run(self, i: int, cleaner: Cleaner) -> None:
        backoff = max(self.config.backoff_ms, 1) / 1000
        while not self._stopping.is_set():
            try:
                cleaned = await self._clean_filthiest_log(i, cleaner)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner thread %d failed", i)
                cleaned = False
            if not cleaned:
                await asyncio.sleep(backoff)

    async def _clean_filthiest_log(self, i: int, cleaner: Cleaner) -> bool:
        ltc = self.grab_filthiest_log()
        if ltc is None:
            return False
        loop = asyncio.get_running_loop()
        ex = self._executor
        try:
            log.info("cleaner %d: beginning cleaning of log %s (ratio %.2f, dirty offsets %d-%d)", i, ltc.name,
                     ltc.cleanable_ratio, ltc.first_dirty_offset, ltc.first_uncleanable_offset)
            task = cleaner.prepare(ltc, self._now(ltc.log))
            await loop.run_in_executor(ex, cleaner.build_offset_map, task)
            groups = await loop.run_in_executor(ex, cleaner.group_segments, task)
            for group in groups:
                cleaned = await loop.run_in_executor(ex, cleaner.clean_group, task, group)
                if not cleaner.swap(task, group, cleaned):        # on the loop, between appends and reads
                    raise _LogChanged("segments were deleted meanwhile")
            self._done(task)
        except (_LogChanged, _Aborted) as e:
            log.info("cleaning of %s given up: %s", ltc.name, e or type(e).__name__)
        except OSError as e:
            # Kafka's cleaner hands an IOException to the LogDirFailureChannel: the log (and its dir) goes offline.
            log.error("cleaning %s failed: %s", ltc.name, e)
            if not getattr(ltc.log, "_closed", False) and hasattr(ltc.log, "fail"):
                ltc.log.fail(e)
        except Exception:
            if getattr(ltc.log, "_closed", False):           # deleted or shut down under our feet
                log.info("cleaning of %s given up: the log was closed", ltc.name)
            else:
                log.exception("cleaning %s failed; marking it uncleanable until restart", ltc.name)
                self._uncleanable.add(ltc.log)
        finally:
            self._in_progress.discard(id(ltc.log))
            cleaner.offset_map.clear()          # the worker is done with it (cancelled or not, it checks _stopping)
        return True
