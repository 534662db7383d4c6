"""Client quotas as the controller changes them (Kafka's ClientQuotaControlManager) and as DescribeClientQuotas reads
them (Kafka's ClientQuotasImage.describe). An entity is a set of (type, name) pairs, None naming the type's default;
the valid combinations and keys are Kafka's QuotaConfig ones.

Kafka's quirks are kept, since clients and tools see them: a duplicate key in one entity's ops answers "Ignoring
duplicate entity" (Kafka overwrites its first message), and an IP entity must be an address. Kafka also accepts a
host name it can resolve; resolving here would block the controller's event loop, so a name is refused.
"""
from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from metadata.image import MetadataImage, quota_entity
from metadata.records import ClientQuotaRecord
from protocol.errors import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE = "request_percentage", "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# QuotaConfig.userAndClientQuotaConfigs() / ipConfigs(): key -> ConfigDef type
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
                    CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}
_MAX = {"SHORT": (2 ** 15 - 1, "a SHORT"), "INT": (2 ** 31 - 1, "an INT"), "LONG": (2 ** 63 - 1, "a LONG")}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple  # ((type, name | None), ...) sorted by type, as the image keys it


@dataclass(frozen=True)
class QuotaAlteration:
    entity: list[tuple[str, str | None]]       # as the request sent it (a type may repeat: the last one counts,
                                               # as in Kafka's AlterClientQuotasRequest.entries)
    ops: list[tuple[str, float | None]]        # (key, value), None removing the key


def entity_str(entity: Entity) -> str:
    """Kafka's ClientQuotaEntity.toString, as its error messages show the entity."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


def _validate_entity(pairs: list[tuple[str, str | None]]) -> tuple[int, str] | None:
    """Kafka's validateEntity then configKeysForEntityType (the entity's pairs as the request sent them)."""
    if not pairs:
        return ErrorCode.invalid_request, "Invalid empty client quota entity"
    seen: dict[str, str | None] = {}
    for etype, name in pairs:
        if etype in seen:
            return ErrorCode.invalid_request, f"Invalid client quota entity, duplicate entity entry {etype}"
        if etype not in (USER, CLIENT_ID, IP):
            return ErrorCode.invalid_request, f"Unhandled client quota entity type: {etype}"
        seen[etype] = name
        if name is not None and not name:
            return ErrorCode.invalid_request, f"Empty {etype} not supported"
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            return (ErrorCode.invalid_request,
                    "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        if seen[IP] is not None and not _is_ip(seen[IP]):
            return ErrorCode.invalid_request, f"{seen[IP]} is not a valid IP or resolvable host."
    return None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def check_key_value(keys: dict[str, str], key: str, value: float) -> tuple[int, str] | None:
    """Kafka's validateQuotaKeyValue."""
    kind = keys.get(key)
    if kind is None:
        return ErrorCode.invalid_request, f"Invalid configuration key {key}"
    if not value > 0.0:
        # NaN too: Kafka's `value <= 0.0` lets it through, and a NaN bound would break every throttle computation
        return ErrorCode.invalid_request, f"Quota {key} must be greater than 0"
    if kind == "DOUBLE":
        return None                      # Infinity included, as in Kafka: no limit
    limit, name = _MAX[kind]
    if value > limit:
        return ErrorCode.invalid_request, f"Proposed value for {key} is too large for {name}."
    if abs(math.fmod(value, 1.0)) > 1e-6:
        return ErrorCode.invalid_request, f"{key} cannot be a fractional value."
    return None


def alter_quotas(alterations: list[QuotaAlteration], validate_only: bool = False):
    """AlterClientQuotas as a controller operation (Kafka's alterClientQuotas): records for the changed values of
    every accepted entity, and [(entity pairs, error code, message)] once per distinct entity."""
    def operation(image: MetadataImage):
        results: dict[Entity, tuple[int, str | None]] = {}
        records: list[ClientQuotaRecord] = []
        for alt in alterations:
            entity = quota_entity(dict(alt.entity).items())     # a repeated type: the last one (Kafka's map)
            changes: dict[str, float | None] = {}
            for key, value in alt.ops:
                if key in changes:
                    results[entity] = (ErrorCode.invalid_request, f"Duplicate quota key {key} not updating quota "
                                                                  f"for this entity {entity_str(entity)}")
                else:
                    changes[key] = value
            if entity in results:
                results[entity] = ErrorCode.invalid_request, f"Ignoring duplicate entity {entity_str(entity)}"
                continue
            refused = _validate_entity(list(dict(alt.entity).items()))
            if refused is not None:
                results[entity] = refused
                continue
            keys = IP_KEYS if entity[0][0] == IP else USER_CLIENT_KEYS
            current = image.client_quotas.get(entity, {})
            mine: list[ClientQuotaRecord] = []
            for key, value in changes.items():
                if value is None:
                    if key in current:
                        mine.append(ClientQuotaRecord(list(entity), key, remove=True))
                    continue
                refused = check_key_value(keys, key, value)
                if refused is not None:
                    break
                if current.get(key) != value:
                    mine.append(ClientQuotaRecord(list(entity), key, float(value)))
            if refused is not None:
                results[entity] = refused
                continue
            records += mine
            results[entity] = 0, None
        answer = [(list(entity), code, message) for entity, (code, message) in results.items()]
        return ([] if validate_only else records), answer
    return operation


class DescribeError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def parse_filter(components: list[tuple[str, int, str | None]]) -> tuple[dict[str, str | None], set[str]]:
    """A DescribeClientQuotas filter as Kafka's ClientQuotasImage.describe checks it: (exact matches, types that must
    be present), or DescribeError (INVALID_REQUEST, or UNSUPPORTED_VERSION for an unknown entity type)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for etype, match_type, match in components:
        if not etype:
            raise DescribeError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if etype in exact or etype in typed:
            raise DescribeError(ErrorCode.invalid_request,
                                f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in (IP, USER, CLIENT_ID):
            raise DescribeError(ErrorCode.unsupported_version, f"Unsupported entity type {etype}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise DescribeError(ErrorCode.invalid_request,
                                    "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise DescribeError(ErrorCode.invalid_request,
                                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise DescribeError(ErrorCode.invalid_request,
                                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(etype)
        else:
            raise DescribeError(ErrorCode.invalid_request, f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (exact.keys() | typed)):
        raise DescribeError(ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter "
                                                       "component should not be used with user or clientId filter "
                                                       "component.")
    return exact, typed


def matches(entity: Entity, exact: dict[str, str | None], typed: set[str], strict: bool) -> bool:
    """Kafka's ClientQuotasImage.matches."""
    names = dict(entity)
    if strict and len(names) != len(exact) + len(typed):
        return False
    return all(t in names and names[t] == n for t, n in exact.items()) and all(t in names for t in typed)


def describe_quotas(image: MetadataImage, components, strict: bool) -> list[tuple[Entity, dict[str, float]]]:
    """The entities `components` (type, match type, match) select, with their values; raises DescribeError."""
    exact, typed = parse_filter(components)
    return [(entity, dict(values)) for entity, values in image.client_quotas.items()
            if matches(entity, exact, typed, strict)]
