"""The executor's WAL chunk reader without Spark or a broker: chunks of one object read with one GET, CRC-checked,
decoded into exactly the records of the piece; a collected object or a damaged chunk stops the read at the first
offset not read, for the caller to Fetch."""
from __future__ import annotations

from types import SimpleNamespace

import crc32c
import pytest

from protocol import compression
from protocol.records import build_records_batch
from spark_connector.arrow_rows import RowBuilder
from spark_connector.wal_reader import WalReader, group_gets

pytestmark = pytest.mark.spark


def write_object(root, key: str, chunks: list[tuple[int, list[bytes]]]) -> list[tuple]:
    """An object of chunks, each a list of batches of 10 records from base offsets; its pointers."""
    data, pointers = b"", []
    for base, batches in chunks:
        chunk = b"".join(batches)
        last = base + 10 * len(batches) - 1
        pointers.append((key, len(data), len(chunk), crc32c.crc32c(chunk), base, last))
        data += chunk
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return pointers


def batches(base: int, n: int, codec=compression.LZ4) -> list[bytes]:
    return [build_records_batch([(None, f"v{o}".encode()) for o in range(b, b + 10)], codec, base_offset=b,
                                timestamp_ms=1_700_000_000_000) for b in range(base, base + 10 * n, 10)]


def read(store_root, pointers, start: int, end: int):
    reader = WalReader((f"file://{store_root}", ()))
    builder = RowBuilder("t", 0, False, max_rows=7)
    try:
        out = list(reader.read(SimpleNamespace(start=start, end=end, wal=tuple(pointers)), builder))
        last = builder.take()
        rows = [o for b in out + ([last] if last is not None else []) for o in b.column("offset").to_pylist()]
        values = [v for b in out + ([last] if last is not None else []) for v in b.column("value").to_pylist()]
        return rows, values, reader.stopped_at, reader.gets
    finally:
        reader.close()


def test_chunks_of_one_object_are_one_get_and_decode_exactly_the_range(tmp_path):
    ptrs = write_object(tmp_path, "wal/1/0000000000000001", [(0, batches(0, 3)), (30, batches(30, 2))])
    ptrs += write_object(tmp_path, "wal/2/0000000000000001", [(50, batches(50, 2, compression.ZSTD))])
    assert [(k, s, e, len(p)) for k, s, e, p in group_gets(ptrs)] == \
        [("wal/1/0000000000000001", 0, ptrs[0][2] + ptrs[1][2], 2), ("wal/2/0000000000000001", 0, ptrs[2][2], 1)]
    rows, values, stopped, gets = read(tmp_path, ptrs, 5, 63)        # starts and ends inside batches
    assert rows == list(range(5, 63)) and values == [f"v{o}".encode() for o in range(5, 63)]
    assert (stopped, gets) == (None, 2)


def test_a_collected_object_or_a_damaged_chunk_stops_at_the_first_offset_not_read(tmp_path):
    ptrs = write_object(tmp_path, "wal/1/a", [(0, batches(0, 2))]) + write_object(tmp_path, "wal/1/b",
                                                                                   [(20, batches(20, 2))])
    (tmp_path / "wal/1/b").unlink()
    rows, _, stopped, _ = read(tmp_path, ptrs, 3, 40)
    assert rows == list(range(3, 20)) and stopped == 20
    ptrs = write_object(tmp_path, "wal/1/c", [(0, batches(0, 2)), (20, batches(20, 2))])
    data = bytearray((tmp_path / "wal/1/c").read_bytes())
    data[ptrs[1][1] + 70] ^= 1                                           # inside the second chunk
    (tmp_path / "wal/1/c").write_bytes(bytes(data))
    rows, _, stopped, _ = read(tmp_path, ptrs, 0, 40)
    assert rows == list(range(20)) and stopped == 20
    rows, _, stopped, _ = read(tmp_path, ptrs[:1], 0, 40)                # pointers end before the piece does
    assert rows == list(range(20)) and stopped == 20


def test_many_objects_are_read_with_gets_in_flight_ahead_of_the_decoder(tmp_path):
    """Issue 27: a piece spread over many WAL objects is read with the broker's read-ahead: over a store with 30 ms to
    the first byte, the window of GETs in flight grows past two, and the records still come back once, in order."""
    ptrs = []
    for i in range(24):
        ptrs += write_object(tmp_path, f"wal/{i}/0000000000000001", [(100 * i, batches(100 * i, 10))])
    reader = WalReader((f"file://{tmp_path}", {"faults": "get_latency_ms=30"}))
    builder = RowBuilder("t", 0, False)
    waits = []
    real = reader.cache.in_order

    def in_order(ra, parts, i):
        fut = real(ra, parts, i)
        waits.append(ra.window)
        return fut
    reader.cache.in_order = in_order
    try:
        out = list(reader.read(SimpleNamespace(start=0, end=2400, wal=tuple(ptrs)), builder))
        last = builder.take()
        rows = [o for b in out + ([last] if last is not None else []) for o in b.column("offset").to_pylist()]
    finally:
        reader.close()
    assert rows == list(range(2400)) and reader.gets == 24 and reader.stopped_at is None
    assert max(waits) > 2, waits
    assert not reader.cache.entries                     # dropped once the piece was read
