"""Changing configs (Kafka's ConfigAdminManager): the one path behind IncrementalAlterConfigs and the legacy
AlterConfigs, for TOPIC, BROKER and GROUP resources. Each change is validated, then written to the metadata log as
ConfigRecords; the metadata publisher applies it on every broker (topic logs reconfigured, dynamic broker configs
layered over server.properties, group configs handed to the group coordinator). Error codes and messages follow
Kafka's."""
from __future__ import annotations

from dataclasses import replace

from broker.config import DYNAMIC_BROKER_CONFIGS
from broker.groups.consumer.consumer_group import CONSUMER_DEFAULTS
from broker.topic_admin import AdminError, submit, validate_configs, validate_remote_storage
from metadata.records import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, ConfigRecord
from protocol.errors import ErrorCode
from storage.log.log_config import TOPIC_CONFIGS, LogConfig, parse_value

TYPE_NAMES = {TOPIC_RESOURCE: "TOPIC", BROKER_RESOURCE: "BROKER", GROUP_RESOURCE: "GROUP"}

# KIP-848 group configs (Kafka's GroupConfig), each with the broker config that is its default and its bounds
GROUP_CONFIGS: dict[str, tuple[str, str, str]] = {
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms",
                                       "group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
}
_LIST_CONFIGS = {"cleanup.policy", "log.cleanup.policy"}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def describe_resource(rtype: int, name: str) -> str:
    return f"ConfigResource(type={TYPE_NAMES.get(rtype, rtype)}, name='{name}')"


def group_default(config, name: str) -> str:
    key = GROUP_CONFIGS[name][0]
    return config.get(key) or CONSUMER_DEFAULTS[key]


def current_configs(image, rtype: int, name: str) -> dict[str, str]:
    """The resource's dynamic configs in `image` (a topic's overrides, a broker's or the cluster default's dynamic
    configs, a group's configs)."""
    if rtype == TOPIC_RESOURCE:
        info = image.get(name)
        if info is None:
            raise AdminError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        return dict(info.configs)
    if rtype == BROKER_RESOURCE:
        if name != "" and not name.isdigit():
            raise AdminError(ErrorCode.invalid_request, f"Unexpected broker id {name}: a broker id or empty (the "
                                                        f"cluster-wide default) is expected")
        return dict(image.broker_configs.get(name, {}))
    if rtype == GROUP_RESOURCE:
        if not name:
            raise AdminError(ErrorCode.invalid_request, "The group id must not be empty")
        return dict(image.group_configs.get(name, {}))
    raise AdminError(ErrorCode.invalid_request, f"AlterConfigs is only supported for topics, brokers and groups, "
                                                f"but resource type is {rtype}")


def apply_ops(current: dict[str, str], ops) -> dict[str, str | None]:
    """IncrementalAlterConfigs' SET, DELETE, APPEND and SUBTRACT on a resource's dynamic configs."""
    new: dict[str, str | None] = dict(current)
    names = [op.name for op in ops]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise AdminError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {sorted(dup)}")
    for op in ops:
        if op.config_operation == SET:
            new[op.name] = op.value
        elif op.config_operation == DELETE:
            new.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            if op.name not in _LIST_CONFIGS:
                raise AdminError(ErrorCode.invalid_config, f"Config value append/subtract is not allowed for config "
                                                           f"{op.name} as it is not a list type")
            d = TOPIC_CONFIGS["cleanup.policy"]
            items = [x for x in str(new.get(op.name) or d.default).split(",") if x]
            for x in (op.value or "").split(","):
                if op.config_operation == APPEND and x and x not in items:
                    items.append(x)
                elif op.config_operation == SUBTRACT and x in items:
                    items.remove(x)
            new[op.name] = ",".join(items)
        else:
            raise AdminError(ErrorCode.invalid_request, f"Unknown config operation {op.config_operation}")
    return new


def alter(broker, image, rtype: int, name: str, new_configs, validate_only: bool) -> list:
    """The records that make `new_configs(current)` the resource's dynamic configs in `image`, after validation
    (none when only validating); raises AdminError."""
    current = current_configs(image, rtype, name)
    new = new_configs(current)
    if rtype == TOPIC_RESOURCE:
        new = validate_configs(new)
        validate_remote_storage(broker, name, new, current)
        try:
            broker.config.log_config(new)
        except ValueError as e:
            raise AdminError(ErrorCode.invalid_config, str(e)) from None
    elif rtype == BROKER_RESOURCE:
        new = _validate_broker(broker, name, new)
    else:
        new = _validate_group(broker, new)
    changes = [ConfigRecord(rtype, name, k, v) for k, v in sorted(new.items()) if current.get(k) != v]
    changes += [ConfigRecord(rtype, name, k, None) for k in sorted(current) if k not in new]
    return [] if validate_only else changes      # the metadata publisher applies them on every broker


async def alter_all(broker, resources, new_configs, validate_only: bool) -> list[dict]:
    """The per-resource results of an (Incremental)AlterConfigs request: `new_configs(resource, current)` gives the
    resource's dynamic configs after the request, from the ops or the full set the API carries. Each resource is one
    controller operation, so it changes the configs as they are when it runs."""
    out = []
    for r in resources:
        res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name}
        try:
            await submit(broker, lambda image, r=r: (alter(broker, image, r.resource_type, r.resource_name,
                                                           lambda current: new_configs(r, current), validate_only),
                                                     None))
        except AdminError as e:
            res.update(error_code=e.code, error_message=str(e))
        out.append(res)
    return out


def _validate_broker(broker, name: str, new: dict[str, str | None]) -> dict[str, str]:
    """Kafka's DynamicBrokerConfig.validate: read-only and unknown names and bad values are INVALID_REQUEST with
    the resource and the keys named. (Kafka stores unknown names for plugins; Strata has none, so a typo fails.)"""
    what = describe_resource(BROKER_RESOURCE, name)
    static = sorted(k for k in new if k not in DYNAMIC_BROKER_CONFIGS)
    if static:
        raise AdminError(ErrorCode.invalid_request, f"Invalid config value for resource {what}: Cannot update these "
                                                    f"configs dynamically: Set({', '.join(static)})")
    nulls = sorted(k for k, v in new.items() if v is None)
    if nulls:
        raise AdminError(ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}")
    out = {k: str(v).strip() for k, v in new.items()}
    try:
        for k in ("log.retention.hours", "log.retention.minutes", "log.roll.hours"):
            if k in out and not out[k].lstrip("-").isdigit():
                raise ValueError(f"Invalid value {out[k]} for configuration {k}: Not a number of type INT")
        by_broker_name = {d.broker_name: d for d in TOPIC_CONFIGS.values()}
        for k, v in out.items():
            if k in by_broker_name:              # named as the operator named it (message.max.bytes, not max.message.bytes)
                parse_value(replace(by_broker_name[k], name=k), v)
        merged = {**broker.config.props, **out}
        LogConfig.resolve(type(broker.config)(merged).log_defaults(), {})
    except ValueError as e:
        raise AdminError(ErrorCode.invalid_request, f"Invalid config value for resource {what}: {e}") from None
    return out


def _validate_group(broker, new: dict[str, str | None]) -> dict[str, str]:
    """Kafka's GroupConfig.validate: known names, integers within the broker's min/max bounds (INVALID_CONFIG)."""
    out = {}
    for k, v in new.items():
        if k not in GROUP_CONFIGS:
            raise AdminError(ErrorCode.invalid_config, f"Unknown group config name: {k}")
        try:
            value = int(str(v).strip())
        except ValueError:
            raise AdminError(ErrorCode.invalid_config, f"Invalid value {v} for configuration {k}: Not a number of "
                                                       f"type INT") from None
        _, lo_key, hi_key = GROUP_CONFIGS[k]
        lo = int(broker.config.get(lo_key) or CONSUMER_DEFAULTS[lo_key])
        hi = int(broker.config.get(hi_key) or CONSUMER_DEFAULTS[hi_key])
        if not lo <= value <= hi:
            raise AdminError(ErrorCode.invalid_config, f"{k} must be greater than or equal to {lo_key} ({lo}) and "
                                                       f"less than or equal to {hi_key} ({hi})")
        out[k] = str(value)
    return out
