"""DescribeGroups (key 15): state, protocol and members; member metadata and assignments only while Stable.
An unknown group is reported as Dead (v0-5) or ErrorCode.group_id_not_found (v6+, KIP-1043)."""
from __future__ import annotations

from broker.groups.classic.group_metadata import DEAD
from broker.security.authorization import (DESCRIBE, GROUP, GROUP_DENIED, NOT_REQUESTED, authorize,
                                           authorized_operations)
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 15
VERSIONS = (0, 6)
DECODABLE = (0, 6)



def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    with_ops = v >= 3 and getattr(body, "include_authorized_operations", False)
    out, refused = [], []
    for group_id in body.groups:
        if not authorize(broker, req, DESCRIBE, GROUP, group_id):     # DescribeGroupsResponse.groupError
            refused.append({"error_code": GROUP_DENIED, "error_message": None, "group_id": group_id,
                            "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                            "authorized_operations": NOT_REQUESTED})
            continue
        s = broker.groups.describe_group(group_id)
        err, message = s.error, None
        if err == ErrorCode.group_id_not_found:
            if v >= 6:
                message = f"Group {group_id} not found."
            else:
                err = 0
        out.append({
            "error_code": err, "error_message": message, "group_id": group_id,
            "group_state": s.state if err != ErrorCode.group_id_not_found else DEAD,
            "protocol_type": s.protocol_type, "protocol_data": s.protocol_name,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata, "member_assignment": m.assignment} for m in s.members],
            "authorized_operations": authorized_operations(broker, req, GROUP, group_id) if with_ops and not err
            else NOT_REQUESTED,
        })
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "groups": refused + out})
