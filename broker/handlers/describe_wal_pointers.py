"""DescribeWalPointers (Strata's key 21332, "ST"; not a Kafka API and not advertised in ApiVersions): where the
committed part of a WAL-enabled partition's recent log sits in the fast store (KIP-1176), for readers that read
object storage directly (the Spark connector's planner, issue 15). The leader answers with the same pointers its
followers get (object key, byte range, offsets, CRC32C), limited to chunks below the high watermark, so a reader
that decodes them and stops at the high watermark sees exactly what Fetch would return.

    request v0:  max_bytes int32, [topic string, [partition int32, offset int64]]
    response v0: throttle_time_ms int32, [topic string, [partition int32, error_code int16, high_watermark int64,
                 log_start_offset int64, wal bytes]]  (wal: protocol.replica_fetch.encode_wal_pointers)

Pointers start at the chunk holding `offset` and run without a gap; none where the leader has no pointer there
(data from before its leadership, a failed upload, collected objects), so the reader falls back to Fetch."""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.replica_fetch import encode_wal_pointers
from protocol.wire import I16, I32, I64, MalformedRequest, array_len, read_array_len, read_i32, read_string, string

API_KEY = 21332
VERSIONS = (0, 0)
DECODABLE = (0, 0)
ADVERTISED = False


def decode(buf, pos: int) -> tuple[int, list]:
    max_bytes, pos = read_i32(buf, pos)
    n, pos = read_array_len(buf, pos, False, "topics")
    topics = []
    for _ in range(n):
        name, pos = read_string(buf, pos, False)
        if name is None:
            raise MalformedRequest("null topic name")
        m, pos = read_array_len(buf, pos, False, "partitions")
        parts = []
        for _ in range(m):
            index, pos = read_i32(buf, pos)
            if pos + 8 > len(buf):
                raise MalformedRequest("truncated offset")
            parts.append((index, I64.unpack_from(buf, pos)[0]))
            pos += 8
        topics.append((name, parts))
    if pos != len(buf):
        raise MalformedRequest(f"{len(buf) - pos} bytes after the request")
    return max_bytes, topics


def handle(broker, req):
    max_bytes, topics = decode(req.frame, req.body_offset)
    out = [I32.pack(0), array_len(len(topics), False)]
    for name, parts in topics:
        out += [string(name, False), array_len(len(parts), False)]
        for index, offset in parts:
            part = broker.replicas.get(name, index)
            hw = start = -1
            wal = encode_wal_pointers("", [])
            if part is None:
                err = broker.replicas.missing_error(name, index)
            elif err := part.not_leader_error():
                pass
            else:
                hw, start = part.high_watermark, part.log_start_offset
                if not start <= offset <= hw:
                    err = ErrorCode.offset_out_of_range
                else:
                    wal = encode_wal_pointers(*part.committed_wal_pointers(offset, max_bytes))
            out += [I32.pack(index), I16.pack(err), I64.pack(hw), I64.pack(start), I32.pack(len(wal)), wal]
    return out
