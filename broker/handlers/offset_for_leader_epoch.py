"""OffsetForLeaderEpoch (key 23, KIP-101/320): for each partition, the largest leader epoch at or below the requested
one and the offset where it ends (the log end for the latest epoch), as Kafka's Partition.lastOffsetForLeaderEpoch
answers. Consumers (replica -1) use it to validate their position after a leader change (KIP-320); an epoch the log
does not know is (-1, -1) with no error. The leader alone answers; current_leader_epoch is checked as in Fetch,
except that only -1 means "not checked" here (Kafka takes any other negative epoch as an old one: FENCED).

Strata's followers find divergence through Fetch's diverging_epoch (KIP-595 style) and never send this request.
Versions 2-4, as Kafka 4 (KIP-896 removed 0 and 1).
"""
from __future__ import annotations

from broker.security.authorization import CLUSTER_ACTION, DESCRIBE, TOPIC_DENIED, authorize_cluster, name_checker
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 23
VERSIONS = (2, 4)
DECODABLE = (2, 4)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    topics = []
    # Kafka (KIP-320): CLUSTER_ACTION on the cluster (a follower), else DESCRIBE on each topic (a consumer)
    describable = None if authorize_cluster(broker, req, CLUSTER_ACTION) else name_checker(broker, req, DESCRIBE)
    for t in body.topics:
        parts = []
        denied = describable is not None and not describable(t.topic)
        for p in t.partitions:
            entry = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
            part = broker.replicas.get(t.topic, p.partition) if not denied else None
            if denied:
                entry["error_code"] = TOPIC_DENIED
            elif part is None:
                entry["error_code"] = broker.replicas.missing_error(t.topic, p.partition)
            elif err := part.not_leader_error() or check_current_epoch(part, p.current_leader_epoch):
                entry["error_code"] = err
            else:
                epoch, end = part.last_offset_for_leader_epoch(p.leader_epoch)
                if end >= 0:
                    entry.update(leader_epoch=epoch, end_offset=end)
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})


def check_current_epoch(part, current_leader_epoch: int) -> int:
    """current_leader_epoch as Kafka checks it in OffsetForLeaderEpoch and ListOffsets: -1 is "not checked", any
    other negative epoch an old one (FENCED_LEADER_EPOCH)."""
    if current_leader_epoch < -1:
        return ErrorCode.fenced_leader_epoch
    return part.check_leader_epoch(current_leader_epoch)
