"""Partitions hosted by this broker: their logs, appends, reads, fetch long-poll wake-ups, and log housekeeping.

Named after Kafka's ReplicaManager. On a single broker this node leads every partition at leader epoch 0.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

from metadata.topic_store import TopicInfo, TopicStore
from protocol.record_batch import split_and_validate
from storage.log.log import Log
from storage.cleaner.log_cleaner import LogCleaner

log = logging.getLogger("strata.replica_manager")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class Partition:
    __slots__ = ("topic", "index", "log", "leader_epoch", "waiters")

    def __init__(self, topic: str, index: int, plog: Log, leader_epoch: int = 0):
        self.topic = topic
        self.index = index
        self.log = plog
        self.leader_epoch = leader_epoch
        self.waiters: list[asyncio.Future] = []

    def wake_waiters(self) -> None:
        if self.waiters:
            for fut in self.waiters:
                if not fut.done():
                    fut.set_result(None)
            self.waiters.clear()


class ReplicaManager:
    def __init__(self, config, topics: TopicStore):
        self.config = config
        self.topics = topics
        self.log_dir: Path = config.log_dir
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._tasks: list[asyncio.Task] = []
        self.remote_log_manager = None    # storage.tiered.remote_log_manager.RemoteLogManager when tiered storage is on
        self.cleaner: LogCleaner | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def startup(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        t0 = time.monotonic()
        for t in self.topics.topics():
            for p in range(t.partitions):
                self._open(t, p, clean)
        # Any crash from here on must be treated as unclean.
        marker.unlink(missing_ok=True)
        log.info("loaded %d partitions in %.2fs (%s shutdown)", len(self.partitions), time.monotonic() - t0,
                 "clean" if clean else "unclean")

    def start_background(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._retention_loop()))
        self._tasks.append(loop.create_task(self._flush_loop()))
        if self.config.get_bool("log.cleaner.enable"):     # log compaction: storage/log_cleaner.py
            self.cleaner = LogCleaner(self.config, self)
            self.cleaner.start()

    def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.cleaner is not None:
            self.cleaner.stop()
        for part in self.partitions.values():
            part.log.close()
        (self.log_dir / CLEAN_SHUTDOWN_FILE).write_text("")
        log.info("logs closed cleanly")

    # ---- partitions ------------------------------------------------------------------------------------------
    def _open(self, t: TopicInfo, p: int, clean: bool = False) -> Partition:
        cfg = self.config.log_config(t.configs)
        rlm = self.remote_log_manager
        plog = Log(self.log_dir / f"{t.name}-{p}", cfg, clean_shutdown=clean,
                   remote_log_enabled=rlm is not None and rlm.is_tiered(t.name, cfg))
        part = Partition(t.name, p, plog)
        self.partitions[(t.name, p)] = part
        return part

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def add_partitions(self, t: TopicInfo, old_count: int) -> None:
        for p in range(old_count, t.partitions):
            self._open(t, p)
        if self.remote_log_manager is not None:
            self.remote_log_manager.on_topic_created(t)

    def delete_topic(self, t: TopicInfo) -> None:
        if self.remote_log_manager is not None:
            self.remote_log_manager.on_topic_deleted(t)     # stop tiering, delete the remote data in the background
        for p in range(t.partitions):
            part = self.partitions.pop((t.name, p), None)
            if part is not None:
                part.wake_waiters()
                part.log.delete()
            shutil.rmtree(self.log_dir / f"{t.name}-{p}", ignore_errors=True)

    def reconfigure(self, t: TopicInfo) -> None:
        cfg = self.config.log_config(t.configs)
        for p in range(t.partitions):
            part = self.partitions.get((t.name, p))
            if part is not None:
                part.log.update_config(cfg)
        if self.remote_log_manager is not None:
            self.remote_log_manager.on_config_changed(t)

    # ---- data path -------------------------------------------------------------------------------------------
    def append(self, part: Partition, records, headers):
        result = part.log.append_as_leader(records, headers, part.leader_epoch)
        if result.error_code == 0 and not result.duplicate:
            part.wake_waiters()
        return result

    def append_internal(self, topic: str, index: int, batch: bytes):
        """Append a batch the broker built itself (internal topics such as __consumer_offsets)."""
        part = self.partitions[(topic, index)]
        buf = bytearray(batch)
        headers = split_and_validate(buf, max(part.log.config.max_message_bytes, len(buf)))
        result = self.append(part, buf, headers)
        if result.error_code:
            raise OSError(f"append to {topic}-{index} failed with error {result.error_code}: {result.error_message}")
        return result

    def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        """Create an internal topic at start-up if it does not exist yet (as Kafka does on first use)."""
        info = self.topics.get(name)
        if info is None:
            info = self.topics.create(name, partitions, configs)
            self.add_partitions(info, 0)
            log.info("created internal topic %s with %d partitions", name, partitions)
        return info

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
                try:
                    n = part.log.delete_old_segments()
                    if n:
                        log.info("retention deleted %d segment(s) of %s-%d", n, part.topic, part.index)
                except Exception:
                    log.exception("retention failed for %s-%d", part.topic, part.index)

    async def _flush_loop(self) -> None:
        """Honour flush.ms: logs with a finite flush.ms are checked every second (or flush.ms if shorter)."""
        while True:
            finite = [p.log for p in self.partitions.values() if p.log.config.flush_ms < 2**62]
            period = min([1.0] + [lg.config.flush_ms / 1000 for lg in finite])
            await asyncio.sleep(max(period, 0.01))
            for lg in finite:
                try:
                    lg.maybe_flush()
                except Exception:
                    log.exception("flush failed for %s", lg.dir)
