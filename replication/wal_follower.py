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
    def __init__(self, stores, metrics, max_concurrency: int = 8, timeout: float = 5.0):
        self.stores, self.metrics, self.timeout = stores, metrics, timeout
        self._slots = asyncio.Semaphore(max_concurrency)

    async def download(self, store_name: str, pointers) -> list[bytes]:
        """The chunks `pointers` name, in order, each checked against its CRC. WalDownloadError on failure."""
        try:
            store = self.stores.get(store_name)
        except KeyError:
            raise WalDownloadError("unknown_store", f"no fast store named {store_name!r} is configured") from None
        ranges: list[list] = []
        for p in pointers:
            last = ranges[-1] if ranges else None
            if last is not None and last[0].key == p.key and last[-1].position + last[-1].size == p.position:
                last.append(p)
            else:
                ranges.append([p])
        try:
            datas = await asyncio.wait_for(asyncio.gather(*(self._get(store, store_name, r) for r in ranges),
                                                          return_exceptions=True), self.timeout)
        except asyncio.TimeoutError:
            self.metrics.download_errors.labels("timeout").inc()
            raise WalDownloadError("timeout", f"reading {len(ranges)} range(s) took over {self.timeout:.1f}s") from None
        out = []
        for r, data in zip(ranges, datas):
            if isinstance(data, BaseException):
                if isinstance(data, WalDownloadError):
                    raise data
                raise WalDownloadError("store", f"reading {r[0].key} failed: {data}") from data
            view = memoryview(data)
            pos = 0
            for p in r:
                chunk = view[pos:pos + p.size]
                if len(chunk) != p.size or not chunk_crc_ok(chunk, p.crc):
                    self.metrics.download_errors.labels("crc").inc()
                    raise WalDownloadError("crc", f"{p.key} bytes {p.position}..{p.position + p.size} (offsets "
                                                  f"{p.base_offset}..{p.last_offset}) do not match their CRC")
                out.append(chunk)
                pos += p.size
        return out

    async def _get(self, store, store_name: str, r: list) -> bytes:
        start, end = r[0].position, r[-1].position + r[-1].size
        async with self._slots:
            try:
                data = await store.get(r[0].key, start, end)
            except (ObjectStoreError, OSError) as e:
                self.metrics.download_errors.labels("store").inc()
                raise WalDownloadError("store", f"reading {r[0].key} failed: {e}") from None
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
    part.log.update_high_watermark(min(high_watermark, part.log_end_offset))
    return total
