"""The Fetch response as a follower reads it (v12, flexible), decoded by hand: records stay a view of the frame
(no copy per partition), and the KIP-1176 WAL pointers ride in a partition-level tagged field of Strata's own,
which kio's decoder would reject (it raises KeyError on unknown tags; Kafka says a receiver skips them, and a
Kafka follower would).

WAL pointers (tag WAL_POINTERS_TAG): the store's name (compact string), then a compact array of
    object key (compact string) | position i64 | size i32 | CRC32C u32 | base offset i64 | last offset i64 |
    leader epoch i32 | no tags
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.wire import (I16, I32, I64, MalformedRequest, array_len, read_array_len, read_bytes_view, read_string,
                           read_uvarint, skip_tagged_fields, string)

WAL_POINTERS_TAG = 0x5354          # "ST": well clear of the tags Kafka's schema uses (0..2)
_PTR = struct.Struct(">qiIqqi")
_PART_HEAD = struct.Struct(">ihqqq")


@dataclass(frozen=True, slots=True)
class RemotePointer:
    key: str
    position: int
    size: int
    crc: int
    base_offset: int
    last_offset: int
    leader_epoch: int


def encode_wal_pointers(store: str, pointers: list[RemotePointer]) -> bytes:
    out = [string(store, True), array_len(len(pointers), True)]
    for p in pointers:
        out.append(string(p.key, True))
        out.append(_PTR.pack(p.position, p.size, p.crc, p.base_offset, p.last_offset, p.leader_epoch) + b"\x00")
    return b"".join(out)


def decode_wal_pointers(buf, pos: int) -> tuple[str, list[RemotePointer]]:
    store, pos = read_string(buf, pos, True)
    n, pos = read_array_len(buf, pos, True, "wal pointers")
    out = []
    for _ in range(n):
        key, pos = read_string(buf, pos, True)
        if pos + _PTR.size + 1 > len(buf):
            raise MalformedRequest("truncated WAL pointer")
        out.append(RemotePointer(key, *_PTR.unpack_from(buf, pos)))
        pos += _PTR.size + 1
    return store or "", out


@dataclass(slots=True)
class FetchedPartition:
    partition_index: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | None
    diverging_epoch: tuple[int, int] | None = None      # (epoch, end offset)
    wal_store: str = ""
    wal_pointers: list | None = None


@dataclass(slots=True)
class FetchedResponse:
    error_code: int
    responses: list                                    # (topic name, [FetchedPartition])


def decode_fetch_response(buf) -> FetchedResponse:
    """A Fetch v12 response body (after the response header)."""
    pos = 4                                             # throttle_time_ms
    (error,) = I16.unpack_from(buf, pos)
    pos += 2 + 4                                        # error_code, session_id
    n_topics, pos = read_array_len(buf, pos, True, "responses")
    topics = []
    for _ in range(n_topics):
        name, pos = read_string(buf, pos, True)
        n_parts, pos = read_array_len(buf, pos, True, "partitions")
        parts = []
        for _ in range(n_parts):
            if pos + _PART_HEAD.size > len(buf):
                raise MalformedRequest("truncated partition")
            index, err, hw, _lso, log_start = _PART_HEAD.unpack_from(buf, pos)
            pos += _PART_HEAD.size
            n_aborted, pos = read_uvarint(buf, pos)
            for _ in range(max(n_aborted - 1, 0)):     # producer id, first offset, tags
                pos += 16
                pos = skip_tagged_fields(buf, pos)
            pos += 4                                    # preferred_read_replica
            records, pos = read_bytes_view(buf, pos, True)
            fp = FetchedPartition(index, err, hw, log_start, records)
            n_tags, pos = read_uvarint(buf, pos)
            for _ in range(n_tags):
                tag, pos = read_uvarint(buf, pos)
                size, pos = read_uvarint(buf, pos)
                if tag == 0:
                    fp.diverging_epoch = (I32.unpack_from(buf, pos)[0], I64.unpack_from(buf, pos + 4)[0])
                elif tag == WAL_POINTERS_TAG:
                    fp.wal_store, fp.wal_pointers = decode_wal_pointers(buf[:pos + size], pos)
                pos += size
            parts.append(fp)
        pos = skip_tagged_fields(buf, pos)
        topics.append((name, parts))
    return FetchedResponse(error, topics)
