"""OffsetFetch (key 9): committed offsets of one group (v1-7) or several (v8+); null topics mean all of them.
A partition without a committed offset answers offset -1.

Advertised from v0 like Produce/Fetch (librdkafka 2.0.2 feature detection); kio decodes v1+.
"""
from __future__ import annotations

from broker.security.authorization import (DESCRIBE, GROUP, GROUP_DENIED, TOPIC_DENIED, authorize,
                                           name_checker)
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 9
VERSIONS = (0, 9)
DECODABLE = (1, 9)


def _fetch(broker, req, group_id, topics, member_id=None, member_epoch=-1, require_stable=False):
    """-> (group error, [topic dicts]) for one group; `topics` are request topics or None for all. member_id and
    member_epoch (v9+) are checked for consumer-protocol (KIP-848) groups. `require_stable` (v7+, read_committed
    consumers): a partition with a transactional commit still open answers UNSTABLE_OFFSET_COMMIT (KIP-447).
    Authorization as Kafka's: DESCRIBE on the group, and only topics the principal may describe (the others, when
    named, answer TOPIC_AUTHORIZATION_FAILED; with all topics asked for, they are left out)."""
    describable = name_checker(broker, req, DESCRIBE)
    if not authorize(broker, req, DESCRIBE, GROUP, group_id):
        return GROUP_DENIED, [] if topics is None else [
            {"name": t.name, "partitions": [_unread(p, 0) for p in (getattr(t, "partition_indexes", None) or ())]}
            for t in topics]
    refused = []
    if describable is not None and topics is not None:
        refused = [{"name": t.name, "partitions": [_unread(p, TOPIC_DENIED)
                                                   for p in (getattr(t, "partition_indexes", None) or ())]}
                   for t in topics if not describable(t.name)]
        topics = [t for t in topics if describable(t.name)]
    if topics is None:
        partitions = None
    else:
        partitions = [(t.name, p) for t in topics for p in (getattr(t, "partition_indexes", None) or ())]
    err, found = broker.groups.fetch_offsets(group_id, partitions, member_id=member_id, member_epoch=member_epoch)
    if describable is not None and partitions is None:
        found = {tp: om for tp, om in found.items() if describable(tp[0])}
    by_topic: dict[str, list] = {}
    keys = partitions if partitions is not None else sorted(found)
    if topics is not None:
        for t in topics:   # keep requested topics even when they list no partitions
            by_topic.setdefault(t.name, [])
    for tp in keys:
        om = found.get(tp)
        unstable = require_stable and not err and broker.groups.has_pending_txn_offsets(group_id, tp)
        if unstable:
            om = None
        by_topic.setdefault(tp[0], []).append({
            "partition_index": tp[1],
            "committed_offset": om.offset if om is not None else -1,
            "committed_leader_epoch": om.leader_epoch if om is not None else -1,
            "metadata": om.metadata if om is not None else "",
            "error_code": ErrorCode.unstable_offset_commit if unstable else 0,
        })
    return err, [{"name": name, "partitions": parts} for name, parts in by_topic.items()] + refused


def _unread(index: int, error: int) -> dict:
    return {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
            "error_code": error}


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if v >= 8:
        groups = []
        for g in body.groups:
            err, topics = _fetch(broker, req, g.group_id, g.topics, getattr(g, "member_id", None),
                                 getattr(g, "member_epoch", -1), bool(body.require_stable))
            groups.append({"group_id": g.group_id, "error_code": err, "topics": [] if err else topics})
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "groups": groups})
    err, topics = _fetch(broker, req, body.group_id, body.topics, require_stable=bool(getattr(body, "require_stable",
                                                                                                 False)))
    if err and v < 2:
        # v1 has no top-level error: report it on every requested partition.
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = err
    elif err:
        topics = []
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": err, "topics": topics})
