"""The classic consumer-group coordinator (Kafka's pre-KIP-848 GroupCoordinator), in memory.

One GroupMetadata per group id, driven through Kafka's state machine:

    Empty               -> PreparingRebalance   a member joins
    PreparingRebalance  -> CompletingRebalance  every member rejoined, or the rebalance timeout passed
    PreparingRebalance  -> Empty                no member is left when the join completes
    CompletingRebalance -> Stable               the leader's SyncGroup delivered the assignment
    CompletingRebalance -> PreparingRebalance   a join with new metadata, a leave, a session expiry
    Stable              -> PreparingRebalance   the leader rejoins, new metadata, a new member, leave or expiry
    any                 -> Dead                 DeleteGroups, or Empty without offsets at the retention check

Behaviour follows Kafka 3.x's `GroupCoordinator.scala`: the first join of an Empty group waits
`group.initial.rebalance.delay.ms` (extended while members keep arriving, bounded by the rebalance timeout); later
rebalances wait until every known member has rejoined or the rebalance timeout passes, then drop dynamic members that
did not rejoin; JoinGroup v4+ from an unknown member gets ErrorCode.member_id_required and a generated id (KIP-394); a static
member (group.instance.id, KIP-345) that rejoins with an unknown member id takes over the old member's slot, fencing
the old id, without a rebalance when the group is Stable and its protocol stays the same; session timeouts, pending
members and members that never send SyncGroup expire on asyncio timers.

JoinGroup and SyncGroup results are asyncio Futures that complete when the rebalance allows (handlers park on them).
Everything runs on the event loop thread, so no locks.

Persistence: every state change that Kafka writes to `__consumer_offsets` goes through `_store_group` (group metadata
and assignments, or a tombstone for a Dead group) and `_store_offsets` (commits, or tombstones for deleted/expired
offsets), which append Kafka-format records through broker/groups/metadata_store.py before the client is answered and
map a failed append to Kafka's error. At start-up every partition of __consumer_offsets is read back by an asyncio
task; until a group's partition is loaded its APIs answer ErrorCode.coordinator_load_in_progress. Loaded groups come back in
their last persisted state (Stable with members and generation, or Empty); their members expire by session timeout
unless they heartbeat. Without a ReplicaManager (unit tests) the hooks are no-ops.

KIP-848 consumer groups live in broker/groups/consumer/consumer_group.py (`self.consumer`); the group ids of both kinds share one
namespace, and the offset and admin APIs here forward consumer groups there.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from broker.groups import metadata_store as gms
from broker.groups.classic.group_metadata import (COMPLETING_REBALANCE, DEAD, EMPTY, NEW_MEMBER_JOIN_TIMEOUT_MS, PREPARING_REBALANCE,
                                  STABLE, UNKNOWN_MEMBER, GroupMetadata, IllegalStateError, JoinResult,
                                  MemberMetadata, SyncResult, _DelayedJoin)
from broker.config import setting
from broker.groups.consumer.consumer_group import ConsumerGroupCoordinator
from replication.internal_topics import InternalTopics
from broker.groups.metadata_store import GroupMetadataStore
from broker.groups.classic.group_offsets import GroupOffsetsAndAdmin
from broker.groups.txn_offsets import TxnOffsetsMixin
from broker.groups.records import OffsetAndMetadata
from protocol.errors import ErrorCode

log = logging.getLogger("strata.groups")

# Broker settings the coordinator reads, with Kafka's names and defaults.
GROUP_DEFAULTS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.max.size": "2147483647",
    "offset.metadata.max.bytes": "4096",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
}


def _setting(config, key: str) -> int:
    return int(setting(config, key, GROUP_DEFAULTS))


# ---- the coordinator ----------------------------------------------------------------------------------------------
class GroupCoordinator(GroupOffsetsAndAdmin, TxnOffsetsMixin):
    """All classic groups of this broker. Public methods mirror the group APIs; JoinGroup/SyncGroup return Futures."""

    def __init__(self, config=None, clock=None, replicas=None):
        self.initial_rebalance_delay_ms = _setting(config, "group.initial.rebalance.delay.ms")
        self.min_session_timeout_ms = _setting(config, "group.min.session.timeout.ms")
        self.max_session_timeout_ms = _setting(config, "group.max.session.timeout.ms")
        self.max_group_size = _setting(config, "group.max.size")
        self.max_metadata_size = _setting(config, "offset.metadata.max.bytes")
        self.offsets_retention_ms = _setting(config, "offsets.retention.minutes") * 60_000
        self.retention_check_interval_ms = _setting(config, "offsets.retention.check.interval.ms")
        self.commit_timeout_ms = int(setting(config, "offsets.commit.timeout.ms", {"offsets.commit.timeout.ms": "5000"}))
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.groups: dict[str, GroupMetadata] = {}
        self._cleanup_timer: asyncio.TimerHandle | None = None
        # A coordinator that persists to __consumer_offsets answers only once start() knows which partitions it leads
        # and is loading them: a cluster member listens (for the controller) before that, and an OffsetFetch
        # answered from its empty memory then read "no committed offset", which made a transactional copier start
        # over from the beginning of its input (Kafka's GroupCoordinator is inactive until startup, too).
        self._active = replicas is None
        # __consumer_offsets (None without a ReplicaManager: nothing is persisted) and the partitions still loading.
        self.store = GroupMetadataStore(InternalTopics(replicas), config, self.now_ms) if replicas is not None \
            else None
        self.topics = getattr(replicas, "topics", None)
        self._loading: set[int] = set()
        self._load_task: asyncio.Task | None = None
        self.replicas = replicas
        self._leading: set[int] | None = None    # in a cluster: the __consumer_offsets partitions led here
        self.consumer = ConsumerGroupCoordinator(self, config)

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Call from the running event loop (Broker.start, after ReplicaManager.startup): creates __consumer_offsets
        if needed, starts loading it, and schedules the offset-retention check. Active only at the end: should a
        step fail, the coordinator must not answer from memory that knows no partition."""
        if self.store is not None:
            self.store.ensure_topic()
            partitions = set(range(self.store.num_partitions))
            if getattr(self.replicas, "fetchers", None) is not None:       # a cluster: only what we lead
                self._leading = {p for p in partitions if self._leads(p)}
                partitions = set(self._leading)
            self._loading = partitions
            self._load_task = self._loop().create_task(gms.load_groups(self, sorted(partitions)))
        self._active = True
        self._schedule_cleanup()

    def _leads(self, p: int) -> bool:
        part = self.replicas.get(gms.OFFSETS_TOPIC, p)
        return part is not None and part.is_leader

    def sync_leadership(self) -> None:
        """The leaders of __consumer_offsets changed (Kafka's onElection/onResignation): load the groups of the
        partitions this broker now leads, unload those of the partitions it no longer leads (their members get
        NOT_COORDINATOR and find the new coordinator)."""
        if self._leading is None or not self._active:
            return
        now = {p for p in range(self.store.num_partitions) if self._leads(p)}
        gained, lost = now - self._leading, self._leading - now
        self._leading = now
        for p in lost:
            self._loading.discard(p)
            self._unload_partition(p)
        if gained:
            self._loading |= gained
            log.info("coordinator for %s partitions %s: loading their groups", gms.OFFSETS_TOPIC, sorted(gained))
            self._loop().create_task(gms.load_groups(self, sorted(gained)))

    def replicated(self, group_id: str):
        """A future that completes (with an error code, 0 for success) once the ISR has everything appended so far to
        the group's __consumer_offsets partition, as Kafka's appends there wait for acks=all; None when it has."""
        if self.store is None or self.replicas is None:
            return None
        part = self.replicas.get(gms.OFFSETS_TOPIC, self.store.partition_for(group_id))
        return part.wait_for_high_watermark(part.log_end_offset) if part is not None else None

    def set_group_configs(self, configs) -> None:
        """Per-group configs from the metadata image (KIP-848: consumer.session.timeout.ms and
        consumer.heartbeat.interval.ms of consumer groups), applied from the next heartbeat on."""
        self.consumer.group_configs = configs

    def _unload_partition(self, p: int) -> None:
        self.drop_pending_txn_offsets(p)
        unloaded = [g for g in self.groups.values() if self.store.partition_for(g.group_id) == p]
        for group in unloaded:
            self._unload(group)
            del self.groups[group.group_id]
        consumer_groups = [gid for gid in self.consumer.groups if self.store.partition_for(gid) == p]
        for gid in consumer_groups:
            self.consumer.unload(gid)
        if unloaded or consumer_groups:
            log.info("unloaded %d group(s) of %s-%d: no longer its leader", len(unloaded) + len(consumer_groups),
                     gms.OFFSETS_TOPIC, p)

    def stop(self) -> None:
        """Cancel every timer and answer parked JoinGroup/SyncGroup requests with ErrorCode.not_coordinator (Kafka's
        onGroupUnloaded)."""
        self._active = False
        if self._load_task is not None:
            self._load_task.cancel()
            self._load_task = None
        self.consumer.stop()
        if self._cleanup_timer is not None:
            self._cleanup_timer.cancel()
            self._cleanup_timer = None
        for group in self.groups.values():
            self._unload(group)

    def _unload(self, group: GroupMetadata) -> None:
        """Stop a group's timers and answer its parked JoinGroup/SyncGroup with NOT_COORDINATOR."""
        self._cancel_join(group)
        self._remove_sync_expiration(group)
        for timer in group.pending_members.values():
            if timer is not None:
                timer.cancel()
        for member in list(group.members.values()):
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
                member.heartbeat_timer = None
            group.maybe_invoke_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
            group.maybe_invoke_sync(member, SyncResult(ErrorCode.not_coordinator))

    def now_ms(self) -> int:
        return self._clock()

    def _unavailable(self, group_id: str) -> int:
        """NOT_COORDINATOR before start() and once stopped (the client finds the coordinator again, as from Kafka's
        group coordinator runtime); COORDINATOR_LOAD_IN_PROGRESS while the group's partition is loading."""
        if not self._active:
            return ErrorCode.not_coordinator
        if self._leading is not None and self.store.partition_for(group_id) not in self._leading:
            return ErrorCode.not_coordinator
        if self._loading and self.store is not None and self.store.partition_for(group_id) in self._loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    @property
    def active(self) -> bool:
        return self._active

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    # -- persistence hooks (broker/groups/metadata_store.py) -----------------------------------------------------------
    def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes] | None = None) -> int:
        """Persist the group's metadata (generation, protocol, leader, members with their subscription metadata and
        `assignment`), or a tombstone when the group is Dead; returns the client-facing error (Kafka's mapping)."""
        return self.store.store_group(group, assignment or {}) if self.store is not None else ErrorCode.none

    def _store_offsets(self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata | None]) -> int:
        """Persist committed offsets; a None value is a tombstone (OffsetDelete, DeleteGroups, retention). Returns the
        client-facing error (Kafka's mapping, e.g. MESSAGE_TOO_LARGE -> INVALID_COMMIT_OFFSET_SIZE)."""
        return self.store.store_offsets(group_id, offsets) if self.store is not None else ErrorCode.none

    def _forget_classic_group(self, group_id: str) -> None:
        """An Empty classic group replaced by a consumer group (its tombstone is already written)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            for timer in group.pending_members.values():
                if timer is not None:
                    timer.cancel()
            group.pending_members.clear()
            self._cancel_join(group)

    # -- helpers -----------------------------------------------------------------------------------------------------
    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def _done(self, result) -> asyncio.Future:
        fut = self._loop().create_future()
        fut.set_result(result)
        return fut

    @staticmethod
    def _valid_group_id(group_id: str | None, allow_empty: bool) -> bool:
        return group_id is not None and (allow_empty or group_id != "")

    def _validate_current_member(self, group: GroupMetadata, member_id: str, instance_id: str | None,
                                 operation: str) -> int:
        if group.is_static_member_fenced(instance_id, member_id):
            log.info("group %s: %s from %s fenced, instance %s is now member %s", group.group_id, operation,
                     member_id, instance_id, group.static_members.get(instance_id))
            return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    # -- JoinGroup ---------------------------------------------------------------------------------------------------
    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool = True,
                   supports_skip_assignment: bool = False, reason: str | None = None) -> asyncio.Future:
        fut = self._loop().create_future()
        if not self._valid_group_id(group_id, allow_empty=False):
            fut.set_result(JoinResult(ErrorCode.invalid_group_id, member_id))
            return fut
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            fut.set_result(JoinResult(err, member_id))
            return fut
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            fut.set_result(JoinResult(ErrorCode.invalid_session_timeout, member_id))
            return fut
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        unknown = member_id == UNKNOWN_MEMBER
        group = self.groups.get(group_id)
        offsets = {}
        if group is None and group_id in self.consumer.groups:
            # A consumer-protocol group: an Empty one is replaced by a classic group (keeping its offsets), as in
            # Kafka; mixing protocols in one group (online migration) is not supported.
            if self.consumer.groups[group_id].members or not unknown:
                fut.set_result(JoinResult(ErrorCode.inconsistent_group_protocol if unknown else ErrorCode.unknown_member_id, member_id))
                return fut
            err, offsets = self.consumer.convert_empty_to_classic(group_id)
            if err != ErrorCode.none:
                fut.set_result(JoinResult(err, member_id))
                return fut
        if group is None:
            if not unknown:
                fut.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
                return fut
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
            group.offsets.update(offsets)
        if not self._accept_joining_member(group, member_id):
            log.info("group %s is full (group.max.size=%d), rejecting %s", group_id, self.max_group_size,
                     member_id or "a new member")
            fut.set_result(JoinResult(ErrorCode.group_max_size_reached, UNKNOWN_MEMBER))
        elif unknown:
            self._join_new_member(group, group_instance_id, require_known_member_id, supports_skip_assignment,
                                  client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                  protocols, fut, reason)
        else:
            self._join_current_member(group, member_id, group_instance_id, client_id, client_host,
                                      rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, fut, reason)
        if group.is_(PREPARING_REBALANCE):
            self._check_join(group)
        return fut

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_members_awaiting_join < self.max_group_size)
        return group.has(member_id) or group.size() < self.max_group_size

    def _join_new_member(self, group, instance_id, require_known_member_id, supports_skip_assignment, client_id,
                         client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, fut, reason):
        if group.is_(DEAD):
            fut.set_result(JoinResult(ErrorCode.coordinator_not_available, UNKNOWN_MEMBER))
            return
        if not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            fut.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, UNKNOWN_MEMBER))
            return
        new_member_id = f"{instance_id if instance_id is not None else (client_id or '')}-{uuid.uuid4()}"
        if instance_id is not None:
            old_member_id = group.current_static_member_id(instance_id)
            if old_member_id is not None:
                log.info("group %s: static member %s rejoins in %s; replacing member %s with %s", group.group_id,
                         instance_id, group.state, old_member_id, new_member_id)
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, instance_id,
                                                         protocols, rebalance_timeout_ms, session_timeout_ms, fut,
                                                         supports_skip_assignment, reason)
            else:
                self._add_member_and_rebalance(group, new_member_id, instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                               fut, reason)
        elif require_known_member_id:
            # KIP-394: hand out the id and make the client rejoin with it, so a client that times out and retries
            # does not leave a stream of phantom members behind.
            group.pending_members[new_member_id] = self._loop().call_later(
                session_timeout_ms / 1000, self._on_pending_member_expired, group, new_member_id)
            fut.set_result(JoinResult(ErrorCode.member_id_required, new_member_id))
        else:
            self._add_member_and_rebalance(group, new_member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, fut, reason)

    def _join_current_member(self, group, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                             session_timeout_ms, protocol_type, protocols, fut, reason):
        if group.is_(DEAD):
            fut.set_result(JoinResult(ErrorCode.coordinator_not_available, member_id))
            return
        if not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            fut.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return
        if group.is_pending_member(member_id):
            if instance_id is not None:   # pending ids are only handed to dynamic members
                fut.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
                return
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, fut, reason)
            return
        if group.is_static_member_fenced(instance_id, member_id):
            fut.set_result(JoinResult(ErrorCode.fenced_instance_id, member_id))
            return
        if not group.has(member_id) or (instance_id is not None and not group.has_static_member(instance_id)):
            fut.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
            return
        member = group.get(member_id)
        state = group.state
        if state == PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              fut, f"member {member_id} joining group during {state}")
        elif state == COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member lost the JoinGroup response: repeat this generation's answer.
                fut.set_result(self._join_result_for(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, fut,
                                                  f"updating metadata for member {member_id} during {state}")
        elif state == STABLE:
            if group.is_leader(member_id):
                # The leader may rejoin to trigger a rebalance for changes its metadata does not show (topic
                # metadata changes for the consumer protocol).
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, fut,
                                                  f"leader {member_id} re-joining group during {state}")
            elif not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, fut,
                                                  f"updating metadata for member {member_id} during {state}")
            else:
                fut.set_result(JoinResult(ErrorCode.none, member_id, group.generation_id, group.protocol_type,
                                          group.protocol_name, group.leader_id or ""))
        else:
            log.warning("group %s: member %s rejoins in unexpected state %s", group.group_id, member_id, state)
            fut.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))
        if reason:
            log.debug("group %s: member %s join reason: %s", group.group_id, member_id, reason)

    def _join_result_for(self, group: GroupMetadata, member_id: str) -> JoinResult:
        leader = group.is_leader(member_id)
        return JoinResult(ErrorCode.none, member_id, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", False, group.current_member_metadata() if leader else [])

    def _add_member_and_rebalance(self, group, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                  session_timeout_ms, protocol_type, protocols, fut, reason):
        member = MemberMetadata(member_id, instance_id, client_id or "", client_host or "", rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True   # lets the initial rebalance delay extend itself
        group.add(member, fut)
        # A new member cannot heartbeat before it has its id; bound how long its JoinGroup may stay parked.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id} with group instance id {instance_id}"
                                      + (f"; client reason: {reason}" if reason else ""))

    def _update_member_and_rebalance(self, group, member, protocols, rebalance_timeout_ms, session_timeout_ms, fut,
                                     reason):
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, fut)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(self, group, old_member_id, new_member_id, instance_id, protocols,
                                            rebalance_timeout_ms, session_timeout_ms, fut, supports_skip_assignment,
                                            reason):
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        old_protocols = member.protocols
        old_timeouts = (member.rebalance_timeout_ms, member.session_timeout_ms)
        # The old id's heartbeat timer is replaced; the new id heartbeats from now on.
        self._schedule_heartbeat(group, member)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, fut)
        state = group.state
        if state == STABLE:
            if group.protocol_name == group.select_protocol():
                log.info("group %s: static member %s rejoined without changing the selected protocol; "
                         "no rebalance", group.group_id, instance_id)
                err = self._store_group(group, {m.member_id: m.assignment for m in group.members.values()})
                if err != ErrorCode.none:
                    # Could not persist the new member id: answer with the error and restore the old member.
                    group.maybe_invoke_join(member, JoinResult(err, UNKNOWN_MEMBER, group.generation_id,
                                                               group.protocol_type, group.protocol_name,
                                                               current_leader or ""))
                    group.update_member(member, old_protocols, *old_timeouts, None)
                    restored = group.replace_static_member(instance_id, new_member_id, old_member_id)
                    self._schedule_heartbeat(group, restored)
                    return
                elif supports_skip_assignment:
                    # JoinGroup v9 (KIP-814): a static leader learns it leads but skips running the assignor.
                    is_leader = group.is_leader(new_member_id)
                    group.maybe_invoke_join(member, JoinResult(
                        ErrorCode.none, new_member_id, group.generation_id, group.protocol_type, group.protocol_name,
                        group.leader_id or "", is_leader, group.current_member_metadata() if is_leader else []))
                else:
                    # Older versions: report the old leader id, so a rejoining leader does not run a trivial
                    # assignment that a Stable group would ignore.
                    group.maybe_invoke_join(member, JoinResult(
                        ErrorCode.none, new_member_id, group.generation_id, group.protocol_type, group.protocol_name,
                        current_leader or ""))
                # It will not be told to rejoin, so it must not sit awaiting a join; re-arm its session.
                self._schedule_heartbeat(group, member)
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {new_member_id} (instance {instance_id}) changes the selected protocol")
        elif state == COMPLETING_REBALANCE:
            # The leader may be assigning for the old member id; start over.
            self._prepare_rebalance(group, f"updating metadata for static member {new_member_id} with instance id "
                                           f"{instance_id}" + (f"; client reason: {reason}" if reason else ""))
        elif state == PREPARING_REBALANCE:
            pass
        else:
            raise IllegalStateError(f"group {group.group_id} in {state} while static member {instance_id} rejoins")

    # -- rebalance ---------------------------------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        initial = group.is_(EMPTY)
        group.transition_to(PREPARING_REBALANCE, self.now_ms())
        log.info("group %s: preparing to rebalance in generation %d (%s)", group.group_id, group.generation_id,
                 reason)
        if initial:
            d = self.initial_rebalance_delay_ms
            self._watch_join(group, _DelayedJoin(True, d, d, max(group.rebalance_timeout_ms() - d, 0)))
        else:
            self._watch_join(group, _DelayedJoin(False, group.rebalance_timeout_ms()))

    def _watch_join(self, group: GroupMetadata, op: _DelayedJoin) -> None:
        """Kafka's rebalancePurgatory.tryCompleteElseWatch: complete now if possible, else arm the timeout."""
        self._cancel_join(group)
        if not op.initial and group.has_all_members_joined():
            self._on_complete_join(group)
            return
        group.delayed_join = op
        op.timer = self._loop().call_later(op.delay_ms / 1000, self._on_join_timer, group, op)

    def _cancel_join(self, group: GroupMetadata) -> None:
        op = group.delayed_join
        if op is not None:
            group.delayed_join = None
            if op.timer is not None:
                op.timer.cancel()

    def _check_join(self, group: GroupMetadata) -> None:
        """Kafka's rebalancePurgatory.checkAndComplete: a normal DelayedJoin completes once everyone has joined; the
        initial delay always runs its course."""
        op = group.delayed_join
        if op is not None and not op.initial and group.has_all_members_joined():
            self._cancel_join(group)
            self._on_complete_join(group)

    def _on_join_timer(self, group: GroupMetadata, op: _DelayedJoin) -> None:
        if group.delayed_join is not op:
            return
        group.delayed_join = None
        if op.initial and group.new_member_added and op.remaining_ms != 0:
            group.new_member_added = False
            delay = min(op.configured_delay_ms, op.remaining_ms)
            remaining = max(op.remaining_ms - op.delay_ms, 0)
            self._watch_join(group, _DelayedJoin(True, delay, op.configured_delay_ms, remaining))
            return
        self._on_complete_join(group)

    def _on_complete_join(self, group: GroupMetadata) -> None:
        if group.is_(DEAD):
            return
        for member in [m for m in group.not_yet_rejoined_members() if not m.is_static]:
            log.info("group %s: removing member %s, it did not rejoin in time", group.group_id, member.member_id)
            self._remove_member_record(group, member)
        if group.is_(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members are left and none rejoined: wait another rebalance timeout, by which their
            # sessions expire.
            log.error("group %s could not complete rebalance because no members rejoined", group.group_id)
            self._watch_join(group, _DelayedJoin(False, group.rebalance_timeout_ms()))
            return
        group.init_next_generation(self.now_ms())
        if group.is_(EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._store_group(group, {})
            return
        log.info("group %s: stabilized generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation_id, group.size(), group.protocol_name, group.leader_id)
        leader_view = group.current_member_metadata()
        for member in list(group.members.values()):
            leader = group.is_leader(member.member_id)
            group.maybe_invoke_join(member, JoinResult(
                ErrorCode.none, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                group.leader_id or "", False, leader_view if leader else []))
            member.is_new = False
            self._schedule_heartbeat(group, member)
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self._remove_sync_expiration(group)
        group.sync_timer = self._loop().call_later(group.rebalance_timeout_ms() / 1000, self._on_pending_sync_expired,
                                                   group, group.generation_id)

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _on_pending_sync_expired(self, group: GroupMetadata, generation_id: int) -> None:
        group.sync_timer = None
        if generation_id != group.generation_id or group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        pending = list(group.pending_sync_members)
        if not pending:
            return
        log.info("group %s: removing members that sent no SyncGroup in time: %s", group.group_id, pending)
        for member_id in pending:
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member_record(group, member)
            else:
                group.pending_sync_members.discard(member_id)
        self._maybe_prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: GroupMetadata, assignment: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        ptype, pname = (group.protocol_type, group.protocol_name) if error == ErrorCode.none else (None, None)
        for member in list(group.members.values()):
            if group.maybe_invoke_sync(member, SyncResult(error, ptype, pname, member.assignment)):
                # Re-arm the session: an expiry while the member awaited SyncGroup was ignored.
                self._schedule_heartbeat(group, member)

    # -- sessions ----------------------------------------------------------------------------------------------------
    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        """completeAndScheduleNextHeartbeatExpiration: a member parked in JoinGroup/SyncGroup needs no heartbeat
        (unless it is new), so no timer is armed for it; completing the join or sync re-arms it."""
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self._loop().call_later(timeout / 1000, self._on_heartbeat_expired, group, member)

    def _on_heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.is_(DEAD) or group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return
        log.info("group %s: member %s has failed (session timeout), removing it", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member, f"removing member {member.member_id} on heartbeat "
                                                            "expiration")

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str) -> None:
        if member_id in group.pending_members:
            log.info("group %s: pending member %s removed after session timeout", group.group_id, member_id)
            del group.pending_members[member_id]
            if group.is_(PREPARING_REBALANCE):
                self._check_join(group)

    def _remove_member_record(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.maybe_invoke_join(member, JoinResult(ErrorCode.unknown_member_id, UNKNOWN_MEMBER))
        group.maybe_invoke_sync(member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        self._remove_member_record(group, member)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING_REBALANCE):
            self._check_join(group)

    # -- SyncGroup ---------------------------------------------------------------------------------------------------
    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> asyncio.Future:
        fut = self._loop().create_future()
        if not self._valid_group_id(group_id, allow_empty=False):
            fut.set_result(SyncResult(ErrorCode.invalid_group_id))
            return fut
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            fut.set_result(SyncResult(err))
            return fut
        group = self.groups.get(group_id)
        if group is None:
            fut.set_result(SyncResult(ErrorCode.unknown_member_id))
            return fut
        if group.is_(DEAD):
            fut.set_result(SyncResult(ErrorCode.coordinator_not_available))
            return fut
        err = self._validate_current_member(group, member_id, group_instance_id, "sync-group")
        if err == ErrorCode.none and generation_id != group.generation_id:
            err = ErrorCode.illegal_generation
        if err == ErrorCode.none and protocol_type is not None and group.protocol_type != protocol_type:
            err = ErrorCode.inconsistent_group_protocol
        if err == ErrorCode.none and protocol_name is not None and group.protocol_name != protocol_name:
            err = ErrorCode.inconsistent_group_protocol
        if err != ErrorCode.none:
            fut.set_result(SyncResult(err))
            return fut
        state = group.state
        if state == EMPTY:
            fut.set_result(SyncResult(ErrorCode.unknown_member_id))
        elif state == PREPARING_REBALANCE:
            fut.set_result(SyncResult(ErrorCode.rebalance_in_progress))
        elif state == COMPLETING_REBALANCE:
            member = group.get(member_id)
            old = member.sync_future
            if old is not None and not old.done():
                old.set_result(SyncResult(ErrorCode.rebalance_in_progress))   # superseded by this retry
            member.sync_future = fut
            group.pending_sync_members.discard(member_id)
            if group.is_leader(member_id):
                log.info("group %s: assignment received from leader %s for generation %d (%d members, %d static)",
                         group.group_id, member_id, group.generation_id, group.size(), len(group.static_members))
                assignment = {m: bytes(a) for m, a in assignments.items()}
                missing = [m for m in group.members if m not in assignment]
                if missing:
                    log.warning("group %s: empty assignments for members %s in generation %d", group.group_id,
                                missing, group.generation_id)
                for m in missing:
                    assignment[m] = b""
                store_err = self._store_group(group, assignment)
                if group.is_(COMPLETING_REBALANCE) and generation_id == group.generation_id:
                    if store_err != ErrorCode.none:
                        self._reset_and_propagate_assignment_error(group, store_err)
                        self._maybe_prepare_rebalance(group, f"error storing the assignment from {member_id}")
                    else:
                        self._set_and_propagate_assignment(group, assignment)
                        group.transition_to(STABLE, self.now_ms())
        elif state == STABLE:
            group.pending_sync_members.discard(member_id)
            member = group.get(member_id)
            fut.set_result(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member)
        else:
            raise IllegalStateError(f"SyncGroup for group {group_id} in state {state}")
        return fut

    # -- Heartbeat ---------------------------------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        if not self._valid_group_id(group_id, allow_empty=False):
            return ErrorCode.invalid_group_id
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            # Kafka's classic coordinator answers a heartbeat for a loading group with ErrorCode.none: the member keeps its
            # session and finds out about the group once it is loaded.
            return ErrorCode.none if err == ErrorCode.coordinator_load_in_progress else err
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        err = self._validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if err != ErrorCode.none:
            return err
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        state = group.state
        if state == EMPTY:
            return ErrorCode.unknown_member_id
        member = group.get(member_id)
        self._schedule_heartbeat(group, member)
        return ErrorCode.rebalance_in_progress if state == PREPARING_REBALANCE else ErrorCode.none

    # -- LeaveGroup --------------------------------------------------------------------------------------------------
    def leave_group(self, group_id: str,
                    members: list[tuple[str, str | None, str | None]]) -> tuple[int, list[int]]:
        """members: [(member_id, group_instance_id, reason)] -> (group error, per-member errors)."""
        if not self._valid_group_id(group_id, allow_empty=False):
            return ErrorCode.invalid_group_id, []
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            return err, []
        group = self.groups.get(group_id)
        if group is None and group_id in self.consumer.groups:
            return ErrorCode.none, self.consumer.leave_members(group_id, members)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available, []
        errors = []
        for member_id, instance_id, reason in members:
            reason = reason or "not provided"
            if member_id == UNKNOWN_MEMBER:
                # Administrative removal by group.instance.id (AdminClient removeMembersFromConsumerGroup).
                current = group.current_static_member_id(instance_id)
                if current is None:
                    errors.append(ErrorCode.unknown_member_id)
                else:
                    self._remove_current_member(group, current, reason)
                    errors.append(ErrorCode.none)
            elif group.is_pending_member(member_id):
                timer = group.pending_members.pop(member_id)
                if timer is not None:
                    timer.cancel()
                if group.is_(PREPARING_REBALANCE):
                    self._check_join(group)
                log.info("group %s: pending member %s left (%s)", group_id, member_id, reason)
                errors.append(ErrorCode.none)
            else:
                err = self._validate_current_member(group, member_id, instance_id, "leave-group")
                if err == ErrorCode.none:
                    self._remove_current_member(group, member_id, reason)
                errors.append(err)
        return ErrorCode.none, errors

    def _remove_current_member(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        log.info("group %s: member %s (instance %s) left; client reason: %s", group.group_id, member_id,
                 member.group_instance_id, reason)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on LeaveGroup; "
                                                            f"client reason: {reason}")
