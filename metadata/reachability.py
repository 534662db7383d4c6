"""Brokers' reports of a controller they cannot reach, kept in the metadata store: how a controller cut off from the
brokers, but not from the store, learns that it is the one cut off (issue 26).

Without them such a controller keeps its lease (it still renews it) and, at session expiry, fences every broker it
cannot hear: the healthy majority loses its leaderships to the one node nobody can reach. KRaft avoids this because
the active controller must hear from a majority of the voters; here the store is the only quorum, so the brokers say
so through it:

- A broker that has had no answer from the controller its image names for a third of a session (counted afresh
  when the image names a new controller) writes `<prefix>/unreachable/<its id>` naming that controller and epoch,
  from a task of its own so that heartbeats never wait for the store. It deletes the object once the controller
  answers again, and after a start (a report of an earlier incarnation must not outlive it). A third of a session:
  brokers cut off together stop hearing from the controller at most one heartbeat interval apart, so every report
  is in before the first of their sessions expires.
- The active controller reads the reports against its own epoch only when a session expires, before fencing. It
  counts the brokers it has not heard from for half a session that report it (`reporting`) and those it has
  (`heard`, fenced or not). When `reporting` outnumbers `heard` plus itself, it is the odd one out: it resigns the
  lease instead of fencing anyone and stays out of elections for a session and two lease timeouts, so a broker the
  others reach takes over and fences it instead; and it does not resign that way twice in a row (if nobody else
  took the lease meanwhile, nobody else can, and resigning again would only stall the cluster). Ties (two brokers
  that lost their link) fence as before: nothing tells which side is right.

A broker that reaches neither the controller nor the store reports nothing and is fenced as a dead one is. The
reports decide nothing by themselves: fencing and elections still go through the lease and the log.
"""
from __future__ import annotations

import asyncio
import logging

import msgspec

from storage.objectstore.object_store import ObjectNotFound, ObjectStore

log = logging.getLogger("strata.controller")


class UnreachableReport(msgspec.Struct, array_like=True):
    reporter: int                # the broker that cannot reach the controller
    controller_id: int
    controller_epoch: int        # the epoch its image showed: a report counts only against that controller


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(UnreachableReport).decode

_UNKNOWN = -1                    # a start: whatever an earlier incarnation left is deleted at the first answer


def controller_is_cut_off(reporting: set[int], heard: set[int]) -> bool:
    """Whether the controller should resign rather than fence: more silent brokers report it unreachable
    (`reporting`) than it hears from (`heard`, other brokers) plus itself."""
    return len(reporting) > len(heard) + 1


class ReachabilityReports:
    """This node's report (the broker side) and everyone's reports (the controller side)."""

    def __init__(self, store: ObjectStore, prefix: str, node_id: int):
        self.store, self.node_id = store, node_id
        self.prefix = f"{prefix.strip('/')}/unreachable/"
        self._written: int | None = _UNKNOWN       # the epoch of our report in the store; None: there is none

    async def report(self, controller_id: int, controller_epoch: int) -> bool:
        """Say that `controller_id` at `controller_epoch` does not answer; True if it was written now."""
        if self._written == controller_epoch:
            return False
        self._written = _UNKNOWN                    # a put that fails may still land: withdraw it all the same
        await self.store.put(self.prefix + str(self.node_id),
                             _encode(UnreachableReport(self.node_id, controller_id, controller_epoch)))
        self._written = controller_epoch
        return True

    @property
    def pending(self) -> bool:
        """Whether a report of ours may be in the store."""
        return self._written is not None

    async def withdraw(self) -> bool:
        """The controller answers again: delete our report if there may be one; True if one was deleted."""
        if self._written is None:
            return False
        await self.store.delete(self.prefix + str(self.node_id))
        had, self._written = self._written, None
        return had != _UNKNOWN

    async def reporters(self, controller_epoch: int) -> set[int]:
        """The brokers whose report names `controller_epoch`."""
        async def read(key: str) -> UnreachableReport | None:
            try:
                return _decode(await self.store.get(key))
            except ObjectNotFound:
                return None                         # withdrawn since the listing
            except msgspec.DecodeError as e:
                log.warning("unreadable controller reachability report %s: %s", key, e)
                return None
        keys = [info.key async for info in self.store.list(self.prefix)]
        reports = await asyncio.gather(*(read(k) for k in keys))
        return {r.reporter for r in reports if r is not None and r.controller_epoch == controller_epoch}
