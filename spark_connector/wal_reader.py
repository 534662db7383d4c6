"""Executor side: read the recent, not yet tiered part of an offset range from the fast store's WAL objects
(KIP-1176), with the pointers the planner got from the partition's leader (DescribeWalPointers,
docs/wal.md#readers-of-the-fast-store).

A pointer names a chunk: a byte range of one object holding one partition's batches exactly as in the leader's log,
with its CRC32C. Chunks of one object that lie side by side are read with one ranged GET; every chunk's CRC is
checked before its batches are decoded (remote_reader.walk_batches, the segment path's decoder). An object that is
gone (collected after `remote.wal.retention.ms`) or a chunk that fails its CRC ends the WAL read at the first offset
not yet read: the caller reads the rest of the piece by Fetch, so a late task still returns every record.
"""
from __future__ import annotations

from typing import Iterator

from spark_connector.remote_reader import walk_batches

MAX_GET_BYTES = 16 << 20


def group_gets(pointers) -> list[tuple[str, int, int, list]]:
    """(key, start, end, pointers) per ranged GET: consecutive pointers into one object whose bytes touch, up to
    MAX_GET_BYTES a GET. Pointers are (key, position, size, crc, base offset, last offset)."""
    gets: list = []
    for ptr in pointers:
        key, pos, size = ptr[0], ptr[1], ptr[2]
        if gets and gets[-1][0] == key and gets[-1][2] == pos and gets[-1][2] - gets[-1][1] + size <= MAX_GET_BYTES:
            gets[-1][2] = pos + size
            gets[-1][3].append(ptr)
        else:
            gets.append([key, pos, pos + size, [ptr]])
    return [tuple(g) for g in gets]


class WalReader:
    """Reads the WAL pieces of one input partition; owns a StoreClient for the fast store until close(). The GETs of
    a piece are read in order with the broker's read-ahead (storage/tiered/remote_chunks.py: ChunkCache.in_order):
    two in flight at first, twice as many whenever the decoder waits for one already on its way, within
    `memory_bytes`."""

    def __init__(self, store: tuple, memory_bytes: int = 128 << 20):
        from spark_connector.storeio import StoreClient
        from storage.tiered.remote_chunks import ChunkCache
        url, options = store
        self.client = StoreClient(url, dict(options))
        self.cache = ChunkCache(memory_bytes)
        self.gets = 0
        self.bytes = 0
        self.stopped_at: int | None = None      # set when the store could not serve the whole piece

    def close(self) -> None:
        try:
            self.client.call(self.cache.close(), timeout=30)
        finally:
            self.client.close()

    def _parts(self, gets) -> list:
        """The piece's GETs as ChunkCache.in_order parts: (cache key, size, make)."""
        store = self.client.store
        return [((key, lo, hi), hi - lo, (lambda key=key, lo=lo, hi=hi: store.get(key, lo, hi)))
                for key, lo, hi, _ in gets]

    def read(self, piece, builder, ts_lo: int | None = None, aborted: tuple | None = None) -> Iterator:
        """Append the records of [piece.start, piece.end) to `builder`, yielding a RecordBatch whenever it is full.
        If an object is gone or a chunk is damaged, stop; `stopped_at` is then the first offset not read.
        With `aborted` (read_committed: the leader's aborted transactions (producer id, first offset, last offset)
        overlapping the range, DescribeWalPointers v1) records of aborted transactions are left out."""
        import crc32c

        from storage.objectstore.object_store import ObjectNotFound
        from spark_connector.transactions import AbortedFilter, overlapping
        self.stopped_at = None
        txn_filter = None if aborted is None else AbortedFilter(overlapping(aborted, piece.start, piece.end))
        from storage.tiered.remote_chunks import ReadAhead
        start, end = piece.start, piece.end
        gets = group_gets(piece.wal)
        parts = self._parts(gets)
        average = max(1, sum(hi - lo for _, lo, hi, _ in gets) // max(1, len(gets)))
        ra = ReadAhead(average, 2, max(1, self.cache.capacity // (2 * average)))

        async def part(i: int) -> bytes:
            return await self.cache.in_order(ra, parts, i)
        next_offset = start
        try:
            for i, (key, lo, _hi, ptrs) in enumerate(gets):
                try:
                    data = self.client.call(part(i))
                except ObjectNotFound:
                    self.stopped_at = next_offset
                    return
                self.gets += 1
                self.bytes += len(data)
                for ptr in ptrs:
                    chunk = data[ptr[1] - lo:ptr[1] - lo + ptr[2]]
                    if len(chunk) != ptr[2] or crc32c.crc32c(chunk) != ptr[3]:
                        self.stopped_at = next_offset
                        return
                    used, next_offset, done = yield from walk_batches(chunk, start, end, ts_lo, builder, key,
                                                                      next_offset, txn_filter)
                    if used != len(chunk) and not done:
                        raise ValueError(f"WAL chunk {key}@{ptr[1]} of {builder.topic}-{builder.partition} does "
                                         f"not end on a batch boundary although its CRC matches")
                    if done or next_offset >= end:
                        return
            if next_offset < end:
                self.stopped_at = next_offset
        finally:
            wanted = {p[0] for p in parts}
            # the piece is read (or given up): its GETs are not needed (the cache is the loop thread's)
            self.client.on_loop(self.cache.drop, lambda k: k in wanted)
