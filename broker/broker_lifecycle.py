"""Registration and heartbeats of this broker with the active controller (Kafka's BrokerLifecycleManager).

The broker registers with a new incarnation id at every start and gets its broker epoch; it then heartbeats every
`broker.heartbeat.interval.ms` with the metadata offset it has applied, which unfences it once it has caught up. A
heartbeat answered STALE_BROKER_EPOCH (the controller no longer knows this registration) registers again. On a
clean stop it asks for a controlled shutdown: the controller fences it and moves its leaderships away first.

Each request waits at most half of `broker.session.timeout.ms` (KAFKA-14392): a heartbeat sent to a controller that
then stops answering (paused, partitioned) must give up in time to reach its successor before that one's session
timer fences this broker. Waiting longer got every live broker fenced at a controller failover, and with them the
whole ISR of the partitions the old controller led.

A broker that has had no answer from the controller for a third of a session says so in the metadata store
(`reports`, metadata/reachability.py) and takes it back once the controller answers: a controller that reaches the
store but not the brokers learns from those reports that it is the one cut off, and resigns instead of fencing them.
A task of its own does it, so that no heartbeat waits for the store.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from broker.controller_channel import ControllerUnavailable
from protocol.errors import ErrorCode

log = logging.getLogger("strata.lifecycle")

BROKER_REGISTRATION, BROKER_HEARTBEAT = 62, 63


class BrokerLifecycle:
    def __init__(self, node_id: int, channel, topics, *, cluster_id: str, rack: str | None,
                 endpoint: list[tuple[str, str, int, int]], heartbeat_interval_ms: int = 2000, session_timeout_ms: int = 9000,
                 reports=None):
        self.node_id, self.channel, self.topics = node_id, channel, topics
        self.reports = reports                   # metadata.reachability.ReachabilityReports, None: say nothing
        self.session_timeout = session_timeout_ms / 1000
        self._answered_at = time.monotonic()     # when the controller last answered (or a new one was named)
        self._watcher: asyncio.Task | None = None
        self.cluster_id, self.rack, self.endpoint = cluster_id, rack, endpoint
        self.interval = heartbeat_interval_ms / 1000
        self.request_timeout = session_timeout_ms / 2000
        self.incarnation_id = uuid.uuid4().hex
        self.broker_epoch = -1
        self.fenced = True
        self.registered = asyncio.Event()
        self.unfenced = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="broker-lifecycle")
        if self.reports is not None:
            self._watcher = asyncio.create_task(self._watch_reachability(), name="controller-reachability")

    async def _register(self) -> None:
        resp = await self.channel.send(BROKER_REGISTRATION, 0, {
            "broker_id": self.node_id, "cluster_id": self.cluster_id,
            "incarnation_id": uuid.UUID(self.incarnation_id),
            "listeners": [{"name": name, "host": host, "port": port, "security_protocol": proto}
                          for name, host, port, proto in self.endpoint],
            "features": [], "rack": self.rack}, timeout=self.request_timeout)
        self._answered_at = time.monotonic()
        if resp.error_code:
            raise ControllerUnavailable(f"registration refused: {resp.error_code.name}")
        self.broker_epoch = resp.broker_epoch
        self.registered.set()
        log.info("broker %d registered with the controller, broker epoch %d", self.node_id, self.broker_epoch)

    async def _heartbeat(self, want_shut_down: bool = False):
        return await self.channel.send(BROKER_HEARTBEAT, 0, {
            "broker_id": self.node_id, "broker_epoch": self.broker_epoch,
            "current_metadata_offset": self.topics.image.offset, "want_fence": False,
            "want_shut_down": want_shut_down}, timeout=self.request_timeout)

    async def _run(self) -> None:
        while self._task is not None:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                resp = await self._heartbeat()
                self._answered_at = time.monotonic()
                if resp.error_code == ErrorCode.stale_broker_epoch:
                    log.warning("broker %d: the controller does not know broker epoch %d; registering again",
                                self.node_id, self.broker_epoch)
                    self.broker_epoch = -1
                    continue
                if resp.error_code:
                    raise ControllerUnavailable(resp.error_code.name)
                if self.fenced != resp.is_fenced:
                    log.info("broker %d is %s", self.node_id, "fenced" if resp.is_fenced else "unfenced")
                self.fenced = resp.is_fenced
                if not self.fenced:
                    self.unfenced.set()
            except ControllerUnavailable as e:
                log.debug("broker %d: controller unavailable: %s", self.node_id, e)
                await asyncio.sleep(min(self.interval, 0.2))
                continue
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker %d: heartbeat failed", self.node_id)
            # fenced brokers retry soon: they are waiting to be let in
            await asyncio.sleep(self.interval if not self.fenced else min(self.interval, 0.1))

    async def _watch_reachability(self) -> None:
        """Report the controller our image names once it has not answered for a third of a session (the count starts
        again when a new controller is named); withdraw the report once it answers. A store error costs only the
        report: the next round tries again."""
        epoch = -1
        failed = False
        while True:
            await asyncio.sleep(min(self.interval, self.session_timeout / 6))
            image = self.topics.image
            if image.controller_epoch != epoch:
                epoch = image.controller_epoch
                self._answered_at = max(self._answered_at, time.monotonic())
            silent = time.monotonic() - self._answered_at
            try:
                async with asyncio.timeout(self.session_timeout / 3):
                    if silent < self.session_timeout / 3:
                        if self.reports.pending and await self.reports.withdraw():
                            log.info("broker %d: the controller answers again; report withdrawn", self.node_id)
                    elif image.controller_id not in (-1, self.node_id) and \
                            await self.reports.report(image.controller_id, epoch):
                        log.warning("broker %d: controller %d (epoch %d) has not answered for %.1fs; reported to "
                                    "the metadata store", self.node_id, image.controller_id, epoch, silent)
                failed = False
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not failed:
                    log.info("broker %d: could not update the report of an unreachable controller: %r",
                             self.node_id, e)
                failed = True

    async def stop(self, controlled: bool = True, timeout: float = 5.0) -> None:
        task, self._task = self._task, None        # also ends the loop if wait_for swallows the cancel (3.11)
        watcher, self._watcher = self._watcher, None
        tasks = {t for t in (task, watcher) if t is not None}
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if controlled and self.broker_epoch >= 0:
            try:
                async with asyncio.timeout(timeout):   # not wait_for: its task's failure may go unread (3.11)
                    await self._heartbeat(want_shut_down=True)
                log.info("broker %d: controlled shutdown done", self.node_id)
            except (ControllerUnavailable, asyncio.TimeoutError) as e:
                log.warning("broker %d: controlled shutdown failed: %s", self.node_id, e)
