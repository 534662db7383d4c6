"""KIP-951: a Produce (v10+) or Fetch (v16+) answer of NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries the
partition's current leader and epoch, and the endpoints of those leaders, so the client can go there without a
Metadata round trip first."""
from __future__ import annotations

from protocol.errors import ErrorCode

_MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def current_leaders(image, failed, listener: str = "") -> tuple[dict, list] | None:
    """`failed`: (topic name or id, partition, error) of the answered partitions ->
    ({(topic, partition): (leader, leader epoch)}, [(node id, host, port, rack)]), None when there is nothing."""
    leaders, nodes = {}, {}
    for topic, index, err in failed:
        if err not in _MOVED:
            continue
        info = image.get(topic) if isinstance(topic, str) else image.by_id(topic)
        p = info.partition(index) if info is not None else None
        if p is None or p.leader < 0:
            continue
        leaders[(topic, index)] = (p.leader, p.leader_epoch)
        reg = image.brokers.get(p.leader)
        endpoint = reg.endpoint(listener) if reg is not None else None
        if endpoint is not None:
            nodes[p.leader] = (p.leader, *endpoint, reg.rack)
    return (leaders, list(nodes.values())) if leaders else None
