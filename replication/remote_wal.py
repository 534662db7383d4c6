"""Active-segment replication through the fast object store (KIP-1176), the leader's side.

A leader's appends to partitions with `remote.wal.enable=true` are gathered by one combiner per broker and uploaded
as WAL objects holding many partitions (storage/wal/wal_object.py), when `remote.wal.upload.max.bytes` are buffered
or `remote.wal.upload.interval.ms` after the first one, whichever comes first, at most
`remote.wal.upload.max.inflight` at a time. Uploads may finish out of order; their pointers are published in upload
order, so each partition's pointer file stays in offset order.

What a follower's fetch gets (PartitionWal.serve): pointers where the pointer file covers its fetch offset; records,
as in classic replication, for what was appended before this leadership began, for what a failed upload held, for
a follower that made no progress on the pointers it got (a damaged or vanished object), and for everything while
the fast store is considered down; otherwise nothing yet (the data is still being uploaded: the fetch parks until
the upload is published). acks=all is untouched: the high watermark still moves only with the followers' fetch
offsets, i.e. when they have appended, never on upload alone.

Fallback: `remote.wal.fallback.failure.threshold` uploads in a row that fail or take longer than
`remote.wal.upload.timeout.ms` switch the broker to records; the combiner keeps uploading, and the first upload
that succeeds switches back. The mode is the `strata_wal_mode` gauge and a log line.

Garbage collection: an object is deleted, oldest first, once `remote.wal.retention.ms` has passed since its upload
and every partition in it has either a high watermark past its chunk (every ISR replica appended it) or is no
longer led here at that epoch (its new leader never hands out our pointers). Objects of an earlier incarnation of
this broker are deleted after the retention time. Object keys: `wal/<broker id>/<upload id, 16 hex digits>`, the
upload id rising with the wall clock, so listing a prefix gives upload order.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from protocol.replica_fetch import RemotePointer
from storage.objectstore.object_store import ObjectStoreError
from storage.wal import wal_object
from storage.wal.wal_pointers import FILE_NAME, WalPointer, WalPointerIndex

log = logging.getLogger("strata.remote_wal")

WAL_DEFAULTS: dict[str, str] = {
    "remote.wal.storage.url": "",
    "remote.wal.upload.max.bytes": str(8 * 1024 * 1024),
    "remote.wal.upload.interval.ms": "100",
    "remote.wal.upload.max.inflight": "4",
    "remote.wal.upload.timeout.ms": "2000",
    "remote.wal.fallback.failure.threshold": "3",
    "remote.wal.follower.stall.timeout.ms": "5000",
    "remote.wal.retention.ms": "300000",
    "remote.wal.gc.interval.ms": "1000",
}
POINTERS, RECORDS, WAIT = "pointers", "records", "wait"


def _topic_id_bytes(topic_id: str) -> bytes:
    return uuid.UUID(topic_id).bytes if topic_id else bytes(16)


def object_key(node_id: int, upload_id: int) -> str:
    return f"wal/{node_id}/{upload_id:016x}"


class PartitionWal:
    """One partition's WAL state while this broker leads it: its pointer file (opened on the first upload, so
    partitions that never lead with WAL on cost no file), how far its uploads have been resolved, and which
    followers are stuck on pointers."""
    __slots__ = ("manager", "dir", "_pointers", "leader_start", "resolved_end", "_stalls")

    def __init__(self, manager: "RemoteWalManager", dir):
        self.manager = manager
        self.dir = dir
        self._pointers: WalPointerIndex | None = None
        (dir / FILE_NAME).unlink(missing_ok=True)     # an earlier run's: its leadership is over
        self.leader_start = 1 << 62      # appends from here on are uploaded (our log end when we became leader)
        self.resolved_end = 1 << 62      # every upload holding offsets below this one is finished, well or not
        self._stalls: dict[int, tuple[int, float]] = {}

    @property
    def pointers(self) -> WalPointerIndex:
        if self._pointers is None:
            self._pointers = WalPointerIndex(self.dir)
        return self._pointers

    def _reset(self, start: int) -> None:
        if self._pointers is not None:
            self._pointers.clear()
        self.leader_start = self.resolved_end = start
        self._stalls = {}

    def became_leader(self, log_end: int) -> None:
        self._reset(log_end)

    def became_follower(self) -> None:
        self._reset(1 << 62)

    @property
    def store_name(self) -> str:
        """The fast store this broker uploads to (its rack's): what its pointers name."""
        return self.manager.stores.local_name

    def serve(self, replica_id: int, offset: int, max_bytes: int, now: float) -> tuple[str, list]:
        """What a follower fetching from `offset` gets: (POINTERS, pointers), (RECORDS, []) or (WAIT, [])."""
        m = self.manager
        if offset < self.leader_start or not m.healthy:
            return RECORDS, []
        stall = self._stalls.get(replica_id)
        if stall is not None and stall[0] == offset and now - stall[1] > m.stall_timeout:
            return RECORDS, []                   # it got these pointers and could not use them
        found = []
        if self._pointers is not None and len(self._pointers):
            if self._pointers.first().upload_id < m.oldest_live_upload:
                self._pointers.drop_below_upload(m.oldest_live_upload)      # their objects were collected
            found = self._pointers.from_offset(offset, max_bytes)
        if found:
            if stall is None or stall[0] != offset:
                self._stalls[replica_id] = (offset, now)
            node = m.node_id
            return POINTERS, [RemotePointer(object_key(node, p.upload_id), p.position, p.size, p.crc, p.base_offset,
                                            p.last_offset, p.leader_epoch) for p in found]
        if offset < self.resolved_end:
            return RECORDS, []                   # a failed upload's range, or pointers already collected
        return WAIT, []

    def committed_pointers(self, offset: int, end: int, max_bytes: int) -> list:
        """Pointers from the one holding `offset` on, in offset order and without a gap, up to the chunk holding
        `end - 1` (a reader's share of the log below the high watermark `end`), about `max_bytes` of them. Empty
        when the pointer file does not hold `offset` (data from before this leadership, a failed upload's range,
        collected objects): the reader reads that part some other way."""
        m = self.manager
        if self._pointers is None or not len(self._pointers) or offset >= end or not m.healthy:
            return []
        if self._pointers.first().upload_id < m.oldest_live_upload:
            self._pointers.drop_below_upload(m.oldest_live_upload)
        node = m.node_id
        return [RemotePointer(object_key(node, p.upload_id), p.position, p.size, p.crc, p.base_offset,
                              p.last_offset, p.leader_epoch)
                for p in self._pointers.from_offset(offset, max_bytes) if p.base_offset < end]

    def published(self, p: WalPointer) -> None:
        self.pointers.append(p)
        self.resolved_end = max(self.resolved_end, p.last_offset + 1)

    def failed(self, last_offset: int) -> None:
        self.resolved_end = max(self.resolved_end, last_offset + 1)

    def close(self) -> None:
        if self._pointers is not None:
            self._pointers.close()


@dataclass
class _Upload:
    upload_id: int
    chunks: list                              # (part, epoch, base, last, data) until published
    needed: dict = field(default_factory=dict)    # part -> (epoch, last offset) its ISR must have, once uploaded
    created: float = field(default_factory=time.time)
    size: int = 0
    entries: list = field(default_factory=list)   # WalChunk, after build
    ok: bool | None = None                    # None while running


class RemoteWalManager:
    """The combiner, the uploads, the mode and the garbage collector of one broker."""

    def __init__(self, config, stores, metrics, node_id: int):
        g = config.get_int
        self.stores, self.metrics, self.node_id = stores, metrics, node_id
        self.max_bytes = g("remote.wal.upload.max.bytes")
        self.interval = g("remote.wal.upload.interval.ms") / 1000
        self.max_inflight = max(1, g("remote.wal.upload.max.inflight"))
        self.upload_timeout = g("remote.wal.upload.timeout.ms") / 1000
        self.failure_threshold = max(1, g("remote.wal.fallback.failure.threshold"))
        self.stall_timeout = g("remote.wal.follower.stall.timeout.ms") / 1000
        self.retention = g("remote.wal.retention.ms") / 1000
        self.gc_interval = g("remote.wal.gc.interval.ms") / 1000
        self.healthy = True
        metrics.mode.set(1)
        self._failures = 0
        self._buffer: list = []
        self._buffered = 0
        self._first_at = 0.0
        self._flush_now = asyncio.Event()
        self._slots = asyncio.Semaphore(self.max_inflight)
        self._queue: list[_Upload] = []            # uploads not yet published, in upload order
        self._live: list[_Upload] = []             # uploaded, not yet deleted, in upload order
        self._orphans: list[tuple[int, float]] = []   # failed or timed-out uploads that may still have landed
        self._started_id = int(time.time() * 1000) << 16     # ids below it are an earlier incarnation's
        self._last_id = self._started_id - 1
        self._tasks: list[asyncio.Task] = []
        self._stored_at = time.time()

    # ---- the combiner ----------------------------------------------------------------------------------------
    def add(self, part, epoch: int, base: int, last: int, data: bytes) -> None:
        """A leader appended `data` (batches exactly as in its log, offsets base..last) at `epoch`."""
        if not self._buffer:
            self._first_at = time.monotonic()
        self._buffer.append((part, epoch, base, last, data))
        self._buffered += len(data)
        if self._buffered >= self.max_bytes:
            self._flush_now.set()
        elif len(self._buffer) == 1:
            self._flush_now.set()                  # wake the combiner to start the interval timer

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._combine(), name="wal-combiner"))
        self._tasks.append(loop.create_task(self._collect(), name="wal-gc"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _combine(self) -> None:
        while True:
            if not self._buffer:
                self._flush_now.clear()
                await self._flush_now.wait()
                continue
            wait = self._first_at + self.interval - time.monotonic()
            if wait > 0 and self._buffered < self.max_bytes:
                self._flush_now.clear()
                try:
                    await asyncio.wait_for(self._flush_now.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                if self._buffered < self.max_bytes and time.monotonic() < self._first_at + self.interval:
                    continue
            chunks, self._buffer, self._buffered = self._buffer, [], 0
            up = _Upload(self._next_id(), chunks)
            self._queue.append(up)
            if len(self._queue) > 4 * self.max_inflight:
                up.ok = False                      # the store cannot keep up: these ranges go as records
                self._note_failure("too many uploads waiting")
                self._publish()
                continue
            asyncio.get_running_loop().create_task(self._upload(up))

    def _next_id(self) -> int:
        self._last_id = max(self._last_id + 1, int(time.time() * 1000) << 16)
        return self._last_id

    async def _upload(self, up: _Upload) -> None:
        async with self._slots:
            parts, up.entries = wal_object.build([(_topic_id_bytes(c[0].topic_id), c[0].index, c[1], c[2], c[3],
                                                   c[4]) for c in up.chunks])
            data = b"".join(parts)
            up.size = len(data)
            started = time.monotonic()
            try:
                store = self.stores.local          # opening it may fail too: that is a failed upload, not a dead task
                async with asyncio.timeout(self.upload_timeout):
                    await store.put(object_key(self.node_id, up.upload_id), data)
                up.ok = True
                up.created = time.time()
                self.metrics.uploaded(self.stores.local_name, len(data))
            except asyncio.CancelledError:
                raise
            except (asyncio.TimeoutError, ObjectStoreError, OSError) as e:
                up.ok = False
                reason = f"took longer than {self.upload_timeout:.1f}s" if isinstance(e, asyncio.TimeoutError) \
                    else str(e)
                self._note_failure(reason)
            except Exception as e:                 # a botocore error of an unreachable endpoint, ...
                up.ok = False
                self._note_failure(repr(e))
            if not up.ok:                          # a timed-out PUT may still land: delete it with the others
                self._orphans.append((up.upload_id, time.time()))
            if up.ok:
                self._note_success(time.monotonic() - started)
        self._publish()

    def _note_failure(self, reason: str) -> None:
        self.metrics.upload_errors.inc()
        self._failures += 1
        log.info("WAL upload failed (%d in a row): %s", self._failures, reason)
        if self.healthy and self._failures >= self.failure_threshold:
            self.healthy = False
            self.metrics.mode.set(0)
            log.warning("fast store %r failing: followers get records (classic replication) until an upload "
                        "succeeds", self.stores.local_name)

    def _note_success(self, took: float) -> None:
        self._failures = 0
        if not self.healthy:
            self.healthy = True
            self.metrics.mode.set(1)
            log.warning("fast store %r is back (upload took %.2fs): followers get pointers again",
                        self.stores.local_name, took)

    def _publish(self) -> None:
        """Publish finished uploads in upload order: pointers for a good one, a resolved range for a failed one.
        A chunk whose partition changed leader (or epoch) meanwhile is dropped: pointers live only as long as
        the leadership they were uploaded in."""
        while self._queue and self._queue[0].ok is not None:
            up = self._queue.pop(0)
            entries = up.entries or [None] * len(up.chunks)
            for (part, epoch, base, last, _), e in zip(up.chunks, entries):
                pw = part.wal
                if pw is None or not part.is_leader or part.leader_epoch != epoch or part.closed:
                    continue
                if up.ok:
                    pw.published(WalPointer(base, last, up.upload_id, e.position, e.size, e.crc, epoch))
                else:
                    pw.failed(last)
                part.wake_waiters()
            if up.ok:
                up.needed = {part: (epoch, last) for part, epoch, _, last, _ in up.chunks}
                self._live.append(up)
            up.chunks = []

    # ---- garbage collection ----------------------------------------------------------------------------------
    @property
    def oldest_live_upload(self) -> int:
        """Pointers to uploads below this id name collected objects."""
        return self._live[0].upload_id if self._live else self._last_id + 1

    def _isr_has(self, up: _Upload) -> bool:
        """Whether every partition of `up` has it below its high watermark or is no longer led here at that
        epoch; the partitions that do are forgotten, so an upload holds references only until the ISR has it."""
        for part, (epoch, last) in list(up.needed.items()):
            if part.is_leader and part.leader_epoch == epoch and not part.closed and part.high_watermark <= last:
                return False
            del up.needed[part]
        return True

    async def _collect(self) -> None:
        await self._delete_earlier_incarnations()
        while True:
            await asyncio.sleep(self.gc_interval)
            try:
                await self.collect_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("WAL garbage collection failed")

    async def collect_once(self) -> int:
        """Delete, oldest first, the objects whose retention time has passed and whose partitions' ISRs have them."""
        now = time.time()
        self.metrics.stored(sum(u.size for u in self._live), (now - self._stored_at) / 3600)
        self._stored_at = now
        for up in self._live:
            if up.needed:
                self._isr_has(up)
        deleted = 0
        store = self.stores.local
        while self._live and now - self._live[0].created >= self.retention and not self._live[0].needed:
            up = self._live[0]
            try:
                await store.delete(object_key(self.node_id, up.upload_id))
                self.metrics.deleted(self.stores.local_name)
            except ObjectStoreError as e:
                log.info("deleting WAL object %x failed, will retry: %s", up.upload_id, e)
                break
            self._live.pop(0)
            deleted += 1
        while self._orphans and now - self._orphans[0][1] >= self.retention:
            try:
                await store.delete(object_key(self.node_id, self._orphans[0][0]))    # absent is fine
            except ObjectStoreError:
                break
            self._orphans.pop(0)
        return deleted

    async def _delete_earlier_incarnations(self) -> None:
        """Objects this broker uploaded before it last started: nobody is handed pointers to them any more (a
        restarted broker leads at a new epoch), so they go once the retention time has passed."""
        pending = True
        while pending:
            pending = False
            cutoff = time.time() - self.retention
            try:
                store = self.stores.local
                async for info in store.list(f"wal/{self.node_id}/"):
                    upload_id = int(info.key.rsplit("/", 1)[1], 16)
                    if upload_id >= self._started_id:
                        break
                    if (upload_id >> 16) / 1000 < cutoff:
                        await store.delete(info.key)
                        self.metrics.deleted(self.stores.local_name)
                    else:
                        pending = True
            except (ObjectStoreError, OSError, ValueError) as e:
                log.info("listing earlier WAL objects failed, will retry: %s", e)
                pending = True
            if pending:
                await asyncio.sleep(max(self.gc_interval, min(self.retention, 60)))
