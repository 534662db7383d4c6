"""The offset, deletion and loading side of KIP-848 consumer groups: OffsetCommit/OffsetFetch/OffsetDelete and
DeleteGroups for such groups (called by GroupCoordinator, which owns the APIs for both kinds), offset retention, topic
deletion, the conversion of an Empty consumer group to a classic one, and the replay of a group's records at start-up.
A mixin of ConsumerGroupCoordinator (broker/groups/consumer/consumer_group.py), kept apart so the heartbeat logic reads on its own."""
from __future__ import annotations

import logging

from broker.groups import metadata_store as gms
from broker.groups import records as gr
from broker.groups.consumer.state import UNREVOKED_PARTITIONS, ConsumerGroup
from broker.groups.records import (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
                                  CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, OffsetAndMetadata)
from protocol.errors import ErrorCode

log = logging.getLogger("strata.groups.consumer")


class ConsumerGroupOffsets:
    """Mixed into ConsumerGroupCoordinator; see the module docstring."""

    # -- offsets (called by GroupCoordinator for consumer groups) ----------------------------------------------------
    def commit_offsets(self, group: ConsumerGroup, member_epoch: int, member_id: str, instance_id: str | None,
                       offsets: dict, retention_ms: int, api_version: int | None) -> dict:
        """ConsumerGroup.validateOffsetCommit, then the same records as a classic commit."""
        def all_(err):
            return {tp: err for tp in offsets}
        if not (member_epoch < 0 and not group.members):
            member = group.members.get(member_id)
            if member is None:
                return all_(ErrorCode.unknown_member_id)
            if api_version is not None and api_version < 9:
                return all_(ErrorCode.unsupported_version)
            if member_epoch != member.member_epoch:
                return all_(ErrorCode.stale_member_epoch)
        now = self.now_ms()
        expire = now + retention_ms if retention_ms != -1 else None
        results, accepted = {}, {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = "" if metadata is None else metadata
            if len(metadata) > self.parent.max_metadata_size:
                results[tp] = ErrorCode.offset_metadata_too_large
            else:
                accepted[tp] = OffsetAndMetadata(offset, -1 if leader_epoch is None else leader_epoch, metadata,
                                                 now, expire)
        if accepted:
            err = self.store_offsets(group, accepted)
            for tp in accepted:
                results[tp] = err
        return {tp: results[tp] for tp in offsets}

    def store_offsets(self, group: ConsumerGroup, offsets: dict) -> int:
        """Persist and apply commits (None values delete); returns the client-facing error."""
        if self.parent.store is not None:
            err = self.parent.store.store_offsets(group.group_id, offsets)
            if err != ErrorCode.none:
                return err
        for tp, om in offsets.items():
            if om is None:
                group.offsets.pop(tp, None)
            else:
                group.offsets[tp] = om
        return ErrorCode.none

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
        if member_epoch == -1:
            return ErrorCode.none
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return ErrorCode.stale_member_epoch if member_epoch != member.member_epoch else ErrorCode.none

    def delete_offsets(self, group: ConsumerGroup, partitions: list) -> dict:
        errors, removed = {}, {}
        for tp in partitions:
            if self.is_subscribed_to_topic(group, tp[0]):
                errors[tp] = ErrorCode.group_subscribed_to_topic
            elif tp in group.offsets:
                removed[tp] = None
        err = self.store_offsets(group, removed) if removed else ErrorCode.none
        for tp in partitions:
            errors.setdefault(tp, err)
        return errors

    def delete_group(self, group: ConsumerGroup) -> int:
        """DeleteGroups: only Empty groups; offsets and group records get tombstones."""
        if group.members:
            return ErrorCode.non_empty_group
        err = self.store_offsets(group, {tp: None for tp in group.offsets}) if group.offsets else ErrorCode.none
        if err != ErrorCode.none:
            return err
        return self._delete(group)

    def _delete(self, group: ConsumerGroup) -> int:
        gid = group.group_id
        records = [(gr.consumer_group_key(t, gid), None) for t in (
            CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_PARTITION_METADATA, CONSUMER_GROUP_METADATA)]
        if self.parent.store is not None:
            err = self.parent.store.append(gid, records)
            if err != ErrorCode.none:
                return gms.map_offsets_error(err)
        self.groups.pop(gid, None)
        log.info("consumer group %s deleted", gid)
        return ErrorCode.none

    def cleanup_expired_offsets(self, now: int, retention_ms: int) -> int:
        removed = 0
        for group in list(self.groups.values()):
            if self.parent._unavailable(group.group_id) != ErrorCode.none:
                continue
            subscribed = set().union(*(self._subscribed_names(m) for m in group.members.values())) \
                if group.members else set()
            expired = {tp: None for tp, om in group.offsets.items() if tp[0] not in subscribed and (
                now >= om.expire_timestamp if om.expire_timestamp is not None
                else now - om.commit_timestamp >= retention_ms)}
            if expired and self.store_offsets(group, expired) == ErrorCode.none:
                removed += len(expired)
                log.info("consumer group %s: removed %d expired offsets", group.group_id, len(expired))
            if not group.members and not group.offsets:
                self._delete(group)
        return removed

    def on_topics_deleted(self, topics: set[str]) -> int:
        removed = 0
        for group in list(self.groups.values()):
            gone = {tp: None for tp in group.offsets if tp[0] in topics}
            if gone and self.store_offsets(group, gone) == ErrorCode.none:
                removed += len(gone)
        return removed

    def convert_empty_to_classic(self, group_id: str) -> tuple[int, dict]:
        """A classic JoinGroup for an Empty consumer group replaces it (Kafka's maybeDeleteEmptyConsumerGroup);
        returns (error, its offsets)."""
        group = self.groups[group_id]
        offsets = dict(group.offsets)
        err = self._delete(group)
        return err, offsets

    # -- loading -----------------------------------------------------------------------------------------------------
    def install_loaded(self, group_id: str, records: list, offsets: dict) -> bool:
        """Replay a group's records from __consumer_offsets; False when the group ended up deleted."""
        group = ConsumerGroup(group_id)
        for k, v in records:
            group.replay(k, v)
        if not group.exists:
            return False
        group.offsets = dict(offsets)
        group.subscription_metadata = self._subscription_metadata(group)
        self.groups[group_id] = group
        for mid, m in group.members.items():
            self._schedule_session_timeout(group_id, mid)
            if m.state == UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group_id, mid, m.member_epoch, m.rebalance_timeout_ms)
        log.info("loaded consumer group %s (epoch %d, %d members, %d offsets)", group_id, group.group_epoch,
                 len(group.members), len(group.offsets))
        return True
