"""DescribeWalPointers (Strata's key 21332, "ST"; not a Kafka API and not advertised in ApiVersions): where the
committed part of a WAL-enabled partition's recent log sits in the fast store (KIP-1176), for readers that read
object storage directly (the Spark connector's planner, issue 15). The leader answers with the same pointers its
followers get (object key, byte range, offsets, CRC32C), limited to chunks below the high watermark, so a reader
that decodes them and stops at the high watermark sees exactly what Fetch would return.

    request v0:  max_bytes int32, [topic string, [partition int32, offset int64]]
    response v0: throttle_time_ms int32, [topic string, [partition int32, error_code int16, high_watermark int64,
                 log_start_offset int64, wal bytes]]  (wal: protocol.replica_fetch.encode_wal_pointers)

    request v1:  max_bytes int32, isolation_level int8, [topic string, [partition int32, offset int64,
                 txn_start_offset int64, txn_end_offset int64]]
    response v1: throttle_time_ms int32, [topic string, [partition int32, error_code int16, high_watermark int64,
                 log_start_offset int64, last_stable_offset int64, local_log_start_offset int64, wal bytes,
                 aborted_transactions [producer_id int64, first_offset int64, last_offset int64]]]

Pointers start at the chunk holding `offset` and run without a gap; none where the leader has no pointer there
(data from before its leadership, a failed upload, collected objects), so the reader falls back to Fetch.

v1 is for read_committed readers (issue 24): with isolation_level 1 the answer also lists the aborted transactions
of the leader's LOCAL log (its segments' transaction indexes, Kafka's AbortedTxn entries) that overlap
[txn_start_offset, txn_end_offset): those a reader needs for offsets it reads from the fast store, and, for offsets
it reads from tiered segments, the ones whose ABORT marker is not tiered yet (the tiered ones are in the remote
segments' .txnindex objects, which the reader reads itself). local_log_start_offset tells the reader which segments
the local list covers. Offsets a reader may read are below the last stable offset, whose transactions all have
their markers in the log already, so the list is complete for them."""
from __future__ import annotations

from broker.security.authorization import CLUSTER_ACTION, READ, TOPIC_DENIED, authorize_cluster, name_checker
from protocol.errors import ErrorCode
from protocol.replica_fetch import encode_wal_pointers
from protocol.wire import (
    I8, I16, I32, I64, MalformedRequest, array_len, read_array_len, read_i32, read_string, string,
)

API_KEY = 21332
VERSIONS = (0, 1)
DECODABLE = (0, 1)
ADVERTISED = False
READ_COMMITTED = 1


def decode(buf, pos: int, version: int = 0) -> tuple:
    """(max_bytes, isolation_level, [(topic, [(partition, offset, *v1's txn_start_offset, txn_end_offset)])]);
    v0 has isolation level 0 and no transaction range."""
    max_bytes, pos = read_i32(buf, pos)
    isolation = 0
    if version >= 1:
        if pos + 1 > len(buf):
            raise MalformedRequest("truncated isolation level")
        isolation = I8.unpack_from(buf, pos)[0]
        pos += 1
    longs = 3 if version >= 1 else 1
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
            if pos + 8 * longs > len(buf):
                raise MalformedRequest("truncated offset")
            parts.append((index, *(I64.unpack_from(buf, pos + 8 * i)[0] for i in range(longs))))
            pos += 8 * longs
        topics.append((name, parts))
    if pos != len(buf):
        raise MalformedRequest(f"{len(buf) - pos} bytes after the request")
    return max_bytes, isolation, topics


def handle(broker, req):
    version = req.api_version
    max_bytes, isolation, topics = decode(req.frame, req.body_offset, version)
    out = [I32.pack(0), array_len(len(topics), False)]
    # the records' locations are as good as the records: READ on the topic, as for Fetch (or CLUSTER_ACTION, a broker)
    readable = None if authorize_cluster(broker, req, CLUSTER_ACTION) else name_checker(broker, req, READ)
    for name, parts in topics:
        out += [string(name, False), array_len(len(parts), False)]
        denied = readable is not None and not readable(name)
        for index, offset, *txn_range in parts:
            part = broker.replicas.get(name, index) if not denied else None
            hw = start = lso = local_start = -1
            wal = encode_wal_pointers("", [])
            aborted = []
            if denied:
                err = TOPIC_DENIED
            elif part is None:
                err = broker.replicas.missing_error(name, index)
            elif err := part.not_leader_error():
                pass
            else:
                hw, start = part.high_watermark, part.log_start_offset
                lso, local_start = part.last_stable_offset, part.local_log_start_offset
                if not start <= offset <= hw:
                    err = ErrorCode.offset_out_of_range
                else:
                    wal = encode_wal_pointers(*part.committed_wal_pointers(offset, max_bytes))
                    if isolation == READ_COMMITTED:
                        aborted = part.local_aborted_transactions(*txn_range)
            out += [I32.pack(index), I16.pack(err), I64.pack(hw), I64.pack(start)]
            if version >= 1:
                out += [I64.pack(lso), I64.pack(local_start)]
            out += [I32.pack(len(wal)), wal]
            if version >= 1:
                out.append(array_len(len(aborted), False))
                out += [I64.pack(a.producer_id) + I64.pack(a.first_offset) + I64.pack(a.last_offset) for a in aborted]
    return out
