"""What `strata groups` asks of a cluster, sent where Kafka's Admin client sends it: a group's requests to its
coordinator (FindCoordinator), ListGroups to every broker, ListOffsets to each partition's leader. Errors that pass
(a coordinator moving or loading, a leader changing, a broker restarting) are retried until --timeout, as the Admin
client retries them until its api timeout; anything else is an AdminError with Kafka's exception text."""
from __future__ import annotations

import asyncio
import struct
from collections import defaultdict
from dataclasses import dataclass, field

from tools.admin_client import AdminClient, AdminError, error_name
from protocol.errors import ErrorCode

TP = tuple[str, int]
LATEST, EARLIEST = -1, -2                    # ListOffsets timestamps

# Kafka's exception class and Errors message for the codes these tools meet, so a user reads what Kafka prints.
KAFKA_ERRORS = {
    ErrorCode.non_empty_group: ("GroupNotEmptyException", "The group is not empty."),
    ErrorCode.group_id_not_found: ("GroupIdNotFoundException", "The group id does not exist."),
    ErrorCode.invalid_group_id: ("InvalidGroupIdException", "The configured groupId is invalid."),
    ErrorCode.group_subscribed_to_topic: ("GroupSubscribedToTopicException", "Deleting offsets of a topic is "
                                          "forbidden while the consumer group is actively subscribed to it."),
    ErrorCode.unknown_topic_or_partition: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.unknown_member_id: ("UnknownMemberIdException", "The coordinator is not aware of this member."),
    ErrorCode.rebalance_in_progress: ("RebalanceInProgressException",
                                      "The group is rebalancing, so a rejoin is needed."),
    ErrorCode.coordinator_not_available: ("CoordinatorNotAvailableException", "The coordinator is not available."),
    ErrorCode.not_coordinator: ("NotCoordinatorException", "This is not the correct coordinator."),
    ErrorCode.coordinator_load_in_progress: ("CoordinatorLoadInProgressException",
                                             "The coordinator is loading and hence can't process requests."),
    ErrorCode.leader_not_available: ("LeaderNotAvailableException", "There is no leader for this topic-partition "
                                     "as we are in the middle of a leadership election."),
    ErrorCode.not_leader_or_follower: ("NotLeaderOrFollowerException", "The broker is not the current leader."),
    ErrorCode.request_timed_out: ("TimeoutException", "The request timed out."),
}
RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
             ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.request_timed_out,
             ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch}


def kafka_error(code: int) -> str:
    name, message = KAFKA_ERRORS.get(int(code), (None, None))
    return f"{name}: {message}" if name else error_name(code)


class _Retriable(Exception):
    def __init__(self, what: str):
        super().__init__(what)


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[TP]
    target: list[TP] = field(default_factory=list)
    epoch: int | None = None                 # KIP-848 member epoch; classic members have none


@dataclass
class Group:
    group_id: str
    state: str                               # Kafka's GroupState names: Stable, Empty, Assigning, ...
    kind: str                                # Kafka's GroupType names: Classic, Consumer
    assignor: str
    coordinator: tuple[int, str, int]        # (node id, host, port)
    members: list[Member]
    group_epoch: int | None = None
    target_epoch: int | None = None


def decode_assignment(data: bytes | None) -> list[TP]:
    """ConsumerProtocolAssignment (every version starts alike): int16 version, [topic string, [int32 partition]]."""
    if not data:
        return []
    out, pos = [], 2
    (topics,), pos = struct.unpack_from(">i", data, pos), pos + 4
    for _ in range(max(topics, 0)):
        (n,), pos = struct.unpack_from(">h", data, pos), pos + 2
        topic, pos = bytes(data[pos:pos + n]).decode(), pos + n
        (count,), pos = struct.unpack_from(">i", data, pos), pos + 4
        out += [(topic, p) for p in struct.unpack_from(f">{max(count, 0)}i", data, pos)]
        pos += 4 * max(count, 0)
    return out


class GroupAdmin:
    def __init__(self, client: AdminClient, timeout_ms: int):
        self.client = client
        self.timeout_ms = timeout_ms
        self._coordinators: dict[str, tuple[int, str, int]] = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    async def _retrying(self, what: str, attempt):
        """attempt() until it does not raise _Retriable, with Kafka's 100 ms backoff doubling to 1 s."""
        loop = asyncio.get_running_loop()
        deadline, backoff = loop.time() + self.timeout_ms / 1000, 0.1
        while True:
            try:
                return await attempt()
            except _Retriable as e:
                if loop.time() + backoff > deadline:
                    raise AdminError(f"TimeoutException: timed out after {self.timeout_ms} ms waiting for {what} "
                                     f"(last: {e})") from None
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, 1.0)

    async def _coordinator(self, group: str) -> tuple[int, str, int]:
        if group not in self._coordinators:
            c = (await self.client.send(10, 4, {"key_type": 0, "coordinator_keys": [group]})).coordinators[0]
            if c.error_code in RETRIABLE:
                raise _Retriable(kafka_error(c.error_code))
            if c.error_code:
                raise AdminError(c.error_message or kafka_error(c.error_code))
            self._coordinators[group] = (c.node_id, c.host, c.port)
        return self._coordinators[group]

    async def _to_coordinator(self, group: str, api_key: int, version: int, body, error_of):
        """The request to the group's coordinator; error_of(response) is the error that decides a retry."""
        async def attempt():
            node = await self._coordinator(group)
            try:
                resp = await self.client.send_to(node[1], node[2], api_key, version, body)
            except AdminError as e:
                self._coordinators.pop(group, None)
                raise _Retriable(str(e)) from None
            err = error_of(resp)
            if err in RETRIABLE:
                self._coordinators.pop(group, None)
                raise _Retriable(kafka_error(err))
            return resp
        return await self._retrying(f"the coordinator of group '{group}'", attempt)

    # -- groups ------------------------------------------------------------------------------------------------------
    async def list_groups(self, states: list[str], types: list[str]) -> list[tuple[str, str, str]]:
        """(group id, type, state) of every consumer group on any broker (ListGroups v5 to each, as Kafka's
        listGroups does); only protocol types "consumer" and "" (offsets-only groups), as forConsumerGroups()."""
        md = await self.client.metadata([])
        body = {"states_filter": states, "types_filter": types or ["classic", "consumer"]}

        async def one(host: str, port: int):
            async def attempt():
                try:
                    resp = await self.client.send_to(host, port, 16, 5, body)
                except AdminError as e:
                    raise _Retriable(str(e)) from None
                if resp.error_code in RETRIABLE:
                    raise _Retriable(kafka_error(resp.error_code))
                if resp.error_code:
                    raise AdminError(kafka_error(resp.error_code))
                return resp.groups
            return await self._retrying(f"ListGroups from {host}:{port}", attempt)
        found = {}
        for groups in await asyncio.gather(*(one(b.host, b.port) for b in md.brokers)):
            for g in groups:
                if g.protocol_type in ("", "consumer"):
                    found[g.group_id] = (g.group_id, (g.group_type or "classic").capitalize(), g.group_state)
        return [found[k] for k in sorted(found)]

    async def describe(self, group: str) -> Group | None:
        """ConsumerGroupDescribe first, DescribeGroups for classic groups (Kafka 4's DescribeConsumerGroupsHandler);
        None when the group does not exist (GROUP_ID_NOT_FOUND from both, or Dead)."""
        resp = await self._to_coordinator(group, 69, 0, {"group_ids": [group], "include_authorized_operations": False},
                                          lambda r: r.groups[0].error_code)
        g = resp.groups[0]
        coordinator = self._coordinators[group]
        if g.error_code == 0:
            members = [Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                              [(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions],
                              [(t.topic_name, p) for t in m.target_assignment.topic_partitions for p in t.partitions],
                              m.member_epoch) for m in g.members]
            return Group(group, g.group_state, "Consumer", g.assignor_name, coordinator, members, g.group_epoch,
                         g.assignment_epoch)
        if g.error_code != ErrorCode.group_id_not_found:
            raise AdminError(g.error_message or kafka_error(g.error_code))
        resp = await self._to_coordinator(group, 15, 5, {"groups": [group], "include_authorized_operations": False},
                                          lambda r: r.groups[0].error_code)
        d = resp.groups[0]
        if d.error_code == ErrorCode.group_id_not_found or (d.error_code == 0 and d.group_state == "Dead"):
            return None
        if d.error_code:
            raise AdminError(kafka_error(d.error_code))
        if d.protocol_type not in ("", "consumer"):
            raise AdminError(f"GroupId {group} is not a consumer group ({d.protocol_type}).")
        members = [Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                          decode_assignment(m.member_assignment)) for m in d.members]
        return Group(group, d.group_state, "Classic", d.protocol_data, self._coordinators[group], members)

    async def committed(self, group: str) -> dict[TP, tuple[int, int]]:
        """The group's committed offsets: {(topic, partition): (offset, leader epoch)} (OffsetFetch v8, all topics)."""
        resp = await self._to_coordinator(group, 9, 8, {"groups": [{"group_id": group, "topics": None}],
                                                        "require_stable": False}, lambda r: r.groups[0].error_code)
        g = resp.groups[0]
        if g.error_code:
            raise AdminError(kafka_error(g.error_code))
        return {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch)
                for t in g.topics for p in t.partitions if p.committed_offset >= 0 and not p.error_code}

    async def commit(self, group: str, offsets: dict[TP, int]) -> dict[TP, int]:
        """OffsetCommit as Kafka's alterConsumerGroupOffsets sends it: generation -1 and no member id, which the
        coordinator takes only while the group has no members. -> {(topic, partition): error code}."""
        topics: dict[str, list] = defaultdict(list)
        for (t, p), off in sorted(offsets.items()):
            topics[t].append({"partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                              "committed_metadata": ""})
        body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def first_error(r):
            return next((p.error_code for t in r.topics for p in t.partitions if p.error_code), 0)
        resp = await self._to_coordinator(group, 8, 9, body, first_error)
        return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}

    async def delete_group(self, group: str) -> int:
        resp = await self._to_coordinator(group, 42, 2, {"groups_names": [group]},
                                          lambda r: r.results[0].error_code)
        return resp.results[0].error_code

    async def delete_offsets(self, group: str, tps: list[TP]) -> tuple[int, dict[TP, int]]:
        topics: dict[str, list] = defaultdict(list)
        for t, p in tps:
            topics[t].append({"partition_index": p})
        resp = await self._to_coordinator(group, 47, 0, {"group_id": group, "topics": [
            {"name": t, "partitions": ps} for t, ps in topics.items()]}, lambda r: r.error_code)
        return resp.error_code, {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}

    # -- partitions --------------------------------------------------------------------------------------------------
    async def partitions(self, topics) -> dict[str, dict[int, int]]:
        """{topic: {partition: leader id (-1 for none)}} of the topics that exist (Metadata)."""
        md = await self.client.metadata(sorted(set(topics)))
        self.brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        return {t.name: {p.partition_index: p.leader_id for p in t.partitions}
                for t in md.topics if not t.error_code}

    async def log_offsets(self, tps, timestamp: int) -> dict[TP, int | None]:
        """ListOffsets (LATEST, EARLIEST or a time in ms) to each partition's leader; None for a partition without a
        leader or gone; -1 where no record has a timestamp at or after the time asked for."""
        todo, out = set(tps), {}

        async def one(leader: int, group: list[TP]):
            topics: dict[str, list] = defaultdict(list)
            for t, p in group:
                topics[t].append({"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp})
            host, port = self.brokers[leader]
            resp = await self.client.send_to(host, port, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": t, "partitions": ps} for t, ps in topics.items()]})
            return [((t.name, p.partition_index), p.error_code, p.offset) for t in resp.topics for p in t.partitions]

        async def attempt():
            leaders = await self.partitions({t for t, _ in todo})
            by_leader: dict[int, list[TP]] = defaultdict(list)
            for tp in list(todo):
                leader = leaders.get(tp[0], {}).get(tp[1], -1)
                if leader < 0 or leader not in self.brokers:
                    out[tp] = None
                    todo.discard(tp)
                else:
                    by_leader[leader].append(tp)
            results = await asyncio.gather(*(one(leader, g) for leader, g in by_leader.items()),
                                           return_exceptions=True)
            for r in results:
                if isinstance(r, AdminError):
                    continue                                  # that leader is down: ask again
                if isinstance(r, BaseException):
                    raise r
                for tp, err, offset in r:
                    if err not in RETRIABLE:
                        out[tp] = None if err else offset
                        todo.discard(tp)
            if todo:
                raise _Retriable(f"offsets of {len(todo)} partitions")
        if todo:
            try:
                await self._retrying("ListOffsets", attempt)
            except AdminError:
                out.update({tp: None for tp in todo})
        return out
