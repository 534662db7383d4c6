"""KIP-848 consumer groups ("group.protocol=consumer"): ConsumerGroupHeartbeat, ConsumerGroupDescribe, and the offset
APIs for such groups. Modelled on Kafka's GroupMetadataManager (consumer-group half), ConsumerGroup,
ConsumerGroupMember, TargetAssignmentBuilder and CurrentAssignmentBuilder.

The coordinator computes assignments itself. Each heartbeat:
  1. creates or updates the member; a changed subscription (or changed topic metadata) bumps the group epoch;
  2. when the group epoch is ahead of the assignment epoch, the server-side assignor (`uniform` or `range`,
     `group.consumer.assignors`, the members' most requested one first) computes a new target assignment;
  3. reconciles the member towards its target: partitions it must give up are revoked first (the member stays in
     its epoch, state UNREVOKED_PARTITIONS, until its heartbeat no longer reports them); then it moves to the target
     epoch and gets the target's partitions that no other member still owns (UNRELEASED_PARTITIONS while some are
     held elsewhere, STABLE once it has them all).
A member that stops heartbeating for `group.consumer.session.timeout.ms`, or keeps partitions it must revoke past
its rebalance timeout, is fenced (removed) and the group epoch bumps.

State is changed only by replaying records (ConsumerGroupMetadata/MemberMetadata/TargetAssignment*/
CurrentMemberAssignment, Kafka's record types 3 and 5-8): an operation replays the records it produces on a copy of
the group, appends them to __consumer_offsets, and only then swaps the copy in - so a failed append changes
nothing, and loading at start-up is the same replay. Member sessions are not persisted (Kafka does not either):
restored members get a fresh session timeout and are fenced unless they keep heartbeating.

Not implemented: online upgrade/downgrade of non-empty groups between the classic and consumer protocols (an Empty
group of either kind converts, as Kafka does), rack-aware assignment, client-side assignors (KIP-848 classic
members), topic metadata hashing (subscriptions are re-resolved against the topic store on every heartbeat).

The replayed group and member state is broker/groups/consumer/state.py, the assignors broker/groups/consumer/assignors.py,
the offset APIs, deletion and start-up replay broker/groups/consumer/offsets.py.
"""
from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from broker.groups import metadata_store as gms
from broker.groups import records as gr
from broker.config import setting
from broker.groups.consumer.assignors import ASSIGNORS
from broker.groups.consumer.offsets import ConsumerGroupOffsets
from broker.groups.consumer.state import (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, STABLE,
                                         UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, Assignment, ConsumerGroup,
                                         ConsumerGroupMember)
from broker.groups.records import (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CONSUMER_GROUP_MEMBER_METADATA,
                                  CONSUMER_GROUP_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                  CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, RecordKey)
from protocol.errors import ErrorCode

log = logging.getLogger("strata.groups.consumer")

CONSUMER_DEFAULTS: dict[str, str] = {
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.max.session.timeout.ms": "60000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.max.heartbeat.interval.ms": "15000",
    "group.consumer.max.size": "2147483647",
    "group.consumer.assignors": "uniform,range",
}
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
    "org.apache.kafka.coordinator.group.api.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.api.assignor.RangeAssignor": "range",
}


def _setting(config, key: str) -> str:
    return setting(config, key, CONSUMER_DEFAULTS)



def _assignment_subset(owned, assignment: Assignment) -> bool:
    """Kafka's isSubset: every owned partition is in `assignment` (owned None -> False)."""
    if owned is None:
        return False
    for topic_id, parts in owned:
        have = assignment.get(topic_id)
        if have is None or any(p not in have for p in parts):
            return False
    return True


def _owns_any(owned, assignment: Assignment) -> bool:
    """Kafka's ownsRevokedPartitions: does the member still report any partition of `assignment`? (None -> yes)."""
    if owned is None:
        return True
    for topic_id, parts in owned:
        pending = assignment.get(topic_id)
        if pending and any(p in pending for p in parts):
            return True
    return False



# ---- results -------------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None     # None: not part of the response


class _Failed(Exception):
    def __init__(self, error: int, message: str | None = None):
        super().__init__(message)
        self.error = error
        self.message = message


# ---- the coordinator -----------------------------------------------------------------------------------------------
class ConsumerGroupCoordinator(ConsumerGroupOffsets):
    """Consumer-protocol groups of this broker; owned by GroupCoordinator (which shares its store, loading state and
    clock, and forwards offset and admin calls for consumer groups here)."""

    def __init__(self, parent, config=None):
        self.parent = parent
        self.session_timeout_ms = int(_setting(config, "group.consumer.session.timeout.ms"))
        self.heartbeat_interval_ms = int(_setting(config, "group.consumer.heartbeat.interval.ms"))
        self.group_configs: Mapping[str, Mapping[str, str]] = {}   # KIP-848 per-group overrides, from the image
        self.max_size = int(_setting(config, "group.consumer.max.size"))
        names = [_ASSIGNOR_CLASSES.get(n.strip(), n.strip())
                 for n in _setting(config, "group.consumer.assignors").split(",") if n.strip()]
        self.assignors = [n for n in names if n in ASSIGNORS] or ["uniform"]
        self.groups: dict[str, ConsumerGroup] = {}
        self._session_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._rebalance_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    # -- plumbing ----------------------------------------------------------------------------------------------------
    @property
    def topics(self):
        return self.parent.topics

    def now_ms(self) -> int:
        return self.parent.now_ms()

    def stop(self) -> None:
        for timer in list(self._session_timers.values()) + list(self._rebalance_timers.values()):
            timer.cancel()
        self._session_timers.clear()
        self._rebalance_timers.clear()

    def unload(self, group_id: str) -> None:
        """Forget a group whose __consumer_offsets partition is now led elsewhere (its timers too)."""
        self.groups.pop(group_id, None)
        for timers in (self._session_timers, self._rebalance_timers):
            for key in [k for k in timers if k[0] == group_id]:
                timers.pop(key).cancel()

    def _commit(self, group: ConsumerGroup, ops: list, extra: list | None = None) -> int:
        """Append the records of `ops` ([(RecordKey, value)], already replayed on `group`) and swap `group` in."""
        records = list(extra or [])
        for k, v in ops:
            records.append((_encode_key(k), None if v is None else _encode_value(k.type, v)))
        if records and self.parent.store is not None:
            err = self.parent.store.append(group.group_id, records)
            if err != ErrorCode.none:
                return gms.map_operation_error(err)
        if group.exists or group.members or group.offsets:
            self.groups[group.group_id] = group
        else:
            self.groups.pop(group.group_id, None)
        return ErrorCode.none

    # -- topics ------------------------------------------------------------------------------------------------------
    def _resolve_regex(self, regex: str) -> set[str]:
        if self.topics is None:
            return set()
        try:
            pattern = re.compile(regex)
        except re.error:
            return set()
        return {t.name for t in self.topics.topics() if not t.name.startswith("__") and pattern.fullmatch(t.name)}

    def _subscribed_names(self, m: ConsumerGroupMember) -> set[str]:
        names = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            names |= self._resolve_regex(m.subscribed_topic_regex)
        return names

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for m in group.members.values():
            for name in self._subscribed_names(m):
                if name in out:
                    continue
                info = self.topics.get(name) if self.topics is not None else None
                if info is not None:
                    out[name] = (info.uuid, info.partitions)
        return out

    def _topic_name(self, topic_id) -> str:
        info = self.topics.by_id(topic_id) if self.topics is not None else None
        return info.name if info is not None else ""

    def is_subscribed_to_topic(self, group: ConsumerGroup, topic: str) -> bool:
        return any(topic in self._subscribed_names(m) for m in group.members.values())

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None = None,
                  rack_id: str | None = None, rebalance_timeout_ms: int = -1,
                  subscribed_topic_names: list[str] | None = None, subscribed_topic_regex: str | None = None,
                  server_assignor: str | None = None, owned: list | None = None, client_id: str = "",
                  client_host: str = "", version: int = 1) -> HeartbeatResult:
        """owned: [(topic id, [partitions])] or None when unchanged since the last heartbeat."""
        try:
            self._validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                           subscribed_topic_names, subscribed_topic_regex, server_assignor, owned, version)
            err = self.parent._unavailable(group_id)
            if err != ErrorCode.none:
                raise _Failed(err)
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(group_id, member_id, instance_id, member_epoch)
            return self._heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                   subscribed_topic_names, subscribed_topic_regex, server_assignor, owned,
                                   client_id, client_host)
        except _Failed as e:
            return HeartbeatResult(e.error, e.message)

    def _validate(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                  subscribed_topic_names, subscribed_topic_regex, server_assignor, owned, version) -> None:
        def empty(s):
            return s is not None and s.strip() == ""
        if (version >= 1 or member_epoch > 0 or member_epoch == LEAVE_GROUP_MEMBER_EPOCH) and \
                (member_id is None or empty(member_id)):
            raise _Failed(ErrorCode.invalid_request, "MemberId can't be empty.")
        if group_id is None or empty(group_id):
            raise _Failed(ErrorCode.invalid_request, "GroupId can't be empty.")
        if empty(instance_id):
            raise _Failed(ErrorCode.invalid_request, "InstanceId can't be empty.")
        if empty(rack_id):
            raise _Failed(ErrorCode.invalid_request, "RackId can't be empty.")
        if member_epoch == 0:
            if rebalance_timeout_ms == -1:
                raise _Failed(ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise _Failed(ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining.")
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                raise _Failed(ErrorCode.invalid_request, "Either SubscribedTopicNames or SubscribedTopicRegex must be "
                                               "non-null when (re-)joining.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if instance_id is None:
                raise _Failed(ErrorCode.invalid_request, "InstanceId can't be null.")
        elif member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _Failed(ErrorCode.invalid_request, "MemberEpoch is invalid.")
        if server_assignor is not None and server_assignor not in self.assignors:
            raise _Failed(ErrorCode.unsupported_assignor, f"ServerAssignor {server_assignor} is not supported. Supported "
                                                f"assignors: {', '.join(self.assignors)}.")
        if subscribed_topic_regex:
            try:
                re.compile(subscribed_topic_regex)
            except re.error as e:
                raise _Failed(ErrorCode.invalid_regular_expression, f"SubscribedTopicRegex `{subscribed_topic_regex}` is not "
                                                          f"a valid regular expression: {e}.") from None

    def _group_for_join(self, group_id: str, create: bool) -> tuple[ConsumerGroup, list]:
        """A working copy of the group (a new one when `create`, replacing an Empty classic group as Kafka does),
        plus the records that delete the classic group."""
        group = self.groups.get(group_id)
        if group is not None:
            return group.copy(), []
        classic = self.parent.groups.get(group_id)
        if not create:
            raise _Failed(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        work = ConsumerGroup(group_id)
        if classic is None:
            return work, []
        if classic.members or classic.state != "Empty":
            raise _Failed(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        work.offsets = dict(classic.offsets)
        return work, [(gr.group_metadata_key(group_id), None)]

    def _check_epoch(self, member: ConsumerGroupMember, epoch: int, owned) -> None:
        if epoch > member.member_epoch:
            raise _Failed(ErrorCode.fenced_member_epoch, f"The consumer group member has a greater member epoch ({epoch}) "
                                               f"than the one known by the group coordinator "
                                               f"({member.member_epoch}). The member must abandon all its "
                                               f"partitions and rejoin.")
        if epoch < member.member_epoch and (epoch != member.previous_member_epoch
                                            or not _assignment_subset(owned, member.assigned)):
            raise _Failed(ErrorCode.fenced_member_epoch, f"The consumer group member has a smaller member epoch ({epoch}) "
                                               f"than the one known by the group coordinator "
                                               f"({member.member_epoch}). The member must abandon all its "
                                               f"partitions and rejoin.")

    def _heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                   subscribed_topic_names, subscribed_topic_regex, server_assignor, owned, client_id, client_host):
        join = member_epoch == 0
        work, extra = self._group_for_join(group_id, join)
        ops: list = []

        def emit(record_type, value, member=None):
            k = RecordKey(record_type, group_id, member=member)
            ops.append((k, value))
            work.replay(k, value)

        if len(work.members) >= self.max_size and (not member_id or member_id not in work.members):
            raise _Failed(ErrorCode.group_max_size_reached, f"The consumer group has reached its maximum capacity of "
                                                  f"{self.max_size} members.")
        if not member_id:
            member_id = str(uuid.uuid4())     # v0: the coordinator names the member

        # The member: existing, new, or a static member taking over its instance id.
        if instance_id is None:
            member = work.members.get(member_id)
            if member is None:
                if not join:
                    raise _Failed(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
                member = ConsumerGroupMember(member_id)
                log.info("group %s: member %s joins the consumer group", group_id, member_id)
            else:
                self._check_epoch(member, member_epoch, owned)
        else:
            existing = work.static_member(instance_id)
            if join:
                if existing is None:
                    member = work.members.get(member_id) or ConsumerGroupMember(member_id)
                    log.info("group %s: static member %s (instance %s) joins", group_id, member_id, instance_id)
                else:
                    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise _Failed(ErrorCode.unreleased_instance_id,
                                      f"Static member {member_id} with instance id {instance_id} cannot join the "
                                      f"group because the instance id is owned by {existing.member_id} member.")
                    old_target = work.target.get(existing.member_id, {})
                    member = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
                    self._remove_member_records(emit, existing.member_id)
                    emit(CONSUMER_GROUP_MEMBER_METADATA, member.metadata_value(), member_id)
                    emit(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, old_target, member_id)
                    emit(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member.assignment_value(), member_id)
                    member = work.members[member_id]
                    log.info("group %s: static member %s rejoins as %s, replacing %s", group_id, instance_id,
                             member_id, existing.member_id)
            else:
                if existing is None:
                    raise _Failed(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise _Failed(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id {instance_id} "
                                                      f"was fenced by member {existing.member_id}.")
                self._check_epoch(existing, member_epoch, owned)
                member = existing
        before = member

        # 1. Create or update the member; a new subscription bumps the group epoch.
        updated = replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=rack_id if rack_id is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=server_assignor if server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(sorted(set(subscribed_topic_names))) if subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(subscribed_topic_regex if subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=client_id, client_host=client_host)
        bump = work.group_epoch == 0
        if member_id not in work.members or updated.metadata_value() != member.metadata_value():
            emit(CONSUMER_GROUP_MEMBER_METADATA, updated.metadata_value(), member_id)
            if (updated.subscribed_topic_names, updated.subscribed_topic_regex) != \
                    (member.subscribed_topic_names, member.subscribed_topic_regex):
                bump = True
        metadata = self._subscription_metadata(work)     # also catches created/deleted/grown topics
        if metadata != (work.subscription_metadata or {}):
            bump = True
        work.subscription_metadata = metadata
        if bump:
            emit(CONSUMER_GROUP_METADATA, work.group_epoch + 1)
            log.info("group %s: bumped group epoch to %d", group_id, work.group_epoch)

        # 2. A new target assignment when the group epoch moved past the assignment epoch.
        if work.group_epoch > work.assignment_epoch:
            self._update_target_assignment(work, emit)

        # 3. Reconcile the member towards its target.
        current = work.members[member_id]
        target = work.target.get(member_id, {})
        reconciled = self._reconcile(work, current, work.assignment_epoch, target, owned)
        if not reconciled.same_assignment(current):
            emit(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, reconciled.assignment_value(), member_id)
        err = self._commit(work, ops, extra)
        if err != ErrorCode.none:
            raise _Failed(err)
        if extra:
            self.parent._forget_classic_group(group_id)
        final = work.members[member_id]
        if final.state == UNREVOKED_PARTITIONS:
            if not (current.state == UNREVOKED_PARTITIONS and current.member_epoch == final.member_epoch):
                self._schedule_rebalance_timeout(group_id, member_id, final.member_epoch,
                                                 final.rebalance_timeout_ms)
        else:
            self._cancel(self._rebalance_timers, (group_id, member_id))
        self._schedule_session_timeout(group_id, member_id)
        full = join or (rebalance_timeout_ms != -1 and subscribed_topic_names is not None and owned is not None)
        changed = final.assigned != before.assigned
        return HeartbeatResult(ErrorCode.none, None, member_id, final.member_epoch,
                               self._group_setting(group_id, "consumer.heartbeat.interval.ms", self.heartbeat_interval_ms),
                               final.assigned if full or changed else None)

    @staticmethod
    def _remove_member_records(emit, member_id: str) -> None:
        emit(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, None, member_id)
        emit(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, None, member_id)
        emit(CONSUMER_GROUP_MEMBER_METADATA, None, member_id)

    def _preferred_assignor(self, group: ConsumerGroup) -> str:
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor in ASSIGNORS)
        if votes:
            top = max(votes.values())
            return min(a for a, c in votes.items() if c == top)
        return self.assignors[0]

    def _update_target_assignment(self, work: ConsumerGroup, emit) -> None:
        metadata = work.subscription_metadata or {}
        topics = {tid: n for tid, n in metadata.values()}
        subscriptions = {}
        for mid, m in work.members.items():
            subscriptions[mid] = {metadata[name][0] for name in self._subscribed_names(m) if name in metadata}
        assignor = self._preferred_assignor(work)
        new = ASSIGNORS[assignor](subscriptions, topics, work.target)
        for mid in sorted(new):
            if work.target.get(mid) != new[mid] or mid not in work.target:
                emit(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, new[mid], mid)
        emit(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, work.group_epoch)
        log.info("group %s: new target assignment for epoch %d with the %s assignor: %s", work.group_id,
                 work.group_epoch, assignor,
                 {mid: sum(len(p) for p in a.values()) for mid, a in new.items()})

    def _reconcile(self, work: ConsumerGroup, member: ConsumerGroupMember, target_epoch: int, target: Assignment,
                   owned) -> ConsumerGroupMember:
        """Kafka's CurrentAssignmentBuilder."""
        if member.is_reconciled_to(target_epoch):
            return member
        if member.state == UNREVOKED_PARTITIONS and _owns_any(owned, member.pending_revocation):
            return member
        subscribed = {work.subscription_metadata[n][0] for n in self._subscribed_names(member)
                      if work.subscription_metadata and n in work.subscription_metadata}
        new_assigned: dict = {}
        new_revoking: dict = {}
        new_pending: dict = {}
        unreleased = False
        for topic_id in set(target) | set(member.assigned):
            want = target.get(topic_id, frozenset()) if topic_id in subscribed else frozenset()
            have = member.assigned.get(topic_id, frozenset())
            keep = have & want
            revoke = have - keep
            pending = set(want - keep)
            held = {p for p in pending if work.current_partition_epoch(topic_id, p) != -1
                    and p not in member.pending_revocation.get(topic_id, frozenset())}
            if held:
                unreleased = True
                pending -= held
            if keep:
                new_assigned[topic_id] = frozenset(keep)
            if revoke:
                new_revoking[topic_id] = frozenset(revoke)
            if pending:
                new_pending[topic_id] = frozenset(pending)
        if new_revoking and _owns_any(owned, new_revoking):
            return replace(member, state=UNREVOKED_PARTITIONS, member_epoch=member.member_epoch,
                           previous_member_epoch=member.member_epoch, assigned=new_assigned,
                           pending_revocation=new_revoking)
        for topic_id, parts in new_pending.items():
            new_assigned[topic_id] = new_assigned.get(topic_id, frozenset()) | parts
        return replace(member, state=UNRELEASED_PARTITIONS if unreleased else STABLE, member_epoch=target_epoch,
                       previous_member_epoch=member.member_epoch, assigned=new_assigned, pending_revocation={})

    # -- leaving and fencing -----------------------------------------------------------------------------------------
    def _leave(self, group_id, member_id, instance_id, member_epoch) -> HeartbeatResult:
        group = self.groups.get(group_id)
        if group is None:
            raise _Failed(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _Failed(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise _Failed(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise _Failed(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id {instance_id} was "
                                                  f"fenced by member {member.member_id}.")
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("group %s: static member %s (instance %s) temporarily left", group_id, member_id, instance_id)
            work = group.copy()
            leaving = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            k = RecordKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, member=member.member_id)
            work.replay(k, leaving.assignment_value())
            err = self._commit(work, [(k, leaving.assignment_value())])
            if err != ErrorCode.none:
                raise _Failed(err)
            self._cancel(self._rebalance_timers, (group_id, member.member_id))
            return HeartbeatResult(ErrorCode.none, None, member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        log.info("group %s: member %s left the consumer group", group_id, member.member_id)
        err = self._fence(group, member.member_id)
        if err != ErrorCode.none:
            raise _Failed(err)
        return HeartbeatResult(ErrorCode.none, None, member_id, member_epoch)

    def _fence(self, group: ConsumerGroup, member_id: str) -> int:
        """Remove the member (tombstones for its records) and bump the group epoch."""
        work = group.copy()
        ops: list = []

        def emit(record_type, value, member=None):
            k = RecordKey(record_type, group.group_id, member=member)
            ops.append((k, value))
            work.replay(k, value)

        self._remove_member_records(emit, member_id)
        work.subscription_metadata = self._subscription_metadata(work)
        emit(CONSUMER_GROUP_METADATA, work.group_epoch + 1)
        err = self._commit(work, ops)
        if err == ErrorCode.none:
            self._cancel(self._session_timers, (group.group_id, member_id))
            self._cancel(self._rebalance_timers, (group.group_id, member_id))
        return err

    def leave_members(self, group_id: str, members: list[tuple[str, str | None, str | None]]) -> list[int]:
        """The classic LeaveGroup on a consumer group (Kafka's classicGroupLeaveToConsumerGroup), as the admin
        client's removeMembersFromConsumerGroup sends it: each member named by id, or by group.instance.id with
        an empty member id, is removed; per-member errors (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID)."""
        errors = []
        for member_id, instance_id, reason in members:
            group = self.groups[group_id]
            member = group.members.get(member_id) if instance_id is None else group.static_member(instance_id)
            if member is None:
                errors.append(ErrorCode.unknown_member_id)
            elif instance_id is not None and member_id and member.member_id != member_id:
                errors.append(ErrorCode.fenced_instance_id)
            else:
                log.info("group %s: member %s (instance %s) removed by LeaveGroup; reason: %s", group_id,
                         member.member_id, instance_id, reason or "not provided")
                errors.append(self._fence(group, member.member_id))
        return errors

    # -- timers ------------------------------------------------------------------------------------------------------
    @staticmethod
    def _cancel(timers: dict, key) -> None:
        timer = timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        self._cancel(self._session_timers, (group_id, member_id))
        self._session_timers[(group_id, member_id)] = asyncio.get_running_loop().call_later(
            self._group_setting(group_id, "consumer.session.timeout.ms", self.session_timeout_ms) / 1000,
            self._on_session_timeout, group_id, member_id)

    def _group_setting(self, group_id: str, name: str, default: int) -> int:
        """A group config set with IncrementalAlterConfigs on the GROUP resource, else the broker's default."""
        value = self.group_configs.get(group_id, {}).get(name)
        return default if value is None else int(value)

    def _on_session_timeout(self, group_id: str, member_id: str) -> None:
        self._session_timers.pop((group_id, member_id), None)
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members or not self.parent._active:
            return
        log.info("group %s: member %s fenced, its session expired", group_id, member_id)
        if self._fence(group, member_id) != ErrorCode.none:
            self._schedule_session_timeout(group_id, member_id)   # try again later

    def _schedule_rebalance_timeout(self, group_id: str, member_id: str, epoch: int, timeout_ms: int) -> None:
        self._cancel(self._rebalance_timers, (group_id, member_id))
        if timeout_ms < 0:
            return
        self._rebalance_timers[(group_id, member_id)] = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._on_rebalance_timeout, group_id, member_id, epoch)

    def _on_rebalance_timeout(self, group_id: str, member_id: str, epoch: int) -> None:
        self._rebalance_timers.pop((group_id, member_id), None)
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or member.member_epoch != epoch or member.state != UNREVOKED_PARTITIONS:
            return
        log.info("group %s: member %s fenced, it did not revoke its partitions within its rebalance timeout",
                 group_id, member_id)
        self._fence(group, member_id)

    # -- ConsumerGroupDescribe ---------------------------------------------------------------------------------------
    def describe(self, group_ids: list[str], include_authorized_operations: bool = False) -> list[dict]:
        out = []
        for group_id in group_ids:
            entry = {"group_id": group_id, "error_code": ErrorCode.none, "error_message": None, "group_state": "",
                     "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
                     "authorized_operations": ((1 << 3) | (1 << 6) | (1 << 8)) if include_authorized_operations
                     else -2147483648}
            err = self.parent._unavailable(group_id)
            group = self.groups.get(group_id)
            if err != ErrorCode.none:
                entry["error_code"] = err
            elif group is None:
                entry["error_code"] = ErrorCode.group_id_not_found
                entry["error_message"] = (f"Group {group_id} is not a consumer group."
                                          if group_id in self.parent.groups else f"Group {group_id} not found.")
            else:
                entry.update(group_state=group.state(), group_epoch=group.group_epoch,
                             assignment_epoch=group.assignment_epoch, assignor_name=self._preferred_assignor(group),
                             members=[self._describe_member(group, m) for m in group.members.values()])
            out.append(entry)
        return out

    def _describe_member(self, group: ConsumerGroup, m: ConsumerGroupMember) -> dict:
        def parts(a: Assignment):
            return {"topic_partitions": [{"topic_id": t, "topic_name": self._topic_name(t), "partitions": sorted(ps)}
                                         for t, ps in sorted(a.items(), key=lambda kv: str(kv[0]))]}
        return {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex, "assignment": parts(m.assigned),
                "target_assignment": parts(group.target.get(m.member_id, {})), "member_type": 1}


# ---- record encoding ------------------------------------------------------------------------------------------------
def _encode_key(k: RecordKey) -> bytes:
    return gr.consumer_group_key(k.type, k.group, k.member)


def _encode_value(record_type: int, value) -> bytes:
    if record_type == CONSUMER_GROUP_METADATA:
        return gr.encode_consumer_group_epoch(value)
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        return gr.encode_target_assignment_epoch(value)
    if record_type == CONSUMER_GROUP_MEMBER_METADATA:
        return gr.encode_consumer_member(value)
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        return gr.encode_target_assignment_member(value)
    if record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        return gr.encode_current_assignment(value)
    raise ValueError(f"no value encoding for consumer group record type {record_type}")

