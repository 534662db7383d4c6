"""ConsumerGroupHeartbeat (key 68, KIP-848): joins, heartbeats and leaves a consumer-protocol group; the coordinator
answers with the member epoch and, when it changed (or on a full request), the member's assignment by topic id.
See broker/groups/consumer/consumer_group.py. v1 requires a client-generated member id (KIP-1082)."""
from __future__ import annotations

import datetime

from broker.security.authorization import GROUP, GROUP_DENIED, READ, authorize
from protocol import kio_codec

API_KEY = 68
VERSIONS = (0, 1)
DECODABLE = (0, 1)

_MS = datetime.timedelta(milliseconds=1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize(broker, req, READ, GROUP, body.group_id):       # ConsumerGroupHeartbeatRequest.getErrorResponse
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": GROUP_DENIED,
                                                      "member_epoch": 0, "heartbeat_interval": 0})
    owned = None if body.topic_partitions is None else \
        [(tp.topic_id, list(tp.partitions)) for tp in body.topic_partitions]
    names = body.subscribed_topic_names
    r = broker.groups.consumer.heartbeat(
        body.group_id, body.member_id, body.member_epoch, body.instance_id, body.rack_id,
        body.rebalance_timeout // _MS, None if names is None else list(names),
        getattr(body, "subscribed_topic_regex", None), body.server_assignor, owned,
        client_id=req.client_id or "", client_host=req.client_host or "", version=v)
    assignment = None if r.assignment is None else {"topic_partitions": [
        {"topic_id": topic_id, "partitions": sorted(parts)}
        for topic_id, parts in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))]}
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": r.error, "error_message": r.message, "member_id": r.member_id,
        "member_epoch": r.member_epoch, "heartbeat_interval": r.heartbeat_interval_ms, "assignment": assignment})
