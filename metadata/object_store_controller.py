"""The cluster's controller on an object store: every broker follows the metadata log there, and those with the
controller role campaign for the lease; the holder is the active controller, the only one that appends.

Building blocks: metadata/object_store_log.py (the log: create-only numbered batches, snapshots) and
metadata/controller_lease.py (the lease). The active controller's first batch is a LeaderChangeRecord at its new
epoch; a controller whose append loses a race, or whose lease was replaced or could not be renewed in time, steps
down and answers NOT_CONTROLLER. Followers poll for the next batch every `poll_interval` and publish each new image,
as the active controller publishes its own appends.

Every change goes through one event queue (Kafka's QuorumController): an operation is a function from the latest
image to the records that express it and the answer for its caller, run by the queue's one worker, never by the
caller. Operations queued together run one after another against the image their predecessors produced (their
records not yet committed) and are appended as one batch; none of them is answered before that batch is in the log.
An operation that raises leaves nothing behind, and when the append fails every operation of the batch fails
(NotControllerError, retriable) and the image is re-read before the next one. Nothing awaits between reading the
image and writing the records, so two events can never both act on the state before the other.

Kafka's configs where Kafka has the concept: the lease times out after `controller.quorum.fetch.timeout.ms`
(default 2000: in KRaft, the time without hearing from the leader before a voter campaigns), and a snapshot is
written after `metadata.log.max.record.bytes.between.snapshots` (default 20 MiB) of appended batches.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from metadata.controller import Operation, Publisher
from metadata.controller_lease import ControllerLease
from metadata.image import MetadataImage
from metadata.object_store_log import ObjectStoreMetadataLog, ReplayInterrupted
from metadata.records import LeaderChangeRecord
from storage.objectstore.object_store import ObjectStore, ObjectStoreError, PreconditionFailed, until_answered

log = logging.getLogger("strata.controller")


class NotControllerError(Exception):
    """This node is not the active controller (Kafka's NOT_CONTROLLER): ask the one the image names."""


MAX_OPERATIONS_PER_BATCH = 256          # operations appended together in one metadata batch


def _fail(entries, exc: Exception) -> None:
    """Fail the futures of queued operations ((operation, future, ...) tuples) not answered yet."""
    for entry in entries:
        fut = entry[1]
        if not fut.done():
            fut.set_exception(exc)


class ObjectStoreController:
    def __init__(self, store: ObjectStore, node_id: int, *, controller_role: bool = True, prefix: str = "metadata",
                 lease_timeout: float = 2.0, poll_interval: float = 0.2, snapshot_bytes: int = 20 * 1024 * 1024):
        self.node_id, self.controller_role = node_id, controller_role
        self.log = ObjectStoreMetadataLog(store, prefix)
        self.lease = ControllerLease(store, f"{self.log.prefix}/controller-lease", node_id, lease_timeout)
        self.poll_interval, self.snapshot_bytes = poll_interval, snapshot_bytes
        self._image = MetadataImage()
        self._publishers: list[Publisher] = []
        self._lock = asyncio.Lock()            # the log position: one append batch (or catch-up) at a time
        self._queue: deque[tuple[Operation, asyncio.Future]] = deque()
        self._worker: asyncio.Task | None = None
        self._reread = False                   # an append failed ambiguously: read the log before the next one
        self._loading: MetadataImage | None = None   # start-up replay so far, kept across store errors
        self._leader_change_sent = 0           # the epoch of the last LeaderChangeRecord this process tried to append
        self._closed = False                   # stopped: no operation runs any more
        self._task: asyncio.Task | None = None
        self._snapshot_task: asyncio.Task | None = None
        self._snapshot_at_bytes = 0            # log.appended_bytes when the last snapshot was started
        self._campaign_after = 0.0             # lease-clock time before which this node does not campaign (resign)
        self.resigned_at: tuple[int, int] | None = None   # (epoch, log end) of its last resignation as unreachable
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

    async def run(self, operation: Operation) -> Any:
        """Queue `operation` (image -> (records, answer)) and return its answer once its records are committed.
        Raises what the operation raised (nothing is written), ValueError if its records do not apply to the image
        it was given, and NotControllerError when this node is not the active controller or the append failed.
        A caller that is cancelled before its turn comes is dropped from the queue."""
        if self._closed:
            raise self._not_controller()
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((operation, fut))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain(), name=f"controller-events-{self.node_id}")
        return await fut

    async def refresh(self) -> None:
        """Read the metadata log now instead of at the next poll (after a forwarded admin request)."""
        async with self._lock:
            await self._catch_up()

    # ---- the event queue -------------------------------------------------------------------------------------
    async def _drain(self) -> None:
        batch: list = []
        try:
            while self._queue and not self._closed:
                batch = []
                while self._queue and len(batch) < MAX_OPERATIONS_PER_BATCH:
                    batch.append(self._queue.popleft())
                async with self._lock:
                    await self._execute(batch)
        finally:                                   # stopped (or a bug): nobody may wait forever
            _fail(batch + list(self._queue), self._not_controller())
            self._queue.clear()

    async def _execute(self, batch: list) -> None:
        if not self.acting:
            return _fail(batch, self._not_controller())
        if self._reread:
            try:
                await self._catch_up()
            except Exception as e:
                return _fail(batch, NotControllerError(f"node {self.node_id} cannot read the metadata log: {e}"))
            self._reread = False
            if not self.acting:
                return _fail(batch, self._not_controller())
        base = image = self._image
        records: list = []
        answered: list = []
        for op, fut in batch:
            if fut.done():                             # its caller gave up before its turn came: nothing to do
                continue
            try:
                recs, answer = op(image)
                recs = list(recs)
                after = image.apply(recs) if recs else image       # validates: a bad record fails only this op
            except Exception as e:
                fut.set_exception(e)
                continue
            image = after
            records += recs
            answered.append((op, fut, answer))
        if records:
            try:
                new = await self.log.append(base, self.lease.epoch, records, applied=image)
            except PreconditionFailed:
                log.warning("node %d: another batch is at offset %d; re-reading the log", self.node_id,
                            base.offset + 1)
                self._reread = True
                await self._reread_now()
                return _fail(answered, NotControllerError(
                    f"node {self.node_id} lost the controller role to {self._image.controller_id}" if not self.active
                    else f"node {self.node_id} found metadata offset {base.offset + 1} taken; try again"))
            except Exception as e:
                # The batch may or may not be in the log (an answer lost on the way back): read before appending.
                log.warning("node %d: metadata append at offset %d failed: %s", self.node_id, base.offset + 1, e)
                self._reread = True
                return _fail(answered, NotControllerError(
                    f"node {self.node_id} could not append to the metadata log: {e}"))
            self._publish(new)
        for _, fut, answer in answered:
            if not fut.done():
                fut.set_result(answer)

    async def _reread_now(self) -> None:
        """After losing the race for a position: read what is there. A batch of a newer controller epoch means this
        node was deposed (the catch-up steps it down); a batch of our own epoch was our own earlier append whose
        answer was lost, and we stay active."""
        try:
            await self._catch_up()
            self._reread = False
        except Exception as e:
            log.warning("node %d: re-reading the metadata log failed: %s", self.node_id, e)

    def _not_controller(self) -> NotControllerError:
        return NotControllerError(f"node {self.node_id} is not the active controller "
                                  f"(controller {self._image.controller_id})")

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    async def load(self) -> None:
        """Read the log to its end (the newest snapshot, then every batch after it) and publish that image. A store
        error keeps what was read: the next call goes on from there."""
        if self._loading is None:
            self._loading = await self.log.load_start()
        try:
            replayed = await self.log.catch_up(self._loading)
        except ReplayInterrupted as e:
            self._loading = e.replayed.image
            raise
        self._loading = None
        self._publish(replayed.image)

    async def campaign(self) -> bool:
        """One round of the election: take the lease if it is free or lapsed, then become active (read to the end
        of the log, append our LeaderChangeRecord). True once this node is the active controller."""
        if self.controller_role and self.lease.clock() >= self._campaign_after and await self.lease.campaign():
            await self._become_active()
        return self.active

    async def start(self) -> None:
        await until_answered(self.load, f"node {self.node_id}: reading the metadata log", log,
                             progress=lambda: self._loading.offset if self._loading is not None else -1)
        log.info("node %d: metadata log at offset %d (controller %d, epoch %d)", self.node_id, self._image.offset,
                 self._image.controller_id, self._image.controller_epoch)
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.node_id}")

    async def stop(self) -> None:
        self._closed = True                    # no new operation is queued or started from here on
        tasks = [t for t in (self._task, self._snapshot_task, self._worker) if t is not None]
        self._task = self._snapshot_task = self._worker = None    # also ends the loop if a cancel is swallowed
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        _fail(self._queue, self._not_controller())             # the worker's own cleanup, should it not have run
        self._queue.clear()
        if self.active or self.lease.holding:
            self.active = False
            try:
                await self.lease.resign()
            except ObjectStoreError as e:
                log.warning("node %d: could not resign the controller lease: %s", self.node_id, e)

    async def resign(self, why: str, hold_off: float) -> None:
        """Give up the lease while still holding it, so another node takes over at once, and stay out of elections
        for `hold_off` seconds (metadata/reachability.py: the brokers cannot reach this controller). After the last
        batch this node appends, under the log lock, so no append of ours is in flight when the lease goes."""
        async with self._lock:
            if not self.active:
                return
            log.warning("node %d resigns as controller (epoch %d, at offset %d): %s", self.node_id, self.lease.epoch,
                        self._image.offset, why)
            self.active = False
            self._campaign_after = self.lease.clock() + hold_off
            self.resigned_at = (self.lease.epoch, self._image.offset)
            try:
                await self.lease.resign()
            except ObjectStoreError as e:       # no longer renewed: it lapses after the lease timeout instead
                log.warning("node %d: could not resign the controller lease: %s", self.node_id, e)

    def may_resign_unreachable(self) -> bool:
        """False when this node took the lease right after resigning it (nobody else did: resigning again would
        only stall the cluster)."""
        return self.resigned_at is None or self.lease.epoch != self.resigned_at[0] + 1

    async def _run(self) -> None:
        while self._task is not None:
            try:
                if self.lease.holding:
                    # Renew whether or not we are active yet: a winner still catching up keeps its lease (or learns
                    # it lost it) instead of holding one nobody renews.
                    if not await self.lease.renew() or not self.lease.valid():
                        self._step_down("the lease was replaced" if not self.lease.holding
                                        else "the lease could not be renewed in time")
                    elif not self.active:
                        await self._become_active()
                elif self.controller_role:
                    await self.campaign()
                if not self.active:
                    async with self._lock:
                        await self._catch_up()
            except ObjectStoreError as e:
                log.warning("node %d: metadata store: %s", self.node_id, e)
                if self.lease.holding and not self.lease.valid():
                    self._step_down("the lease could not be renewed in time")
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node %d: controller loop", self.node_id)
            await asyncio.sleep(self.lease.renew_interval if self.lease.holding else self.poll_interval)

    async def _become_active(self) -> None:
        """Read to the end of the log and append our LeaderChangeRecord; until it is in, we are not active. A
        failure here leaves the lease held: the loop renews it and tries again, or gives it up once it lapses."""
        async with self._lock:
            while self.lease.valid():
                await self._catch_up()
                epoch = self.lease.epoch
                if (self._image.controller_epoch, self._image.controller_id) == (epoch, self.node_id) and \
                        self._leader_change_sent == epoch:
                    # our LeaderChangeRecord is in: this process's append of it was answered with an error but had
                    # landed (only this lease holder writes batches of this epoch), so we are active
                    self._activate(self._image, epoch, publish=False)     # _catch_up published it
                    return
                if epoch <= self._image.controller_epoch:          # the log is ahead of the lease: never go back
                    log.error("node %d: lease epoch %d is not above the log's %d; resigning", self.node_id, epoch,
                              self._image.controller_epoch)
                    await self.lease.resign()
                    return
                self._leader_change_sent = epoch
                try:
                    new = await self.log.append(self._image, epoch, [LeaderChangeRecord(self.node_id, epoch)])
                except PreconditionFailed:
                    continue                                        # a late batch of the old controller: re-read
                self._activate(new, epoch)
                return
            self._step_down("the lease lapsed before the log could be read")

    def _activate(self, image: MetadataImage, epoch: int, publish: bool = True) -> None:
        self.active = True
        self._reread = False
        if publish:
            self._publish(image)
        log.info("node %d is the active controller, epoch %d, at offset %d", self.node_id, epoch, image.offset)

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
