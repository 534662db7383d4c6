"""The cluster's controller on an object store: every broker follows the metadata log there, and those with the
controller role campaign for the lease; the holder is the active controller, the only one that appends.

Building blocks: metadata/object_store_log.py (the log: create-only numbered batches, snapshots) and
metadata/controller_lease.py (the lease). The active controller's first batch is a LeaderChangeRecord at its new
epoch; a controller whose append loses a race, or whose lease was replaced or could not be renewed in time, steps
down and answers NOT_CONTROLLER. Followers poll for the next batch every `poll_interval` and publish each new image,
as the active controller publishes its own appends.

Kafka's configs where Kafka has the concept: the lease times out after `controller.quorum.fetch.timeout.ms`
(default 2000: in KRaft, the time without hearing from the leader before a voter campaigns), and a snapshot is
written after `metadata.log.max.record.bytes.between.snapshots` (default 20 MiB) of appended batches.
"""
from __future__ import annotations

import asyncio
import logging
import time

from metadata.controller import Publisher
from metadata.controller_lease import ControllerLease
from metadata.image import MetadataImage
from metadata.object_store_log import ObjectStoreMetadataLog
from metadata.records import LeaderChangeRecord
from storage.objectstore.object_store import ObjectStore, ObjectStoreError, PreconditionFailed

log = logging.getLogger("strata.controller")


class NotControllerError(Exception):
    """This node is not the active controller (Kafka's NOT_CONTROLLER): ask the one the image names."""


class ObjectStoreController:
    def __init__(self, store: ObjectStore, node_id: int, *, controller_role: bool = True, prefix: str = "metadata",
                 lease_timeout: float = 2.0, poll_interval: float = 0.2, snapshot_bytes: int = 20 * 1024 * 1024):
        self.node_id, self.controller_role = node_id, controller_role
        self.log = ObjectStoreMetadataLog(store, prefix)
        self.lease = ControllerLease(store, f"{self.log.prefix}/controller-lease", node_id, lease_timeout)
        self.poll_interval, self.snapshot_bytes = poll_interval, snapshot_bytes
        self._image = MetadataImage()
        self._publishers: list[Publisher] = []
        self._lock = asyncio.Lock()            # one append (or catch-up) at a time
        self._task: asyncio.Task | None = None
        self._snapshot_task: asyncio.Task | None = None
        self._snapshot_at_bytes = 0            # log.appended_bytes when the last snapshot was started
        self.active = False

    # ---- the Controller interface ----------------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def epoch(self) -> int:
        return self._image.controller_epoch

    @property
    def acting(self) -> bool:
        """Whether this node may answer as the active controller now: it holds the lease and, by its own clock, the
        lease has not lapsed. `active` alone is not enough: a controller paused past the lease (SIGSTOP, a long GC)
        wakes up with `active` still set until its loop next tries to renew, and in that window it would answer
        heartbeats from its stale image, telling its own broker it was unfenced when the new controller had fenced
        it. Kafka's controller answers NOT_CONTROLLER once it is no longer the Raft leader; so does this one."""
        return self.active and self.lease.valid()

    def add_publisher(self, publisher: Publisher) -> None:
        self._publishers.append(publisher)

    async def submit(self, records: list) -> MetadataImage:
        """Append `records` as one batch and publish the image; NotControllerError unless this node is the active
        controller, ValueError if they do not apply to the current image (nothing is written)."""
        async with self._lock:
            if not self.acting:
                raise NotControllerError(f"node {self.node_id} is not the active controller "
                                         f"(controller {self._image.controller_id})")
            try:
                new = await self.log.append(self._image, self.lease.epoch, records)
            except PreconditionFailed:
                log.warning("node %d: another controller appended at offset %d; stepping down", self.node_id,
                            self._image.offset + 1)
                self.active = False
                await self._catch_up()
                raise NotControllerError(f"node {self.node_id} lost the controller role to "
                                         f"{self._image.controller_id}") from None
            self._publish(new)
            return new

    async def refresh(self) -> None:
        """Read the metadata log now instead of at the next poll (after a forwarded admin request)."""
        async with self._lock:
            await self._catch_up()

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        replayed = await self.log.load()
        self._publish(replayed.image)
        log.info("node %d: metadata log at offset %d (controller %d, epoch %d)", self.node_id, self._image.offset,
                 self._image.controller_id, self._image.controller_epoch)
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.node_id}")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._snapshot_task) if t is not None]
        self._task = self._snapshot_task = None    # also ends the loop if a cancel is swallowed
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self.active:
            self.active = False
            try:
                await self.lease.resign()
            except ObjectStoreError as e:
                log.warning("node %d: could not resign the controller lease: %s", self.node_id, e)

    async def _run(self) -> None:
        while self._task is not None:
            try:
                if self.active:
                    if not await self.lease.renew() or not self.lease.valid():
                        self._step_down("the lease was replaced")
                elif self.controller_role and await self.lease.campaign():
                    await self._become_active()
                if not self.active:
                    async with self._lock:
                        await self._catch_up()
            except ObjectStoreError as e:
                log.warning("node %d: metadata store: %s", self.node_id, e)
                if self.active and not self.lease.valid():
                    self._step_down("the lease could not be renewed in time")
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node %d: controller loop", self.node_id)
            await asyncio.sleep(self.lease.renew_interval if self.active else self.poll_interval)

    async def _become_active(self) -> None:
        """Read to the end of the log and append our LeaderChangeRecord; until it is in, we are not active."""
        async with self._lock:
            while self.lease.valid():
                await self._catch_up()
                epoch = self.lease.epoch
                if epoch <= self._image.controller_epoch:          # the log is ahead of the lease: never go back
                    log.error("node %d: lease epoch %d is not above the log's %d; resigning", self.node_id, epoch,
                              self._image.controller_epoch)
                    await self.lease.resign()
                    return
                try:
                    new = await self.log.append(self._image, epoch, [LeaderChangeRecord(self.node_id, epoch)])
                except PreconditionFailed:
                    continue                                        # a late batch of the old controller: re-read
                self.active = True
                self._publish(new)
                log.info("node %d is the active controller, epoch %d, at offset %d", self.node_id, epoch, new.offset)
                return

    def _step_down(self, why: str) -> None:
        log.warning("node %d steps down as controller (epoch %d): %s", self.node_id, self.lease.epoch, why)
        self.active = False
        self.lease.abandon()

    async def _catch_up(self) -> None:
        replayed = await self.log.catch_up(self._image)
        if replayed.image.offset != self._image.offset:
            if self.active and replayed.image.controller_epoch > self.lease.epoch:
                self._step_down(f"controller {replayed.image.controller_id} has epoch "
                                f"{replayed.image.controller_epoch}")
            self._publish(replayed.image)

    def _publish(self, new: MetadataImage) -> None:
        old, self._image = self._image, new
        for publish in self._publishers:
            try:
                publish(old, new)
            except Exception:
                log.exception("metadata publisher %r failed at offset %d", publish, new.offset)
        if self.active and self.log.appended_bytes - self._snapshot_at_bytes >= self.snapshot_bytes \
                and self._snapshot_task is None:
            self._snapshot_at_bytes = self.log.appended_bytes
            self._snapshot_task = asyncio.create_task(self._snapshot(new))

    async def _snapshot(self, image: MetadataImage) -> None:
        """Write a snapshot of `image` and delete what it makes unnecessary (batches up to it, older snapshots)."""
        try:
            started = time.monotonic()
            await self.log.write_snapshot(image)
            deleted = await self.log.delete_before(image.offset)
            log.info("metadata snapshot at offset %d (%d objects deleted) in %.0f ms", image.offset, deleted,
                     (time.monotonic() - started) * 1000)
        except ObjectStoreError as e:
            log.warning("metadata snapshot at offset %d failed: %s", image.offset, e)
        finally:
            self._snapshot_task = None
