"""AlterConfigs (key 33), the legacy API librdkafka and older clients still call: it replaces a resource's whole set
of dynamic configs (names left out are removed), through the same path as IncrementalAlterConfigs."""
from __future__ import annotations

from broker.config_admin import alter_all
from broker.topic_admin import AdminError
from broker.security.authorization import ALTER_CONFIGS, merge_refused, refused_config_resources
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 33
VERSIONS = (0, 2)
DECODABLE = (0, 2)
FORWARDED_TO_CONTROLLER = True


def _full_set(r, _current) -> dict:
    names = [c.name for c in r.configs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise AdminError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {dup}")
    return {c.name: c.value for c in r.configs}


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    refused = refused_config_resources(broker, req, ALTER_CONFIGS, body.resources)     # ALTER_CONFIGS, as Kafka
    allowed = [r for i, r in enumerate(body.resources) if i not in refused]
    out = merge_refused(refused, await alter_all(broker, allowed, _full_set, body.validate_only))
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "responses": out})
