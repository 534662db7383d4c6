"""What handlers call to authorize a request (Kafka's AuthHelper): the request's principal and client address against
the broker's authorizer and the ACLs of its current metadata image.

Without an authorizer (`authorizer.class.name` empty) every check is one attribute test and allows, and the KIP-430
bitfields list every operation the resource type supports, as Kafka's AuthHelper.authorizedOperations answers then.
"""
from __future__ import annotations

from typing import Callable, Iterable

from broker.security.authorizer import ALL_SUPPORTED, java_host
from metadata.acls import CLUSTER_NAME, AclOperation, ResourceType
from protocol.errors import ErrorCode

NOT_REQUESTED = -2147483648        # an authorized-operations field the request did not ask for (INT32_MIN)

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                           ResourceType.TRANSACTIONAL_ID)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                                AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE)
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE)

# the errors Kafka answers a refusal with, by resource type (AclEntry.authorizationError)
TOPIC_DENIED = ErrorCode.topic_authorization_failed                       # 29
GROUP_DENIED = ErrorCode.group_authorization_failed                       # 30
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed                   # 31
TRANSACTIONAL_ID_DENIED = ErrorCode.transactional_id_authorization_failed  # 53
DENIED_MESSAGE = {TOPIC_DENIED: "Topic authorization failed.", GROUP_DENIED: "Group authorization failed.",
                  CLUSTER_DENIED: "Cluster authorization failed.",
                  TRANSACTIONAL_ID_DENIED: "Transactional Id authorization failed."}

# config resource types (ConfigResource.Type): TOPIC 2, BROKER 4, BROKER_LOGGER 8, CLIENT_METRICS 16, GROUP 32
_CONFIG_RESOURCE = {2: (TOPIC, TOPIC_DENIED), 4: (CLUSTER, CLUSTER_DENIED), 8: (CLUSTER, CLUSTER_DENIED),
                    16: (CLUSTER, CLUSTER_DENIED), 32: (GROUP, GROUP_DENIED)}


def authorizer_of(broker):
    """The broker's authorizer with its image's ACLs loaded, or None when none is configured."""
    az = getattr(broker, "authorizer", None)
    if az is not None:
        az.load(getattr(broker.topics.image, "acls", None))
    return az


def _host(req) -> str:
    h = req.client_host or ""
    return java_host(h[1:] if h.startswith("/") else h)


def authorize(broker, req, operation: int, resource_type: int, name: str) -> bool:
    """Kafka's AuthHelper.authorize: may the request's principal do `operation` on the literal resource?"""
    az = getattr(broker, "authorizer", None)
    if az is None:
        return True
    az.load(getattr(broker.topics.image, "acls", None))
    return name is not None and az.authorize(req.principal, _host(req), operation, resource_type, name)


def authorize_cluster(broker, req, operation: int) -> bool:
    return authorize(broker, req, operation, CLUSTER, CLUSTER_NAME)


def filter_authorized(broker, req, operation: int, resource_type: int, names: Iterable[str]) -> set[str]:
    """Kafka's filterByAuthorized: the distinct names the principal may do `operation` on (each checked once)."""
    wanted = set(names)
    az = authorizer_of(broker)
    if az is None:
        return wanted
    principal, host = req.principal, _host(req)
    return {n for n in wanted if n is not None and az.authorize(principal, host, operation, resource_type, n)}


def name_checker(broker, req, operation: int, resource_type: int = TOPIC) -> Callable[[str], bool] | None:
    """For hot paths: None without an authorizer (nothing to check), else name -> allowed, each name decided once
    per request however many partitions name it."""
    az = authorizer_of(broker)
    if az is None:
        return None
    principal, host = req.principal, _host(req)
    seen: dict[str, bool] = {}

    def allowed(name: str) -> bool:
        ok = seen.get(name)
        if ok is None:
            ok = seen[name] = name is not None and az.authorize(principal, host, operation, resource_type, name)
        return ok
    return allowed


def authorize_by_resource_type(broker, req, operation: int, resource_type: int) -> bool:
    """Kafka's AuthHelper.authorizeByResourceType: may the principal do `operation` on some resource of the type?"""
    az = authorizer_of(broker)
    return az is None or az.authorize_by_resource_type(req.principal, _host(req), operation, resource_type)


def authorized_operations(broker, req, resource_type: int, name: str) -> int:
    """KIP-430: the bitfield of operations the principal may do on the resource (all supported ones without an
    authorizer)."""
    az = authorizer_of(broker)
    if az is None:
        return ALL_SUPPORTED[resource_type]
    return az.authorized_operations(req.principal, _host(req), resource_type, name)


def cluster_authorized_operations(broker, req) -> int:
    """KIP-430/700's cluster_authorized_operations as Kafka answers it: 0 without DESCRIBE on the cluster."""
    if not authorize_cluster(broker, req, DESCRIBE):
        return 0
    return authorized_operations(broker, req, CLUSTER, CLUSTER_NAME)


def config_resource_error(broker, req, operation: int, config_type: int, name: str) -> int:
    """DescribeConfigs / (Incremental)AlterConfigs (Kafka's ConfigHelper and ControllerApis.authorizeAlterResource):
    0 when allowed, else the error for the config resource type (BROKER, BROKER_LOGGER and CLIENT_METRICS are
    checked on the cluster). A type Kafka does not know is left to the handler (0)."""
    target = _CONFIG_RESOURCE.get(config_type)
    if target is None:
        return 0
    resource_type, error = target
    allowed = authorize(broker, req, operation, resource_type, CLUSTER_NAME if resource_type == CLUSTER else name)
    return 0 if allowed else error


def refused_config_resources(broker, req, operation: int, resources) -> dict[int, dict]:
    """(Incremental)AlterConfigs: {index in the request: response entry} for each resource the principal may not
    alter (Kafka's ControllerApis.authorizeAlterResource, with the error's default message); {} without an
    authorizer."""
    if getattr(broker, "authorizer", None) is None:
        return {}
    out = {}
    for i, r in enumerate(resources):
        denied = config_resource_error(broker, req, operation, r.resource_type, r.resource_name)
        if denied:
            out[i] = {"error_code": denied, "error_message": DENIED_MESSAGE[denied], "resource_type": r.resource_type,
                      "resource_name": r.resource_name}
    return out


def merge_refused(refused: dict[int, dict], answered: list) -> list:
    """The answers of the allowed resources with the refusals put back at their places in the request."""
    if not refused:
        return answered
    rest = iter(answered)
    return [refused[i] if i in refused else next(rest) for i in range(len(refused) + len(answered))]
