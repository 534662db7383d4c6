"""DescribeClientQuotas (key 48): Strata enforces no client quotas yet, so every filter matches no entity and the
answer is an empty list, which is what Kafka answers when none are set. Kafka's kafka-configs.sh asks it before
describing a user's SCRAM credentials. Needs DESCRIBE_CONFIGS on the cluster, as in Kafka."""
from __future__ import annotations

from broker.security.authorization import CLUSTER_DENIED, DENIED_MESSAGE, authorize_cluster
from metadata.acls import AclOperation
from protocol import kio_codec

API_KEY = 48
VERSIONS = (0, 1)
DECODABLE = (0, 1)

_MATCH_TYPES = (0, 1, 2)     # EXACT, DEFAULT, SPECIFIED


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    error, message = 0, None
    if not authorize_cluster(broker, req, AclOperation.DESCRIBE_CONFIGS):
        error, message = CLUSTER_DENIED, DENIED_MESSAGE[CLUSTER_DENIED]
    elif any(c.match_type not in _MATCH_TYPES or (c.match_type == 0 and c.match is None) for c in body.components):
        error, message = 42, "Invalid match type or missing match for an EXACT component"   # INVALID_REQUEST
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": error, "error_message": message,
                                                  "entries": None if error else []})
