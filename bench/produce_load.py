"""A produce load with a fixed request shape, so that a benchmark measures the broker and not the client.

confluent-kafka decides the shape of its requests itself: librdkafka puts one partition in each Produce request
(librdkafka issue #1700), so with many partitions and the same bytes it sends many more, smaller requests, and its
own CPU per MB grows with them. This generator sends pre-built Produce v9 requests (acks=1, uncompressed batches
of `--records` x `--size`-byte values, no producer id) over one connection, `--window` requests in flight, and
prints what it measured as JSON. Its own cost is a send and a small read per request, so on two shared cores the
broker gets nearly a core of its own.

Shapes: `--per-request 1` is librdkafka's (one partition per request, round-robin); `--per-request N` puts N
partitions' batches in one request, as the Java producer drains every ready partition of a broker into one request.

    .venv/bin/python bench/produce_load.py --bootstrap 127.0.0.1:9092 --topic t --partitions 1000 --records 32
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from protocol.record_batch import build_batch  # noqa: E402
from protocol.wire import I16, I32, array_len, string, uvarint  # noqa: E402

PRODUCE_VERSION = 9     # flexible, as librdkafka 2.x sends it


def produce_frame(corr: int, topic: str, batches: list[tuple[int, bytes]]) -> bytes:
    body = bytearray(I16.pack(0) + I16.pack(PRODUCE_VERSION) + I32.pack(corr) + string("produce-load", False) + b"\x00")
    body += b"\x00" + I16.pack(1) + I32.pack(30_000)          # transactional_id null, acks=1, timeout
    body += array_len(1, True) + string(topic, True) + array_len(len(batches), True)
    for index, batch in batches:
        body += I32.pack(index) + uvarint(len(batch) + 1) + batch + b"\x00"
    body += b"\x00\x00"                                         # topic and request tagged fields
    return I32.pack(len(body)) + bytes(body)


def frames_for(topic: str, partitions: int, per_request: int, batch: bytes) -> list[bytes]:
    """One cycle of requests over the partitions, round-robin (correlation ids are patched in at send time)."""
    n = max(1, partitions // per_request) if per_request < partitions else 1
    out, p = [], 0
    for _ in range(n):
        parts = []
        for _ in range(min(per_request, partitions)):
            parts.append((p % partitions, batch))
            p += 1
        out.append(produce_frame(0, topic, parts))
    return out


def run(bootstrap: str, topic: str, partitions: int, requests: int, records: int, size: int, per_request: int,
        window: int) -> dict:
    batch = build_batch([(None, os.urandom(size)) for _ in range(records)])
    frames = frames_for(topic, partitions, per_request, batch)
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rfile = sock.makefile("rb", buffering=1 << 20)
    errors = 0

    def read_response() -> None:
        nonlocal errors
        size_ = struct.unpack(">i", rfile.read(4))[0]
        body = rfile.read(size_)
        # header v1: corr id + tagged fields; then topics[1] name, partitions[k]: index, error_code ...
        pos = 4 + 1 + 1
        nlen = body[pos] - 1
        pos += 1 + nlen + 1                                     # name, then the partitions' compact array length
        if struct.unpack_from(">h", body, pos + 4)[0] != 0:
            errors += 1

    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    in_flight = 0
    for i in range(requests):
        frame = bytearray(frames[i % len(frames)])
        struct.pack_into(">i", frame, 8, i)                     # correlation id
        sock.sendall(frame)
        in_flight += 1
        if in_flight >= window:
            read_response()
            in_flight -= 1
    while in_flight:
        read_response()
        in_flight -= 1
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    sock.close()
    n_bytes = requests * min(per_request, partitions) * records * size
    return {"seconds": seconds, "requests": requests, "mb_s": n_bytes / 1e6 / seconds, "errors": errors,
            "client_cpu": (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / seconds,
            "bytes": n_bytes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--records", type=int, default=32, help="records per batch (32)")
    ap.add_argument("--size", type=int, default=1024, help="value bytes per record (1024)")
    ap.add_argument("--per-request", type=int, default=1, help="partitions per request (1, as librdkafka)")
    ap.add_argument("--window", type=int, default=8, help="requests in flight (8)")
    a = ap.parse_args(argv)
    print(json.dumps(run(a.bootstrap, a.topic, a.partitions, a.requests, a.records, a.size, a.per_request, a.window)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
