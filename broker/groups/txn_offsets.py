"""Transactional offset commits (TxnOffsetCommit, KIP-98/447): Kafka's pending transactional offsets of the group
coordinator. A mixin of GroupCoordinator, for classic and consumer (KIP-848) groups alike.

The offsets are written to the group's `__consumer_offsets` partition as a transactional batch of the producer and
held apart, per producer, until the transaction's marker reaches that partition (WriteTxnMarkers, or the loader
replaying the log): COMMIT makes them the group's committed offsets, ABORT drops them. Meanwhile an OffsetFetch that
requires stable offsets (read_committed consumers, KIP-447) gets UNSTABLE_OFFSET_COMMIT for those partitions.
"""
from __future__ import annotations

import logging

from broker.groups.classic.group_metadata import DEAD, EMPTY, UNKNOWN_MEMBER, GroupMetadata
from broker.groups.records import OffsetAndMetadata
from protocol.errors import ErrorCode

log = logging.getLogger("strata.groups.txn")


class TxnOffsetsMixin:
    """Needs the coordinator's groups, consumer coordinator, store, `_unavailable` and `now_ms`."""

    def _pending_txn(self) -> dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]]:
        pending = getattr(self, "_txn_pending", None)
        if pending is None:
            pending = self._txn_pending = {}
        return pending

    def txn_commit_offsets(self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, group_instance_id: str | None, generation_id: int,
                           offsets: dict, **verification) -> dict:
        """{(topic, partition): (offset, leader epoch, metadata)} -> {(topic, partition): error}, or an awaitable of
        that once the batch is replicated (acks=all, as Kafka writes offsets). `verification_guard`: KIP-890's, when
        the handler verified the transaction with its coordinator."""
        def all_(err):
            return {tp: err for tp in offsets}

        if not self._valid_group_id(group_id, allow_empty=True):
            return all_(ErrorCode.invalid_group_id)
        err = self._unavailable(group_id)
        if err:
            return all_(err)
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            if member_id and member_id != UNKNOWN_MEMBER:
                member = consumer.members.get(member_id)
                if member is None:
                    return all_(ErrorCode.unknown_member_id)
                if generation_id >= 0 and generation_id != member.member_epoch:
                    return all_(ErrorCode.illegal_generation)
        else:
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
            if group.is_(DEAD):
                return all_(ErrorCode.coordinator_not_available)
            if group_instance_id is not None and group.static_members.get(group_instance_id, member_id) != member_id:
                return all_(ErrorCode.fenced_instance_id)
            if member_id and member_id != UNKNOWN_MEMBER and member_id not in group.members:
                return all_(ErrorCode.unknown_member_id)
            if generation_id >= 0 and generation_id != group.generation_id:
                return all_(ErrorCode.illegal_generation)
        now = self.now_ms()
        results, accepted = {}, {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = "" if metadata is None else metadata
            if len(metadata) > self.max_metadata_size:
                results[tp] = ErrorCode.offset_metadata_too_large
            else:
                accepted[tp] = OffsetAndMetadata(offset, -1 if leader_epoch is None else leader_epoch, metadata, now,
                                                 None)
        if accepted:
            err = self.store.store_offsets(group_id, accepted, (producer_id, producer_epoch), **verification) \
                if self.store is not None else ErrorCode.none
            if not err:
                self._pending_txn().setdefault(producer_id, {}).setdefault(group_id, {}).update(accepted)
            for tp in accepted:
                results[tp] = err
            fut = self.replicated(group_id) if not err else None
            if fut is not None:
                return self._after_replication({tp: results[tp] for tp in offsets}, fut)
        return {tp: results[tp] for tp in offsets}

    async def _after_replication(self, results: dict, fut) -> dict:
        import asyncio
        try:
            err = await asyncio.wait_for(fut, self.commit_timeout_ms / 1000)
        except asyncio.TimeoutError:
            err = ErrorCode.request_timed_out
        if err:
            code = ErrorCode.not_coordinator if err == ErrorCode.not_leader_or_follower else err
            results = {tp: e or code for tp, e in results.items()}
        return results

    def complete_transaction(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """A marker for the producer reached `__consumer_offsets` partition `offsets_partition` (Kafka's
        onTransactionCompleted): its pending offsets of the groups there become committed, or are dropped."""
        pending = self._pending_txn()
        by_group = pending.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.store is None or self.store.partition_for(g) == offsets_partition]:
            offsets = by_group.pop(group_id)
            if commit:
                self.install_committed_offsets(group_id, offsets)
        if not by_group:
            del pending[producer_id]

    def install_committed_offsets(self, group_id: str, offsets: dict) -> None:
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            consumer.offsets.update(offsets)
            return
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
        if not group.is_(DEAD):
            group.offsets.update(offsets)

    def has_pending_txn_offsets(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any(tp in by_group.get(group_id, ()) for by_group in self._pending_txn().values())

    def install_pending_txn_offsets(self, pending: dict) -> None:
        """From a partition's load: {producer id: {group: {tp: offsets}}} whose transaction has no marker yet."""
        mine = self._pending_txn()
        for pid, by_group in pending.items():
            for group_id, offsets in by_group.items():
                mine.setdefault(pid, {}).setdefault(group_id, {}).update(offsets)

    def drop_pending_txn_offsets(self, offsets_partition: int) -> None:
        """The partition is unloaded: its groups' pending offsets go with it (the next coordinator loads them)."""
        pending = self._pending_txn()
        for pid in list(pending):
            by_group = pending[pid]
            for g in [g for g in by_group if self.store is None or self.store.partition_for(g) == offsets_partition]:
                del by_group[g]
            if not by_group:
                del pending[pid]
