"""FindCoordinator (key 10): a group's coordinator is the leader of its `__consumer_offsets` partition in the metadata
image (COORDINATOR_NOT_AVAILABLE while that topic does not exist, as in Kafka); transactional ids are this broker's
(no transaction coordinator yet). v4+ batches several keys in `coordinator_keys`."""
from __future__ import annotations

from broker.groups.metadata_store import OFFSETS_TOPIC, partition_for
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 10
VERSIONS = (0, 6)
DECODABLE = (0, 6)

GROUP = 0
TRANSACTION = 1


def _coordinator(broker, key_type: int, key: str) -> dict:
    if key_type == GROUP:
        image = broker.topics.image
        offsets = image.get(OFFSETS_TOPIC)
        p = offsets.partition(partition_for(key, offsets.partitions)) if offsets is not None else None
        node = image.brokers.get(p.leader) if p is not None else None
        if node is None:
            return _error(ErrorCode.coordinator_not_available, "The coordinator is not available.")
        host, port = node.endpoint()
        return {"node_id": node.broker_id, "host": host, "port": port, "error_code": 0, "error_message": None}
    if key_type == TRANSACTION:
        host, port = broker.config.advertised
        return {"node_id": broker.node_id, "host": host, "port": port, "error_code": 0, "error_message": None}
    return _error(ErrorCode.invalid_request, f"Unknown coordinator type {key_type}")


def _error(code: int, message: str) -> dict:
    return {"node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    key_type = int(getattr(body, "key_type", GROUP))
    if v >= 4:
        resp = {"throttle_time": 0,
                "coordinators": [{"key": key, **_coordinator(broker, key_type, key)} for key in body.coordinator_keys]}
    else:
        resp = {"throttle_time": 0, **_coordinator(broker, key_type, body.key)}
    return kio_codec.encode_response(API_KEY, v, resp)
