"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on topic configs; applied to live logs."""
from __future__ import annotations

from broker.topic_admin import AdminError, submit, validate_configs, validate_remote_storage
from metadata.records import TOPIC_RESOURCE, ConfigRecord
from protocol import kio_codec
from storage.log.log_config import TOPIC_CONFIGS
from protocol.errors import ErrorCode

API_KEY = 44
VERSIONS = (0, 1)
DECODABLE = (0, 1)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC, BROKER = 2, 4
_LIST_CONFIGS = {"cleanup.policy"}


def _apply(current: dict[str, str], ops) -> dict[str, str]:
    new = dict(current)
    names = [op.name for op in ops]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise AdminError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {sorted(dup)}")
    for op in ops:
        if op.name not in TOPIC_CONFIGS:
            raise AdminError(ErrorCode.invalid_config, f"Unknown topic config name: {op.name}")
        if op.config_operation == SET:
            new[op.name] = op.value
        elif op.config_operation == DELETE:
            new.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            if op.name not in _LIST_CONFIGS:
                raise AdminError(ErrorCode.invalid_config, f"Config value append/subtract is not allowed for config {op.name} "
                                                 f"as it is not a list type")
            base = new.get(op.name, TOPIC_CONFIGS[op.name].default)
            items = [x for x in str(base).split(",") if x]
            for x in (op.value or "").split(","):
                if op.config_operation == APPEND and x and x not in items:
                    items.append(x)
                elif op.config_operation == SUBTRACT and x in items:
                    items.remove(x)
            new[op.name] = ",".join(items)
        else:
            raise AdminError(ErrorCode.invalid_request, f"Unknown config operation {op.config_operation}")
    return new


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    out = []
    for r in body.resources:
        res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name}
        try:
            if r.resource_type != TOPIC:
                raise AdminError(ErrorCode.invalid_request, "Only topic configs can be altered; broker configs are static")
            info = broker.topics.get(r.resource_name)
            if info is None:
                raise AdminError(ErrorCode.unknown_topic_or_partition, f"Topic {r.resource_name} does not exist")
            new = validate_configs(_apply(info.configs, r.configs))
            validate_remote_storage(broker, info.name, new, info.configs)
            try:
                broker.config.log_config(new)
            except ValueError as e:
                raise AdminError(ErrorCode.invalid_config, str(e)) from None
            if not body.validate_only:
                changes = [ConfigRecord(TOPIC_RESOURCE, info.name, k, v) for k, v in sorted(new.items())
                           if info.configs.get(k) != v]
                changes += [ConfigRecord(TOPIC_RESOURCE, info.name, k, None) for k in sorted(info.configs)
                            if k not in new]
                if changes:
                    await submit(broker, changes)      # the publisher reconfigures the logs
        except AdminError as e:
            res.update(error_code=e.code, error_message=str(e))
        out.append(res)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "responses": out})
