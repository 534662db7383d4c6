"""Executor side: read the tiered part of an offset range straight from the object store, without the broker.

Per segment: the `.index` object (Kafka's offset index: 8-byte entries, offset relative to the segment's base and
byte position, both u32 big endian; an entry names the LAST offset of the batch at that position) gives the byte
position at or below the first wanted offset; then ranged GETs of the `.log` object, several in flight ahead of the
decoder (the broker's parallel ranged reads), are walked batch by batch on the 61-byte v2 header (baseOffset i64, batchLength i32, ..., attributes i16 at byte 21,
lastOffsetDelta i32 at 23, baseTimestamp i64 at 27, maxTimestamp i64 at 35, ...). Batches wholly outside the range,
control batches and batches entirely older than a pushed timestamp bound are skipped without decompressing; the
rest are decompressed by protocol/records.py (every codec, xerial snappy included) and decoded into columns by
decode.py.
"""
from __future__ import annotations

from typing import Iterator

from protocol.record_batch import CONTROL_BIT, HEADER, HEADER_SIZE, TIMESTAMP_TYPE_BIT
from spark_connector.planning import Piece, report_data_loss


def index_position(index: bytes, base_offset: int, target: int) -> int:
    """Byte position in the .log where the batch holding `target` starts or before (0 without an entry)."""
    import numpy as np
    n = len(index) // 8
    if n == 0 or target <= base_offset:
        return 0
    arr = np.frombuffer(index, dtype=">u4", count=2 * n).reshape(n, 2).astype(np.int64)
    rel, pos = arr[:, 0], arr[:, 1]
    bad = np.nonzero(np.diff(rel) <= 0)[0]      # a preallocated, untrimmed index ends in zero entries
    if bad.size:
        rel, pos = rel[:bad[0] + 1], pos[:bad[0] + 1]
    i = int(np.searchsorted(rel, target - base_offset, side="right")) - 1
    return int(pos[i]) if i >= 0 else 0


def walk_batches(buf: bytes, start: int, end: int, ts_lo: int | None, builder, key: str, next_offset: int,
                 aborted=None):
    """Decode the complete v2 batches at the head of `buf` whose records fall in [start, end) into `builder`,
    yielding a RecordBatch whenever it fills. Returns (bytes consumed, the offset after the last batch seen,
    whether a batch at or past `end` was reached). Control batches, batches wholly older than `ts_lo` and, with
    read_committed (`aborted`, a transactions.AbortedFilter that sees every batch), batches of aborted transactions
    are skipped without decompressing. Shared by segment reads (this module) and WAL chunk reads (wal_reader.py)."""
    from protocol.records import records_section
    from spark_connector.decode import decode_into
    mv = memoryview(buf)
    p, n = 0, len(buf)
    while n - p >= HEADER_SIZE:
        (base, length, _epoch, magic, _crc, attrs, last_delta, base_ts, max_ts, pid, _pe, _seq,
         count) = HEADER.unpack_from(buf, p)
        total = 12 + length
        if n - p < total:
            break
        if base >= end:
            return p, next_offset, True
        last = base + last_delta
        if aborted is not None and aborted.skip(last, attrs, pid, mv[p:p + total]):
            pass
        elif last >= start and not attrs & CONTROL_BIT and (ts_lo is None or max_ts >= ts_lo):
            if magic != 2:
                raise ValueError(f"{key}: batch at offset {base} has magic {magic}, only v2 is supported")
            lat = attrs & TIMESTAMP_TYPE_BIT
            decode_into(records_section(mv[p:p + total]), count, base, base_ts, max_ts if lat else None,
                        start, end, builder, 1 if lat else 0)
        next_offset = max(next_offset, last + 1)
        p += total
        if builder.full():
            yield builder.take()
    return p, next_offset, False


class RemoteReader:
    """Reads pieces of one input partition; owns a StoreClient (an event loop thread) until close(). Segments are read
    with the broker's parallel ranged reads (storage/tiered/remote_chunks.py): on the client's loop, several GETs
    stay in flight ahead of the decoder, as many as the store's latency and the decoder's pace call for, within
    `memory_bytes`."""

    def __init__(self, store: tuple, chunk_bytes: int, fail_on_data_loss: bool, memory_bytes: int = 128 << 20):
        from spark_connector.storeio import StoreClient
        from storage.tiered.remote_chunks import ChunkCache, GetEstimate, RangedReads
        url, options = store
        self.client = StoreClient(url, dict(options))
        self.fail = fail_on_data_loss
        self.reads = RangedReads(ChunkCache(memory_bytes), GetEstimate(), chunk_bytes, 2)
        self.gets = 0                 # ranged GETs of .log objects and their bytes (the benchmark prints them)
        self.bytes = 0
        self._txn_indexes: dict[str, list] = {}     # read_committed: parsed .txnindex objects by key prefix

    def close(self) -> None:
        try:
            self.client.call(self.reads.close(), timeout=30)
        finally:
            self.client.close()

    def _gone(self, piece: Piece, builder, what: str) -> None:
        report_data_loss(self.fail, f"Remote segment {piece.key_prefix} of {builder.topic}-{builder.partition} "
                                    f"({what}) is gone from the object store {self.client.url}, so offsets "
                                    f"[{piece.start}, {piece.end}) cannot be read")

    def _txn_index(self, key_prefix: str) -> list:
        """A remote segment's aborted transactions (its .txnindex object, Kafka's AbortedTxn entries)."""
        from storage.log.transaction_index import parse_entries
        if key_prefix not in self._txn_indexes:
            self._txn_indexes[key_prefix] = parse_entries(self.client.get(key_prefix + ".txnindex").result())
        return self._txn_indexes[key_prefix]

    def aborted(self, piece: Piece, builder, txn: tuple):
        """read_committed: a transactions.AbortedFilter for the piece, from the .txnindex objects of its segment and
        the later ones (`txn[1]`: (segment start, end, key prefix) of the remote segments that have one, in order)
        until the search completes, and the leader's local entries (`txn[0]`). None (data loss reported) when an
        index the planner listed is gone: the segments are being deleted."""
        from storage.objectstore.object_store import ObjectNotFound
        from spark_connector.transactions import AbortedFilter, overlapping, search_indexes
        local, indexes = txn
        wanted = (self._txn_index(prefix) for _, seg_end, prefix in indexes if seg_end >= piece.start)
        try:
            found, _complete = search_indexes(wanted, piece.start, piece.end)
        except ObjectNotFound:
            self._gone(piece, builder, "a transaction index of it or of a later segment")
            return None
        return AbortedFilter(found + overlapping(local, piece.start, piece.end))

    def _object(self, key: str, size: int, following: tuple = ()):
        """The .log object for the ranged reads; each GET is timed for the store estimate. A GET may come back short
        (an object shorter than its metadata): the read then ends there and says so. When the read-ahead reaches past
        its end it goes on with the segments of the `following` pieces read from their start (the task reads them
        next), as the broker's reader goes on with the next segment."""
        from storage.objectstore.object_store import reads_into
        from storage.tiered.remote_chunks import RangedObject
        store, estimate = self.client.store, self.reads.estimate

        async def fetch(start: int, end: int) -> bytes:
            data = await estimate.timed(store.get(key, start, end))
            self.gets += 1
            self.bytes += len(data)
            return data

        fetch_into = None
        if reads_into(store):
            async def fetch_into(start: int, end: int, buf: memoryview):
                """As fetch, into a buffer the chunk cache reuses (chunk_buffers.py)."""
                got = await estimate.timed(store.get_into(key, start, memoryview(buf)))
                self.gets += 1
                self.bytes += len(got)
                return buf if len(got) == len(buf) else got

        def after(window: int, count: int) -> bool:
            nxt = following[0] if following else None
            if nxt is not None and nxt.key_prefix is not None and nxt.size >= 0 and nxt.start == nxt.segment_start:
                return self.reads.start(self._object(nxt.key_prefix + ".log", nxt.size, following[1:]), window, count)
            return True                     # nothing after this that is read as an object: nothing to request
        return RangedObject(key, size, fetch, after, fetch_into)

    def read(self, piece: Piece, builder, ts_lo: int | None = None, txn: tuple | None = None,
             following: tuple = ()) -> Iterator:
        """Append the records of [piece.start, piece.end) to `builder`, yielding a RecordBatch whenever it is full.
        With `txn` (read_committed: the range's aborted transactions, see aborted()) records of aborted transactions
        are left out. `following`: the pieces the task reads after this one (read ahead into, see _object)."""
        from storage.objectstore.object_store import ObjectNotFound
        aborted = None
        if txn is not None:
            aborted = self.aborted(piece, builder, txn)
            if aborted is None:
                return
        key = piece.key_prefix + ".log"
        position = 0
        if piece.start > piece.segment_start:
            try:
                index = self.client.get(piece.key_prefix + ".index").result()
            except ObjectNotFound:
                self._gone(piece, builder, "its .index")
                return
            position = index_position(index, piece.segment_start, piece.start)
        size = piece.size
        if size < 0:
            info = self.client.call(self.client.store.head(key))
            if info is None:
                self._gone(piece, builder, "its .log")
                return
            size = info.size
        obj = self._object(key, size, following)
        ra = self.client.on_loop(self.reads.read_ahead, key)
        cs = ra.chunk_size
        i, skip = divmod(position, cs)
        start, end = piece.start, piece.end
        buf = b""
        next_offset = start
        done = False
        try:
            while not done:
                if i * cs >= size:
                    data, eof = b"", True                # nothing (more) in the object where the piece needs it
                else:
                    try:
                        data = self.client.call(self.reads.chunk(obj, i, ra, at=skip))   # its pace: whole chunks
                    except ObjectNotFound:
                        self._gone(piece, builder, "its .log")
                        return
                    eof = len(data) < min(cs, size - i * cs) or (i + 1) * cs >= size
                if skip:
                    data, skip = data[skip:], 0
                i += 1
                buf = buf + data if buf else data
                p, next_offset, done = yield from walk_batches(buf, start, end, ts_lo, builder, key, next_offset,
                                                               aborted)
                buf = buf[p:]
                if eof and not done:
                    if buf:
                        raise ValueError(f"{key} ends inside a record batch ({len(buf)} bytes left): truncated "
                                         f"object")
                    if next_offset < end:
                        if not piece.open_end:
                            raise ValueError(f"{key} ends at offset {next_offset - 1}, but the metadata says the "
                                             f"segment holds offsets up to {end - 1}")
                        report_data_loss(self.fail, f"Offsets [{next_offset}, {end}) of {builder.topic}-"
                                                    f"{builder.partition} are not in the object store (its last "
                                                    f"segment ends at {next_offset - 1}) and the broker is "
                                                    f"unreachable")
                    done = True
        finally:
            # read as far as wanted (or abandoned): its chunks are not needed again (the cache is the loop thread's)
            self.client.on_loop(self.reads.cache.drop, lambda k: k[0] == key)
