"""LeaveGroup (key 13): one member (v0-2) or a batch of members, by member id or group.instance.id (v3+)."""
from __future__ import annotations

from broker.security.authorization import GROUP, GROUP_DENIED, READ, authorize
from protocol import kio_codec

API_KEY = 13
VERSIONS = (0, 5)
DECODABLE = (0, 5)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize(broker, req, READ, GROUP, body.group_id):
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": GROUP_DENIED, "members": []})
    if v >= 3:
        members = [(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in body.members]
    else:
        members = [(body.member_id, None, None)]
    group_error, member_errors = broker.groups.leave_group(body.group_id, members)
    if v >= 3:
        resp = {"throttle_time": 0, "error_code": group_error,
                "members": [] if group_error else [
                    {"member_id": m[0], "group_instance_id": m[1], "error_code": e}
                    for m, e in zip(members, member_errors)]}
    else:
        resp = {"throttle_time": 0, "error_code": group_error or (member_errors[0] if member_errors else 0)}
    return kio_codec.encode_response(API_KEY, v, resp)
