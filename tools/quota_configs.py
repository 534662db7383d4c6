"""`strata configs` for client quotas (--entity-type clients, users or ips), as kafka-configs.sh does them
(Kafka's ConfigCommand.alterQuotaConfigs and describeQuotaConfigs): DescribeClientQuotas with a strict filter, then
AlterClientQuotas; the output is kafka-configs.sh's."""
from __future__ import annotations

from tools.admin_client import AdminClient, AdminError, error_name

ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
QUOTA_KEYS = {"users": ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"),
              "clients": ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                          "controller_mutation_rate"),
              "ips": ("connection_creation_rate",)}
_LABELS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def java_double(value: float) -> str:
    """Double.toString, as kafka-configs.sh prints quota values: 1024.0, 1.0E7, 1.5E-4."""
    if value != value or value in (float("inf"), float("-inf")):
        return {True: "NaN"}.get(value != value, "Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "e" not in text else f"{value:.17g}"
    mantissa, exponent = f"{value:.16e}".split("e")
    mantissa = repr(float(mantissa))
    return f"{mantissa}E{int(exponent)}"


async def describe(client: AdminClient, etype: str, name: str | None) -> dict:
    """{entity pairs: {key: value}} of the entities kafka-configs.sh would show (ClientQuotaFilter.containsOnly): one
    entity when named ("" is the default), every entity of the type alone otherwise."""
    component = {"entity_type": ENTITY_TYPES[etype], "match_type": 2 if name is None else 1 if name == "" else 0,
                 "match": name or None}
    resp = await client.send(48, 1, {"components": [component], "strict": True})
    if resp.error_code:
        raise AdminError(resp.error_message or error_name(resp.error_code))
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


async def describe_and_print(client: AdminClient, etype: str, name: str | None, out) -> None:
    for entity, values in (await describe(client, etype, name)).items():
        names = dict(entity)
        label = ", ".join(f"{_LABELS[t]} '{names[t]}'" if names[t] is not None else f"the default {_LABELS[t]}"
                          for t in ("user", "client-id", "ip") if t in names)
        entries = ", ".join(f"{k}={java_double(v)}" for k, v in values.items())
        print(f"Quota configs for {label} are {entries}", file=out)


async def alter(client: AdminClient, etype: str, name: str, add: dict[str, str], delete: list[str], out) -> None:
    if etype == "ips":
        unknown = [k for k in [*add, *delete] if k not in QUOTA_KEYS["ips"]]
        if unknown:
            raise AdminError(f"Only connection quota configs can be added for 'ips' using --bootstrap-server. "
                             f"Unexpected config names: {','.join(unknown)}")
    current = next(iter((await describe(client, etype, name)).values()), {})
    missing = [k for k in delete if k not in current]
    if missing:
        raise AdminError(f"Invalid config(s): {','.join(missing)}")
    ops = []
    for key, text in add.items():
        try:
            ops.append({"key": key, "value": float(text), "remove": False})
        except ValueError:
            raise AdminError(f"Cannot parse quota configuration value for {key}: {text}") from None
    ops += [{"key": key, "value": 0.0, "remove": True} for key in delete]
    resp = await client.send(49, 1, {"entries": [{"entity": [{"entity_type": ENTITY_TYPES[etype],
                                                                "entity_name": name or None}], "ops": ops}],
                                     "validate_only": False})
    for entry in resp.entries:
        if entry.error_code:
            raise AdminError(entry.error_message or error_name(entry.error_code))
    if name:
        print(f"Completed updating config for {etype[:-1]} {name}.", file=out)
    else:
        print(f"Completed updating default config for {etype} in the cluster.", file=out)
