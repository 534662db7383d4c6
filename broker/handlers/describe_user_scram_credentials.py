"""DescribeUserScramCredentials (key 50): each user's SCRAM mechanisms and iteration counts (never keys or salts),
from this broker's metadata image, as Kafka's ScramImage.describe answers them."""
from __future__ import annotations

from broker.security.authorization import authorize
from metadata.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata.scram_control import describe_credentials
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 50
VERSIONS = (0, 0)
DECODABLE = (0, 0)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    named = None if body.users is None else [u.name for u in body.users]
    out = {"throttle_time": 0, "error_code": 0, "error_message": None, "results": []}
    if not authorize(broker, req, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        failed = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        out.update(error_code=failed[0], error_message=failed[1])
        results = [(name, *failed, []) for name in named or []]
    else:
        results = describe_credentials(broker.topics.image, named)
    out["results"] = [{"user": user, "error_code": code, "error_message": message,
                       "credential_infos": [{"mechanism": m, "iterations": i} for m, i in infos]}
                      for user, code, message, infos in results]
    return kio_codec.encode_response(API_KEY, v, out)
