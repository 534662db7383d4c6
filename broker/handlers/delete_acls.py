"""DeleteAcls (key 31): each filter removes the ACLs it matches (Kafka's AclBindingFilter rules, ANY and MATCH
included) through the controller, and answers them. SECURITY_DISABLED without an authorizer, as in Kafka."""
from __future__ import annotations

from broker.security.authorization import authorize
from broker.topic_admin import AdminError, submit
from metadata.acl_control import AclBindingFilter, delete_acls
from metadata.acls import CLUSTER_NAME, AclOperation, ResourceType
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 31
VERSIONS = (1, 3)
DECODABLE = (1, 3)
FORWARDED_TO_CONTROLLER = True


def _matching(acl) -> dict:
    return {"error_code": 0, "error_message": None, "resource_type": acl.resource_type,
            "resource_name": acl.resource_name, "pattern_type": acl.pattern_type, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation, "permission_type": acl.permission_type}


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    n = len(body.filters)
    if not authorize(broker, req, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = [(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", [])] * n
    elif not broker.config.get("authorizer.class.name"):
        results = [(ErrorCode.security_disabled, "No Authorizer is configured.", [])] * n
    else:
        filters = [AclBindingFilter(int(f.resource_type_filter), f.resource_name_filter, int(f.pattern_type_filter),
                                    f.principal_filter, f.host_filter, int(f.operation), int(f.permission_type))
                   for f in body.filters]
        try:
            results = await submit(broker, delete_acls(filters))
        except AdminError as e:
            results = [(e.code, str(e), [])] * n
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": [_matching(a) for a in acls]}
        for code, message, acls in results]})
