"""WAL objects (KIP-1176): what a leader uploads to the fast object store. One object holds the batches many
partitions appended during one combiner interval, so a broker makes a few PUTs per second whatever its partition
count.

Layout: a header indexing the chunks, then the chunks. A chunk is the record batches one leader append wrote,
byte for byte as they are in the leader's log (offsets, leader epoch, CRCs assigned), so a follower appends them
as it would records from a Fetch. The header carries each chunk's CRC32C so a follower checks a ranged GET of one
chunk without reading the rest.

    magic "STWAL" | version u8 | chunk count u32 | entries | header CRC32C u32 | chunk bytes...
    entry: topic id (16) | partition i32 | leader epoch i32 | base offset i64 | last offset i64 |
           position u32 (from the object's start) | size u32 | CRC32C u32
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

MAGIC = b"STWAL"
VERSION = 1
_HEAD = struct.Struct(">5sBI")
_ENTRY = struct.Struct(">16siiqqIII")
_CRC = struct.Struct(">I")


class WalObjectError(ValueError):
    """Not a WAL object, or its header is damaged."""


@dataclass(frozen=True, slots=True)
class WalChunk:
    topic_id: bytes           # 16 bytes
    partition: int
    leader_epoch: int
    base_offset: int
    last_offset: int
    position: int
    size: int
    crc: int


def header_size(chunks: int) -> int:
    return _HEAD.size + chunks * _ENTRY.size + _CRC.size


def build(chunks: list[tuple[bytes, int, int, int, int, bytes | memoryview]]) -> tuple[list, list[WalChunk]]:
    """(topic id, partition, epoch, base offset, last offset, batch bytes) in append order -> (the object as a list
    of buffers to join, the index entries with their positions)."""
    pos = header_size(len(chunks))
    entries = []
    for topic_id, partition, epoch, base, last, data in chunks:
        entries.append(WalChunk(topic_id, partition, epoch, base, last, pos, len(data), crc32c.crc32c(data)))
        pos += len(data)
    head = bytearray(_HEAD.pack(MAGIC, VERSION, len(entries)))
    for e in entries:
        head += _ENTRY.pack(e.topic_id, e.partition, e.leader_epoch, e.base_offset, e.last_offset, e.position,
                            e.size, e.crc)
    head += _CRC.pack(crc32c.crc32c(head))
    return [bytes(head)] + [c[5] for c in chunks], entries


def parse_header(data: bytes | memoryview) -> list[WalChunk]:
    """The chunk index of an object (or of its first header_size(n) bytes)."""
    if len(data) < _HEAD.size + _CRC.size:
        raise WalObjectError("too short for a WAL object header")
    magic, version, count = _HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        raise WalObjectError(f"not a WAL object (magic {magic!r}, version {version})")
    end = _HEAD.size + count * _ENTRY.size
    if len(data) < end + _CRC.size:
        raise WalObjectError("WAL object header is truncated")
    if _CRC.unpack_from(data, end)[0] != crc32c.crc32c(memoryview(data)[:end]):
        raise WalObjectError("WAL object header CRC mismatch")
    return [WalChunk(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)) for i in range(count)]


def chunk_crc_ok(data: bytes | memoryview, crc: int) -> bool:
    return crc32c.crc32c(data) == crc
