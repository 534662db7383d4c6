"""The classic group model (Kafka's GroupMetadata.scala / MemberMetadata.scala): one GroupMetadata per group id with
its members, generation, chosen protocol and committed offsets, plus the error codes, states and result types the
classic coordinator and its handlers share. Pure data and state checks: the timers, persistence and request logic are
in broker/groups/classic/group_coordinator.py (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and broker/groups/classic/group_offsets.py (offsets,
admin, offset retention)."""
from __future__ import annotations

import asyncio
import logging
import struct
from collections import Counter
from dataclasses import dataclass, field

from broker.groups.records import OffsetAndMetadata
from protocol.errors import ErrorCode

log = logging.getLogger("strata.groups")

# ---- states --------------------------------------------------------------------------------------------------------
EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)

_VALID_PREVIOUS = {
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    EMPTY: {PREPARING_REBALANCE},
}

CONSUMER_PROTOCOL_TYPE = "consumer"
CLASSIC_GROUP_TYPE = "classic"
UNKNOWN_MEMBER = ""                  # JoinGroupRequest.UNKNOWN_MEMBER_ID
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # GroupCoordinator.NewMemberJoinTimeoutMs
DEFAULT_RETENTION_TIME = -1          # OffsetCommit v2-4 retention_time meaning "broker default"


class IllegalStateError(RuntimeError):
    pass


# ---- results -------------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list = field(default_factory=list)   # [(member_id, group_instance_id, metadata)] for the leader


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupSummary:
    error: int
    state: str
    protocol_type: str
    protocol_name: str
    members: list


def parse_subscription_topics(data: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: version i16, topics [i16-string]); None if malformed."""
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0:
            return None
        topics = set()
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if ln < 0 or pos + ln > len(data):
                return None
            topics.add(bytes(data[pos:pos + ln]).decode("utf-8"))
            pos += ln
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


# ---- members and groups --------------------------------------------------------------------------------------------
class MemberMetadata:
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "join_future", "sync_future",
                 "is_new", "heartbeat_timer")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]]):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.join_future: asyncio.Future | None = None
        self.sync_future: asyncio.Future | None = None
        self.is_new = False
        self.heartbeat_timer: asyncio.TimerHandle | None = None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise IllegalStateError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return len(protocols) == len(self.protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.protocols))

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise IllegalStateError(f"member {self.member_id} does not support any of the candidates {candidates}")

    def __repr__(self) -> str:
        return (f"MemberMetadata({self.member_id!r}, instance={self.group_instance_id!r}, "
                f"protocols={self.protocol_names()}, awaiting_join={self.is_awaiting_join}, "
                f"awaiting_sync={self.is_awaiting_sync}, new={self.is_new})")


class _DelayedJoin:
    """A pending rebalance completion: Kafka's DelayedJoin, or InitialDelayedJoin for a group leaving Empty."""
    __slots__ = ("timer", "initial", "configured_delay_ms", "delay_ms", "remaining_ms")

    def __init__(self, initial: bool, delay_ms: int, configured_delay_ms: int = 0, remaining_ms: int = 0):
        self.timer: asyncio.TimerHandle | None = None
        self.initial = initial
        self.delay_ms = delay_ms
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms


class GroupMetadata:
    def __init__(self, group_id: str, state: str = EMPTY, now_ms: int = 0):
        self.group_id = group_id
        self.state = state
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}             # group.instance.id -> member id
        self.pending_members: dict[str, asyncio.TimerHandle | None] = {}   # KIP-394 ids handed out, not joined yet
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.delayed_join: _DelayedJoin | None = None
        self.sync_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"protocol={self.protocol_type}/{self.protocol_name}, leader={self.leader_id}, "
                f"members={list(self.members)})")

    # -- state -------------------------------------------------------------------------------------------------------
    def is_(self, state: str) -> bool:
        return self.state == state

    def transition_to(self, state: str, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateError(f"group {self.group_id} cannot move from {self.state} to {state}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (STABLE, COMPLETING_REBALANCE, EMPTY)

    # -- membership --------------------------------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def size(self) -> int:
        return len(self.members)

    def has_static_member(self, instance_id: str | None) -> bool:
        return instance_id is not None and instance_id in self.static_members

    def current_static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id is not None else None

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def add(self, member: MemberMetadata, future: asyncio.Future | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.supported_protocols.update(member.protocol_names())
        self._set_join_future(member, future)
        timer = self.pending_members.pop(member.member_id, None)
        if timer is not None:
            timer.cancel()

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            self.supported_protocols += Counter()   # drop zero counts
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
                member.heartbeat_timer = None
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        timer = self.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, future: asyncio.Future | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        self.supported_protocols += Counter()
        member.protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self._set_join_future(member, future)

    def _set_join_future(self, member: MemberMetadata, future: asyncio.Future | None) -> None:
        old = member.join_future
        if old is not None and old is not future and not old.done():
            # A retried JoinGroup supersedes the parked one; answer the old request so its connection's reply
            # queue is not stuck behind it (Kafka drops the old callback).
            old.set_result(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        if future is not None and old is None:
            self.num_members_awaiting_join += 1
        elif future is None and old is not None:
            self.num_members_awaiting_join -= 1
        member.join_future = future

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise IllegalStateError(f"cannot replace non-existing member {old_member_id} of instance {instance_id}")
        # Fence the old incarnation right away if it is parked in JoinGroup or SyncGroup.
        self.maybe_invoke_join(member, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        self.maybe_invoke_sync(member, SyncResult(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[instance_id] = new_member_id
        return member

    def maybe_invoke_join(self, member: MemberMetadata, result: JoinResult) -> bool:
        fut = member.join_future
        if fut is None:
            return False
        member.join_future = None
        self.num_members_awaiting_join -= 1
        if not fut.done():
            fut.set_result(result)
        return True

    def maybe_invoke_sync(self, member: MemberMetadata, result: SyncResult) -> bool:
        fut = member.sync_future
        if fut is None:
            return False
        member.sync_future = None
        if not fut.done():
            fut.set_result(result)
        return True

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                log.info("group %s: leader %s did not rejoin, %s is the new leader", self.group_id, self.leader_id,
                         member_id)
                self.leader_id = member_id
                return True
        return False

    # -- protocols ---------------------------------------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self.supported_protocols[p] == n for p in protocols)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, c in self.supported_protocols.items() if c == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those every member supports; most votes wins
        (ties go to the protocol voted for first)."""
        if not self.members:
            raise IllegalStateError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=votes.__getitem__)

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        if self.is_(DEAD) or self.is_(PREPARING_REBALANCE):
            raise IllegalStateError(f"cannot obtain member metadata for group {self.group_id} in {self.state}")
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            t = parse_subscription_topics(m.metadata(self.protocol_name))
            if t is None:
                return None
            topics |= t
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    # -- offsets -----------------------------------------------------------------------------------------------------
    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Kafka's removeExpiredOffsets selection (KIP-211): an Empty group's offsets expire `retention_ms` after it
        became Empty; a Stable consumer group's offsets for topics nobody subscribes to expire `retention_ms` after
        their commit; a group without a protocol type (simple commits only) expires by commit time; offsets with an
        explicit expire timestamp (OffsetCommit v2-4 retention_time) expire at that time."""
        def pick(base, skip_topics=frozenset()):
            out = []
            for tp, om in self.offsets.items():
                if tp[0] in skip_topics:
                    continue
                if om.expire_timestamp is not None:
                    if now_ms >= om.expire_timestamp:
                        out.append(tp)
                elif now_ms - base(om) >= retention_ms:
                    out.append(tp)
            return out

        if self.protocol_type is not None and self.is_(EMPTY):
            return pick(lambda om: self.state_timestamp_ms)
        if self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None and self.is_(STABLE):
            return pick(lambda om: om.commit_timestamp, self.subscribed_topics)
        if self.protocol_type is None:
            return pick(lambda om: om.commit_timestamp)
        return []

    # -- summaries ---------------------------------------------------------------------------------------------------
    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", self.state)

    def summary(self) -> GroupSummary:
        if self.is_(STABLE):
            protocol = self.protocol_name
            members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.metadata(protocol), m.assignment) for m in self.members.values()]
            return GroupSummary(ErrorCode.none, self.state, self.protocol_type or "", protocol, members)
        members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                   for m in self.members.values()]
        return GroupSummary(ErrorCode.none, self.state, self.protocol_type or "", "", members)
