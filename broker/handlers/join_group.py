"""JoinGroup (key 11): parks until the group's rebalance completes (see broker/groups/classic/group_coordinator.py).

v4+ asks an unknown member to rejoin with a generated id (MEMBER_ID_REQUIRED, KIP-394); v5+ carries
group.instance.id (KIP-345); v9 lets a rejoining static leader skip the assignment (KIP-814).
"""
from __future__ import annotations

import datetime

from broker.security.authorization import GROUP, GROUP_DENIED, READ, authorize
from protocol import kio_codec

API_KEY = 11
VERSIONS = (0, 9)
DECODABLE = (0, 9)

_MS = datetime.timedelta(milliseconds=1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize(broker, req, READ, GROUP, body.group_id):
        return kio_codec.encode_response(API_KEY, v, {      # JoinGroupRequest.getErrorResponse
            "throttle_time": 0, "error_code": GROUP_DENIED, "generation_id": -1, "leader": "", "member_id": "",
            "protocol_name": None if v >= 7 else "", "members": []})
    session_ms = body.session_timeout // _MS
    rebalance_ms = body.rebalance_timeout // _MS if v >= 1 else session_ms
    fut = broker.groups.join_group(
        body.group_id, body.member_id, getattr(body, "group_instance_id", None), req.client_id or "",
        getattr(req, "client_host", None) or "", rebalance_ms, session_ms, body.protocol_type,
        [(p.name, p.metadata) for p in body.protocols], require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9, reason=getattr(body, "reason", None))
    if fut.done():
        return _encode(v, fut.result())
    return _parked(v, fut)


async def _parked(v, fut):
    return _encode(v, await fut)


def _encode(v: int, r) -> bytes:
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0,
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        # nullable from v7; Kafka writes "" before that
        "protocol_name": r.protocol_name if r.protocol_name is not None or v >= 7 else "",
        "leader": r.leader,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in r.members],
    })
