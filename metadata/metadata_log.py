"""The controller's record log on local disk, `<log.dirs>/__cluster_metadata-0/00000000000000000000.log` (Kafka's
name for the metadata partition): length-prefixed, CRC-32C-checked envelopes, appended and fsynced before an append
returns. Opening it replays every record and cuts a torn tail (a kill -9 in the middle of a write) at the last whole
record, so a record is either in the log entirely or not at all.

This is the one-broker implementation of the metadata log; the cluster issue puts the same records in the object
store as numbered objects written with put_if_absent.
"""
from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import crc32c
import msgspec

from metadata.records import Envelope, decode, encode

log = logging.getLogger("strata.metadata_log")

DIR_NAME = "__cluster_metadata-0"
FILE_NAME = "00000000000000000000.log"
_HEAD = struct.Struct(">II")             # payload length, CRC-32C of the payload


class MetadataLog:
    def __init__(self, log_dir: Path):
        self.dir = Path(log_dir) / DIR_NAME
        self.path = self.dir / FILE_NAME

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def read_all(self) -> list[Envelope]:
        """Every whole record; a partial or damaged tail is cut off the file (logged)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out, pos = [], 0
        while len(data) - pos >= _HEAD.size:
            n, crc = _HEAD.unpack_from(data, pos)
            body = data[pos + _HEAD.size:pos + _HEAD.size + n]
            if len(body) < n or crc32c.crc32c(body) != crc:
                break
            try:
                out.append(decode(body))
            except (msgspec.DecodeError, msgspec.ValidationError):
                break
            pos += _HEAD.size + n
        if pos < len(data):
            log.warning("metadata log %s: cutting %d bytes of torn or damaged tail after %d records", self.path,
                        len(data) - pos, len(out))
            with open(self.path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
        return out

    def append(self, envelopes: list[Envelope]) -> None:
        """Write and fsync; the records are durable when this returns."""
        buf = bytearray()
        for env in envelopes:
            body = encode(env)
            buf += _HEAD.pack(len(body), crc32c.crc32c(body)) + body
        new = not self.path.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:
            f.write(buf)
            f.flush()
            os.fsync(f.fileno())
        if new:
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
