"""SyncGroup (key 14): the leader's assignment completes the rebalance; followers park until it arrives."""
from __future__ import annotations

from broker.groups.classic.group_metadata import SyncResult
from broker.security.authorization import GROUP, GROUP_DENIED, READ, authorize
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 14
VERSIONS = (0, 5)
DECODABLE = (0, 5)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    protocol_type = getattr(body, "protocol_type", None)
    protocol_name = getattr(body, "protocol_name", None)
    if v >= 5 and (protocol_type is None or protocol_name is None):
        return _encode(v, SyncResult(ErrorCode.inconsistent_group_protocol))   # both are mandatory from v5
    if not authorize(broker, req, READ, GROUP, body.group_id):
        return _encode(v, SyncResult(GROUP_DENIED))
    assignments = {}
    for a in body.assignments:
        assignments[a.member_id] = a.assignment
    fut = broker.groups.sync_group(body.group_id, body.generation_id, body.member_id,
                                   getattr(body, "group_instance_id", None), protocol_type, protocol_name, assignments)
    if fut.done():
        return _encode(v, fut.result())
    return _parked(v, fut)


async def _parked(v, fut):
    return _encode(v, await fut)


def _encode(v: int, r) -> bytes:
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": r.error, "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name, "assignment": r.assignment,
    })
