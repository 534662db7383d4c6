"""The connector's pure parts, without Spark or a broker: the column decoder against protocol/records.py on every
codec, Arrow columns against the schema Spark checks, offset-index lookups, range splitting and pieces, streaming
offsets JSON and rate limiting, and the data-loss warning."""
from __future__ import annotations

import logging
import random
import struct
import time

import pytest

from protocol import compression
from protocol.record_batch import HEADER
from protocol.records import build_records_batch, iter_records, records_section
from spark_connector.arrow_rows import RowBuilder, binary_array, spark_schema
from spark_connector.cluster import SegmentInfo
from spark_connector.decode import CorruptBatch, decode_into
from spark_connector.planning import DataLossError, remote_pieces, report_data_loss, split_ranges, store_pieces
from spark_connector.remote_reader import index_position
from spark_connector.storeio import StoreSegment
from spark_connector.stream import from_json, rate_limit, to_json

pytestmark = pytest.mark.spark


def random_records(rnd: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.choice([0, 3, 200]))
        value = None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 10, 127, 128, 5000, 20000]))
        headers = [(f"h{j}é", None if rnd.random() < 0.3 else rnd.randbytes(rnd.randrange(0, 300)))
                   for j in range(rnd.choice([0, 0, 1, 3]))]
        out.append((key, value, headers))
    return out


@pytest.mark.parametrize("codec", sorted(compression.CODEC_NAMES))
@pytest.mark.parametrize("headers", [True, False])
@pytest.mark.parametrize("compiled", [True, False])
def test_decoder_matches_protocol_records(codec, headers, compiled, monkeypatch):
    """decode_into against protocol/records.py: compiled (fast_decode.py, no headers) and in Python."""
    import spark_connector.decode as decode
    monkeypatch.setattr(decode, "FAST", compiled)
    rnd = random.Random(codec * 10 + headers)
    batch = build_records_batch(random_records(rnd, 300), codec, base_offset=1000, timestamp_ms=1_700_000_000_000)
    h = HEADER.unpack_from(batch, 0)
    expected = list(iter_records(batch))
    for lo, hi in [(0, 10**9), (1100, 1200), (1299, 1300), (5000, 6000)]:
        b = RowBuilder("t", 0, headers)
        decode_into(records_section(batch), h[12], h[0], h[7], None, lo, hi, b, 0)
        want = [r for r in expected if lo <= r.offset < hi]
        rows = b.take().to_pylist() if want else []
        assert len(rows) == len(want)
        for row, rec in zip(rows, want):
            assert (row["offset"], row["key"], row["value"]) == (rec.offset, rec.key, rec.value)
            assert int(row["timestamp"].timestamp() * 1000) == rec.timestamp
            if headers:
                assert row["headers"] == ([{"key": k, "value": v} for k, v in rec.headers] or None)


def test_decoder_log_append_time_and_corruption():
    batch = bytearray(build_records_batch([(b"k", b"v"), (b"k2", b"v2")], compression.NONE, base_offset=5,
                                          timestamp_ms=1000, attributes=0x08))
    struct.pack_into(">q", batch, 35, 123_456)                    # maxTimestamp = the append time
    b = RowBuilder("t", 0, False)
    decode_into(records_section(bytes(batch)), 2, 5, 1000, 123_456, 0, 100, b, 1)
    rows = b.take().to_pylist()
    assert [r["timestampType"] for r in rows] == [1, 1]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [123_456, 123_456]
    section = records_section(bytes(batch))
    for headers in (True, False):                                  # the Python and the compiled decoder
        with pytest.raises(CorruptBatch):
            decode_into(section[:-3], 2, 5, 1000, None, 0, 100, RowBuilder("t", 0, headers), 0)
        with pytest.raises(CorruptBatch):
            decode_into(section + b"\x00", 2, 5, 1000, None, 0, 100, RowBuilder("t", 0, headers), 0)
        with pytest.raises(CorruptBatch):
            decode_into(section[:8], 2, 5, 1000, None, 0, 100, RowBuilder("t", 0, headers), 0)


def test_compiled_and_python_rows_mix_in_order_in_one_builder():
    """A task reads a piece directly (compiled decoder) and the next by Fetch (RowBuilder.add): one RecordBatch,
    offsets in order."""
    batch = build_records_batch([(None, b"a"), (b"k", None)], compression.NONE, base_offset=0, timestamp_ms=5)
    b = RowBuilder("t", 0, False)
    decode_into(records_section(batch), 2, 0, 5, None, 0, 100, b, 0)
    b.add(2, 7, 0, b"k2", b"v2", None)
    decode_into(records_section(build_records_batch([(None, b"c")], compression.NONE, base_offset=3,
                                                    timestamp_ms=9)), 1, 3, 9, None, 0, 100, b, 0)
    rows = b.take().to_pylist()
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == \
        [(0, None, b"a"), (1, b"k", None), (2, b"k2", b"v2"), (3, None, b"c")]
    assert b.take() is None


def test_arrow_batches_have_the_schema_spark_checks():
    from pyspark.sql.pandas.types import to_arrow_schema
    for headers in (False, True):
        b = RowBuilder("topic", 7, headers)
        b.add(1, 1000, 0, None, b"v", [("a", None)])
        b.add(2, 2000, 1, b"k", None, None)
        rb = b.take()
        assert rb.schema.equals(to_arrow_schema(spark_schema(headers), timezone="UTC"))
        rows = rb.to_pylist()
        assert [r["partition"] for r in rows] == [7, 7] and [r["topic"] for r in rows] == ["topic", "topic"]
        if headers:
            assert [r["headers"] for r in rows] == [[{"key": "a", "value": None}], None]
    items = [b"a", None, b"", b"xyz" * 1000, None]
    arr = binary_array(items)
    arr.validate(full=True)
    assert arr.to_pylist() == items and arr.null_count == 2


def test_index_position():
    # entries (relative offset, position): batch ending at 9 starts at 0, ... ending at 29 starts at 2000
    index = struct.pack(">IIIIII", 9, 0, 19, 1000, 29, 2000) + bytes(16)      # untrimmed: trailing zeros
    base = 100
    assert index_position(index, base, 100) == 0
    assert index_position(index, base, 108) == 0
    assert index_position(index, base, 109) == 0
    assert index_position(index, base, 110) == 0          # entry 109 <= 110 -> position of the batch ending at 109
    assert index_position(index, base, 125) == 1000
    assert index_position(index, base, 500) == 2000
    assert index_position(b"", base, 500) == 0


def test_split_ranges_like_spark():
    ranges = [("t", 0, 0, 1000), ("t", 1, 0, 10)]
    assert split_ranges(ranges, None, None) == ranges
    split = split_ranges(ranges, 5, None)
    assert len(split) >= 5 and sum(e - s for _, _, s, e in split) == 1010
    assert [r for r in split if r[1] == 1] == [("t", 1, 0, 10)]            # small partitions stay whole
    split = split_ranges([("t", 0, 0, 1000)], None, 300)
    assert [(s, e) for _, _, s, e in split] == [(0, 250), (250, 500), (500, 750), (750, 1000)]


def test_pieces():
    segs = [SegmentInfo("a", 0, 99, 1, 0), SegmentInfo("b", 100, 199, 1, 0)]
    pieces = remote_pieces(50, 300, segs)
    assert [(p.start, p.end, p.key_prefix) for p in pieces] == [(50, 100, "a"), (100, 200, "b"), (200, 300, None)]
    gap = [SegmentInfo("a", 0, 99, 1, 0), SegmentInfo("c", 150, 199, 1, 0)]
    assert [(p.start, p.end, p.key_prefix) for p in remote_pieces(0, 180, gap)] == \
        [(0, 100, "a"), (100, 150, None), (150, 180, "c")]
    listing = [StoreSegment("a", 0, 10), StoreSegment("b", 100, 10), StoreSegment("c", 200, 10)]
    pieces = store_pieces(150, 250, listing)
    assert [(p.start, p.end, p.key_prefix, p.open_end) for p in pieces] == \
        [(150, 200, "b", False), (200, 250, "c", True)]


def test_stream_offsets_json_is_stable():
    offsets = {("b", 10): 5, ("a", 2): 7, ("b", 2): 1, ("a", 0): 3}
    js = to_json(offsets)
    assert list(js) == ["a", "b"] and list(js["b"]) == ["2", "10"]
    assert from_json(js) == offsets
    import json
    assert json.dumps(to_json(from_json(json.loads(json.dumps(js))))) == json.dumps(js)


def test_rate_limit_like_spark():
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 50}
    out = rate_limit(100, start, latest, {("t", 2): 0})
    assert sum(out[tp] - start.get(tp, 0) for tp in out) <= 100       # floor(100 x 900 / 1050) etc.
    assert out[("t", 0)] == 85 and out[("t", 1)] == 9 and out[("t", 2)] == 4
    assert rate_limit(10_000, start, latest, {("t", 2): 0}) == latest


def test_data_loss_is_an_error_or_a_warning(caplog):
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        report_data_loss(True, "offsets [3, 9) of t-0 are gone")
    with caplog.at_level(logging.WARNING, logger="strata.spark"):
        report_data_loss(False, "offsets [3, 9) of t-0 are gone")
    assert "offsets [3, 9) of t-0 are gone" in caplog.text and "failOnDataLoss is false" in caplog.text


def test_reachable_needs_a_kafka_answer_not_just_a_listener():
    """Once a broker stops, another process may listen on its freed port (in CI, Spark's own worker sockets did):
    planning must then still see the broker as down and plan from the store."""
    import socket
    import threading

    from spark_connector.cluster import reachable

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def serve():
        for reply in (b"", b"\x00\x00\x00\x06garbage"):      # closes at once, then answers with non-Kafka bytes
            conn, _ = srv.accept()
            conn.recv(64)
            conn.sendall(reply)
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        assert not reachable(f"127.0.0.1:{port}", timeout=2)
        assert not reachable(f"127.0.0.1:{port}", timeout=2)
    finally:
        srv.close()
    t.join(5)
    assert not reachable(f"127.0.0.1:{port}", timeout=1)      # nobody listens any more


def test_push_filters_turns_comparisons_into_exact_bounds():
    from pyspark.sql.datasource import (EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                        LessThan, LessThanOrEqual)

    from spark_connector.pushdown import Bounds, push_filters

    off, part = ("offset",), ("partition",)
    b, rest = push_filters([GreaterThan(off, 9), LessThanOrEqual(off, 20), GreaterThanOrEqual(part, 1),
                            LessThan(part, 4), IsNotNull(off)])
    assert rest == []
    assert (b.offset_lo, b.offset_hi, b.partition_lo, b.partition_hi) == (10, 21, 1, 4)
    assert [b.clamp(0, 100), b.clamp(15, 18)] == [(10, 21), (15, 18)]
    assert [p for p in range(6) if b.accepts_partition(p)] == [1, 2, 3]

    b, rest = push_filters([EqualTo(off, 7), EqualNullSafe(part, 2), LessThan(off, 100)])
    assert rest == [] and b.clamp(0, 100) == (7, 8) and [p for p in range(5) if b.accepts_partition(p)] == [2]

    b, rest = push_filters([GreaterThanOrEqual(off, 50), LessThan(off, 10)])     # contradictory: nothing to read
    assert b.clamp(0, 100) == (50, 50)

    in_filter = In(off, (3, 30, 12))
    b, rest = push_filters([in_filter])                  # narrowed to [min, max], Spark still evaluates the In
    assert rest == [in_filter] and b.clamp(0, 100) == (3, 31)

    odd = GreaterThan(part, "x")                         # not an integer literal: left to Spark, bounds unchanged
    b, rest = push_filters([odd])
    assert rest == [odd] and b == Bounds()


def test_read_committed_filter_drops_aborted_transactions_like_kafkas_consumer():
    """AbortedFilter in walk_batches: a transaction aborted before the piece starts is dropped from its first batch
    on, a producer's later transaction (committed) is kept after its ABORT marker, other producers' batches and
    non-transactional ones are kept, markers never come back; the filter sees batches below the piece's start too."""
    from protocol.record_batch import TRANSACTIONAL_BIT, assign_offset
    from protocol.records import build_control_batch
    from spark_connector.remote_reader import walk_batches
    from spark_connector.transactions import AbortedFilter, overlapping, search_indexes
    from storage.log.transaction_index import AbortedTxn

    log, offset, fates = b"", 0, {}

    def data(pid: int, n: int, fate: str) -> None:
        nonlocal log, offset
        txn = pid >= 0
        log += build_records_batch([(None, b"x")] * n, compression.LZ4, base_offset=offset, producer_id=pid,
                                   producer_epoch=0 if txn else -1, attributes=TRANSACTIONAL_BIT if txn else 0)
        fates.update({o: fate for o in range(offset, offset + n)})
        offset += n

    def marker(pid: int, commit: bool) -> int:
        nonlocal log, offset
        b = bytearray(build_control_batch(pid, 0, 0, commit, 1_700_000_000_000))
        assign_offset(b, 0, offset, 0)
        log += bytes(b)
        offset += 1
        return offset - 1

    data(7, 5, "aborted")         # 0-4  pid 7, aborted at 13
    data(-1, 3, "plain")          # 5-7
    data(8, 4, "committed")       # 8-11 pid 8, committed at 12
    marker(8, True)               # 12
    m7 = marker(7, False)         # 13
    data(7, 4, "committed")       # 14-17 pid 7 again, committed at 18
    marker(7, True)               # 18
    data(8, 2, "aborted")         # 19-20 pid 8, aborted at 21
    m8 = marker(8, False)         # 21
    data(-1, 2, "plain")          # 22-23
    entries = [AbortedTxn(7, 0, m7, 8), AbortedTxn(8, 19, m8, 22)]

    def read(start: int, end: int, aborted) -> list[int]:
        builder = RowBuilder("t", 0, False)
        gen = walk_batches(log, start, end, None, builder, "k", start, aborted)
        try:
            while True:
                next(gen)
        except StopIteration:
            pass
        got = builder.take()
        return [] if got is None else got.column("offset").to_pylist()

    committed = [o for o, f in sorted(fates.items()) if f != "aborted"]
    for start, end in ((0, offset), (2, offset), (6, 20), (14, 22)):
        found, _ = search_indexes([entries], start, end)
        assert read(start, end, AbortedFilter(found)) == [o for o in committed if start <= o < end], (start, end)
    # read_uncommitted: every data record, markers never
    assert read(0, offset, None) == sorted(fates)
    # the search stops at the first entry whose last stable offset reaches the end; overlap filters local entries
    assert search_indexes([entries, [AbortedTxn(9, 30, 31, 40)]], 0, 5) == ([(7, 0, 13)], True)
    assert search_indexes([entries], 14, 19) == ([], True)      # Kafka's rule: any entry's LSO, overlapping or not
    assert search_indexes([entries], 14, 30) == ([(8, 19, 21)], False)
    assert overlapping([(7, 0, 13), (8, 19, 21)], 14, 19) == []
    assert overlapping([(7, 0, 13), (8, 19, 21)], 13, 20) == [(7, 0, 13), (8, 19, 21)]


def _segment_objects(root, n_batches: int, per_batch: int, value_size: int) -> tuple[str, bytes, bytes]:
    """A remote segment's .log and .index in a local store directory: n_batches uncompressed batches from offset 0."""
    log, index, offset = b"", b"", 0
    for _ in range(n_batches):
        if len(log) // (256 << 10) > len(index) // 8:           # an index entry every 256 KiB, as Kafka's
            index += struct.pack(">II", offset - 1, len(log) - len(prev))
        prev = build_records_batch([(None, bytes([offset % 251]) * value_size)] * per_batch, compression.NONE,
                                   base_offset=offset)
        log += prev
        offset += per_batch
    (root / "seg.log").write_bytes(log)
    (root / "seg.index").write_bytes(index)
    return "seg", log, index


def _read_piece(reader, start: int, end: int, size: int, key: str = "seg", following: tuple = ()) -> list[int]:
    from spark_connector.planning import Piece
    builder = RowBuilder("t", 0, False)
    got = []
    for batch in reader.read(Piece(start, end, key, 0, size), builder, following=following):
        got += batch.column("offset").to_pylist()
    last = builder.take()
    return got + (last.column("offset").to_pylist() if last is not None else [])


def test_direct_reads_keep_several_gets_in_flight_on_a_slow_store(tmp_path):
    """Issue 27: Spark's direct reads go through the broker's parallel ranged reads: over a store with 30 ms to the
    first byte and 80 MB/s per GET, the read-ahead window grows past the first two chunks, every record of the
    piece comes back once, in order, from the segment's start or from an index entry, and nothing is left in
    flight when the reader closes."""
    from spark_connector.remote_reader import RemoteReader
    prefix, log, _ = _segment_objects(tmp_path, n_batches=300, per_batch=10, value_size=6000)   # ~18 MB
    reader = RemoteReader((f"file://{tmp_path}", {"faults": "get_latency_ms=30,get_bandwidth_mb_s=80"}),
                          2 << 20, True, memory_bytes=64 << 20)
    try:
        assert _read_piece(reader, 0, 3000, len(log)) == list(range(3000))
        assert reader.bytes == len(log)                                  # every byte fetched once
        window = reader.client.on_loop(lambda: reader.reads.read_aheads["seg.log"].window)
        assert window > 2, "the read-ahead never grew past two chunks"
        assert _read_piece(reader, 1234, 2500, -1) == list(range(1234, 2500))      # via the index; size by HEAD
    finally:
        reader.close()
    assert not reader.reads.cache.pending, "a GET was left in flight after close()"
    from spark_connector.planning import Piece
    reader = RemoteReader((f"file://{tmp_path}", {"faults": "get_latency_ms=300"}), 2 << 20, True)
    try:
        gen = reader.read(Piece(0, 3000, "seg", 0, len(log)), RowBuilder("t", 0, False, max_rows=400))
        next(gen)                               # 2.4 MB of rows: into the second chunk, whose read-ahead goes on
        gen.close()                             # a reader that stops early: its read-ahead is cancelled at once
        for _ in range(100):
            if reader.client.on_loop(lambda: len(reader.reads.cache.pending)) == 0:
                break
            time.sleep(0.01)
        assert reader.client.on_loop(lambda: len(reader.reads.cache.pending)) == 0
    finally:
        reader.close()
    assert not reader.reads.cache.pending, "a GET was left in flight after close()"


def test_direct_reads_report_a_truncated_or_empty_segment(tmp_path):
    from spark_connector.remote_reader import RemoteReader
    prefix, log, _ = _segment_objects(tmp_path, n_batches=40, per_batch=10, value_size=6000)
    (tmp_path / "seg.log").write_bytes(log[:len(log) - 1000])
    reader = RemoteReader((f"file://{tmp_path}", {}), 1 << 20, True)
    try:
        with pytest.raises(ValueError, match="ends inside a record batch"):
            _read_piece(reader, 0, 400, len(log))
        (tmp_path / "seg.log").write_bytes(b"")
        with pytest.raises(ValueError, match="the metadata says the segment holds offsets up to 399"):
            _read_piece(reader, 0, 400, 0)
    finally:
        reader.close()


def test_direct_reads_read_ahead_into_the_next_piece_of_the_task(tmp_path):
    """Issue 27: a task that reads two remote segments one after the other has the second's first chunks requested
    while it still reads the first (the read-ahead goes on past the object's end, as the broker's reader does), and
    reads each byte of both once."""
    import shutil
    from spark_connector.planning import Piece
    from spark_connector.remote_reader import RemoteReader
    prefix, log, _ = _segment_objects(tmp_path, n_batches=100, per_batch=10, value_size=6000)   # ~6 MB, 0-999
    shutil.copy(tmp_path / "seg.log", tmp_path / "seg2.log")      # the same batches again: offsets as in seg
    reader = RemoteReader((f"file://{tmp_path}", {"faults": "get_latency_ms=30,get_bandwidth_mb_s=80"}),
                          1 << 20, True, memory_bytes=64 << 20)
    asked: list[str] = []
    store = reader.client.store
    inner_get, inner_get_into = store.get, store.get_into

    async def get(key, start=0, end=None):
        asked.append(key)
        return await inner_get(key, start, end)

    async def get_into(key, start, view):           # whole chunks, read into the cache's buffers
        asked.append(key)
        return await inner_get_into(key, start, view)
    store.get, store.get_into = get, get_into
    second = Piece(0, 1000, "seg2", 0, len(log))
    try:
        assert _read_piece(reader, 0, 1000, len(log), following=(second,)) == list(range(1000))
        assert "seg2.log" in asked, "nothing of the next piece was requested while the first was read"
        assert _read_piece(reader, 0, 1000, len(log), key="seg2") == list(range(1000))
        assert reader.bytes == 2 * len(log)                              # every byte of both once
    finally:
        reader.close()

