"""DeleteGroups (key 42): removes Empty groups and their offsets; NON_EMPTY_GROUP while members remain."""
from __future__ import annotations

from broker.security.authorization import DELETE, GROUP, GROUP_DENIED, filter_authorized
from protocol import kio_codec

API_KEY = 42
VERSIONS = (0, 2)
DECODABLE = (0, 2)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    names = list(dict.fromkeys(body.groups_names))
    allowed = filter_authorized(broker, req, DELETE, GROUP, names)
    errors = broker.groups.delete_groups([g for g in names if g in allowed])
    results = [{"group_id": g, "error_code": errors[g]} for g in names if g in allowed]
    results += [{"group_id": g, "error_code": GROUP_DENIED} for g in names if g not in allowed]   # after, as Kafka
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "results": results})
