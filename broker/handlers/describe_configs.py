"""DescribeConfigs (key 32): topic configs (override, broker default or Kafka default), broker configs (dynamic per
broker, dynamic cluster-wide default, server.properties or Kafka's default) and KIP-848 group configs."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from broker.config import BROKER_DEFAULTS, DYNAMIC_BROKER_CONFIGS, is_sensitive
from broker.config_admin import GROUP_CONFIGS, group_default
from broker.security.authorization import DENIED_MESSAGE, DESCRIBE_CONFIGS, config_resource_error
from protocol import kio_codec
from storage.log.log_config import TOPIC_CONFIGS
from protocol.errors import ErrorCode

API_KEY = 32
VERSIONS = (1, 4)
DECODABLE = (1, 4)

TOPIC, BROKER, GROUP = 2, 4, 32
# ConfigSource values
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = \
    1, 2, 3, 4, 5
GROUP_CONFIG = 8
SOURCES = {"DYNAMIC_BROKER_CONFIG": DYNAMIC_BROKER_CONFIG, "DYNAMIC_DEFAULT_BROKER_CONFIG":
           DYNAMIC_DEFAULT_BROKER_CONFIG, "STATIC_BROKER_CONFIG": STATIC_BROKER_CONFIG, "DEFAULT_CONFIG": DEFAULT_CONFIG}
# ConfigType values
_TYPE = {bool: 1, str: 2, int: 5, float: 6}


def _fmt(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the names of one setting in other units, most precise first, and
# Kafka's defaults of those names (None: no default of its own; the setting falls back to the next name).
_UNIT_GROUPS = (("log.roll.ms", "log.roll.hours"), ("log.retention.ms", "log.retention.minutes", "log.retention.hours"))
_GROUP_OF = {n: g for g in _UNIT_GROUPS for n in g}
_KAFKA_DEFAULTS = {"log.retention.ms": None, "log.retention.minutes": None, "log.retention.hours": "168",
                   "log.roll.ms": None, "log.roll.hours": "168", "log.flush.interval.ms": None,
                   # topic configs without a broker-level name in Kafka (Strata reads one, with no default of its own)
                   "remote.storage.enable": None, "remote.log.copy.disable": None,
                   "remote.log.delete.on.disable": None}


def _defaults() -> dict[str, str | None]:
    return {**{d.broker_name: _fmt(d.default) for d in TOPIC_CONFIGS.values()}, **BROKER_DEFAULTS, **_KAFKA_DEFAULTS}


def _synonyms(config, name: str, defaults: dict) -> list[dict]:
    """Kafka's configSynonyms: every layer (this broker's dynamic configs, the cluster-wide default, the static file,
    the default) over every name of the setting, then `dropWhile(_.name != name)`: a value in other units shows only
    once the asked name itself has one (kafka-configs.sh: `log.retention.ms=7200000 ... synonyms={DYNAMIC_BROKER_
    CONFIG:log.retention.ms=7200000, DEFAULT_CONFIG:log.retention.hours=168}`; with nothing set, `synonyms={}`)."""
    group = _GROUP_OF.get(name, (name,))
    hide = is_sensitive(name)
    out = [{"name": n, "value": None if hide else layer[n], "source": source}
           for layer, source in ((config.dynamic_broker, DYNAMIC_BROKER_CONFIG),
                                 (config.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
                                 (config.props, STATIC_BROKER_CONFIG)) for n in group if n in layer]
    out += [{"name": n, "value": None if hide else defaults[n], "source": DEFAULT_CONFIG}
            for n in group if defaults.get(n) is not None]
    while out and out[0]["name"] != name:
        out.pop(0)
    return out


def topic_config_entries(broker, overrides: dict[str, str]) -> list[dict]:
    config = broker.config
    resolved = config.log_config(overrides)
    defaults = _defaults()
    out = []
    for name, d in TOPIC_CONFIGS.items():
        synonyms = _synonyms(config, d.broker_name, defaults)
        source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
        if name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
            synonyms.insert(0, {"name": name, "value": overrides[name], "source": DYNAMIC_TOPIC_CONFIG})
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




def _broker_entries(broker) -> list[dict]:
    """This broker's configs, each from the layer that sets it, with the layers below as synonyms."""
    config = broker.config
    out = []
    defaults = _defaults()
    names = set(defaults) | set(config.props) | set(config.dynamic_default) | set(config.dynamic_broker)
    for name in sorted(names):
        synonyms = _synonyms(config, name, defaults)
        source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
        value = config.get(name) if source != DEFAULT_CONFIG else defaults.get(name)
        if value and (name == STORE_URL or (name.startswith("remote.wal.storage.") and name.endswith(".url"))):
            value = absolute_store_url(value)
        sensitive = is_sensitive(name)
        out.append(_entry(name, None if sensitive else value, source, name not in DYNAMIC_BROKER_CONFIGS,
                          sensitive, synonyms))
    return out


def _entry(name: str, value, source: int, read_only: bool, sensitive: bool = False, synonyms=()) -> dict:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_sensitive": sensitive, "is_default": source == DEFAULT_CONFIG, "synonyms": list(synonyms),
            "config_type": 2, "documentation": None}


def _broker_default_entries(broker) -> list[dict]:
    """The cluster-wide default resource (name ""): its dynamic configs only, each its own synonym, as Kafka answers
    (its createBrokerConfigEntry keeps only DYNAMIC_DEFAULT_BROKER_CONFIG synonyms for the default resource)."""
    return [_entry(k, v, DYNAMIC_DEFAULT_BROKER_CONFIG, False,
                   synonyms=[{"name": k, "value": v, "source": DYNAMIC_DEFAULT_BROKER_CONFIG}])
            for k, v in sorted(broker.topics.image.broker_configs.get("", {}).items())]


def _group_entries(broker, group_id: str) -> list[dict]:
    """A group's configs: its own (GROUP_CONFIG) or the broker's group.consumer.* default."""
    own = broker.topics.image.group_configs.get(group_id, {})
    out = []
    for name in GROUP_CONFIGS:
        e = _entry(name, own[name], GROUP_CONFIG, False) if name in own else \
            _entry(name, group_default(broker.config, name), DEFAULT_CONFIG, False)
        e["config_type"] = 3                # INT
        out.append(e)
    return out


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    results = []
    for r in body.resources:
        res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name, "configs": []}
        # Kafka's ConfigHelper: DESCRIBE_CONFIGS on the topic, the group, or the cluster for BROKER resources
        denied = config_resource_error(broker, req, DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
        if denied:
            res.update(error_code=denied, error_message=DENIED_MESSAGE[denied])
        elif r.resource_type == TOPIC:
            info = broker.topics.get(r.resource_name)
            if info is None:
                res.update(error_code=ErrorCode.unknown_topic_or_partition,
                           error_message=f"Topic {r.resource_name} does not exist")
            else:
                res["configs"] = topic_config_entries(broker, info.configs)
        elif r.resource_type == BROKER:
            if r.resource_name == "":
                res["configs"] = _broker_default_entries(broker)
            elif r.resource_name != str(broker.node_id):
                res.update(error_code=ErrorCode.invalid_request, error_message=f"Unexpected broker id, expected "
                           f"{broker.node_id}, but received {r.resource_name}")
            else:
                res["configs"] = _broker_entries(broker)
        elif r.resource_type == GROUP:
            if not r.resource_name:
                res.update(error_code=ErrorCode.invalid_request, error_message="The group id must not be empty")
            else:
                res["configs"] = _group_entries(broker, r.resource_name)
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
