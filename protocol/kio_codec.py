"""kio-based codec for the non-hot APIs: cached schema readers/writers and plain-dict response building.

Handlers build responses as plain dicts and lists; `to_entity` turns them into the kio class of the negotiated
version, dropping fields that version does not have and filling the ones it needs from Kafka's defaults. That keeps
one handler body for every version instead of one per version.
"""
from __future__ import annotations

import datetime
import functools
import io
import uuid
from dataclasses import MISSING, fields, is_dataclass

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (EntityField, EntityTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)

from protocol.tagged_fields import check_structure, strip_unknown_tags
from protocol.wire import MalformedRequest


@functools.cache
def request_schema(api_key: int, version: int):
    return load_request_schema(api_key, version)


@functools.cache
def response_schema(api_key: int, version: int):
    return load_response_schema(api_key, version)


@functools.cache
def throttle_time_first(api_key: int, version: int) -> bool:
    """Whether this response version starts with throttle_time_ms (most do; Produce, Fetch's old versions,
    ApiVersions and a few others do not)."""
    try:
        names = [f.name for f in fields(response_schema(api_key, version))]
    except Exception:
        return False
    return bool(names) and names[0] == "throttle_time"


@functools.cache
def _reader(schema):
    return entity_reader(schema)


@functools.cache
def _writer(schema):
    return entity_writer(schema)


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_schema(api_key, version).__flexible__)


def decode_request(api_key: int, version: int, buf, offset: int):
    """Decode a request body; any malformed input raises MalformedRequest (the connection is closed with a log line).

    The structure walk runs first because kio's native reader aborts the process on absurd array lengths; it also
    finds unknown tagged fields, which kio rejects with KeyError but Kafka says to skip.
    """
    schema = request_schema(api_key, version)
    try:
        if check_structure(schema, buf, offset):
            buf, offset = strip_unknown_tags(schema, buf, offset), 0
        entity, _ = _reader(schema)(buf, offset)
    except Exception as e:  # kio raises several unrelated types (BufferUnderflow, InvalidUnicode, ValueError, ...)
        raise MalformedRequest(f"cannot decode {schema.__name__} v{version}: {type(e).__name__}: {e}") from None
    return entity


class EncodedResponse(bytes):
    """A response body with the error codes it carries, `error_counts` ({code: count}, Kafka's
    AbstractResponse.errorCounts): the socket server counts them (ErrorsPerSec) without decoding the bytes again."""
    error_counts: dict[int, int]


def encode_response(api_key: int, version: int, body: dict) -> EncodedResponse:
    schema = response_schema(api_key, version)
    entity = to_entity(schema, body)
    out = io.BytesIO()
    _writer(schema)(out, entity)
    encoded = EncodedResponse(out.getvalue())
    encoded.error_counts = error_counts(schema, entity)
    return encoded


def with_error_counts(api_key: int, version: int, body) -> bytes:
    """A response body received from another broker (a forwarded request's answer), as an EncodedResponse; as it
    came when it does not decode."""
    schema = response_schema(api_key, version)
    data = bytes(body)
    try:
        if check_structure(schema, data, 0):     # first, as in decode_request: kio's reader trusts array lengths
            data = strip_unknown_tags(schema, data, 0)
        entity, _ = _reader(schema)(memoryview(data).toreadonly(), 0)
    except Exception:
        return bytes(body)
    encoded = EncodedResponse(body)
    encoded.error_counts = error_counts(schema, entity)
    return encoded


def error_counts(schema, entity, counts: dict[int, int] | None = None) -> dict[int, int]:
    """Every error code in a response, NONE included: what Kafka's errorCounts() gives for the responses Strata
    sends (top-level, per-topic, per-partition, per-group or per-member codes, whichever the version has)."""
    counts = {} if counts is None else counts
    plan = _error_plan(schema)
    if plan is None or entity is None:
        return counts
    codes, nested = plan
    for name in codes:
        code = getattr(entity, name)
        if code is not None:
            code = int(code)
            counts[code] = counts.get(code, 0) + 1
    for name, sub, is_array in nested:
        value = getattr(entity, name)
        if value is None:
            continue
        for item in (value if is_array else (value,)):
            error_counts(sub, item, counts)
    return counts


@functools.cache
def _error_plan(schema):
    """(error-code field names, (field, schema, is_array) of nested entities holding error codes), or None."""
    codes, nested = [], []
    for name, kind, sub, is_array, *_ in _field_plan(schema):
        if kind == "error_code":
            codes.append(name)
        elif sub is not None and _error_plan(sub) is not None:
            nested.append((name, sub, is_array))
    return (tuple(codes), tuple(nested)) if codes or nested else None


_EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)


@functools.cache
def _field_plan(schema):
    plan = []
    for f in fields(schema):
        kind = get_schema_field_type(f) if "kafka_type" in f.metadata else None
        cls = classify_field(f)
        nested = cls.type_ if isinstance(cls, (EntityField, EntityTupleField)) else None
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        plan.append((f.name, kind, nested, isinstance(cls, EntityTupleField), has_default,
                     is_optional(f), get_field_tag(f) is not None))
    return tuple(plan)


def _convert(kind: str | None, value):
    if value is None:
        return None
    if kind == "error_code":
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if kind == "datetime_i64":
        return value if isinstance(value, datetime.datetime) else _EPOCH + datetime.timedelta(milliseconds=value)
    if kind == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)) if value else None
    return value


def to_entity(schema, data):
    """Build kio entity `schema` from a dict (or pass an entity through). Unknown keys are dropped silently."""
    if is_dataclass(data) and not isinstance(data, dict):
        return data
    kw = {}
    for name, kind, nested, is_array, has_default, optional, tagged in _field_plan(schema):
        if name not in data:
            if has_default:
                continue
            if nested is not None and is_array:
                kw[name] = ()
                continue
            if kind == "error_code":
                kw[name] = ErrorCode.none
                continue
            if optional:
                kw[name] = None
                continue
            raise KeyError(f"{schema.__qualname__} v{schema.__version__} needs field {name!r}")
        value = data[name]
        if nested is not None:
            if is_array:
                value = None if value is None else tuple(to_entity(nested, v) for v in value)
            else:
                value = None if value is None else to_entity(nested, value)
        elif isinstance(value, (list, tuple)) and kind is not None and kind not in ("bytes", "records"):
            value = tuple(_convert(kind, v) for v in value)
        else:
            value = _convert(kind, value)
        kw[name] = value
    return schema(**kw)
