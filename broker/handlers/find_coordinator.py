"""FindCoordinator (key 10): this broker coordinates every group (key type 0) and every transactional id (key type
1); v4+ batches several keys in `coordinator_keys`."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 10
VERSIONS = (0, 6)
DECODABLE = (0, 6)

GROUP = 0
TRANSACTION = 1
INVALID_REQUEST = 42


def _coordinator(broker, key_type: int) -> dict:
    if key_type in (GROUP, TRANSACTION):
        host, port = broker.config.advertised
        return {"node_id": broker.node_id, "host": host, "port": port, "error_code": 0, "error_message": None}
    return {"node_id": -1, "host": "", "port": -1, "error_code": INVALID_REQUEST,
            "error_message": f"Unknown coordinator type {key_type}"}


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    key_type = int(getattr(body, "key_type", GROUP))
    if v >= 4:
        resp = {"throttle_time": 0,
                "coordinators": [{"key": key, **_coordinator(broker, key_type)} for key in body.coordinator_keys]}
    else:
        resp = {"throttle_time": 0, **_coordinator(broker, key_type)}
    return kio_codec.encode_response(API_KEY, v, resp)
