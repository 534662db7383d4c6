"""CreateAcls (key 30): new ACL bindings through the controller (metadata/acl_control.py), each validated as Kafka's
AclApis and AclControlManager do. Without an authorizer there is nothing to enforce ACLs, so the API answers
SECURITY_DISABLED as Kafka does. Versions 1-3 (kio has no v0; Kafka 4 dropped it too)."""
from __future__ import annotations

from broker.security.authorization import authorize
from broker.topic_admin import AdminError, submit
from metadata.acl_control import create_acls
from metadata.acls import CLUSTER_NAME, AclOperation, ResourceType, StandardAcl
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 30
VERSIONS = (1, 3)
DECODABLE = (1, 3)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    n = len(body.creations)
    if not authorize(broker, req, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = [(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")] * n
    elif not broker.config.get("authorizer.class.name"):
        results = [(ErrorCode.security_disabled, "No Authorizer is configured.")] * n
    else:
        bindings = [StandardAcl(int(c.resource_type), c.resource_name, int(c.resource_pattern_type), c.principal,
                                c.host, int(c.operation), int(c.permission_type)) for c in body.creations]
        try:
            results = await submit(broker, create_acls(bindings))
        except AdminError as e:
            results = [(e.code, str(e))] * n
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "results": [
        {"error_code": code, "error_message": message} for code, message in results]})
