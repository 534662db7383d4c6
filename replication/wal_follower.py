"""Active-segment replication through the fast object store (KIP-1176), the follower's side: turn the pointers a
leader sent into the record batches they name.

Adjacent chunks of one object are fetched with one ranged GET, several GETs run at once, and every chunk is
checked against its CRC32C before anything is appended: a damaged range is refused whole and fetched again at the
next fetch (the leader answers a follower stuck on the same pointers with records after
`remote.wal.follower.stall.timeout.ms`). A chunk may begin below our log end (we truncated inside it): the batches
we already have are skipped, as batch boundaries are where both logs agree.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from protocol.errors import ApiError, ErrorCode
from storage.objectstore.object_store import ObjectStoreError
from storage.wal.wal_object import chunk_crc_ok

log = logging.getLogger("strata.wal_follower")

_BATCH_HEAD = struct.Struct(">qi")       # base offset, batch length (after these 12 bytes)
_LAST_DELTA = struct.Struct(">i")        # at byte 23 of a batch


class WalDownloadError(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class WalReader:
    """Downloads the chunks of one fetch response: the pointers of all its partitions are grouped by object, and
    ranges of one object that touch or lie within `MAX_GAP` bytes of each other are read with one GET (chunks of
    many partitions sit side by side in an object, and a GET costs more than reading a few KiB between them)."""

    MAX_GAP = 32 * 1024

    def __init__(self, stores, metrics, max_concurrency: int = 8, timeout: float = 5.0):
        self.stores, self.metrics, self.timeout = stores, metrics, timeout
        self._slots = asyncio.Semaphore(max_concurrency)

    async def download_all(self, wanted: list[tuple[str, list]]) -> list:
        """For each (store name, pointers): its chunks in order, or the WalDownloadError that stopped them."""
        ranges: dict[tuple[str, str], list] = {}          # (store, key) -> [[start, end, [(i, pointer)...]], ...]
        results: list = [None] * len(wanted)
        for i, (store_name, pointers) in enumerate(wanted):
            if store_name not in self.stores.urls:
                results[i] = WalDownloadError("unknown_store", f"no fast store named {store_name!r} is configured")
                continue
            for p in pointers:
                ranges.setdefault((store_name, p.key), []).append((p.position, i, p))
        gets = []                                          # (store, key, start, end, [(i, pointer)])
        for (store_name, key), items in ranges.items():
            items.sort(key=lambda x: x[0])
            cur = None
            for pos, i, p in items:
                if cur is not None and pos <= cur[3] + self.MAX_GAP:
                    cur[3] = max(cur[3], pos + p.size)
                    cur[4].append((i, p))
                else:
                    cur = [store_name, key, pos, pos + p.size, [(i, p)]]
                    gets.append(cur)
        try:
            datas = await asyncio.wait_for(asyncio.gather(*(self._get(*g[:4]) for g in gets),
                                                          return_exceptions=True), self.timeout)
        except asyncio.TimeoutError:
            self.metrics.download_errors.labels("timeout").inc()
            err = WalDownloadError("timeout", f"reading {len(gets)} range(s) took over {self.timeout:.1f}s")
            return [r if r is not None else err for r in results]
        chunks: dict = {}                                  # (i, pointer index in its list) -> chunk
        for g, data in zip(gets, datas):
            for i, p in g[4]:
                if results[i] is not None:
                    continue
                if isinstance(data, BaseException):
                    results[i] = data if isinstance(data, WalDownloadError) else \
                        WalDownloadError("store", f"reading {p.key} failed: {data}")
                    continue
                chunk = memoryview(data)[p.position - g[2]:p.position - g[2] + p.size]
                if len(chunk) != p.size or not chunk_crc_ok(chunk, p.crc):
                    self.metrics.download_errors.labels("crc").inc()
                    results[i] = WalDownloadError("crc", f"{p.key} bytes {p.position}..{p.position + p.size} "
                                                         f"(offsets {p.base_offset}..{p.last_offset}) do not match "
                                                         f"their CRC")
                    continue
                chunks[(i, id(p))] = chunk
        return [r if r is not None else [chunks[(i, id(p))] for p in wanted[i][1]] for i, r in enumerate(results)]

    async def _get(self, store_name: str, key: str, start: int, end: int) -> bytes:
        async with self._slots:
            try:
                data = await self.stores.get(store_name).get(key, start, end)
            except (ObjectStoreError, OSError) as e:
                self.metrics.download_errors.labels("store").inc()
                raise WalDownloadError("store", f"reading {key} failed: {e}") from None
        self.metrics.downloaded(store_name, len(data), 1)
        return data


def skip_below(chunk: memoryview, offset: int) -> memoryview:
    """The batches of `chunk` whose last offset is at or past `offset`."""
    pos = 0
    while pos + 27 <= len(chunk):
        base, length = _BATCH_HEAD.unpack_from(chunk, pos)
        (delta,) = _LAST_DELTA.unpack_from(chunk, pos + 23)
        if base + delta >= offset:
            break
        pos += 12 + length
    return chunk[pos:]


def append_chunks(part, chunks, high_watermark: int) -> int:
    """Append downloaded chunks as a follower; returns the record bytes appended. Raises ApiError."""
    total = 0
    for chunk in chunks:
        data = skip_below(chunk, part.log_end_offset)
        if not len(data):
            continue
        first = _BATCH_HEAD.unpack_from(data, 0)[0]
        if first != part.log_end_offset:
            raise ApiError(ErrorCode.corrupt_message, f"WAL chunk of {part.topic}-{part.index} starts at {first}, "
                                                      f"not at our log end {part.log_end_offset}")
        part.append_records_to_follower(bytearray(data), high_watermark)
        total += len(data)
    part.update_follower_high_watermark(high_watermark)
    return total
