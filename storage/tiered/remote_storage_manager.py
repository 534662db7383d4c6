"""RemoteStorageManager (KIP-405) over the ObjectStore interface: copy a closed segment and its indexes, fetch a
byte range of a segment or a whole index, delete a segment's objects.

Key layout (one object per file, Kafka's suffixes; topic id and segment id in Kafka's Uuid string form):

    <topic>-<topicId>/<partition>/<startOffset, 20 digits>-<segmentId>.log
                                                               .index                    offset index
                                                               .timeindex                time index
                                                               .snapshot                 producer state at the end
                                                               .leader_epoch_checkpoint  epochs up to the end
                                                               .txnindex                 only when the segment has one

Every copy attempt gets a fresh segment id (RemoteLogSegmentId.generate), so a retried or half-finished copy never
overwrites objects another attempt wrote; the RemoteLogManager deletes the objects of failed attempts.

Segment reads from a local-filesystem store map the object file (read-only mmap, like local segments) and return
memoryview slices instead of copying through `ObjectStore.get` in a worker thread: objects are immutable once
published (a segment id is never rewritten) and a mapping outlives the file's deletion. Everything else, and every
read from S3, goes through the ObjectStore interface.

Reads are checked for length before anyone caches or parses them: a GET that answers with fewer bytes than the
object holds (a truncated response) raises a retriable RemoteStorageException instead of returning short data. A
segment range is checked against the segment size in its metadata; an index against its object's size (a HEAD
sent with the GET: the metadata holds no index sizes), since a short transaction index would hide aborted
transactions from read_committed consumers.
"""
from __future__ import annotations

import asyncio
import logging
import mmap
import os
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from storage.objectstore.object_store import ObjectNotFound, ObjectStore, ObjectStoreError, reads_into
from storage.tiered.remote_chunks import GetEstimate
from storage.tiered.remote_log_metadata import (
    RemoteLogSegmentMetadata, RemoteResourceNotFoundException, RemoteStorageException, kafka_uuid,
)

log = logging.getLogger("strata.remote_storage_manager")


class IndexType(Enum):
    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = ".leader_epoch_checkpoint"


LOG_SUFFIX = ".log"
ALL_SUFFIXES = (LOG_SUFFIX,) + tuple(t.value for t in IndexType)


@dataclass(frozen=True)
class LogSegmentData:
    """What one copy uploads (Kafka's LogSegmentData); the leader-epoch checkpoint is passed as bytes."""
    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path | None
    leader_epoch_index: bytes


def partition_prefix(topic: str, topic_id, partition: int) -> str:
    return f"{topic}-{kafka_uuid(topic_id)}/{partition}/"


def segment_key_prefix(md: RemoteLogSegmentMetadata) -> str:
    tip = md.tip
    return (partition_prefix(tip.topic, tip.topic_id, tip.partition)
            + f"{md.start_offset:020d}-{kafka_uuid(md.segment_id.id)}")


def _wrap(e: Exception, what: str) -> RemoteStorageException:
    if isinstance(e, ObjectNotFound):
        return RemoteResourceNotFoundException(f"{what}: {e}")
    if isinstance(e, ObjectStoreError):
        return RemoteStorageException(f"{what}: {e}", retriable=e.retriable)
    return RemoteStorageException(f"{what}: {type(e).__name__}: {e}", retriable=isinstance(e, OSError))


class RemoteStorageManager:
    def __init__(self, store: ObjectStore, *, max_mapped_segments: int = 64):
        self.store = store
        self._root = getattr(store, "root", None) if type(store).__name__ == "LocalObjectStore" else None
        self._maps: OrderedDict[str, mmap.mmap] = OrderedDict()
        self._max_maps = max_mapped_segments
        self.segment_gets = 0            # ranged GETs of .log objects and their bytes (for logs and benchmarks)
        self.segment_get_bytes = 0
        self.gets = GetEstimate()        # the store's latency and bandwidth, from the GETs below (remote_chunks.py)

    async def copy_log_segment_data(self, md: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Upload the segment and its indexes (concurrently). Returns custom metadata (none). Raises
        RemoteStorageException; objects already written stay until delete_log_segment_data."""
        prefix = segment_key_prefix(md)
        try:
            small: dict[str, bytes] = {
                IndexType.OFFSET.value: data.offset_index.read_bytes() if data.offset_index.exists() else b"",
                IndexType.TIMESTAMP.value: data.time_index.read_bytes() if data.time_index.exists() else b"",
                IndexType.LEADER_EPOCH.value: data.leader_epoch_index,
            }
            if data.producer_snapshot_index is not None and data.producer_snapshot_index.exists():
                small[IndexType.PRODUCER_SNAPSHOT.value] = data.producer_snapshot_index.read_bytes()
            if data.transaction_index is not None and data.transaction_index.exists():
                small[IndexType.TRANSACTION.value] = data.transaction_index.read_bytes()
            mapped = _map_file(data.log_segment)     # stays readable even if retention unlinks the file meanwhile
        except OSError as e:
            raise _wrap(e, f"reading local files of {md.segment_id}") from e
        view = memoryview(mapped) if mapped is not None else memoryview(b"")
        try:
            # Indexes first (concurrently, waiting for every put), the .log object last: a reader that lists the
            # store without the metadata topic (the Spark connector with the broker down) counts a segment only
            # once its .log exists, so the .log must be the commit point of the copy.
            results = await asyncio.gather(*(self.store.put(prefix + suffix, body) for suffix, body in small.items()),
                                           return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            await self.store.put(prefix + LOG_SUFFIX, view)
        except (ObjectStoreError, OSError) as e:
            raise _wrap(e, f"copying {md.segment_id}") from e
        finally:
            try:
                view.release()
                if mapped is not None:
                    mapped.close()
            except BufferError:
                pass                          # a cancelled upload thread still holds a slice; GC unmaps it later
        return None

    @property
    def reads_into(self) -> bool:
        """Whether fetch_log_segment can read into a caller's buffer (a GET, on a store that has get_into)."""
        return self._root is None and reads_into(self.store)

    async def fetch_log_segment(self, md: RemoteLogSegmentMetadata, start: int, end: int | None = None,
                                into: memoryview | None = None) -> bytes | memoryview:
        """Bytes [start, end) of the segment's .log object (end exclusive; None = to the end); with `into` (when
        `reads_into`), read into that buffer of exactly end - start bytes, and it is the answer."""
        key = segment_key_prefix(md) + LOG_SUFFIX
        if self._root is not None:
            data = self._mapped(key, start, end)
        elif into is not None:
            try:
                got = len(await self.gets.timed(self.store.get_into(key, start, memoryview(into))))
                self.segment_gets += 1
                self.segment_get_bytes += got
            except (ObjectStoreError, OSError) as e:
                raise _wrap(e, f"fetching {md.segment_id} [{start}, {end})") from e
            data = into if got == len(into) else memoryview(into)[:got]
        else:
            try:
                data = await self.gets.timed(self.store.get(key, start, end))
                self.segment_gets += 1
                self.segment_get_bytes += len(data)
            except (ObjectStoreError, OSError) as e:
                raise _wrap(e, f"fetching {md.segment_id} [{start}, {end})") from e
        size = md.segment_size_in_bytes
        need = max(0, (size if end is None else min(end, size)) - start)
        if len(data) < need:
            raise RemoteStorageException(f"fetching {md.segment_id} [{start}, {end}): got {len(data)} of {need} "
                                         f"bytes (a truncated read)", retriable=True)
        return data

    def _mapped(self, key: str, start: int, end: int | None) -> memoryview:
        if getattr(self.store, "_closed", False):
            raise RemoteStorageException(f"{self.store!r} is closed", retriable=False)
        mm = self._maps.get(key)
        if mm is None:
            try:
                fd = os.open(self._root.joinpath(*key.split("/")), os.O_RDONLY)
            except (FileNotFoundError, NotADirectoryError):
                raise RemoteResourceNotFoundException(f"{key!r} not found") from None
            except OSError as e:
                raise _wrap(e, f"opening {key}") from e
            try:
                size = os.fstat(fd).st_size
                mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else b""
            finally:
                os.close(fd)
            self._maps[key] = mm
            while len(self._maps) > self._max_maps:
                _, old = self._maps.popitem(last=False)
                _close_map(old)
        else:
            self._maps.move_to_end(key)
        stop = len(mm) if end is None else min(end, len(mm))
        view = memoryview(mm)[start:max(start, stop)]
        self.segment_gets += 1
        self.segment_get_bytes += len(view)
        return view

    def forget(self, md: RemoteLogSegmentMetadata) -> None:
        mm = self._maps.pop(segment_key_prefix(md) + LOG_SUFFIX, None)
        if mm is not None:
            _close_map(mm)

    async def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index object, checked against its size (HEAD and GET concurrently: no added latency)."""
        key = segment_key_prefix(md) + index_type.value
        what = f"fetching {index_type.name} index of {md.segment_id}"
        data, info = await asyncio.gather(self.gets.timed(self.store.get(key)), self.store.head(key),
                                          return_exceptions=True)
        for r in (data, info):
            if isinstance(r, (ObjectStoreError, OSError)):
                raise _wrap(r, what) from r
            if isinstance(r, BaseException):
                raise r
        if info is None or len(data) != info.size:    # truncated, or replaced meanwhile (ids are never reused)
            raise RemoteStorageException(f"{what}: got {len(data)} of {info.size if info else '?'} bytes (a "
                                         f"truncated read)", retriable=True)
        return data

    async def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment; objects that are already gone are fine (idempotent)."""
        prefix = segment_key_prefix(md)
        self.forget(md)
        try:
            # the .log first, so a store listing never shows a segment whose indexes are already gone
            await self.store.delete(prefix + LOG_SUFFIX)
            await asyncio.gather(*(self.store.delete(prefix + suffix) for suffix in ALL_SUFFIXES
                                   if suffix != LOG_SUFFIX))
        except (ObjectStoreError, OSError) as e:
            raise _wrap(e, f"deleting {md.segment_id}") from e

    async def close(self) -> None:
        for mm in self._maps.values():
            _close_map(mm)
        self._maps.clear()
        await self.store.close()


def _close_map(mm) -> None:
    if isinstance(mm, mmap.mmap):
        try:
            mm.close()
        except BufferError:
            pass                  # a fetch response still holds a slice: unmapped when the last one dies


def _map_file(path: Path) -> mmap.mmap | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
    finally:
        os.close(fd)
