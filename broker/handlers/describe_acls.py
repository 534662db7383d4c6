"""DescribeAcls (key 29): the ACLs a filter matches, from this broker's metadata image, grouped by resource pattern
(Kafka's DescribeAclsResponse.aclsResources). SECURITY_DISABLED without an authorizer, as in Kafka."""
from __future__ import annotations

from broker.security.authorization import authorize
from metadata.acl_control import AclBindingFilter, by_resource, matching_acls
from metadata.acls import CLUSTER_NAME, AclOperation, ResourceType
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 29
VERSIONS = (1, 3)
DECODABLE = (1, 3)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    out = {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": []}
    f = AclBindingFilter(int(body.resource_type_filter), body.resource_name_filter, int(body.pattern_type_filter),
                         body.principal_filter, body.host_filter, int(body.operation), int(body.permission_type))
    if not authorize(broker, req, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        out.update(error_code=ErrorCode.cluster_authorization_failed, error_message="Cluster authorization failed.")
    elif not broker.config.get("authorizer.class.name"):
        out.update(error_code=ErrorCode.security_disabled, error_message="No Authorizer is configured on the broker")
    elif f.unknown_part() is not None:     # Kafka refuses such a request when it parses it
        out.update(error_code=ErrorCode.invalid_request, error_message="DescribeAclsRequest contains UNKNOWN elements")
    else:
        out["resources"] = [
            {"resource_type": rtype, "resource_name": name, "pattern_type": ptype,
             "acls": [{"principal": a.principal, "host": a.host, "operation": a.operation,
                       "permission_type": a.permission_type} for a in acls]}
            for (rtype, name, ptype), acls in by_resource(matching_acls(broker.topics.image, f)).items()]
    return kio_codec.encode_response(API_KEY, v, out)
