"""Reads from the remote tier (KIP-405): Kafka's RemoteLogReader (a bounded pool of remote reads) and
RemoteIndexCache, plus parallel ranged reads of segments (remote_chunks.py).

Reads below the local log start go through `read()` on a bounded reader pool (`remote.log.reader.threads` tasks,
`remote.log.reader.max.pending.tasks` waiting), with a per-segment index cache and parallel ranged reads with an
adaptive read-ahead within `remote.fetch.max.memory.bytes` (remote_chunks.py); the Fetch handler waits for them at
most `remote.fetch.max.wait.ms`.

`RemoteLogReader` is mixed into RemoteLogManager (storage/tiered/remote_log_manager.py) rather than being an object of its
own: it works on the manager's state (rsm, rlmm, metrics, reader slots and caches), which RemoteLogManager.__init__
sets up from the broker config with the rest.
"""
from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections import OrderedDict
from typing import Callable, Iterator

from protocol.record_batch import HEADER_SIZE, read_header
from storage.log.log import OffsetOutOfRangeError
from storage.log.log_segment import record_timestamps
from storage.log.transaction_index import AbortedTxn, collect_aborted, parse_entries
from storage.tiered.eager import eager
from storage.tiered.remote_chunks import RangedObject
from storage.tiered.remote_log_metadata import (RemoteLogSegmentMetadata, RemoteLogSegmentState,
                                                RemoteResourceNotFoundException, RemoteStorageException)
from storage.tiered.remote_storage_manager import IndexType

S = RemoteLogSegmentState
TXN_INDEXES_AHEAD = 32     # transaction indexes of later segments requested at once by a read_committed fetch (small
#                            GETs: a cold walk over 16 segments took three store round trips at 8)
EMPTY_WALKS = 1024         # partitions whose walks of transaction indexes are remembered (EmptyWalks)
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


# ---- caches -------------------------------------------------------------------------------------------------------
class _TxnIndex:
    """A remote segment's aborted transactions (its `.txnindex`, Kafka's TransactionIndex)."""
    __slots__ = ("entries", "size")

    def __init__(self, entries: list[AbortedTxn]):
        self.entries = entries
        self.size = 34 * len(entries) + 64


class _Indexes:
    """A remote segment's offset and time index in Kafka's on-disk formats, searched where they lie (as Kafka's
    OffsetIndex and TimeIndex search their mappings): parsing every entry into lists took ~2 ms of the event loop
    per 64 MiB segment of 16 KiB batches, once for each segment a consumer reads."""
    __slots__ = ("base", "offset_index", "time_index", "n_offsets", "n_times", "size")

    def __init__(self, base: int, offset_index: bytes, time_index: bytes):
        self.base = base
        self.offset_index, self.time_index = offset_index, time_index
        self.n_offsets = _entries(offset_index, _OFFSET_ENTRY.size)
        self.n_times = _entries(time_index, _TIME_ENTRY.size)
        self.size = len(offset_index) + len(time_index) + 64

    def position_for(self, offset: int) -> int:
        """Position of the batch to start scanning at for `offset` (largest entry with offset <= target)."""
        i = _last_at_most(self.offset_index, _OFFSET_ENTRY, self.n_offsets, offset - self.base)
        return _OFFSET_ENTRY.unpack_from(self.offset_index, i * _OFFSET_ENTRY.size)[1] if i >= 0 else 0

    def offset_for_timestamp(self, ts: int) -> int:
        i = _last_at_most(self.time_index, _TIME_ENTRY, self.n_times, ts)
        return self.base + _TIME_ENTRY.unpack_from(self.time_index, i * _TIME_ENTRY.size)[1] if i >= 0 else self.base


def _entries(index: bytes, width: int) -> int:
    """The entries of an index before its preallocated zero tail (an index uploaded untrimmed), by bisection: past
    the first, an entry is all zeros only in the tail (the entries before it increase)."""
    lo, hi = 1, len(index) // width
    if hi == 0:
        return 0
    zero = bytes(width)
    while lo < hi:
        mid = (lo + hi) // 2
        if index[mid * width:(mid + 1) * width] == zero:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _last_at_most(index: bytes, entry: struct.Struct, n: int, target: int) -> int:
    """The last of the first `n` entries whose first field (the relative offset, or the timestamp) is <= target
    (the index increases in it), or -1."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if entry.unpack_from(index, mid * entry.size)[0] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


class _LruFutures:
    """An LRU of futures keyed by anything, bounded by the byte size of completed values; concurrent requests for one
    key share one fetch, failed fetches are forgotten."""

    def __init__(self, capacity: int, sizeof: Callable[[object], int]):
        self.capacity = capacity
        self.sizeof = sizeof
        self.entries: OrderedDict = OrderedDict()
        self.bytes = 0

    def get(self, key, make: Callable[[], "asyncio.Future"]):
        fut = self.entries.get(key)
        if fut is not None:
            self.entries.move_to_end(key)
            return fut
        fut = asyncio.ensure_future(make())
        self.entries[key] = fut
        fut.add_done_callback(lambda f, k=key: self._done(k, f))
        return fut

    def _done(self, key, fut) -> None:
        if fut.cancelled() or fut.exception() is not None:
            if self.entries.get(key) is fut:
                del self.entries[key]
            return
        if self.entries.get(key) is not fut:
            return
        self.bytes += self.sizeof(fut.result())
        while self.bytes > self.capacity and len(self.entries) > 1:
            old_key, old = next(iter(self.entries.items()))
            if old_key == key:
                break
            del self.entries[old_key]
            if old.done() and not old.cancelled() and old.exception() is None:
                self.bytes -= self.sizeof(old.result())

    def drop(self, pred) -> None:
        for key in [k for k in self.entries if pred(k)]:
            fut = self.entries.pop(key)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.bytes -= self.sizeof(fut.result())


class _ReaderSlot:
    """A read task's slot in the reader pool (`remote.log.reader.threads`). Kafka's reader threads block on the store;
    here the slot is given back while the task waits for a GET, so the pool bounds the reads working, not those
    waiting (the memory budget bounds the GETs), and many partitions' reads wait on the store at once."""
    __slots__ = ("rlm", "held")

    def __init__(self, rlm):
        self.rlm, self.held = rlm, False

    async def acquire(self) -> None:
        await self.rlm._reader_slots.acquire()
        self.held = True
        self.rlm._active_reads += 1

    def release(self) -> None:
        if self.held:
            self.held = False
            self.rlm._active_reads -= 1
            self.rlm._reader_slots.release()

    async def wait(self, fut: asyncio.Future):
        """`fut`'s result, with the slot given back meanwhile (not taken again if the task is cancelled); at once
        if it is done. Shielded: other reads may wait for the same future."""
        if fut.done():
            return fut.result()
        self.release()
        self.rlm._waiting_reads += 1
        try:
            result = await asyncio.shield(fut)
        finally:
            self.rlm._waiting_reads -= 1
        await self.acquire()
        return result


class ResumePositions:
    """Where the last reads of remote segments ended: (segment id, next offset) -> position of the next batch.
    A consumer's next fetch asks for exactly that offset, and starting there is what the offset index and a scan
    would find (every batch before it ends below the offset). The index alone starts one batch early (Kafka's
    entries hold a batch's last offset), often in the chunk the reader has passed and the cache has evicted: a
    whole GET again for one header. Bounded: the oldest are forgotten."""

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        self.entries: OrderedDict = OrderedDict()

    def put(self, key, pos: int) -> None:
        self.entries[key] = pos
        self.entries.move_to_end(key)
        if len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def get(self, key) -> int | None:
        """Kept after use: consumers of other groups may read the same offsets."""
        pos = self.entries.get(key)
        if pos is not None:
            self.entries.move_to_end(key)
        return pos


class EmptyWalks:
    """Per partition, the remote segments after which a walk of transaction indexes found no entry, valid for one
    (segments version, epochs version): replaced whole when either changes. The partitions walked last are kept."""

    def __init__(self, capacity: int = EMPTY_WALKS):
        self.capacity = capacity
        self.entries: OrderedDict = OrderedDict()     # tip -> (stamp, set of segment ids)

    def empty_after(self, tip, stamp, segment_id) -> bool:
        e = self.entries.get(tip)
        return e is not None and e[0] == stamp and segment_id in e[1]

    def remember(self, tip, stamp, segments) -> None:
        e = self.entries.get(tip)
        if e is None or e[0] != stamp:
            e = self.entries[tip] = (stamp, set())
        self.entries.move_to_end(tip)
        e[1].update(s.segment_id.id for s in segments)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def drop(self, tip) -> None:
        self.entries.pop(tip, None)


def segment_key(md) -> tuple:
    """(tip, segment id as an int): how a segment's object and indexes are keyed in the caches. The int, not the UUID:
    the chunk cache hashes keys tens of times per Fetch, and UUID's hash is Python code."""
    return md.tip, md.segment_id.id.int


def _txn_key(md) -> tuple:
    """A segment's transaction index in the index cache (its offset and time indexes are segment_key)."""
    return *segment_key(md), "txn"


def _epochs_version(lg) -> int | None:
    """The version of the leader's epoch cache, which _following's path depends on."""
    epochs = lg.leader_epoch_cache if lg is not None else None      # as _following finds them
    return epochs.version if epochs is not None else None


class RemoteLogReader:
    """Fetch reads and ListOffsets lookups below the local log start, for RemoteLogManager."""

    # ---- reads ----------------------------------------------------------------------------------------------------
    def in_remote_range(self, lg, offset: int) -> bool:
        return lg.remote_log_enabled and lg.log_start_offset <= offset < lg.local_log_start_offset

    def remote_read(self, topic: str, partition: int, lg, offset: int, max_bytes: int,
                    min_one_message: bool, read_committed: bool = False) -> asyncio.Future:
        """Start (or join) a remote read of whole batches at `offset`. A read that outlives one Fetch's
        remote.fetch.max.wait.ms stays registered so the client's retry of the same offset picks up its result.
        `read_committed`: the Fetch will look up aborted transactions once the read is done; their first index GETs
        start now, with the read (_walk_ahead)."""
        key = (topic, partition, offset)
        task = self._inflight_reads.get(key)
        if task is not None:
            return task
        if self._pending_reads >= self.max_pending_reads:
            raise RemoteStorageException(f"remote log reader queue is full ({self._pending_reads} pending)")
        tip = self.tip_of(topic, partition)
        progress: list[memoryview] = []
        # eagerly: a read whose chunks are cached is done here, and the Fetch answers at once (eager.py); its GETs
        # go to the store before the transaction indexes' (on S3 they share max_concurrency connections)
        task = eager(self._read_task(tip, lg, offset, max_bytes, min_one_message, progress))
        task.progress = progress       # whole batches read so far: what a Fetch that stops waiting answers
        if read_committed:
            self._walk_ahead(tip, lg, offset)
        if task.done():                # the Fetch that started it takes its outcome now: nothing to register
            if not task.cancelled():
                task.exception()       # a Fetch that fails before taking it leaves no "never retrieved" log
            return task
        self._inflight_reads[key] = task
        task.add_done_callback(lambda f, k=key: self._read_done(k, f))
        return task

    def _read_done(self, key, task) -> None:
        # keep an unclaimed result briefly for a client that gave up waiting, then forget it (the timer holds only
        # the key and the task's id, so a claimed result is freed at once)
        if not task.cancelled():
            task.exception()         # a read nobody claims any more fails quietly (its Fetch answered already)
        if self._inflight_reads.get(key) is not task:
            return
        if task.cancelled() or not self._running:
            del self._inflight_reads[key]
            return
        self._read_timers[key] = asyncio.get_running_loop().call_later(30, self._expire_read, key, id(task))

    def _expire_read(self, key, task_id: int) -> None:
        self._read_timers.pop(key, None)
        task = self._inflight_reads.get(key)
        if task is not None and id(task) == task_id:
            del self._inflight_reads[key]

    def consumed(self, topic: str, partition: int, offset: int, task: asyncio.Task) -> None:
        key = (topic, partition, offset)
        if self._inflight_reads.get(key) is task:
            del self._inflight_reads[key]
            timer = self._read_timers.pop(key, None)
            if timer is not None:
                timer.cancel()

    async def _read_task(self, tip, lg, offset, max_bytes, min_one, progress=None):
        topic = tip.topic
        slot = _ReaderSlot(self)
        self._pending_reads += 1
        self._reads_under_way += 1
        try:
            await slot.acquire()
        except BaseException:
            self._reads_under_way -= 1
            raise
        finally:
            self._pending_reads -= 1
        t0 = time.monotonic()
        try:
            self.metrics.fetch_requests.labels(topic).inc()
            views = await self.read(tip, lg, offset, max_bytes, min_one, progress, slot)
            self.metrics.fetch_bytes.labels(topic).inc(sum(len(v) for v in views))
            return views
        except OffsetOutOfRangeError:
            raise
        except asyncio.CancelledError:
            raise
        except Exception:
            self.metrics.fetch_errors.labels(topic).inc()
            raise
        finally:
            self._reads_under_way -= 1
            slot.release()
            self.metrics.reader_time.observe(time.monotonic() - t0)

    def segment_for_offset(self, tip, lg, offset: int) -> RemoteLogSegmentMetadata | None:
        epoch = lg.leader_epoch_cache.epoch_for_offset(offset)
        md = self.rlmm.remote_log_segment_metadata(tip, epoch, offset) if epoch is not None else None
        if md is None:
            for s in self.rlmm.list_remote_log_segments(tip):
                if s.state == S.COPY_SEGMENT_FINISHED and s.start_offset <= offset <= s.end_offset:
                    md = s
        return md

    def _following(self, tip, md: RemoteLogSegmentMetadata, lg=None) -> Iterator[RemoteLogSegmentMetadata]:
        """The finished segments after `md`, each the one a reader goes on to after the one before. With the leader's
        log `lg`, Kafka's findNextSegmentMetadata: the segment holding the offset after the previous one's end in the
        leader epoch that `lg`'s epoch cache gives that offset. Segments may overlap: a new leader, whose segments roll
        at other offsets than its predecessor's, tiers its segment holding the first offset not tiered yet, e.g.
        [100, 249] beside the old leader's [100, 199]; the one starting first past [100, 199]'s end would skip
        [200, 249] (and the aborted transactions whose markers are there). Without `lg`, or where the epochs find
        none, that one, from one listing (sorted by start offset) for the whole walk: a walk over many segments must
        not list and scan them once per step."""
        epochs = lg.leader_epoch_cache if lg is not None else None
        listing = None
        end = md.end_offset
        while True:
            nxt = None
            if epochs is not None:
                epoch = epochs.epoch_for_offset(end + 1)
                if epoch is not None:
                    nxt = self.rlmm.remote_log_segment_metadata(tip, epoch, end + 1)
            if nxt is None:
                if listing is None:
                    listing = iter(self.rlmm.list_remote_log_segments(tip))
                # `end` only grows, so what this passes over is behind every later step too
                nxt = next((s for s in listing if s.state == S.COPY_SEGMENT_FINISHED and s.start_offset > end), None)
                if nxt is None:
                    return
            yield nxt
            end = nxt.end_offset

    def _next_segment(self, tip, md: RemoteLogSegmentMetadata, lg=None) -> RemoteLogSegmentMetadata | None:
        return next(self._following(tip, md, lg), None)

    async def read(self, tip, lg, offset: int, max_bytes: int, min_one: bool,
                   progress: list | None = None, slot: _ReaderSlot | None = None) -> list[memoryview]:
        """Kafka's RemoteLogManager.read: whole batches from the remote segment holding `offset`, at most
        max_bytes (the first batch whatever its size with min_one). Zero-copy slices of cached chunks. `progress`
        (the list returned) holds the whole batches read so far at any time; `slot`, the reader pool's slot the
        read holds, is given back while it waits for the store."""
        md = self.segment_for_offset(tip, lg, offset)
        if md is None:
            raise OffsetOutOfRangeError(f"offset {offset} of {tip} is not in the remote tier")
        wait = slot.wait if slot is not None else None
        for _ in range(1000):
            pos = self._resume_at.get((md.segment_id.id, offset))
            if pos is None and offset <= md.start_offset:
                # from its first batch (or from the next segment, below): the first chunk's GET need not wait for the
                # offset index's. The index is still requested (cached for seeks; its small GETs give the store
                # estimate its latency: remote_chunks.py)
                pos = 0
                self._index(md)
            if pos is None:
                idx = self._index(md)               # shared: a cancelled reader must not cancel it for others
                idx = await (wait(idx) if wait is not None else asyncio.shield(idx))
                pos = idx.position_for(offset)
            views = await self._read_batches(md, pos, offset, max_bytes, min_one,
                                             progress if progress is not None else [], wait)
            if views is None:
                return []                            # the first batch is larger than max_bytes (not min_one)
            if views:
                return views
            md = self._next_segment(tip, md, lg)     # nothing at/after offset here (e.g. compacted away)
            if md is None:
                break
        return []

    async def collect_aborted_transactions(self, topic: str, partition: int, lg, start: int,
                                           upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper) from the remote segments' TRANSACTION indexes, then the
        local log's past the local log start (Kafka's RemoteLogManager.collectAbortedTransactions): what a
        read_committed Fetch served from the remote tier returns."""
        tip = self.tip_of(topic, partition)
        md = self.segment_for_offset(tip, lg, start) if tip is not None else None
        out, seen, complete = await self._walk_aborted(tip, md, lg, start, upper, self._empty_walks)
        if complete is None:                     # the segments or epochs changed under a remembered walk: afresh
            out, seen, complete = await self._walk_aborted(tip, md, lg, start, upper, None)
        if complete:
            return out                   # no later entry can overlap (Kafka's TxnIndexSearchResult)
        # a segment both uploaded and still local has its entries in both places
        return out + [e for e in lg.collect_aborted_transactions(start, upper)
                      if (e.producer_id, e.first_offset) not in seen]

    async def _walk_aborted(self, tip, md, lg, start: int, upper: int, walks: "EmptyWalks | None"):
        """(entries, their (producer id, first offset), complete) from `md` and the remote segments after it; complete
        None when `walks` was used and the segments or epochs changed meanwhile (its answer may be short).

        Without aborted transactions the walk passes every later segment at every fetch (a consumer catching up on a
        long topic: O(segments) per fetch). Where it found none after `md`, `walks` remembers that for `md` and every
        segment on its path (a consumer goes on to them) while the partition's segments and the leader's epochs
        (which choose the path) are unchanged: the indexes themselves never change. A walk from a segment so
        remembered reads its own index only; one reaching such a segment stops after that one's index."""
        out: list[AbortedTxn] = []
        seen: set[tuple[int, int]] = set()     # (producer id, first offset): overlapping segments index it twice
        if md is None:
            return out, seen, False

        stamp = self._walk_stamp(tip, lg) if walks is not None else None
        remembered = stamp is not None and walks.empty_after(tip, stamp, md.segment_id.id)
        used = remembered
        ahead = [md]                            # segments whose index GETs were started, in order
        following = iter(()) if remembered else self._following(tip, md, lg)
        path = []                               # the segments walked after md
        found_after = False
        while ahead:                 # a transaction's entry is in its marker's segment, which may come later
            while len(ahead) < TXN_INDEXES_AHEAD and (nxt := next(following, None)) is not None:
                ahead.append(nxt)    # their GETs at once, not one store round trip after another
                self._txn_index(nxt)
                if (stamp is not None and walks.empty_after(tip, stamp, nxt.segment_id.id)
                        and self._walk_stamp(tip, lg) == stamp):
                    following, used = iter(()), True    # what follows `nxt` is what followed it from there
            seg = ahead.pop(0)
            if seg is not md:
                path.append(seg)
            index = self._txn_index(seg)
            # shared with other fetches; a cached index is taken as it is (the walk passes every later segment)
            index = index.result() if index.done() else await asyncio.shield(index)
            found, complete = collect_aborted(index.entries, start, upper)
            found_after = found_after or (bool(index.entries) and seg is not md)
            for e in found:              # Kafka collects them in a set of (producer id, first offset)
                if (e.producer_id, e.first_offset) not in seen:
                    seen.add((e.producer_id, e.first_offset))
                    out.append(e)
            if complete:
                return out, seen, True
        if stamp is not None and self._walk_stamp(tip, lg) != stamp:
            return out, seen, (None if used else False)     # not remembered: what it walked may be stale
        if stamp is not None and not found_after:
            walks.remember(tip, stamp, [md, *path])
        return out, seen, False

    def _walk_ahead(self, tip, lg, offset: int) -> None:
        """Request the transaction indexes a read_committed Fetch's lookup will take first: the lookup needs the
        read's end (Kafka's order), and done after it would add a store round trip or two to a cold Fetch (at 30 ms a
        GET, ~100 ms measured at 16 segments). Those of the segment holding `offset` and of the next ones its walk
        requests at once (TXN_INDEXES_AHEAD), up to the first remembered as empty (EmptyWalks: the walk stops
        there); nothing once its own is cached (a reader going on within the segment: its walk's GETs were made)."""
        md = self.segment_for_offset(tip, lg, offset) if tip is not None else None
        if md is None or _txn_key(md) in self._indexes.entries:
            return
        stamp = self._walk_stamp(tip, lg)
        for seg in itertools.chain((md,), itertools.islice(self._following(tip, md, lg), TXN_INDEXES_AHEAD - 1)):
            self._txn_index(seg)
            if stamp is not None and self._empty_walks.empty_after(tip, stamp, seg.segment_id.id):
                return                  # as the walk: nothing after a segment remembered as empty is read

    def _walk_stamp(self, tip, lg) -> tuple | None:
        """(segments version, epochs version): what a remembered walk holds for (EmptyWalks); None when the metadata
        manager keeps no version (nothing is remembered then)."""
        version = self.rlmm.segments_version(tip)
        return (version, _epochs_version(lg)) if version is not None else None

    def _txn_index(self, md: RemoteLogSegmentMetadata):
        async def load():
            try:
                data = await self.rsm.fetch_index(md, IndexType.TRANSACTION)
            except RemoteResourceNotFoundException:
                data = b""                       # the segment had no aborted transaction: no index was uploaded
            # any other error fails the fetch (and is not cached): never "no aborted transactions" by accident
            return _TxnIndex(parse_entries(data))
        return self._indexes.get(_txn_key(md), load)

    def _index(self, md: RemoteLogSegmentMetadata):
        async def load():
            off, ts = await asyncio.gather(self.rsm.fetch_index(md, IndexType.OFFSET),
                                           self.rsm.fetch_index(md, IndexType.TIMESTAMP))
            return _Indexes(md.start_offset, off, ts)
        return self._indexes.get(segment_key(md), load)

    def _object(self, md: RemoteLogSegmentMetadata) -> RangedObject:
        """The segment's .log object for the ranged reads (remote_chunks.py); at its end, read-ahead goes on with the
        next segment's indexes and first chunk (the one starting first past its end, without the leader's epochs: where
        segments overlap that may be one the reader will not read, which costs a read-ahead, not wrong data). The RSM
        refuses a short answer (retriable), so a truncated GET fails the read and is not cached."""
        def after(window: int, count: int) -> bool:
            nxt = self._next_segment(md.tip, md)
            if nxt is None:
                return True                     # none tiered yet: looked for again once the reader moves on
            self._index(nxt)
            return self._ranged.start(self._object(nxt), window, count)
        into = None
        if self.rsm.reads_into:
            def into(start: int, end: int, buf: memoryview):
                return self.rsm.fetch_log_segment(md, start, end, buf)
        return RangedObject(segment_key(md), md.segment_size_in_bytes,
                            lambda start, end: self.rsm.fetch_log_segment(md, start, end), after, into)

    async def _range(self, md, start: int, end: int, cur: list, wait=None) -> list[memoryview]:
        """Views covering [start, end) of the segment; `cur` keeps the last chunk between calls; `wait` as for
        RangedReads.range."""
        try:
            return await self._ranged.range(self._object(md), start, end, cur, wait)
        except ValueError as e:
            raise RemoteStorageException(f"{md.segment_id} is shorter than its metadata says: {e}") from None

    async def _read_batches(self, md, pos: int, offset: int, max_bytes: int, min_one: bool,
                            out: list[memoryview], wait=None) -> list[memoryview] | None:
        """Whole batches from `pos`, appended to `out` (only ever whole batches, whose bytes all arrived). Batches
        lying in the chunk at hand go out as one view per run, not one per batch: a response of many small views
        costs the socket's writelines more than the batches' bytes do. A run is appended before the reader waits
        for the next chunk, so that `out` has what was read when a Fetch stops waiting. None when the first batch at
        the offset is larger than max_bytes (and not min_one): the read must answer nothing, not go on elsewhere."""
        size = md.segment_size_in_bytes
        cur = [-1, None]
        total = 0
        after = offset                              # the offset after the last batch taken
        run = pos                                   # [run, pos): whole batches read and not appended yet

        def in_chunk(end: int) -> bool:             # [pos, end) lies in the chunk at hand
            if cur[1] is None:
                return False
            base = cur[0][0] * cur[0][1]
            return base <= pos and end <= base + len(cur[1])

        while pos + HEADER_SIZE <= size:
            if in_chunk(pos + HEADER_SIZE):         # most batches: the header is in the chunk at hand
                h = read_header(cur[1], pos - cur[0][0] * cur[0][1])
            else:                                   # the run first: reading on may wait for the next chunk
                if run < pos:
                    out.extend(await self._range(md, run, pos, cur, wait))
                    run = pos
                head = await self._range(md, pos, pos + HEADER_SIZE, cur, wait)
                h = read_header(head[0] if len(head) == 1 else b"".join(head), 0)
            bsize = h.size
            if h.batch_length <= 0 or pos + bsize > size:
                raise RemoteStorageException(f"corrupt batch at position {pos} of {md.segment_id}")
            if h.last_offset < offset:
                pos += bsize
                run = pos
                continue
            if total + bsize > max_bytes and not (min_one and total == 0 and not out):
                if total == 0 and not out:
                    return None                     # a batch is here but does not fit: not "nothing here"
                break
            if not in_chunk(pos + bsize):           # it goes on in the next chunk: the run first, then all of it
                if run < pos:
                    out.extend(await self._range(md, run, pos, cur, wait))
                out.extend(await self._range(md, pos, pos + bsize, cur, wait))
                run = pos + bsize
            total += bsize
            pos += bsize
            after = h.last_offset + 1
            if total >= max_bytes:
                break
        if run < pos:
            out.extend(await self._range(md, run, pos, cur, wait))
        if total and pos < size:                    # where a consumer's next fetch starts (see ResumePositions)
            self._resume_at.put((md.segment_id.id, after), pos)
        return out

    # ---- ListOffsets ----------------------------------------------------------------------------------------------
    def latest_tiered(self, lg) -> tuple[int, int]:
        """ListOffsets -5 (KIP-1005): (highest tiered offset, its epoch); (-1, -1) when nothing is tiered."""
        hi = lg.highest_offset_in_remote_storage
        if hi < 0:
            return -1, -1
        epoch = lg.leader_epoch_cache.epoch_for_offset(hi)
        return hi, (epoch if epoch is not None else -1)

    async def find_offset_by_timestamp(self, topic: str, partition: int, lg, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after log start with timestamp >= ts in the remote tier
        (time index -> offset index -> batches), or None (then the caller searches the local log)."""
        tip = self.tip_of(topic, partition)
        start = lg.log_start_offset
        for md in self.rlmm.list_remote_log_segments(tip):
            if md.state != S.COPY_SEGMENT_FINISHED or md.end_offset < start or md.max_timestamp_ms < ts:
                continue
            idx = await asyncio.shield(self._index(md))
            pos = idx.position_for(max(idx.offset_for_timestamp(ts), start))
            found = await self._scan_timestamp(md, pos, ts, start)
            if found is not None:
                return found
        return None

    async def _scan_timestamp(self, md, pos: int, ts: int, start: int) -> tuple[int, int] | None:
        size = md.segment_size_in_bytes
        cur = [-1, None]
        while pos + HEADER_SIZE <= size:
            head = b"".join(await self._range(md, pos, pos + HEADER_SIZE, cur))
            h = read_header(head, 0)
            if h.max_timestamp >= ts and h.last_offset >= start:
                batch = b"".join(await self._range(md, pos, pos + h.size, cur))
                for off, rts in record_timestamps(batch, h):
                    if rts >= ts and off >= start:
                        return off, rts
            pos += h.size
        return None
