"""ListGroups (key 16): classic and consumer-protocol groups, filtered by state (v4+) and type (v5+,
case-insensitive); COORDINATOR_NOT_AVAILABLE before the group coordinator started and COORDINATOR_LOAD_IN_PROGRESS
while __consumer_offsets is still loading (as Kafka)."""
from __future__ import annotations

from broker.security.authorization import DESCRIBE, GROUP, authorize_cluster, name_checker
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 16
VERSIONS = (0, 5)
DECODABLE = (0, 5)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    err = ErrorCode.coordinator_not_available if not getattr(broker.groups, "active", True) else \
        ErrorCode.coordinator_load_in_progress if getattr(broker.groups, "loading", False) else 0
    if err:         # not started yet (a cluster member listens before), or loading: an empty list would be a lie
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": err, "groups": []})
    groups = broker.groups.list_groups(list(getattr(body, "states_filter", ()) or ()),
                                       list(getattr(body, "types_filter", ()) or ()))
    if not authorize_cluster(broker, req, DESCRIBE):       # without DESCRIBE on the cluster: the groups it may describe
        allowed = name_checker(broker, req, DESCRIBE, GROUP)
        groups = [g for g in groups if allowed(g.group_id)]
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": 0,
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
                    "group_type": g.group_type} for g in groups],
    })
