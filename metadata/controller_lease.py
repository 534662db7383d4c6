"""The controller lease: one object, replaced only with `put_if_match`, that elects the active controller.

The object holds (holder node id, controller epoch, renewal count). What each conditional write guarantees:

- Acquiring a missing lease is `put_if_absent` with epoch 1: of several candidates exactly one succeeds.
- Taking over, renewing and resigning are `put_if_match` on the ETag the writer last saw: the write succeeds only if
  nobody replaced the lease since, so epochs only grow and no two holders ever get the same epoch.

Expiry never compares clocks of different machines. A candidate watches the lease's ETag with its own monotonic
clock and may take over once the ETag has not changed for `timeout` seconds, counted from when the answer that showed
it a new ETag came back (never from when it asked: a request, or a pause of the candidate, may last longer than the
holder's margin). The holder renews every `timeout / 4`
and counts its own time from when it *sent* its last successful renewal (the store applied it after that, so every
candidate saw it later still); it stops acting as controller once `timeout - timeout / 4` has passed without a
successful renewal. A paused holder that wakes up finds its renewal refused and steps down; whatever it tries to
append meanwhile is refused by the metadata log (metadata/object_store_log.py), which is what keeps data safe.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Callable

import msgspec

from storage.objectstore.object_store import ObjectStore, PreconditionFailed

log = logging.getLogger("strata.controller_lease")


class Lease(msgspec.Struct, array_like=True):
    holder: int                  # node id of the active controller, -1 after a resignation
    epoch: int                   # the controller epoch: every metadata batch carries it
    renewal: int = 0             # changes the content (and so the ETag) at every renewal
    writer: int = 0              # the writing process's random id: a lease object that lost its epoch history
                                 # (deleted, undecodable) starts again at epoch 1, so (holder, epoch) alone may repeat


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Lease).decode


class ControllerLease:
    def __init__(self, store: ObjectStore, key: str, node_id: int, timeout: float,
                 clock: Callable[[], float] = time.monotonic):
        self.store, self.key, self.node_id, self.timeout, self.clock = store, key, node_id, timeout, clock
        self.epoch = 0                        # ours while we hold it
        self.writer = random.getrandbits(62) | 1    # this process's id in what it writes (Lease.writer)
        self.holding = False
        self.observed: Lease | None = None    # the lease as last read
        self._etag: str | None = None         # ETag of what we last read or wrote
        self._seen_at = 0.0                   # when _etag was first seen (a candidate's clock)
        self._renewed_sent_at = 0.0           # when our last successful renewal was sent (the holder's clock)
        self._writing = asyncio.Lock()         # a renewal and a resignation never race on one ETag

    @property
    def renew_interval(self) -> float:
        return self.timeout / 4

    def valid(self) -> bool:
        """Whether we hold the lease and may still act on it (the holder's side of expiry)."""
        return self.holding and self.clock() - self._renewed_sent_at < self.timeout - self.renew_interval

    async def campaign(self) -> bool:
        """One look at the lease; take it if it is missing, expired, or ours from an earlier incarnation of this
        node. Returns True once we hold it (self.epoch is then the new controller epoch)."""
        if self.holding:
            return True
        now = self.clock()
        info = await self.store.head(self.key)
        if info is None:
            return await self._write(Lease(self.node_id, 1, writer=self.writer), None, now)
        if info.etag != self._etag:
            # seen when the answer came, not when the HEAD was sent: the holder may have written this ETag while the
            # HEAD was under way (or this process was paused in it), and counting from before would let this node
            # take the lease over from a holder that renewed moments ago and still acts on it
            self._etag, self._seen_at = info.etag, self.clock()
            try:
                self.observed = _decode(await self.store.get(self.key))
            except msgspec.DecodeError as e:
                log.error("controller lease %s does not decode (%s): it will be replaced when it expires", self.key, e)
                self.observed = Lease(-1, 0)
            if self.observed.holder not in (-1, self.node_id):
                return False
        elif now - self._seen_at < self.timeout:
            return False
        current = self.observed or Lease(-1, 0)
        return await self._write(Lease(self.node_id, current.epoch + 1, writer=self.writer), info.etag, now)

    async def renew(self) -> bool:
        """Extend our lease; False (and we no longer hold it) if someone else replaced it. Store errors propagate:
        the caller keeps trying until `valid()` turns False."""
        async with self._writing:
            return await self._renew()

    async def _renew(self) -> bool:
        if not self.holding:                  # resigned meanwhile
            return False
        for look_again in (True, False):
            sent = self.clock()
            assert self.observed is not None
            lease = Lease(self.node_id, self.epoch, self.observed.renewal + 1, self.writer)
            try:
                self._etag = await self.store.put_if_match(self.key, _encode(lease), self._etag)
            except PreconditionFailed:
                if look_again and await self._still_ours():
                    continue
                log.warning("controller lease lost: epoch %d was replaced", self.epoch)
                self.holding = False
                return False
            self.observed, self._renewed_sent_at = lease, sent
            return True
        return False

    async def _still_ours(self) -> bool:
        """After a refused renewal: whether the lease still names us at our epoch. Then an earlier renewal that was
        answered with an error (a timeout, a lost 5xx answer) had landed, and the ETag we hold is that of the lease
        before it. Nobody else writes our node id with our epoch and our writer id (a take-over raises the epoch, a
        resignation clears the holder, another process has another writer id), so nobody has replaced it: adopt
        what is there and renew from it. Our validity still counts from the last renewal we saw succeed, so acting
        meanwhile was within the rule."""
        info = await self.store.head(self.key)
        if info is None:
            return False
        try:
            current = _decode(await self.store.get(self.key))
        except msgspec.DecodeError:
            return False
        if (current.holder, current.epoch, current.writer) != (self.node_id, self.epoch, self.writer):
            return False
        log.info("controller lease epoch %d: a renewal answered with an error had landed; renewing from it",
                 self.epoch)
        self.observed, self._etag = current, info.etag     # changed between the two reads: the renewal is refused
        return True

    def abandon(self) -> None:
        """Stop acting on the lease without writing it (it could not be renewed in time, or the log shows a newer
        epoch); the next campaign starts from a fresh look at the object."""
        self.holding = False

    async def resign(self) -> None:
        """Give the lease up (clean shutdown, or unreachable by the brokers) so a standby need not wait for it to
        expire; after any renewal in flight, whose ETag it needs."""
        if not self.holding:
            return
        async with self._writing:
            if not self.holding:
                return
            self.holding = False
            try:
                await self.store.put_if_match(self.key, _encode(Lease(-1, self.epoch, writer=self.writer)),
                                              self._etag)
            except PreconditionFailed:
                pass

    async def _write(self, lease: Lease, etag: str | None, sent: float) -> bool:
        try:
            if etag is None:
                self._etag = await self.store.put_if_absent(self.key, _encode(lease))
            else:
                self._etag = await self.store.put_if_match(self.key, _encode(lease), etag)
        except PreconditionFailed:
            self._etag = None                 # someone else won: look again next time
            return False
        self.observed, self.epoch, self.holding = lease, lease.epoch, True
        self._renewed_sent_at = sent
        log.info("node %d holds the controller lease, epoch %d", self.node_id, self.epoch)
        return True
