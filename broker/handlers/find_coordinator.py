"""FindCoordinator (key 10): a group's coordinator is the leader of its `__consumer_offsets` partition in the metadata
image (COORDINATOR_NOT_AVAILABLE while that topic does not exist, as in Kafka); a transactional id's is the leader of its
`__transaction_state` partition, a topic created by the first such request. v4+ batches several keys in `coordinator_keys`."""
from __future__ import annotations

from broker.groups.metadata_store import OFFSETS_TOPIC, partition_for
from broker.security.authorization import DENIED_MESSAGE, DESCRIBE, GROUP_DENIED, TRANSACTIONAL_ID_DENIED, authorize
from broker.transactions.coordinator import TXN_TOPIC
from metadata.acls import ResourceType
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 10
VERSIONS = (0, 6)
DECODABLE = (0, 6)

GROUP = 0
TRANSACTION = 1


def _coordinator(broker, key_type: int, key: str, listener: str = "") -> dict:
    if key_type == GROUP:
        topic, p = OFFSETS_TOPIC, None
    elif key_type == TRANSACTION:
        topic = TXN_TOPIC
        if broker.topics.get(TXN_TOPIC) is None:
            broker.ensure_transaction_topic()      # created on first use, as Kafka does; the client retries
    else:
        return _error(ErrorCode.invalid_request, f"Unknown coordinator type {key_type}")
    image = broker.topics.image
    info = image.get(topic)
    p = info.partition(partition_for(key, info.partitions)) if info is not None else None
    node = image.brokers.get(p.leader) if p is not None else None
    endpoint = node.endpoint(listener) if node is not None else None
    if endpoint is None:
        return _error(ErrorCode.coordinator_not_available, "The coordinator is not available.")
    host, port = endpoint
    return {"node_id": node.broker_id, "host": host, "port": port, "error_code": 0, "error_message": None}


def _authorized(broker, req, key_type: int, key: str, v: int) -> dict:
    """Kafka's getCoordinator: DESCRIBE on the group or transactional id first (no coordinator named otherwise; the
    error message only in the v0-3 error response)."""
    denied = 0
    if key_type == GROUP and not authorize(broker, req, DESCRIBE, ResourceType.GROUP, key):
        denied = GROUP_DENIED
    elif key_type == TRANSACTION and not authorize(broker, req, DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        denied = TRANSACTIONAL_ID_DENIED
    if denied:
        return _error(denied, DENIED_MESSAGE[denied] if v < 4 else None)
    return _coordinator(broker, key_type, key, req.listener)


def _error(code: int, message: str | None) -> dict:
    return {"node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    key_type = int(getattr(body, "key_type", GROUP))
    if v >= 4:
        resp = {"throttle_time": 0,
                "coordinators": [{"key": key, **_authorized(broker, req, key_type, key, v)}
                                 for key in body.coordinator_keys]}
    else:
        resp = {"throttle_time": 0, **_authorized(broker, req, key_type, body.key, v)}
    return kio_codec.encode_response(API_KEY, v, resp)
