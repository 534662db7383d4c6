"""What the active controller decides about brokers and partitions (Kafka's ClusterControlManager and
ReplicationControlManager): registrations, heartbeats and fencing, leader election, ISR changes.

The functions at the top are pure: an image in, the records that express the decision out (or a Kafka error
code). `ClusterControl` adds what needs a clock (broker sessions) and appends the records through the controller,
which fences the whole batch by the controller epoch. Rules as in KRaft:

- A broker registers fenced; it is unfenced by a heartbeat once it has caught up with the metadata log up to its
  own registration. A new incarnation of a registered broker first fences the old one.
- A fenced broker (session expired, or it asked for a controlled shutdown) leaves every ISR and every leadership;
  the new leader is the first replica, in assignment order, that is in the ISR and unfenced, with the leader epoch
  bumped. If no such replica exists the partition goes offline (leader -1) and keeps its last ISR member, so that
  only that replica (which has every acknowledged record) can lead again: no unclean election.
- An unfenced broker leads the offline partitions whose ISR names it.
- Before fencing brokers whose sessions expired, the controller reads their reports of it (metadata/reachability.py):
  when more of them cannot reach it than it hears from, itself included, it resigns instead of fencing them.
- AlterPartition comes from the leader (registered at its current broker epoch), at the current leader epoch and
  partition epoch, and may only name unfenced replicas in the new ISR; each accepted change bumps the partition
  epoch. The checks run in Kafka's order (validateAlterPartitionData).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from metadata.controller import producer_ids_block
from metadata.image import MetadataImage, PartitionImage, TopicImage
from metadata.reachability import controller_is_cut_off
from metadata.records import BrokerRegistrationChangeRecord, PartitionRecord, RegisterBrokerRecord
from protocol.errors import ErrorCode

log = logging.getLogger("strata.controller")


def _changed(t: TopicImage, index: int, p: PartitionImage, *, isr=None, leader=None, replicas=None,
             adding=None, removing=None) -> PartitionRecord:
    isr = p.isr if isr is None else tuple(isr)
    leader = p.leader if leader is None else leader
    epoch = p.leader_epoch + 1 if leader != p.leader else p.leader_epoch
    return PartitionRecord(t.topic_id, index, list(p.replicas if replicas is None else replicas), list(isr), leader,
                           epoch, p.partition_epoch + 1, list(p.adding if adding is None else adding),
                           list(p.removing if removing is None else removing))


def _unfenced(image: MetadataImage, broker_id: int) -> bool:
    b = image.brokers.get(broker_id)
    return b is not None and not b.fenced


def fence_records(image: MetadataImage, broker_id: int) -> list:
    """Fence `broker_id`: out of every ISR, leaderships moved to another ISR member (or offline)."""
    b = image.brokers.get(broker_id)
    if b is None:
        return []
    out: list = [] if b.fenced else [BrokerRegistrationChangeRecord(broker_id, b.epoch, True)]
    for t in image.topics_by_id.values():
        for i, p in enumerate(t.partition_states):
            if broker_id not in p.isr and p.leader != broker_id:
                continue
            isr = tuple(r for r in p.isr if r != broker_id)
            leader = p.leader
            if leader == broker_id or leader == -1:
                leader = next((r for r in p.replicas if r in isr and r != broker_id and _unfenced(image, r)), -1)
            if not isr:
                isr = p.isr            # the last ISR member stays, so that only it can lead again
            if isr != p.isr or leader != p.leader:
                out.append(_changed(t, i, p, isr=isr, leader=leader))
    return out


def unfence_records(image: MetadataImage, broker_id: int) -> list:
    """Unfence `broker_id` and make it leader of the offline partitions whose ISR names it."""
    b = image.brokers.get(broker_id)
    if b is None or not b.fenced:
        return []
    out: list = [BrokerRegistrationChangeRecord(broker_id, b.epoch, False)]
    for t in image.topics_by_id.values():
        for i, p in enumerate(t.partition_states):
            if p.leader == -1 and broker_id in p.isr:
                out.append(_changed(t, i, p, leader=broker_id))
    return out


def register_records(image: MetadataImage, broker_id: int, incarnation_id: str, rack: str | None,
                     endpoints: list[tuple[str, str, int]]) -> list:
    """A broker's registration (fenced until it catches up); a new incarnation fences the old one first."""
    old = image.brokers.get(broker_id)
    if old is not None and old.incarnation_id == incarnation_id:
        return []                                   # a retried registration: nothing changes
    out = fence_records(image, broker_id) if old is not None else []
    out.append(RegisterBrokerRecord(broker_id, incarnation_id, rack, [tuple(e) for e in endpoints], fenced=True))
    return out


@dataclass
class AlterPartitionResult:
    error_code: int
    record: PartitionRecord | None = None
    partition: PartitionImage | None = None


def alter_partition(image: MetadataImage, broker_id: int, broker_epoch: int, topic_id: str, index: int,
                    leader_epoch: int, partition_epoch: int, new_isr: list[int]) -> AlterPartitionResult:
    """Validate a leader's ISR change as Kafka's ReplicationControlManager.alterPartition does."""
    b = image.brokers.get(broker_id)
    if b is None or b.epoch != broker_epoch:
        return AlterPartitionResult(ErrorCode.stale_broker_epoch)
    t = image.topics_by_id.get(topic_id)
    if t is None:
        return AlterPartitionResult(ErrorCode.unknown_topic_id)
    p = t.partition(index)
    if p is None:
        return AlterPartitionResult(ErrorCode.unknown_topic_or_partition)
    # Kafka's order: the leader epoch first (a deposed leader is fenced by it), then the sender, then the partition
    # epoch; an epoch newer than ours means this controller is behind: NOT_CONTROLLER, the sender asks again.
    if leader_epoch > p.leader_epoch:
        return AlterPartitionResult(ErrorCode.not_controller, partition=p)
    if leader_epoch < p.leader_epoch:
        return AlterPartitionResult(ErrorCode.fenced_leader_epoch, partition=p)
    if p.leader != broker_id:
        return AlterPartitionResult(ErrorCode.invalid_request, partition=p)
    if partition_epoch > p.partition_epoch:
        return AlterPartitionResult(ErrorCode.not_controller, partition=p)
    if partition_epoch < p.partition_epoch:
        return AlterPartitionResult(ErrorCode.invalid_update_version, partition=p)
    if broker_id not in new_isr or any(r not in p.replicas for r in new_isr):
        return AlterPartitionResult(ErrorCode.invalid_request, partition=p)
    if any(r not in p.isr and not _unfenced(image, r) for r in new_isr):
        return AlterPartitionResult(ErrorCode.ineligible_replica, partition=p)
    isr = tuple(r for r in p.replicas if r in new_isr)
    if isr == p.isr:
        return AlterPartitionResult(0, partition=p)
    return AlterPartitionResult(0, _changed(t, index, p, isr=isr))


def elect_preferred(image: MetadataImage, t: TopicImage, index: int) -> tuple[int, PartitionRecord | None]:
    """ElectLeaders(PREFERRED): the first assigned replica leads if it is in the ISR and unfenced."""
    p = t.partition(index)
    if p is None:
        return ErrorCode.unknown_topic_or_partition, None
    preferred = p.replicas[0]
    if p.leader == preferred:
        return ErrorCode.election_not_needed, None
    if preferred not in p.isr or not _unfenced(image, preferred):
        return ErrorCode.preferred_leader_not_available, None
    return 0, _changed(t, index, p, leader=preferred)


def reassign(image: MetadataImage, t: TopicImage, index: int, target: list[int] | None) -> tuple[int, str, list]:
    """AlterPartitionReassignments (KIP-455): start moving a partition to `target` replicas (the new ones are added
    and catch up as followers; the old ones leave when every target replica is in the ISR), or cancel a
    reassignment in progress (`target` None) by going back to the replicas it started from."""
    p = t.partition(index)
    if p is None:
        return ErrorCode.unknown_topic_or_partition, f"partition {t.name}-{index} does not exist", []
    if target is None:
        if not p.adding and not p.removing:
            return ErrorCode.no_reassignment_in_progress, f"no reassignment of {t.name}-{index} in progress", []
        original = tuple(r for r in p.replicas if r not in p.adding)
        isr = tuple(r for r in p.isr if r in original)
        if not isr:                  # only added replicas are in sync: going back would lose what they acknowledged
            return ErrorCode.invalid_replica_assignment, f"Unable to revert partition assignment for {t.name}:" \
                f"{index} because it would require an unclean leader election.", []
        leader = p.leader if p.leader in original else \
            next((r for r in original if r in isr and _unfenced(image, r)), -1)
        return 0, "", [_changed(t, index, p, replicas=original, isr=isr, leader=leader, adding=(), removing=())]
    if len(set(target)) != len(target) or not target:
        return ErrorCode.invalid_replica_assignment, "the target replicas are empty or repeat a broker", []
    unknown = [b for b in target if b not in image.brokers]
    if unknown:
        return ErrorCode.invalid_replica_assignment, f"brokers {unknown} are not registered", []
    # A new target replaces one in progress from the current replicas, the ones being added included (KRaft's
    # changePartitionReassignment), so the ISR stays within the replicas.
    current = p.replicas
    if tuple(target) == current and not p.adding and not p.removing:
        return 0, "", []
    replicas = tuple(target) + tuple(r for r in current if r not in target)
    record = _changed(t, index, p, replicas=replicas, adding=[r for r in target if r not in current],
                      removing=[r for r in current if r not in target])
    return 0, "", [record]


def complete_reassignment(image: MetadataImage, t: TopicImage, index: int) -> PartitionRecord | None:
    """Finish a reassignment once every target replica is in the ISR: the removed replicas go, and leadership
    moves to a target replica if the leader is leaving."""
    p = t.partition(index)
    if p is None or not (p.adding or p.removing) or not all(r in p.isr for r in p.target):
        return None
    target = p.target
    isr = tuple(r for r in p.isr if r in target)
    leader = p.leader if p.leader in target else next((r for r in target if r in isr and _unfenced(image, r)), -1)
    return _changed(t, index, p, replicas=target, isr=isr, leader=leader, adding=(), removing=())


def partitions_of(image: MetadataImage, wanted: list[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """(topic, partition) pairs: `wanted` once each, in order, or every partition of the image for None."""
    if wanted is None:
        return [(t.name, i) for t in image.topics() for i in range(t.partitions)]
    return list(dict.fromkeys(wanted))


def elect_preferred_operation(wanted: list[tuple[str, int]] | None):
    """ElectLeaders(PREFERRED) as one controller operation: `wanted` (topic, partition) pairs, or None for every
    partition of the image; answers {(topic, partition): error code}."""
    def operation(image: MetadataImage):
        outcome: dict[tuple[str, int], int] = {}
        records = []
        for name, index in partitions_of(image, wanted):
            t = image.get(name)
            if t is None or t.partition(index) is None:
                outcome[(name, index)] = ErrorCode.unknown_topic_or_partition
                continue
            err, record = elect_preferred(image, t, index)
            outcome[(name, index)] = err
            if record is not None:
                records.append(record)
        return records, outcome
    return operation


def with_completion(image: MetadataImage, records: list, topic_id: str, index: int) -> tuple[MetadataImage, list]:
    """`records` (a change of partition `index`) applied to `image`, followed by the record that completes the
    partition's reassignment when the change put every target replica in the ISR; (the image after, the records)."""
    after = image.apply(records)
    t = after.topics_by_id[topic_id]
    done = complete_reassignment(after, t, index)
    if done is None:
        return after, records
    log.info("the reassignment of %s-%d completes: replicas %s", t.name, index, done.replicas)
    return after.apply([done]), records + [done]


def reassign_operation(name: str, index: int, target: list[int] | None):
    """AlterPartitionReassignments for one partition as a controller operation: start (or cancel, `target` None)
    the move, and complete it at once when the target is in sync already (only removals, say). Answers
    (error code, message)."""
    def operation(image: MetadataImage):
        t = image.get(name)
        if t is None:
            return [], (ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        err, msg, records = reassign(image, t, index, target)
        if records:
            _, records = with_completion(image, records, t.topic_id, index)
        return records, (err, msg)
    return operation


class ClusterControl:
    """Broker sessions and the cluster requests the active controller serves; `controller` is an
    ObjectStoreController. Every decision is an operation on the controller's event queue (`controller.run`): it
    reads the latest image and returns the records, so two requests (a heartbeat and a session expiry, two
    AlterPartitions, two producer-id allocations) never decide from the same state."""

    def __init__(self, controller, session_timeout_ms: int = 9000, *, clock=time.monotonic, reports=None):
        self.controller = controller
        self.session_timeout = session_timeout_ms / 1000
        self.reports = reports                 # metadata.reachability.ReachabilityReports, None: fence regardless
        self._reports_failing = False
        self.clock = clock
        self.last_heartbeat: dict[int, float] = {}
        # each broker's metadata log position as its heartbeats report it: (offset, when reported, when last caught
        # up), wall-clock milliseconds as DescribeQuorum answers them
        self.metadata_positions: dict[int, tuple[int, int, int]] = {}
        self._active_epoch = -1
        self._task: asyncio.Task | None = None

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def start(self) -> None:
        self._task = asyncio.create_task(self._expire_sessions(), name="broker-sessions")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _check_active(self) -> None:
        """A controller that just took over gives every broker a full session to send its first heartbeat."""
        epoch = self.controller.epoch
        if self._active_epoch != epoch:
            self._active_epoch = epoch
            now = self.clock()
            self.last_heartbeat = {b: now for b in self.image.brokers}

    async def register(self, broker_id: int, incarnation_id: str, rack: str | None,
                       endpoints: list[tuple[str, str, int]]) -> int:
        """BrokerRegistration: returns the broker epoch (the offset of its registration record)."""
        self._check_active()

        def operation(image: MetadataImage):
            records = register_records(image, broker_id, incarnation_id, rack, endpoints)
            # the RegisterBrokerRecord comes last: its offset is the new broker epoch
            epoch = image.offset + len(records) if records else image.brokers[broker_id].epoch
            self.last_heartbeat[broker_id] = self.clock()
            return records, epoch

        epoch = await self.controller.run(operation)
        log.info("broker %d registered (incarnation %s, epoch %d)", broker_id, incarnation_id, epoch)
        return epoch

    async def heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int,
                        want_shut_down: bool) -> tuple[int, bool, bool, bool]:
        """BrokerHeartbeat: (error, is_caught_up, is_fenced, should_shut_down). The session is renewed as the
        heartbeat arrives, before its operation waits its turn (Kafka's trackBrokerHeartbeat), so a busy queue never
        lets the session of a broker that did heartbeat expire."""
        self._check_active()
        b = self.image.brokers.get(broker_id)
        if b is not None and b.epoch == broker_epoch:
            self.last_heartbeat[broker_id] = self.clock()

        def operation(image: MetadataImage):
            b = image.brokers.get(broker_id)
            if b is None or b.epoch != broker_epoch:
                return [], (ErrorCode.stale_broker_epoch, False, True, False)
            caught_up = metadata_offset >= b.epoch
            now_ms = int(time.time() * 1000)
            _, _, last_caught_up = self.metadata_positions.get(broker_id, (-1, -1, -1))
            self.metadata_positions[broker_id] = (metadata_offset, now_ms,
                                                  now_ms if metadata_offset >= image.offset else last_caught_up)
            if want_shut_down:
                records = fence_records(image, broker_id)
                if records:
                    log.info("broker %d is shutting down: fenced, %d partition(s) changed", broker_id,
                             len(records) - (not b.fenced))
                return records, (0, caught_up, True, True)
            if b.fenced and caught_up:
                log.info("broker %d unfenced", broker_id)
                return unfence_records(image, broker_id), (0, True, False, False)
            return [], (0, caught_up, b.fenced, False)

        return await self.controller.run(operation)

    async def alter_partition(self, broker_id: int, broker_epoch: int, changes: list) -> list[AlterPartitionResult]:
        """AlterPartition: `changes` are (topic_id, index, leader_epoch, partition_epoch, new_isr); one batch. Each
        change is validated against the image after the ones before it; a change that puts every target replica of
        a reassignment in the ISR also completes the reassignment."""
        self._check_active()

        def operation(image: MetadataImage):
            records, results = [], []
            for c in changes:
                r = alter_partition(image, broker_id, broker_epoch, *c)
                if r.record is not None:         # an ISR that now holds every target replica ends a move too
                    tid, index = r.record.topic_id, r.record.partition
                    image, changed = with_completion(image, [r.record], tid, index)
                    records += changed
                    r.partition = image.topics_by_id[tid].partition(index)
                results.append(r)
            return records, results

        return await self.controller.run(operation)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int | None = None) -> int:
        """AllocateProducerIds: the first id of a new block, or -1 for a broker epoch that is not the registered
        one (STALE_BROKER_EPOCH in the handler)."""
        self._check_active()
        allocate = producer_ids_block(broker_id)

        def operation(image: MetadataImage):
            b = image.brokers.get(broker_id)
            if broker_epoch is not None and (b is None or b.epoch != broker_epoch):
                return [], -1
            return allocate(image)

        return await self.controller.run(operation)

    def _fence_if_expired(self, broker_id: int):
        """The session-expiry operation: decided when it runs (a heartbeat may have come in since it was queued)."""
        def operation(image: MetadataImage):
            b = image.brokers.get(broker_id)
            now = self.clock()
            since = now - self.last_heartbeat.get(broker_id, now)
            if b is None or b.fenced or since <= self.session_timeout:
                return [], None
            records = fence_records(image, broker_id)
            log.warning("broker %d fenced: no heartbeat for %.1fs; %d partition(s) changed", broker_id, since,
                        len(records) - 1)
            return records, None
        return operation

    async def check_sessions(self) -> None:
        """Fence every unfenced broker whose session expired (Kafka's BrokerHeartbeatManager), each in its own
        operation that checks the session again when it runs; unless the brokers' reports say that this controller
        is the one cut off (metadata/reachability.py)."""
        self._check_active()
        if not self._expired() or await self._cut_off():
            return
        for broker_id in self._expired():          # again: heartbeats may have come in while the reports were read
            await self.controller.run(self._fence_if_expired(broker_id))

    def _expired(self) -> list[int]:
        now = self.clock()
        return [b.broker_id for b in self.image.brokers.values()
                if not b.fenced and now - self.last_heartbeat.get(b.broker_id, now) > self.session_timeout]

    async def _cut_off(self) -> bool:
        """Whether to fence nobody now: this controller resigned, as more brokers silent for half a session report it
        unreachable than it hears from (fenced or not) plus itself; or their reports cannot be read while the silent
        ones outnumber the rest. Reading the reports decides no record: each fence is decided when its operation
        runs."""
        if self.reports is None:
            return False
        epoch = self.controller.epoch
        try:
            async with asyncio.timeout(self.session_timeout / 4):
                reporters: set[int] | None = await self.reports.reporters(epoch)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not self._reports_failing:         # once per outage: the check runs every session / 8
                log.warning("could not read the brokers' reports of controller epoch %d: %r", epoch, e)
            self._reports_failing = True
            reporters = None
        else:
            self._reports_failing = False
        now = self.clock()
        me = self.controller.node_id
        silent, heard = set(), set()
        for b in self.image.brokers:
            if b != me:
                (silent if now - self.last_heartbeat.get(b, now) >= self.session_timeout / 2 else heard).add(b)
        if reporters is None:                      # the lease decides: a controller cut off from the store lapses
            return len(silent) > len(heard) + 1
        reporting = reporters & silent
        if not controller_is_cut_off(reporting, heard):
            return False
        if not self.controller.may_resign_unreachable():
            log.warning("brokers %s report controller epoch %d unreachable, but nobody took over when it resigned "
                        "last: fencing them", sorted(reporting), epoch)
            return False
        await self.controller.resign(
            f"brokers {sorted(reporting)} report it unreachable, more than itself and the brokers it hears from "
            f"{sorted(heard)}: not fencing them", hold_off=self.session_timeout + 2 * self.controller.lease.timeout)
        return True

    async def _expire_sessions(self) -> None:
        interval = max(self.session_timeout / 8, 0.05)
        while True:
            await asyncio.sleep(interval)
            if not self.controller.active:
                self._active_epoch = -1
                continue
            try:
                await self.check_sessions()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("broker session check failed: %s", e)
