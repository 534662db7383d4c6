"""DescribeConfigs (key 32): topic configs (override, broker default or Kafka default) and broker configs."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from broker.config import BROKER_DEFAULTS
from protocol import kio_codec
from storage.log.log_config import TOPIC_CONFIGS
from protocol.errors import ErrorCode

API_KEY = 32
VERSIONS = (1, 4)
DECODABLE = (1, 4)

TOPIC, BROKER = 2, 4
# ConfigSource values
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# ConfigType values
_TYPE = {bool: 1, str: 2, int: 5, float: 6}


def _fmt(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def topic_config_entries(broker, overrides: dict[str, str]) -> list[dict]:
    resolved = broker.config.log_config(overrides)
    defaults = broker.config.log_defaults()
    out = []
    for name, d in TOPIC_CONFIGS.items():
        synonyms = []
        if name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
            synonyms.append({"name": name, "value": overrides[name], "source": DYNAMIC_TOPIC_CONFIG})
        else:
            source = STATIC_BROKER_CONFIG if d.broker_name in defaults else DEFAULT_CONFIG
        if d.broker_name in defaults:
            synonyms.append({"name": d.broker_name, "value": defaults[d.broker_name], "source": STATIC_BROKER_CONFIG})
        synonyms.append({"name": d.broker_name, "value": _fmt(d.default), "source": DEFAULT_CONFIG})
        out.append({"name": name, "value": _fmt(resolved.get(name)), "read_only": False, "config_source": source,
                    "is_sensitive": False, "is_default": source == DEFAULT_CONFIG, "synonyms": synonyms,
                    "config_type": _TYPE[d.kind], "documentation": None})
    return out


STORE_URL = "remote.log.storage.manager.store.url"


def absolute_store_url(url: str) -> str:
    """`file://./x` is relative to the broker's working directory, which clients reading the store directly (the
    Spark connector) do not share: report it as `file:///<abs>/x`. Other URLs are returned unchanged."""
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc in ("", "localhost"):
        return url
    return "file://" + quote(str(Path(parts.netloc + unquote(parts.path)).resolve()))


_SENSITIVE_WORDS = ("secret", "password", "token", "access.key", "credential")


def is_sensitive(name: str) -> bool:
    """Kafka answers PASSWORD-type configs with a null value and isSensitive=true; Strata's secrets are the object
    store credentials (`remote.log.storage.manager.store.secret.access.key` and the like)."""
    return any(w in name for w in _SENSITIVE_WORDS)


def _broker_entries(broker) -> list[dict]:
    out = []
    for name in sorted(set(BROKER_DEFAULTS) | set(broker.config.props)):
        explicit = name in broker.config.props
        value = broker.config.get(name)
        if name == STORE_URL and value:
            value = absolute_store_url(value)
        sensitive = is_sensitive(name)
        out.append({"name": name, "value": None if sensitive else value, "read_only": True,
                    "config_source": STATIC_BROKER_CONFIG if explicit else DEFAULT_CONFIG, "is_sensitive": sensitive,
                    "is_default": not explicit, "synonyms": [], "config_type": 2, "documentation": None})
    return out


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    results = []
    for r in body.resources:
        res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name, "configs": []}
        if r.resource_type == TOPIC:
            info = broker.topics.get(r.resource_name)
            if info is None:
                res.update(error_code=ErrorCode.unknown_topic_or_partition,
                           error_message=f"Topic {r.resource_name} does not exist")
            else:
                res["configs"] = topic_config_entries(broker, info.configs)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(broker.node_id)):
                res.update(error_code=ErrorCode.invalid_request, error_message=f"Unexpected broker id {r.resource_name}")
            else:
                res["configs"] = _broker_entries(broker)
        else:
            res.update(error_code=ErrorCode.invalid_request, error_message=f"Unsupported resource type {r.resource_type}")
        keys = r.configuration_keys
        if keys is not None:
            res["configs"] = [c for c in res["configs"] if c["name"] in keys]
        if not getattr(body, "include_synonyms", False):
            for c in res["configs"]:
                c["synonyms"] = []
        results.append(res)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "results": results})
