"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on TOPIC, BROKER (per broker, or "" for the
cluster-wide default) and GROUP configs, through the metadata log (broker/config_admin.py)."""
from __future__ import annotations

from broker.config_admin import alter_all, apply_ops
from broker.security.authorization import ALTER_CONFIGS, merge_refused, refused_config_resources
from protocol import kio_codec

API_KEY = 44
VERSIONS = (0, 1)
DECODABLE = (0, 1)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    refused = refused_config_resources(broker, req, ALTER_CONFIGS, body.resources)     # ALTER_CONFIGS, as Kafka
    allowed = [r for i, r in enumerate(body.resources) if i not in refused]
    out = merge_refused(refused, await alter_all(broker, allowed, lambda r, current: apply_ops(current, r.configs),
                                                 body.validate_only))
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "responses": out})
