"""A reader for Kafka's generated-message encoding, as the records of internal topics use it
(`__consumer_offsets`, `__remote_log_metadata`): big-endian integers, int16/int32-length strings and bytes (the
non-flexible versions), compact ones (uvarint length + 1, 0 = null) and tagged fields (the flexible versions).

Every malformed input raises the class's `error` (a ValueError by default), so a subclass hands its callers the
exception they already catch.
"""
from __future__ import annotations

import struct
import uuid

from protocol.wire import MalformedRequest, read_uvarint

_I8, _I16, _I32, _I64 = (struct.Struct(f) for f in (">b", ">h", ">i", ">q"))


class MessageReader:
    __slots__ = ("b", "p")
    error: type[Exception] = ValueError

    def __init__(self, data):
        self.b = bytes(data)
        self.p = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.p + n > len(self.b):
            raise self.error(f"record field of {n} bytes runs past the end ({len(self.b)} bytes)")
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def i8(self) -> int:
        return _I8.unpack(self.take(1))[0]

    def i16(self) -> int:
        return _I16.unpack(self.take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self.take(8))[0]

    def uvarint(self) -> int:
        try:
            v, self.p = read_uvarint(self.b, self.p)
        except MalformedRequest as e:
            raise self.error(f"record field: {e}") from None
        return v

    def string(self, nullable: bool = False) -> str | None:
        """int16 length; -1 = null."""
        return self._text(self.i16(), nullable)

    def bytes_(self) -> bytes:
        """int32 length; null reads as empty."""
        n = self.i32()
        return b"" if n < 0 else self.take(n)

    def cstring(self, nullable: bool = False) -> str | None:
        return self._text(self.uvarint() - 1, nullable)

    def cbytes(self, nullable: bool = False) -> bytes | None:
        """Compact bytes; null reads as None when `nullable`, else as empty."""
        n = self.uvarint() - 1
        if n < 0:
            return None if nullable else b""
        return self.take(n)

    def carray_len(self) -> int:
        return max(self.uvarint() - 1, 0)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out

    def version(self, lo: int, hi: int, what: str) -> int:
        v = self.i16()
        if not lo <= v <= hi:
            raise self.error(f"unknown {what} version {v}")
        return v

    def _text(self, n: int, nullable: bool) -> str | None:
        if n < 0:
            if nullable:
                return None
            raise self.error("null string in a non-nullable field")
        return self.take(n).decode("utf-8")
