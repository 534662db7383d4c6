"""DeleteGroups (key 42): removes Empty groups and their offsets; NON_EMPTY_GROUP while members remain."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 42
VERSIONS = (0, 2)
DECODABLE = (0, 2)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    names = list(dict.fromkeys(body.groups_names))
    errors = broker.groups.delete_groups(names)
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "results": [{"group_id": g, "error_code": errors[g]} for g in names]})
