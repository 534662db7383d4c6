"""Remove unknown tagged fields from a flexible message so kio (which raises KeyError on them) can decode it.

Kafka's rule is that a receiver skips tagged fields it does not know. This walks the bytes with the kio schema and
copies everything except unknown tags. It runs only after kio rejected a message, so it favours clarity over speed.
"""
from __future__ import annotations

import struct
from dataclasses import fields

from kio.serial._introspect import (EntityField, EntityTupleField, classify_field, get_field_tag,
                                    get_schema_field_type)

_FIXED = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
          "float64": 8, "uuid": 16, "bool": 1, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8,
          "datetime_i64": 8}


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise ValueError("varint too long")


def write_uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def strip_unknown_tags(schema, buf, offset: int, *, is_header: bool = False) -> bytes:
    out = bytearray()
    end = _copy_entity(schema, memoryview(buf), offset, out, is_header)
    out += bytes(memoryview(buf)[end:])
    return bytes(out)


def _skip_primitive(kind: str, flexible: bool, buf, pos: int, legacy_string: bool = False) -> int:
    if kind in _FIXED:
        return pos + _FIXED[kind]
    if kind in ("string", "bytes", "records"):
        if flexible and not legacy_string:
            n, pos = read_uvarint(buf, pos)
            return pos + max(n - 1, 0)
        if kind == "string" or legacy_string:
            (n,) = struct.unpack_from(">h", buf, pos)
            return pos + 2 + max(n, 0)
        (n,) = struct.unpack_from(">i", buf, pos)
        return pos + 4 + max(n, 0)
    raise ValueError(f"unsupported kafka type {kind}")


def _copy_entity(schema, buf, pos: int, out: bytearray, is_header: bool) -> int:
    flexible = bool(schema.__flexible__)
    known_tags = {}
    for f in fields(schema):
        tag = get_field_tag(f)
        if tag is not None:
            known_tags[int(tag)] = f
            continue
        pos = _copy_field(f, flexible, buf, pos, out, is_header)
    if flexible:
        count, pos = read_uvarint(buf, pos)
        kept = []
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            if tag in known_tags:
                kept.append(write_uvarint(tag) + write_uvarint(size) + bytes(buf[pos:pos + size]))
            pos += size
        out += write_uvarint(len(kept))
        for k in kept:
            out += k
    return pos


def _copy_field(f, flexible: bool, buf, pos: int, out: bytearray, is_header: bool) -> int:
    cls = classify_field(f)
    if isinstance(cls, EntityTupleField):
        if flexible:
            n, p = read_uvarint(buf, pos)
            count = n - 1
        else:
            (count,) = struct.unpack_from(">i", buf, pos)
            p = pos + 4
        out += bytes(buf[pos:p])
        for _ in range(max(count, 0)):
            p = _copy_entity(cls.type_, buf, p, out, False)
        return p
    if isinstance(cls, EntityField):
        # Nullable structs carry a presence byte (int8: -1 null, 1 present).
        if f.default is None:
            marker = buf[pos]
            out.append(marker)
            if marker == 0xFF:
                return pos + 1
            pos += 1
        return _copy_entity(cls.type_, buf, pos, out, False)
    kind = get_schema_field_type(f)
    if cls.is_array:
        if flexible:
            n, p = read_uvarint(buf, pos)
            count = n - 1
        else:
            (count,) = struct.unpack_from(">i", buf, pos)
            p = pos + 4
        for _ in range(max(count, 0)):
            p = _skip_primitive(kind, flexible, buf, p)
    else:
        p = _skip_primitive(kind, flexible, buf, pos, legacy_string=is_header and f.name == "client_id")
    out += bytes(buf[pos:p])
    return p
