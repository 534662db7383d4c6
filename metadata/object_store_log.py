"""The cluster's metadata log in an object store: numbered objects written create-only, no Raft.

Layout under the log's prefix:

    log/<offset:020d>        one MetadataBatch: the records of one append, with the writer's controller epoch
    snapshot/<offset:020d>   one MetadataSnapshot: the image as of <offset>, as the records that rebuild it

A batch is named by the offset of its first record, which is the offset after the last record of the batch before
it. Every reader therefore sees one chain of keys (0, then the end of batch 0 plus one, ...), and a writer appends
only at the end of the chain it has read, with `put_if_absent`.

What this guarantees, given a store whose create-only PUT is atomic (S3 If-None-Match: *, the local store's link(2))
and whose GET after a successful PUT is strongly consistent (S3 since 2020; the local store trivially):

- No batch is ever overwritten, and of two writers appending at one position exactly one wins; the loser gets
  PreconditionFailed, re-reads and re-decides. Appends are linearizable: the chain is the order of the log.
- A writer can only succeed at a position whose predecessors it has read. A new controller's first batch is a
  LeaderChangeRecord with its (higher) epoch, so a deposed controller that tries to append after it first fails at
  that position, reads the record, and steps down: it can never append behind it. Replay also skips any batch whose
  epoch is below the highest epoch seen earlier in the chain, so safety holds even if that argument were broken by a
  store that reordered.
- Snapshots are written at batch boundaries; batches below the newest snapshot may be deleted. A reader that finds
  its next batch missing while a newer snapshot exists starts again from that snapshot.

The lease that elects the one writer is metadata/controller_lease.py; it gives liveness (one controller at a time
tries to write), while safety rests on the create-only writes above.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import msgspec

from metadata.image import MetadataImage
from metadata.records import MetadataBatch, MetadataSnapshot
from storage.objectstore.object_store import ObjectNotFound, ObjectStore, ObjectStoreError, PreconditionFailed

log = logging.getLogger("strata.metadata_log")

_batch_encoder = msgspec.msgpack.Encoder()
_batch_decoder = msgspec.msgpack.Decoder(MetadataBatch)
_snapshot_decoder = msgspec.msgpack.Decoder(MetadataSnapshot)


class CorruptMetadataError(Exception):
    """An object of the metadata log that does not decode, or does not apply: the log cannot be replayed past it."""


@dataclass
class Replayed:
    image: MetadataImage
    skipped: int                     # batches skipped because a higher controller epoch came before them


class ReplayInterrupted(ObjectStoreError):
    """A store error in the middle of a replay; `replayed` is the image as far as it got, so the reader can go on
    from there instead of from the start (a store failing one request in two still lets a long log load)."""

    def __init__(self, cause: ObjectStoreError, replayed: Replayed):
        super().__init__(str(cause), retriable=cause.retriable)
        self.replayed = replayed


class ObjectStoreMetadataLog:
    def __init__(self, store: ObjectStore, prefix: str = "metadata"):
        self.store = store
        self.prefix = prefix.strip("/")
        self.appended_bytes = 0          # by this writer since it was made (the snapshot trigger counts them)

    def batch_key(self, offset: int) -> str:
        return f"{self.prefix}/log/{offset:020d}"

    def snapshot_key(self, offset: int) -> str:
        return f"{self.prefix}/snapshot/{offset:020d}"

    # ---- writing ---------------------------------------------------------------------------------------------
    async def append(self, image: MetadataImage, controller_epoch: int, records: list, *,
                     applied: MetadataImage | None = None) -> MetadataImage:
        """Append `records` as one batch after `image` (which must be the end of the chain as read) and return the
        image with them applied (`applied`, when the caller has applied them already). Raises ValueError if they do
        not apply (nothing is written) and PreconditionFailed if another writer appended at this position first (the
        caller re-reads)."""
        if not records:
            raise ValueError("a metadata batch needs at least one record")
        new = image.apply(records) if applied is None else applied
        data = _batch_encoder.encode(MetadataBatch(controller_epoch, records))
        await self.store.put_if_absent(self.batch_key(image.offset + 1), data)
        self.appended_bytes += len(data)
        return new

    async def write_snapshot(self, image: MetadataImage) -> None:
        """Write the image as a snapshot at its offset (create-only: an existing snapshot there is the same image)."""
        data = _batch_encoder.encode(MetadataSnapshot(image.offset, image.controller_epoch, image.to_records()))
        try:
            await self.store.put_if_absent(self.snapshot_key(image.offset), data)
        except PreconditionFailed:
            pass

    async def delete_before(self, offset: int) -> int:
        """Delete batches and snapshots older than the snapshot at `offset` (which must exist); returns the count."""
        doomed = [info.key async for info in self.store.list(f"{self.prefix}/log/")
                  if int(info.key.rsplit("/", 1)[1]) <= offset]
        doomed += [info.key async for info in self.store.list(f"{self.prefix}/snapshot/")
                   if int(info.key.rsplit("/", 1)[1]) < offset]
        for key in doomed:
            await self.store.delete(key)
        return len(doomed)

    # ---- reading ---------------------------------------------------------------------------------------------
    async def latest_snapshot_offset(self) -> int:
        last = -1
        async for info in self.store.list(f"{self.prefix}/snapshot/"):
            last = max(last, int(info.key.rsplit("/", 1)[1]))
        return last

    async def read_snapshot(self, offset: int) -> MetadataImage:
        data = await self.store.get(self.snapshot_key(offset))
        try:
            snap = _snapshot_decoder.decode(data)
            image = MetadataImage().apply(snap.records, strict=False)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
            raise CorruptMetadataError(f"metadata snapshot {self.snapshot_key(offset)}: {e}") from None
        return image.skip(snap.offset - image.offset)

    async def load(self) -> Replayed:
        """The image at the end of the log: the newest snapshot, then every batch after it."""
        return await self.catch_up(await self.load_start())

    async def load_start(self) -> MetadataImage:
        """Where a replay from scratch starts: the newest snapshot, or the empty image."""
        snap = await self.latest_snapshot_offset()
        return await self.read_snapshot(snap) if snap >= 0 else MetadataImage()

    async def catch_up(self, image: MetadataImage) -> Replayed:
        """Apply every batch after `image`, in chain order, until the next one does not exist yet. If the next batch
        was deleted below a newer snapshot (this reader fell behind a truncation), continue from that snapshot. A
        store error raises ReplayInterrupted with what was applied so far."""
        skipped = 0
        while True:
            key = self.batch_key(image.offset + 1)
            try:
                try:
                    data = await self.store.get(key)
                except ObjectNotFound:
                    snap = await self.latest_snapshot_offset()
                    if snap > image.offset:
                        log.info("metadata log: batch %d is gone, continuing from the snapshot at %d",
                                 image.offset + 1, snap)
                        image = await self.read_snapshot(snap)
                        continue
                    return Replayed(image, skipped)
            except ObjectStoreError as e:
                if isinstance(e, ReplayInterrupted):
                    raise
                raise ReplayInterrupted(e, Replayed(image, skipped)) from e
            try:
                batch = _batch_decoder.decode(data)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                raise CorruptMetadataError(f"metadata batch {key}: {e}") from None
            if not batch.records:
                raise CorruptMetadataError(f"metadata batch {key} holds no record")
            if batch.controller_epoch < image.controller_epoch:
                log.warning("metadata log: skipping batch %s of controller epoch %d (the log is at epoch %d)", key,
                            batch.controller_epoch, image.controller_epoch)
                skipped += 1
                image = image.skip(len(batch.records))
                continue
            try:
                image = image.apply(batch.records, strict=False)
            except ValueError as e:
                raise CorruptMetadataError(f"metadata batch {key} does not apply: {e}") from None
