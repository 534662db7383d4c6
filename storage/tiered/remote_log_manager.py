"""RemoteLogManager (KIP-405): tiers closed segments of `remote.storage.enable` topics to an object store, expires
them by retention, serves reads and timestamp lookups below the local log start, and deletes a topic's remote data.

Per tiered partition one asyncio task runs every `remote.log.manager.task.interval.ms` (Kafka's RLMTask):

1. copy (RLMCopyTask): every closed segment whose end is below the last stable offset and above what is already
   tiered, oldest first: COPY_SEGMENT_STARTED -> RSM copy (new segment id per attempt) -> COPY_SEGMENT_FINISHED, then
   `log.highest_offset_in_remote_storage` moves. A failed copy publishes DELETE_SEGMENT_STARTED, deletes what was
   written and publishes DELETE_SEGMENT_FINISHED; the round stops and the next one retries with a new id.
2. expiration (RLMExpirationTask): retries segments stuck in DELETE_SEGMENT_STARTED and orphaned copies, then deletes
   segments below the log start offset (DeleteRecords), past retention.ms (max timestamp) or beyond retention.bytes
   (local-only bytes + remote bytes), oldest first, stopping at the first one that stays; the log start offset is
   moved past them BEFORE their objects go, so no reader is sent to a deleted segment.
3. local retention: Log.delete_old_segments(), which for tiered logs applies local.retention.* and deletes only
   segments already in the remote tier (and rolls the active segment when it alone breaches local retention).

Reads below the local log start (Fetch, and ListOffsets by timestamp) are the RemoteLogReader mixin in
storage/tiered/remote_log_reader.py.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
import uuid
from typing import Callable, Iterable, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from storage.log.log import Log
from storage.objectstore.object_store import open_object_store
from storage.tiered.remote_log_metadata import (
    RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, RemotePartitionDeleteState,
    REMOTE_LOG_METADATA_TOPIC, InternalTopic, RemoteStorageException, TopicBasedRemoteLogMetadataManager, TopicIdPartition,
)
from storage.tiered.remote_chunks import ChunkCache, RangedReads
from storage.tiered.remote_log_reader import EmptyWalks, RemoteLogReader, ResumePositions, _LruFutures, segment_key
from storage.tiered.remote_storage_manager import IndexType, LogSegmentData, RemoteStorageManager

log = logging.getLogger("strata.remote_log_manager")

S = RemoteLogSegmentState


def is_internal_topic(name: str) -> bool:
    return name.startswith("__")


# ---- metrics ------------------------------------------------------------------------------------------------------
class RemoteStorageMetrics:
    """Kafka's tiered-storage metrics in Prometheus form: `kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec`
    becomes the counter `kafka_server_brokertopicmetrics_remote_copy_bytes_total{topic}` (rates are Prometheus'
    job), gauges keep their names (`..._remote_copy_lag_bytes{topic,partition}`)."""

    def __init__(self, registry: CollectorRegistry):
        ns = "kafka_server_brokertopicmetrics"

        def counter(name, doc):
            return Counter(name, doc, ["topic"], namespace=ns, registry=registry)

        def gauge(name, doc):
            return Gauge(name, doc, ["topic", "partition"], namespace=ns, registry=registry)
        self.copy_bytes = counter("remote_copy_bytes", "RemoteCopyBytesPerSec: bytes copied to the remote tier")
        self.copy_requests = counter("remote_copy_requests", "RemoteCopyRequestsPerSec: segment copies")
        self.copy_errors = counter("remote_copy_errors", "RemoteCopyErrorsPerSec: failed segment copies")
        self.fetch_bytes = counter("remote_fetch_bytes", "RemoteFetchBytesPerSec: bytes read from the remote tier")
        self.fetch_requests = counter("remote_fetch_requests", "RemoteFetchRequestsPerSec: remote reads")
        self.fetch_errors = counter("remote_fetch_errors", "RemoteFetchErrorsPerSec: failed remote reads")
        self.delete_requests = counter("remote_delete_requests", "RemoteDeleteRequestsPerSec: segment deletions")
        self.delete_errors = counter("remote_delete_errors", "RemoteDeleteErrorsPerSec: failed segment deletions")
        self.copy_lag_bytes = gauge("remote_copy_lag_bytes", "RemoteCopyLagBytes: closed bytes not yet tiered")
        self.copy_lag_segments = gauge("remote_copy_lag_segments", "RemoteCopyLagSegments: closed segments not yet tiered")
        self.delete_lag_bytes = gauge("remote_delete_lag_bytes", "RemoteDeleteLagBytes: remote bytes awaiting deletion")
        self.delete_lag_segments = gauge("remote_delete_lag_segments", "RemoteDeleteLagSegments: remote segments awaiting deletion")
        self.log_size_bytes = gauge("remote_log_size_bytes", "RemoteLogSizeBytes: bytes in the remote tier")
        self.metadata_count = gauge("remote_log_metadata_count", "RemoteLogMetadataCount: remote segments known")
        pool = "kafka_storage_remotestoragethreadpool"
        self.reader_queue = Gauge("remote_log_reader_task_queue_size", "RemoteLogReaderTaskQueueSize: reads "
                                  "waiting for a reader slot", namespace=pool, registry=registry)
        self.reader_active = Gauge("remote_log_reader_active_tasks", "reads holding a reader slot",
                                   namespace=pool, registry=registry)
        self.reader_waiting = Gauge("remote_log_reader_waiting_tasks", "reads waiting for the store, their reader "
                                    "slot given back meanwhile (Strata)", namespace="strata", registry=registry)
        self.reader_time = Histogram("remote_log_reader_fetch_time_seconds", "RemoteLogReaderFetchRateAndTimeMs: "
                                     "time of one remote read", namespace="kafka_log_remote", registry=registry,
                                     buckets=(.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.get_time = Histogram("remote_log_reader_get_time_seconds", "time of one GET of a remote segment "
                                  "chunk or index, first byte to last (Strata)", namespace="strata",
                                  registry=registry, buckets=(.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.fetch_expires = Counter("expires", "DelayedRemoteFetchMetrics ExpiresPerSec: remote reads not done "
                                     "within remote.fetch.max.wait.ms", namespace="kafka_server_delayedremotefetchmetrics",
                                     registry=registry)

    def forget(self, topic: str, partition: int) -> None:
        for g in (self.copy_lag_bytes, self.copy_lag_segments, self.delete_lag_bytes, self.delete_lag_segments,
                  self.log_size_bytes, self.metadata_count):
            try:
                g.remove(topic, str(partition))
            except KeyError:
                pass


class _ChunkCacheCollector:
    """The remote read buffer's figures, read at scrape time (Strata's own; docs/tiered-storage.md#metrics)."""

    def __init__(self, cache: ChunkCache):
        self.cache = cache

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        c, ns = self.cache, "strata_remote_log_reader_"
        held, memory = c.figures()        # this runs in the metrics server's thread: no recount (figures())
        yield GaugeMetricFamily(ns + "buffer_bytes", "bytes of remote segment chunks held, in flight or read",
                                value=c.bytes)
        yield GaugeMetricFamily(ns + "in_flight_bytes", "bytes of remote segment GETs not yet answered",
                                value=c.in_flight)
        yield GaugeMetricFamily(ns + "held_bytes", "bytes of chunks evicted but still held by responses being sent",
                                value=held)
        yield GaugeMetricFamily(ns + "memory_bytes", "memory remote segment chunks take: answered ones held or still "
                                "held by responses, GETs under way, and free buffers kept for reuse", value=memory)
        yield GaugeMetricFamily(ns + "free_buffer_bytes", "bytes of chunk buffers nothing refers to, kept for the next "
                                "GETs (within remote.fetch.max.memory.bytes)", value=c.free.bytes)
        yield GaugeMetricFamily(ns + "memory_peak_bytes", "the most memory_bytes has been since the broker started",
                                value=c.peak)
        yield GaugeMetricFamily(ns + "buffer_limit_bytes", "remote.fetch.max.memory.bytes", value=c.capacity)
        for name, value, doc in (("chunk_hits", c.hits, "reads of a chunk already held"),
                                 ("chunk_waits", c.waits, "reads of a chunk still on its way (read ahead)"),
                                 ("chunk_misses", c.misses, "reads that had to start their chunk's GET"),
                                 ("read_ahead_bytes", c.ahead_bytes, "bytes requested ahead of a reader"),
                                 ("buffers_reused", c.free.reused, "GETs read into a chunk buffer used before"),
                                 ("read_ahead_wasted_bytes", c.wasted_bytes,
                                  "bytes read ahead and evicted before any reader used them")):
            yield CounterMetricFamily(ns + name, doc, value=value)


class LeaderLogs(Protocol):
    """What the RemoteLogManager sees of the partition layer: the logs this broker leads (only leaders copy to
    and expire the remote tier) and topic ids. replication.replica_manager.ReplicaManager provides it."""

    def leader_logs(self) -> Iterable[tuple[str, int, Log]]: ...

    def leader_log(self, topic: str, partition: int) -> Log | None: ...

    def follower_logs(self) -> Iterable[tuple[str, int, Log]]: ...

    def topic_id(self, topic: str) -> uuid.UUID | None: ...


# ---- per-partition state ------------------------------------------------------------------------------------------
@dataclass(eq=False)
class _PartitionTask:
    tip: TopicIdPartition
    log: Log
    task: asyncio.Task | None = None
    copying: RemoteLogSegmentMetadata | None = None
    stopped: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)      # rounds of one partition never overlap


class RemoteLogManager(RemoteLogReader):
    def __init__(self, config, logs: LeaderLogs, internal: InternalTopic, *,
                 registry: CollectorRegistry | None = None,
                 time_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.config = config
        self.logs = logs
        self.broker_id = config.node_id
        self._time_ms = time_ms
        url = config.remote_store_url()
        if not url:
            raise ValueError("remote.log.storage.system.enable=true needs remote.log.storage.manager.store.url "
                             "(file:///path or s3://bucket/prefix)")
        self.store = open_object_store(url, **config.remote_store_options())
        self.rsm = RemoteStorageManager(self.store)
        self.rlmm = TopicBasedRemoteLogMetadataManager(
            internal, broker_id=self.broker_id, time_ms=time_ms,
            num_partitions=config.get_int("remote.log.metadata.topic.num.partitions"),
            retention_ms=config.get_int("remote.log.metadata.topic.retention.ms"))
        self.task_interval = config.get_int("remote.log.manager.task.interval.ms") / 1000
        self.metadata_wait = config.get_int("remote.log.metadata.consume.wait.ms") / 1000
        self.fetch_max_wait = config.get_int("remote.fetch.max.wait.ms") / 1000
        self.list_offsets_timeout = config.get_int("remote.list.offsets.request.timeout.ms") / 1000
        self.chunk_size = max(4096, config.get_int("remote.log.reader.chunk.size.bytes"))
        self.prefetch_chunks = max(0, config.get_int("remote.log.reader.prefetch.chunks"))
        self.max_pending_reads = config.get_int("remote.log.reader.max.pending.tasks")
        self._reader_slots = asyncio.Semaphore(max(1, config.get_int("remote.log.reader.threads")))
        self._copier_slots = asyncio.Semaphore(max(1, config.get_int("remote.log.manager.copier.thread.pool.size")))
        self._expiration_slots = asyncio.Semaphore(
            max(1, config.get_int("remote.log.manager.expiration.thread.pool.size")))
        self._chunks = ChunkCache(config.get_int("remote.fetch.max.memory.bytes"))
        self._ranged = RangedReads(self._chunks, self.rsm.gets, self.chunk_size, self.prefetch_chunks,
                                   readers=lambda: self._reads_under_way)
        self._resume_at = ResumePositions()
        self._empty_walks = EmptyWalks()   # remote segments followed by no aborted transaction (per partition)
        self._indexes = _LruFutures(config.get_int("remote.log.index.file.cache.total.size.bytes"),
                                    lambda idx: idx.size)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = RemoteStorageMetrics(self.registry)
        self._pending_reads = 0
        self._active_reads = 0
        self._waiting_reads = 0
        self._reads_under_way = 0      # read tasks started and not ended (they share the read-ahead budget)
        self.metrics.reader_queue.set_function(lambda: self._pending_reads)
        self.metrics.reader_active.set_function(lambda: self._active_reads)
        self.metrics.reader_waiting.set_function(lambda: self._waiting_reads)
        self.rsm.gets.listener = lambda nbytes, seconds: self.metrics.get_time.observe(seconds)
        self.registry.register(_ChunkCacheCollector(self._chunks))
        self.tasks: dict[tuple[str, int], _PartitionTask] = {}
        self._inflight_reads: dict[tuple, asyncio.Task] = {}
        self._read_timers: dict[tuple, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task] = set()
        self._deleting: set[TopicIdPartition] = set()
        self._copying: set[RemoteLogSegmentId] = set()
        self._started = False
        self._running = False

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def startup(self) -> None:
        """After the local logs are loaded: create/replay `__remote_log_metadata`, then adopt tiered partitions."""
        self.rlmm.start()
        self._started = True
        for topic, p, _ in self.logs.leader_logs():
            self._init_partition(topic, p)

    def start_background(self) -> None:
        self._running = True
        for tip in self.rlmm.pending_partition_deletes():
            self._spawn(self._delete_partition(tip, None))
        self.sync_partitions()
        self._spawn(self._follow_remote_metadata())

    async def _follow_remote_metadata(self) -> None:
        """Every task interval: take the events other brokers' leaders wrote, and let follower replicas of tiered
        partitions drop local segments the remote tier holds (their local retention, as on the leader)."""
        while self._running:
            await asyncio.sleep(self.task_interval)
            try:
                if self.rlmm.catch_up():
                    for topic, p, lg in self.logs.follower_logs():
                        tip = self.tip_of(topic, p)
                        if tip is not None and lg.remote_log_enabled:
                            lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage,
                                                                      self.find_highest_remote_offset(tip, lg))
            except Exception:
                log.exception("following %s failed", REMOTE_LOG_METADATA_TOPIC)

    async def stop(self) -> None:
        self._running = False
        tasks = [t.task for t in self.tasks.values() if t.task is not None] + list(self._background)
        tasks += list(self._inflight_reads.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()
        await self._ranged.close()            # read-ahead GETs nobody waits for any more
        log.info("remote reads: %d segment GETs, %.1f MB", self.rsm.segment_gets, self.rsm.segment_get_bytes / 1e6)
        try:
            await self.rsm.close()
        except Exception:
            log.exception("closing the remote store failed")

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ---- which partitions are tiered ------------------------------------------------------------------------------
    @staticmethod
    def is_tiered(topic: str, cfg) -> bool:
        return bool(cfg.remote_storage_enable) and not is_internal_topic(topic)

    def tip_of(self, topic: str, partition: int) -> TopicIdPartition | None:
        topic_id = self.logs.topic_id(topic)
        return TopicIdPartition(topic_id, topic, partition) if topic_id is not None else None

    def _init_partition(self, topic: str, p: int) -> None:
        """Kafka's first run of a leader's RLMTask: find what is already tiered (findHighestRemoteOffset) and repair
        the log start offset from the remote tier (findLogStartOffset)."""
        lg = self.logs.leader_log(topic, p)
        tip = self.tip_of(topic, p)
        if lg is None or tip is None or not lg.remote_log_enabled:
            return
        lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage,
                                                  self.find_highest_remote_offset(tip, lg))
        finished = [s for s in self.rlmm.list_remote_log_segments(tip) if s.state == S.COPY_SEGMENT_FINISHED]
        earliest = min((s.start_offset for s in finished), default=None)
        floor = lg.local_log_start_offset if earliest is None else min(earliest, lg.local_log_start_offset)
        if floor > lg.log_start_offset:
            log.info("%s: log start offset %d -> %d (earliest remote/local data)", tip, lg.log_start_offset, floor)
            lg.update_log_start_offset_from_remote_tier(floor)

    def find_highest_remote_offset(self, tip: TopicIdPartition, lg) -> int:
        """Kafka's findHighestRemoteOffset: walk the leader epochs from the latest back, ask the RLMM for the
        highest tiered offset of each, cap it at the epoch's end in this log."""
        entries = lg.leader_epoch_cache.entries
        for i in range(len(entries) - 1, -1, -1):
            epoch = entries[i].epoch
            hi = self.rlmm.highest_offset_for_epoch(tip, epoch)
            if hi is not None:
                end = entries[i + 1].start_offset if i + 1 < len(entries) else lg.log_end_offset
                return end - 1 if end <= hi else hi
        if not entries:      # no epoch history left (everything deleted): the largest tiered end offset
            return max((s.end_offset for s in self.rlmm.list_remote_log_segments(tip)
                        if s.state == S.COPY_SEGMENT_FINISHED), default=-1)
        return -1

    def sync_partitions(self) -> None:
        """Start a task for every tiered partition without one; stop tasks of partitions no longer tiered."""
        if not self._started:
            return
        for topic, p, lg in self.logs.leader_logs():
            want = self.is_tiered(topic, lg.config)
            have = self.tasks.get((topic, p))
            if want and have is None:
                tip = self.tip_of(topic, p)
                if tip is None or tip in self._deleting:
                    continue
                if not lg.remote_log_enabled:
                    lg.set_remote_log_enabled(True)
                    self._init_partition(topic, p)
                if self._running:
                    t = self.tasks[(topic, p)] = _PartitionTask(tip, lg)
                    t.task = asyncio.get_running_loop().create_task(self._run(t))
            elif not want and lg.remote_log_enabled:
                self._disable(topic, p, lg)

    def on_topic_created(self, info) -> None:
        self.sync_partitions()

    async def follower_start_state(self, topic: str, p: int, local_start: int):
        """KIP-405's follower path (Kafka's buildRemoteLogAuxState): a follower that must start at the leader's local
        log start takes the leader-epoch history below it, and the producer snapshot at it, from the remote segment
        that ends there. -> (((epoch, start offset), ...), snapshot bytes or None)."""
        tip = self.tip_of(topic, p)
        if tip is None:
            return (), None
        self.rlmm.reload(tip)
        below = [s for s in self.rlmm.list_remote_log_segments(tip)
                 if s.state == S.COPY_SEGMENT_FINISHED and s.start_offset < local_start <= s.end_offset + 1]
        if not below:
            return (), None
        md = max(below, key=lambda s: s.end_offset)
        snapshot = None
        if md.end_offset + 1 == local_start:        # the snapshot a segment carries is the state at its end
            try:
                snapshot = await self.rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT)
            except Exception as e:
                log.warning("%s: no producer snapshot in the remote tier at %d: %s", tip, local_start, e)
        return md.segment_leader_epochs, snapshot

    def on_leadership_change(self, topic: str, p: int, leader: bool) -> None:
        """Only leaders copy and expire (Kafka's RLM tasks follow leadership): a new leader reloads what the
        partition has in the remote tier and continues after its highest tiered offset; a former leader stops."""
        if not self._started:
            return
        if not leader:
            t = self.tasks.pop((topic, p), None)
            if t is not None:
                t.stopped = True
                t.wake.set()
            return
        tip = self.tip_of(topic, p)
        lg = self.logs.leader_log(topic, p)
        if tip is None or lg is None or not self.is_tiered(topic, lg.config):
            return
        self.rlmm.reload(tip)
        if lg.remote_log_enabled:
            self._init_partition(topic, p)
        self.sync_partitions()

    def on_config_changed(self, info) -> None:
        for p in range(info.partitions):
            t = self.tasks.get((info.name, p))
            if t is not None:
                t.wake.set()
        self.sync_partitions()

    def on_topic_deleted(self, info) -> None:
        """Called before the local logs go: stop the tasks and delete the remote data (DELETE_PARTITION_MARKED
        now, the rest in the background until it succeeds)."""
        for p in range(info.partitions):
            t = self.tasks.pop((info.name, p), None)
            tip = TopicIdPartition(info.uuid, info.name, p)
            if t is not None:
                t.stopped = True
                t.wake.set()
            self.metrics.forget(info.name, p)
            self._ranged.drop(lambda k, tip=tip: k[0] == tip)
            self._indexes.drop(lambda k, tip=tip: k[0] == tip)
            self._empty_walks.drop(tip)
            if self.rlmm.list_remote_log_segments(tip) or t is not None:
                self._mark_partition_deleted(tip, t)

    def _disable(self, topic: str, p: int, lg: Log) -> None:
        """remote.storage.enable true -> false (validated to need remote.log.delete.on.disable=true): the log start
        moves to the local log start and the remote data is deleted in the background (KIP-950)."""
        t = self.tasks.pop((topic, p), None)
        if t is not None:
            t.stopped = True
            t.wake.set()
        lg.update_log_start_offset_from_remote_tier(lg.local_log_start_offset)
        lg.set_remote_log_enabled(False)
        lg.highest_offset_in_remote_storage = -1
        self.metrics.forget(topic, p)
        tip = self.tip_of(topic, p)
        log.info("%s: remote storage disabled; deleting its remote data", tip)
        if tip is not None:
            self._mark_partition_deleted(tip, t)

    def _mark_partition_deleted(self, tip: TopicIdPartition, t: _PartitionTask | None) -> None:
        if tip in self._deleting:
            return
        self._deleting.add(tip)
        try:
            self.rlmm.put_remote_partition_delete_metadata(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        except Exception:
            log.exception("%s: could not record DELETE_PARTITION_MARKED", tip)
        if self._running:
            self._spawn(self._delete_partition(tip, t.task if t is not None else None))

    async def _delete_partition(self, tip: TopicIdPartition, old_task: asyncio.Task | None) -> None:
        """DELETE_PARTITION_STARTED, delete every segment (STARTED/FINISHED events per segment), then
        DELETE_PARTITION_FINISHED; retried every task interval while the store fails."""
        self._deleting.add(tip)
        try:
            if old_task is not None and not old_task.done():
                # let an in-flight copy finish (or fail) so nothing it writes is left behind
                done, _ = await asyncio.wait({old_task}, timeout=120)
                if not done:
                    old_task.cancel()
            while True:
                try:
                    state = self.rlmm.partition_deletes.get(tip)
                    if state is None or state.state == RemotePartitionDeleteState.DELETE_PARTITION_MARKED:
                        self.rlmm.put_remote_partition_delete_metadata(
                            tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
                    segs = [s for s in self.rlmm.list_remote_log_segments(tip)]
                    for md in segs:
                        await self._delete_remote_segment(md)
                    self.rlmm.put_remote_partition_delete_metadata(
                        tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
                    log.info("%s: deleted %d remote segment(s)", tip, len(segs))
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("%s: deleting remote data failed (%s); retrying", tip, e)
                    await asyncio.sleep(max(self.task_interval, 0.5))
        finally:
            self._deleting.discard(tip)
            if self._running:
                self.sync_partitions()

    # ---- the per-partition task ---------------------------------------------------------------------------------
    async def _run(self, t: _PartitionTask) -> None:
        while not t.stopped:
            t.wake.clear()
            try:
                await self._run_once(t)
            except asyncio.CancelledError:
                raise
            except RemoteStorageException as e:
                log.warning("%s: remote log task: %s", t.tip, e)     # store outage: retried next interval
            except Exception:
                log.exception("%s: remote log task failed", t.tip)
            if t.stopped:
                break
            try:
                await asyncio.wait_for(t.wake.wait(), self.task_interval)
            except asyncio.TimeoutError:
                pass

    async def _run_once(self, t: _PartitionTask) -> None:
        """One round: copy, expire, local retention."""
        async with t.lock:
            await self._round(t)

    async def _round(self, t: _PartitionTask) -> None:
        lg = t.log
        if lg.remote_copy_enabled:
            async with self._copier_slots:
                if not t.stopped:
                    await self._copy_segments(t)
        if not t.stopped:
            async with self._expiration_slots:
                if not t.stopped:
                    await self._expire(t)
        if not t.stopped:
            n = lg.delete_old_segments()          # local retention, gated on what is tiered
            if n:
                log.info("%s: local retention deleted %d segment(s); local log start %d", t.tip, n,
                         lg.local_log_start_offset)
            self._update_gauges(t)

    async def run_once(self, topic: str, partition: int) -> None:
        """One round for one partition, outside the schedule (tests, tools)."""
        lg = self.logs.leader_log(topic, partition)
        t = self.tasks.get((topic, partition)) or _PartitionTask(self.tip_of(topic, partition), lg)
        await self._run_once(t)

    def _copy_candidates(self, lg) -> list:
        """Kafka's candidateLogSegments: closed segments from max(highest tiered + 1, local log start) whose next
        segment starts at or below the last stable offset (no transactions here: the high watermark)."""
        from_offset = max(lg.highest_offset_in_remote_storage + 1, lg.local_log_start_offset)
        lso = getattr(lg, "last_stable_offset", lg.high_watermark)
        segs = lg.segments()
        return [(seg, nxt) for seg, nxt in zip(segs, segs[1:])
                if nxt.base_offset > from_offset and nxt.base_offset <= lso and seg.size > 0]

    async def _copy_segments(self, t: _PartitionTask) -> None:
        lg = t.log
        for seg, nxt in self._copy_candidates(lg):
            if t.stopped or not lg.remote_copy_enabled:
                return
            await self._copy_segment(t, seg, nxt)

    async def _copy_segment(self, t: _PartitionTask, seg, nxt) -> None:
        lg = t.log
        end = nxt.base_offset - 1
        epochs = _epochs_in_range(lg.leader_epoch_cache.entries, seg.base_offset, end)
        txn = seg.log_path.with_suffix(".txnindex")
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(t.tip), seg.base_offset, end,
                                      seg.largest_timestamp, self.broker_id, self._time_ms(), seg.size,
                                      tuple(epochs), S.COPY_SEGMENT_STARTED,
                                      txn_index_empty=not (txn.exists() and txn.stat().st_size > 0))   # KIP-1058
        data = LogSegmentData(
            log_segment=seg.log_path, offset_index=seg.index_path, time_index=seg.time_index_path,
            transaction_index=txn if txn.exists() else None,
            producer_snapshot_index=lg.producer_state.dir / f"{nxt.base_offset:020d}.snapshot",
            leader_epoch_index=_checkpoint_bytes(
                [e for e in lg.leader_epoch_cache.entries if e.start_offset < nxt.base_offset]))
        self.rlmm.add_remote_log_segment_metadata(md)
        t.copying = md
        self._copying.add(md.segment_id)
        topic = t.tip.topic
        try:
            self.metrics.copy_requests.labels(topic).inc()
            await self.rsm.copy_log_segment_data(md, data)
        except Exception as e:
            self.metrics.copy_errors.labels(topic).inc()
            log.warning("%s: copying segment %d-%d failed: %s", t.tip, md.start_offset, end, e)
            try:
                await self._delete_remote_segment(md)      # remove what the failed attempt wrote
            except Exception as e2:
                log.warning("%s: cleanup of failed copy %s failed (%s); expiration retries it", t.tip,
                            md.segment_id, e2)
            raise
        finally:
            t.copying = None
            self._copying.discard(md.segment_id)
        self.rlmm.update_state(md, S.COPY_SEGMENT_FINISHED)
        await self.rlmm.committed(t.tip, self.metadata_wait)    # only then may local retention count it
        lg.highest_offset_in_remote_storage = max(lg.highest_offset_in_remote_storage, end)
        self.metrics.copy_bytes.labels(topic).inc(md.segment_size_in_bytes)
        log.debug("%s: copied segment %d-%d (%d bytes)", t.tip, md.start_offset, end, md.segment_size_in_bytes)

    async def _delete_remote_segment(self, md: RemoteLogSegmentMetadata) -> None:
        """DELETE_SEGMENT_STARTED -> delete objects -> DELETE_SEGMENT_FINISHED. A failure leaves the segment in
        DELETE_SEGMENT_STARTED (retried by the expiration task) and raises."""
        cache = self.rlmm.caches.get(md.tip)
        cur = cache.segments.get(md.segment_id.id) if cache is not None else None
        if cur is None:
            return
        if cur.state != S.DELETE_SEGMENT_STARTED:
            cur = self.rlmm.update_state(cur, S.DELETE_SEGMENT_STARTED)
        topic = md.tip.topic
        self.metrics.delete_requests.labels(topic).inc()
        try:
            await self.rsm.delete_log_segment_data(cur)
        except Exception:
            self.metrics.delete_errors.labels(topic).inc()
            raise
        self.rlmm.update_state(cur, S.DELETE_SEGMENT_FINISHED)
        key = segment_key(md)
        self._indexes.drop(lambda k: k[:2] == key)
        self._ranged.drop(lambda k: k == key)

    async def _expire(self, t: _PartitionTask) -> None:
        """Kafka's cleanupExpiredRemoteLogSegments for one partition (single leader lineage)."""
        lg = t.log
        cfg = lg.config
        now = self._time_ms()
        segs = self.rlmm.list_remote_log_segments(t.tip)
        retention_ms, retention_bytes = cfg.retention_ms, cfg.retention_bytes
        cleanup_until = now - retention_ms if retention_ms > -1 else None
        remaining = None
        if retention_bytes > -1:
            remote = sum(s.segment_size_in_bytes for s in segs if s.state == S.COPY_SEGMENT_FINISHED)
            remaining = lg.only_local_log_segments_size() + remote - retention_bytes
        doomed: list[RemoteLogSegmentMetadata] = []
        new_start = None
        log_start = lg.log_start_offset
        stop = False
        for md in segs:
            if md.state == S.DELETE_SEGMENT_STARTED:
                doomed.append(md)                  # a deletion that failed earlier: retry it
                continue
            if md.state == S.COPY_SEGMENT_STARTED:
                if md.segment_id in self._copying:
                    stop = True                    # being copied right now
                else:
                    doomed.append(md)              # orphan of a copy that died with a previous process
                continue
            if stop or md.state != S.COPY_SEGMENT_FINISHED:
                continue
            if md.end_offset < log_start:
                doomed.append(md)                  # log start offset breach (DeleteRecords, earlier retention)
                continue
            delete = False
            if cleanup_until is not None and md.max_timestamp_ms <= cleanup_until:
                delete = True
                if remaining is not None:
                    remaining = max(0, remaining - md.segment_size_in_bytes)
            elif remaining is not None and remaining - md.segment_size_in_bytes >= 0:
                remaining -= md.segment_size_in_bytes
                delete = True
            if delete:
                doomed.append(md)
                new_start = md.end_offset + 1 if new_start is None else max(new_start, md.end_offset + 1)
            else:
                stop = True                        # retention deletes oldest first: stop at the first keeper
        self.metrics.delete_lag_segments.labels(t.tip.topic, str(t.tip.partition)).set(len(doomed))
        self.metrics.delete_lag_bytes.labels(t.tip.topic, str(t.tip.partition)).set(
            sum(m.segment_size_in_bytes for m in doomed))
        if new_start is not None and new_start > lg.log_start_offset:
            log.info("%s: remote retention moves the log start offset %d -> %d", t.tip, lg.log_start_offset,
                     new_start)
            lg.update_log_start_offset_from_remote_tier(new_start)
        for md in doomed:
            if t.stopped:
                return
            await self._delete_remote_segment(md)

    def _update_gauges(self, t: _PartitionTask) -> None:
        lg = t.log
        labels = (t.tip.topic, str(t.tip.partition))
        cands = self._copy_candidates(lg) if lg.remote_copy_enabled else []
        self.metrics.copy_lag_segments.labels(*labels).set(len(cands))
        self.metrics.copy_lag_bytes.labels(*labels).set(sum(seg.size for seg, _ in cands))
        self.metrics.log_size_bytes.labels(*labels).set(self.rlmm.remote_log_size(t.tip))
        self.metrics.metadata_count.labels(*labels).set(len(self.rlmm.list_remote_log_segments(t.tip)))


def _epochs_in_range(entries, start: int, end: int) -> list[tuple[int, int]]:
    """Leader epochs with records in [start, end] (Kafka's epochEntriesInRange): the first clipped to `start`."""
    out = []
    for i, e in enumerate(entries):
        nxt = entries[i + 1].start_offset if i + 1 < len(entries) else None
        if e.start_offset > end or (nxt is not None and nxt <= start):
            continue
        out.append((e.epoch, max(e.start_offset, start)))
    return out or [(0, start)]


def _checkpoint_bytes(entries) -> bytes:
    """Kafka's leader-epoch-checkpoint text format (version 0)."""
    return (f"0\n{len(entries)}\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)).encode()
