"""ConsumerGroup and ConsumerGroupMember of KIP-848 consumer groups (Kafka's ConsumerGroup / ConsumerGroupMember in
group-coordinator's modern.consumer package): the state a group's records (Kafka's record types 3 and 5-8) replay
into. Apart from the coordinator (broker/groups/consumer/consumer_group.py) because replay is the only way this state changes: the
coordinator replays an operation's records on a copy before appending them, and loading at start-up is the same
replay.
"""
from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass

from broker.groups.records import (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CONSUMER_GROUP_MEMBER_METADATA,
                                  CONSUMER_GROUP_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                  CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, ConsumerMemberValue,
                                  CurrentAssignmentValue, OffsetAndMetadata, RecordKey)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# ---- member and group states ---------------------------------------------------------------------------------------
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = 0, 1, 2     # MemberState values in the records
MEMBER_STATE_NAMES = {STABLE: "stable", UNREVOKED_PARTITIONS: "unrevoked_partitions",
                      UNRELEASED_PARTITIONS: "unreleased_partitions"}
GROUP_EMPTY, GROUP_ASSIGNING, GROUP_RECONCILING, GROUP_STABLE, GROUP_DEAD = (
    "Empty", "Assigning", "Reconciling", "Stable", "Dead")


Assignment = dict   # {topic id: frozenset(partitions)}


def _normalize(assignment: dict) -> Assignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


# ---- members and groups --------------------------------------------------------------------------------------------
@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: Assignment = None
    pending_revocation: Assignment = None

    def __post_init__(self):
        if self.assigned is None:
            self.assigned = {}
        if self.pending_revocation is None:
            self.pending_revocation = {}

    def metadata_value(self) -> ConsumerMemberValue:
        return ConsumerMemberValue(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                   self.subscribed_topic_names, self.subscribed_topic_regex,
                                   self.rebalance_timeout_ms, self.server_assignor)

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                                      self.pending_revocation)

    def same_assignment(self, other: "ConsumerGroupMember") -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned, self.pending_revocation) \
            == (other.member_epoch, other.previous_member_epoch, other.state, other.assigned,
                other.pending_revocation)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch


class ConsumerGroup:
    """The replayed state of one consumer group."""

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.exists = False                     # a ConsumerGroupMetadata record is live
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}        # instance id -> member id
        self.target: dict[str, Assignment] = {}          # member id -> target assignment
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}   # partitions some member owns
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] | None = None   # in memory only

    def copy(self) -> "ConsumerGroup":
        g = copy.copy(self)
        g.members = {mid: copy.copy(m) for mid, m in self.members.items()}
        g.static_members = dict(self.static_members)
        g.target = dict(self.target)
        g.partition_epochs = dict(self.partition_epochs)
        g.offsets = dict(self.offsets)
        return g

    # -- state -------------------------------------------------------------------------------------------------------
    def state(self) -> str:
        if not self.members:
            return GROUP_EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GROUP_ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return GROUP_RECONCILING
        return GROUP_STABLE

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        mid = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(mid) if mid is not None else None

    def current_partition_epoch(self, topic_id, partition) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    # -- replay ------------------------------------------------------------------------------------------------------
    def replay(self, key: RecordKey, value) -> None:
        t = key.type
        if t == CONSUMER_GROUP_METADATA:
            if value is None:
                self.exists = False
                self.group_epoch = 0
            else:
                self.exists = True
                self.group_epoch = value
        elif t == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            self.assignment_epoch = 0 if value is None else value
        elif t == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target.pop(key.member, None)
            else:
                self.target[key.member] = _normalize(value)
        elif t == CONSUMER_GROUP_MEMBER_METADATA:
            if value is None:
                old = self.members.pop(key.member, None)
                if old is not None:
                    self._drop_partition_epochs(old)
                    if old.instance_id is not None and self.static_members.get(old.instance_id) == key.member:
                        del self.static_members[old.instance_id]
                return
            old = self.members.get(key.member)
            m = copy.copy(old) if old is not None else ConsumerGroupMember(key.member)
            m.instance_id, m.rack_id = value.instance_id, value.rack_id
            m.client_id, m.client_host = value.client_id, value.client_host
            m.subscribed_topic_names = tuple(sorted(value.subscribed_topic_names))
            m.subscribed_topic_regex = value.subscribed_topic_regex
            m.rebalance_timeout_ms, m.server_assignor = value.rebalance_timeout_ms, value.server_assignor
            self.members[key.member] = m
            if old is not None and old.instance_id is not None and old.instance_id != m.instance_id \
                    and self.static_members.get(old.instance_id) == key.member:
                del self.static_members[old.instance_id]
            if m.instance_id is not None:
                self.static_members[m.instance_id] = key.member
        elif t == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            old = self.members.get(key.member)
            if old is None:
                if value is None:
                    return
                old = ConsumerGroupMember(key.member)
            self._drop_partition_epochs(old)
            m = copy.copy(old)
            if value is None:
                m.member_epoch, m.previous_member_epoch, m.state = LEAVE_GROUP_MEMBER_EPOCH, -1, STABLE
                m.assigned, m.pending_revocation = {}, {}
            else:
                m.member_epoch, m.previous_member_epoch, m.state = (value.member_epoch, value.previous_member_epoch,
                                                                    value.state)
                m.assigned, m.pending_revocation = _normalize(value.assigned), _normalize(value.pending_revocation)
                for assignment in (m.assigned, m.pending_revocation):
                    for topic_id, parts in assignment.items():
                        for p in parts:
                            self.partition_epochs[(topic_id, p)] = m.member_epoch
            self.members[key.member] = m

    def _drop_partition_epochs(self, m: ConsumerGroupMember) -> None:
        for assignment in (m.assigned, m.pending_revocation):
            for topic_id, parts in assignment.items():
                for p in parts:
                    if self.partition_epochs.get((topic_id, p)) == m.member_epoch:
                        del self.partition_epochs[(topic_id, p)]

