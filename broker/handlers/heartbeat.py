"""Heartbeat (key 12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
from __future__ import annotations

from broker.security.authorization import GROUP, GROUP_DENIED, READ, authorize
from protocol import kio_codec

API_KEY = 12
VERSIONS = (0, 4)
DECODABLE = (0, 4)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize(broker, req, READ, GROUP, body.group_id):
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": GROUP_DENIED})
    err = broker.groups.heartbeat(body.group_id, body.member_id, getattr(body, "group_instance_id", None),
                                  body.generation_id)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": err})
