"""DescribeClientQuotas (key 48): the quotas of the entities a filter selects, from this broker's metadata image,
with Kafka's ClientQuotasImage.describe semantics (metadata/quota_control.py). Needs DESCRIBE_CONFIGS on the
cluster, as in Kafka."""
from __future__ import annotations

from broker.security.authorization import CLUSTER_DENIED, DENIED_MESSAGE, authorize_cluster
from metadata.acls import AclOperation
from metadata.quota_control import DescribeError, describe_quotas
from protocol import kio_codec

API_KEY = 48
VERSIONS = (0, 1)
DECODABLE = (0, 1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    out = {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": None}
    if not authorize_cluster(broker, req, AclOperation.DESCRIBE_CONFIGS):
        out.update(error_code=CLUSTER_DENIED, error_message=DENIED_MESSAGE[CLUSTER_DENIED])
        return kio_codec.encode_response(API_KEY, v, out)
    try:
        found = describe_quotas(broker.topics.image,
                                [(c.entity_type, int(c.match_type), c.match) for c in body.components],
                                bool(body.strict))
    except DescribeError as e:
        out.update(error_code=e.code, error_message=str(e))
        return kio_codec.encode_response(API_KEY, v, out)
    out["entries"] = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                       "values": [{"key": k, "value": value} for k, value in values.items()]}
                      for entity, values in found]
    return kio_codec.encode_response(API_KEY, v, out)
