"""A blocking client of DescribeWalPointers (broker/handlers/describe_wal_pointers.py), for readers that plan on a
driver without an event loop (the Spark connector): one request to a partition's leader, its answer decoded."""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from protocol.replica_fetch import decode_wal_pointers
from protocol.wire import I8, I32, I64, array_len, read_array_len, read_i16, read_i32, read_string, string

API_KEY = 21332
_HEADER = struct.Struct(">hhi")
_ABORTED = struct.Struct(">qqq")


@dataclass(frozen=True)
class WalPointers:
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    store: str                  # the fast store's name ("" the default one, else a rack's)
    pointers: list              # protocol.replica_fetch.RemotePointer, in offset order, without a gap
    # v1 (txn_ranges given): the leader's last stable offset, local log start, and the aborted transactions of its
    # local log overlapping the requested range, (producer id, first offset, last offset) in marker order
    last_stable_offset: int = -1
    local_log_start_offset: int = -1
    aborted: tuple | None = None


def describe_wal_pointers(host: str, port: int, topic: str, offsets: dict[int, int], max_bytes: int = 64 << 20,
                          timeout: float = 10.0, correlation_id: int = 1,
                          txn_ranges: dict[int, tuple[int, int]] | None = None) -> dict[int, WalPointers]:
    """{partition: its pointers from `offsets[partition]` on, below the high watermark}, from the broker at host:port
    (which must lead the partitions; others come back with NOT_LEADER_OR_FOLLOWER). With `txn_ranges`
    ({partition: (start, end)}, every partition of `offsets`) the request is v1 with isolation level
    read_committed, and each answer also carries the aborted transactions of the leader's local log overlapping
    [start, end)."""
    version = 0 if txn_ranges is None else 1
    body = [I32.pack(max_bytes)]
    if version:
        body.append(I8.pack(1))
    body += [array_len(1, False), string(topic, False), array_len(len(offsets), False)]
    for p, o in offsets.items():
        body += [I32.pack(p), I64.pack(o)]
        if version:
            body += [I64.pack(txn_ranges[p][0]), I64.pack(txn_ranges[p][1])]
    client_id = string("strata-reader", False)
    frame = _HEADER.pack(API_KEY, version, correlation_id) + client_id + b"".join(body)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(I32.pack(len(frame)) + frame)
        size = I32.unpack(_read(s, 4))[0]
        resp = _read(s, size)
    corr, pos = read_i32(resp, 0)
    if corr != correlation_id:
        raise ConnectionError(f"correlation id {corr}, expected {correlation_id}")
    _, pos = read_i32(resp, pos)                        # throttle time
    n, pos = read_array_len(resp, pos, False)
    out = {}
    for _ in range(n):
        _, pos = read_string(resp, pos, False)
        m, pos = read_array_len(resp, pos, False)
        for _ in range(m):
            index, pos = read_i32(resp, pos)
            err, pos = read_i16(resp, pos)
            hw, start = struct.unpack_from(">qq", resp, pos)
            pos += 16
            lso = local_start = -1
            if version:
                lso, local_start = struct.unpack_from(">qq", resp, pos)
                pos += 16
            size, pos = read_i32(resp, pos)
            store, pointers = decode_wal_pointers(resp[pos:pos + size], 0)
            pos += size
            aborted = None
            if version:
                k, pos = read_array_len(resp, pos, False)
                aborted = tuple(_ABORTED.unpack_from(resp, pos + _ABORTED.size * i) for i in range(k))
                pos += _ABORTED.size * k
            out[index] = WalPointers(index, err, hw, start, store, pointers, lso, local_start, aborted)
    return out


def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)
