"""Partitions hosted by this broker (Kafka's ReplicaManager): opening their logs, the Partition objects handlers
use, fetch long-poll wake-ups, and log housekeeping (retention, flush.ms, the log cleaner).

The metadata publisher (broker/metadata_publisher.py) tells it which partitions exist; storage components see it
only through narrow interfaces: the RemoteLogManager through `leader_logs`/`leader_log`/`topic_id`, the log cleaner
through a function listing logs, and the internal-topic users through replication/internal_topics.py.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable

from protocol.errors import ErrorCode
from replication.partition import AlterPartitionListener, Partition
from replication.remote_wal import PartitionWal
from storage.cleaner.log_cleaner import LogCleaner
from storage.log.files import deferred_fsyncs
from storage.log.log import Log
from storage.log.offset_checkpoint import REPLICATION_OFFSET_CHECKPOINT, read_offsets, write_offsets

log = logging.getLogger("strata.replica_manager")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class ReplicaManager:
    def __init__(self, config, topics, *, create_topic: Callable | None = None):
        """`topics` answers topics()/get(name) from the current metadata image; `create_topic(name, partitions,
        configs)` creates an internal topic through the controller and returns its image."""
        self.config = config
        self.topics = topics
        self.local_broker_id = config.node_id
        self.create_topic = create_topic
        self.log_dir: Path = config.log_dir
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._tasks: list[asyncio.Task] = []
        self.remote_log_manager = None    # storage.tiered.remote_log_manager.RemoteLogManager when tiering is on
        self.cleaner: LogCleaner | None = None
        # In a cluster (set by the broker): followers' fetchers and the leaders' ISR changes to the controller.
        self.fetchers = None              # replication.replica_fetcher.ReplicaFetcherManager
        self.alter_partitions = None      # replication.alter_partition_manager.AlterPartitionManager
        self.remote_wal = None            # replication.remote_wal.RemoteWalManager when a fast store is set (KIP-1176)
        self.replica_lag_max = config.get_int("replica.lag.time.max.ms") / 1000
        self.isr_changes = AlterPartitionListener()   # ISR expands/shrinks/failed updates of leaders here (metrics)
        self.hw_checkpoint_interval = config.get_int("replica.high.watermark.checkpoint.interval.ms") / 1000
        self._checkpointed_hws: dict[tuple[str, int], int] = {}      # as read at start-up, then as last written
        # Kafka's LogDirFailureChannel: the I/O error that took the (one) log dir offline, and what the broker does
        # then (it halts, as Kafka does when its last log dir fails).
        self.offline_error: OSError | None = None
        self.on_log_dir_offline: Callable[[], None] | None = None
        # Partitions assigned here after the dir failed (Kafka's HostedPartition.Offline): no log is created for
        # them on the failed disk; they answer KAFKA_STORAGE_ERROR (missing_error) until the broker restarts.
        self.offline_partitions: set[tuple[str, int]] = set()

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def startup(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self._checkpointed_hws = read_offsets(self.log_dir / REPLICATION_OFFSET_CHECKPOINT)
        t0 = time.monotonic()
        for t in self.topics.topics():
            cfg = None
            for p, state in enumerate(t.partition_states):
                if self.local_broker_id in state.replicas:
                    cfg = cfg or self.config.log_config(t.configs)
                    part = self._open(t, p, cfg, clean)
                    if part is not None:
                        self._become(part, state, t.name, p, fresh=True)
        # Any crash from here on must be treated as unclean.
        marker.unlink(missing_ok=True)
        log.info("loaded %d partitions in %.2fs (%s shutdown)", len(self.partitions), time.monotonic() - t0,
                 "clean" if clean else "unclean")

    def start_background(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._retention_loop()))
        self._tasks.append(loop.create_task(self._flush_loop()))
        self._tasks.append(loop.create_task(self._checkpoint_loop()))
        if self.alter_partitions is not None:
            self._tasks.append(loop.create_task(self._isr_loop()))
        if self.config.get_bool("log.cleaner.enable"):     # log compaction: storage/cleaner/
            self.cleaner = LogCleaner(self.config, logs=self._named_logs)
            self.cleaner.start()

    def shutdown(self) -> None:
        """Close every log (Kafka's LogManager.shutdown), then checkpoint the high watermarks and write the
        clean-shutdown marker, only if the dir is still online and every log closed: an I/O error closing one log
        takes the dir offline (the log reports it) but does not stop the others from being released, and the next
        start then recovers every log's tail from disk. Nothing more is written to a dir that failed."""
        for task in self._tasks:
            task.cancel()
        if self.cleaner is not None:
            self.cleaner.stop()
        t0 = time.monotonic()
        closed = 0
        unclosed = 0                     # logs whose close failed: no marker
        with deferred_fsyncs():          # one sync(2) instead of ~7 fsyncs per log (storage/log/files.py)
            for (topic, index), part in list(self.partitions.items()):
                part.closed = True
                if self.offline_error is None and part.log.failed is None:
                    try:
                        if part.wal is not None:
                            part.wal.close()
                        part.log.close()
                        closed += 1
                        continue
                    except OSError as e:     # Log.close reports its own to log_dir_failed; the WAL's does not
                        log.error("closing %s-%d failed: %s", topic, index, e)
                        unclosed += 1
                    except Exception:
                        log.exception("closing %s-%d failed", topic, index)
                        unclosed += 1
                part.log.release()       # a failed dir: drop descriptors and mappings, write nothing more
        self.checkpoint_high_watermarks()    # a failure here takes the dir offline too (checked below)
        if self.offline_error is not None:
            # No clean-shutdown marker: the next start recovers every log's tail from disk (Kafka skips the marker
            # of a dir that failed, and halts when its last one does).
            log.error("log directory %s is offline (%s): %d of %d logs closed, no clean-shutdown marker; the next "
                      "start recovers them", self.log_dir, self.offline_error, closed, len(self.partitions))
            return
        if unclosed:
            log.error("%d of %d logs failed to close: no clean-shutdown marker, the next start recovers them",
                      unclosed, len(self.partitions))
            return
        try:
            (self.log_dir / CLEAN_SHUTDOWN_FILE).write_text("")
        except OSError as e:             # Kafka swallows this too: the next start is merely treated as unclean
            log.error("writing the clean-shutdown marker in %s failed: %s", self.log_dir, e)
            return
        log.info("closed %d logs cleanly in %.2fs", len(self.partitions), time.monotonic() - t0)

    # ---- partitions ------------------------------------------------------------------------------------------
    def _open(self, t, p: int, cfg, clean: bool = False) -> Partition | None:
        """Open (or create) a partition's log and register its Partition; None when the log dir is offline (Kafka
        picks only live dirs: with none left the partition is offline), also when opening the log fails with an
        I/O error (which takes the dir offline rather than escaping to the metadata publisher)."""
        key = (t.name, p)
        if self.offline_error is None:
            rlm = self.remote_log_manager
            path = self.log_dir / f"{t.name}-{p}"
            try:
                plog = Log(path, cfg, clean_shutdown=clean, remote_log_enabled=rlm is not None and
                           rlm.is_tiered(t.name, cfg), on_io_error=self.log_dir_failed)
                wal = PartitionWal(self.remote_wal, plog.dir) if self.remote_wal is not None else None
            except OSError as e:
                self.log_dir_failed(path, e)     # a no-op if the log already reported it (a decorated method)
            else:
                if self.offline_error is None:
                    alter = self.alter_partitions.submit if self.alter_partitions is not None else None
                    plog.update_high_watermark(self._checkpointed_hws.get(key, 0))
                    part = Partition(t.name, p, plog, local_broker_id=self.local_broker_id, remote=rlm,
                                     topic_id=t.topic_id, alter_isr=alter, isr_listener=self.isr_changes,
                                     alive_brokers=self._alive_brokers)
                    part.wal = wal
                    self.partitions[key] = part
                    return part
                plog.release()
        # Kafka's HostedPartition.Offline: nothing is created on the failed dir; requests get KAFKA_STORAGE_ERROR.
        self.offline_partitions.add(key)
        log.error("%s-%d: not created, log directory %s is offline (%s)", t.name, p, self.log_dir,
                  self.offline_error)
        return None

    def _become(self, part: Partition, state, topic: str, index: int, fresh: bool = False) -> None:
        """Take a partition's state from the image: lead it, follow its leader, or just note a new ISR."""
        me = self.local_broker_id
        if state.leader == me:
            if fresh or not part.is_leader or state.leader_epoch != part.leader_epoch:
                if self.fetchers is not None:
                    self.fetchers.unfollow(topic, index)
                part.make_leader(state, time.monotonic())
                if state.leader_epoch:
                    log.info("%s-%d: leader at epoch %d, ISR %s", topic, index, state.leader_epoch, state.isr)
                if self.remote_log_manager is not None:
                    self.remote_log_manager.on_leadership_change(topic, index, True)
            else:
                part.update_isr_state(state)
        elif fresh or part.is_leader or state.leader != part.leader_id or state.leader_epoch != part.leader_epoch:
            part.make_follower(state)
            if self.remote_log_manager is not None:
                self.remote_log_manager.on_leadership_change(topic, index, False)
            if self.fetchers is not None:
                self.fetchers.follow(topic, index, state.leader)
            log.info("%s-%d: follower of %d at epoch %d", topic, index, state.leader, state.leader_epoch)
        else:
            part.isr, part.partition_epoch = tuple(state.isr), state.partition_epoch

    def apply_topic(self, t, before) -> None:
        """A topic's new image (Kafka's ReplicaManager.applyDelta): open the replicas assigned here, give each its
        role, and drop replicas no longer assigned here."""
        cfg = None
        for i, state in enumerate(t.partition_states):
            old = before.partition(i) if before is not None else None
            part = self.partitions.get((t.name, i))
            if self.local_broker_id not in state.replicas:
                if part is not None:
                    self._remove(t.name, i)
                continue
            if part is None:
                if (t.name, i) in self.offline_partitions:
                    continue
                cfg = cfg or self.config.log_config(t.configs)
                part = self._open(t, i, cfg)
                if part is not None:
                    self._become(part, state, t.name, i, fresh=True)
            elif old is not state and part.log.failed is None:     # an offline partition takes no new role
                self._become(part, state, t.name, i)
        if self.remote_log_manager is not None and (before is None or t.partitions > before.partitions):
            self.remote_log_manager.on_topic_created(t)

    def _remove(self, topic: str, index: int) -> None:
        if self.fetchers is not None:
            self.fetchers.unfollow(topic, index)
        self.offline_partitions.discard((topic, index))
        part = self.partitions.pop((topic, index), None)
        if part is not None:
            part.closed = True
            part.fail_waiters()
            if part.wal is not None:
                part.wal.close()
            part.log.delete()
        shutil.rmtree(self.log_dir / f"{topic}-{index}", ignore_errors=True)

    def log_dir_failed(self, path: Path, error: OSError) -> None:
        """An I/O error under the log dir (Kafka's LogDirFailureChannel.maybeAddOfflineLogDir, then
        ReplicaManager.handleLogDirFailure): every partition on it goes offline and answers KAFKA_STORAGE_ERROR,
        parked produces and fetches are woken to see it, followers stop fetching. Strata has one log dir, so, as
        Kafka does when its last log dir fails, the broker then stops (`on_log_dir_offline`): a controlled shutdown
        moves its leaderships to the other in-sync replicas."""
        if self.offline_error is not None:
            return
        self.offline_error = error
        log.error("log directory %s is offline after an I/O error on %s: %s; its partitions answer "
                  "KAFKA_STORAGE_ERROR and the broker shuts down (its only log dir failed)", self.log_dir, path, error)
        for (topic, index), part in list(self.partitions.items()):
            if self.fetchers is not None:
                self.fetchers.unfollow(topic, index)
            part.log.fail(error, report=False)
            part.fail_waiters(ErrorCode.kafka_storage_error)
        if self.on_log_dir_offline is not None:
            self.on_log_dir_offline()

    def _alive_brokers(self) -> set[int] | None:
        """The registered, unfenced brokers of the current image (None without an image: unit harnesses)."""
        image = getattr(self.topics, "image", None)
        return None if image is None else set(image.unfenced_brokers())

    def checkpoint_high_watermarks(self) -> None:
        """Write every partition's high watermark to `replication-offset-checkpoint` (Kafka's
        checkpointHighWatermarks), when one changed since the last write."""
        if self.offline_error is not None:
            return
        hws = {key: part.high_watermark for key, part in self.partitions.items()}
        if hws != self._checkpointed_hws:
            path = self.log_dir / REPLICATION_OFFSET_CHECKPOINT
            try:
                write_offsets(path, hws)
            except OSError as e:            # Kafka: a failed checkpoint write takes the log dir offline
                self.log_dir_failed(path, e)
                return
            self._checkpointed_hws = hws

    def hosted(self) -> list[Partition]:
        """Every partition replica this broker holds (DescribeLogDirs)."""
        return list(self.partitions.values())

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def missing_error(self, topic: str, index: int) -> int:
        """The error for a partition not hosted here: NOT_LEADER_OR_FOLLOWER if it exists elsewhere in the cluster
        (the client refreshes its metadata and goes to the leader), else UNKNOWN_TOPIC_OR_PARTITION; a partition
        assigned here after the log dir failed (offline, no log) answers KAFKA_STORAGE_ERROR."""
        if (topic, index) in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        t = self.topics.get(topic) if topic is not None else None
        if t is not None and t.partition(index) is not None:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_topic_or_partition

    def delete_topic(self, t) -> None:
        if self.remote_log_manager is not None:
            self.remote_log_manager.on_topic_deleted(t)     # stop tiering, delete the remote data in the background
        for p in range(t.partitions):
            self._remove(t.name, p)

    def reconfigure(self, t) -> None:
        cfg = self.config.log_config(t.configs)
        for p in range(t.partitions):
            part = self.partitions.get((t.name, p))
            if part is not None:
                part.log.update_config(cfg)
        if self.remote_log_manager is not None:
            self.remote_log_manager.on_config_changed(t)

    def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str]):
        """An internal topic, created through the controller on first use (as Kafka does); returns its image."""
        info = self.topics.get(name)
        if info is None:
            if self.create_topic is None:
                raise RuntimeError(f"internal topic {name} does not exist and no controller can create it")
            info = self.create_topic(name, partitions, configs)
            log.info("created internal topic %s with %d partitions", name, info.partitions)
        return info

    # ---- what storage components may see (narrow interfaces) -------------------------------------------------
    def leader_logs(self) -> Iterable[tuple[str, int, Log]]:
        """(topic, partition, log) of every partition this broker leads."""
        return [(t, p, part.log) for (t, p), part in list(self.partitions.items()) if part.is_leader]

    def follower_logs(self) -> Iterable[tuple[str, int, Log]]:
        """(topic, partition, log) of every partition this broker follows."""
        return [(t, p, part.log) for (t, p), part in list(self.partitions.items()) if not part.is_leader]

    def leader_log(self, topic: str, partition: int) -> Log | None:
        part = self.partitions.get((topic, partition))
        return part.log if part is not None and part.is_leader else None

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.topics.get(topic)
        return info.uuid if info is not None else None

    def _named_logs(self) -> list[tuple[str, Log]]:
        return [(f"{t}-{p}", part.log) for (t, p), part in list(self.partitions.items())]

    # ---- fetch long-poll -------------------------------------------------------------------------------------
    async def wait_for_data(self, parts: list[Partition], timeout_s: float) -> None:
        """Park a Fetch until any of `parts` gets an append, or the timeout passes."""
        if timeout_s <= 0 or not parts:
            return
        fut = asyncio.get_running_loop().create_future()
        for part in parts:
            part.waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for part in parts:
                try:
                    part.waiters.remove(fut)
                except ValueError:
                    pass

    # ---- housekeeping ----------------------------------------------------------------------------------------
    async def _retention_loop(self) -> None:
        interval = self.config.get_int("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            for part in list(self.partitions.values()):
                if part.log.failed is not None:
                    continue
                try:
                    n = part.log.delete_old_segments()
                    if n:
                        log.info("retention deleted %d segment(s) of %s-%d", n, part.topic, part.index)
                except OSError as e:            # the log (and so its dir) went offline: reported by the log
                    log.error("retention failed for %s-%d: %s", part.topic, part.index, e)
                except Exception:
                    log.exception("retention failed for %s-%d", part.topic, part.index)

    async def _isr_loop(self) -> None:
        """Leaders drop followers that lag more than replica.lag.time.max.ms (Kafka's isr-expiration task)."""
        while True:
            await asyncio.sleep(max(self.replica_lag_max / 2, 0.05))
            now = time.monotonic()
            for part in list(self.partitions.values()):
                if part.is_leader and len(part.isr) > 1:
                    part.maybe_shrink_isr(now, self.replica_lag_max)

    async def _checkpoint_loop(self) -> None:
        """replica.high.watermark.checkpoint.interval.ms (Kafka's default 5000)."""
        while True:
            await asyncio.sleep(self.hw_checkpoint_interval)
            self.checkpoint_high_watermarks()

    async def _flush_loop(self) -> None:
        """Honour flush.ms: logs with a finite flush.ms are checked every second (or flush.ms if shorter)."""
        while True:
            finite = [p.log for p in self.partitions.values()
                      if p.log.config.flush_ms < 2**62 and p.log.failed is None]
            period = min([1.0] + [lg.config.flush_ms / 1000 for lg in finite])
            await asyncio.sleep(max(period, 0.01))
            for lg in finite:
                try:
                    lg.maybe_flush()
                except OSError as e:            # the log (and so its dir) went offline: reported by the log
                    log.error("flush failed for %s: %s", lg.dir, e)
                except Exception:
                    log.exception("flush failed for %s", lg.dir)
