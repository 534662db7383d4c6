"""The offset, admin and offset-retention APIs of the classic coordinator (Kafka's OffsetMetadataManager side):
OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups, onPartitionsDeleted and the
offsets.retention.minutes check. A mixin of GroupCoordinator, kept apart so neither file outgrows a reading; it uses
the coordinator's groups, persistence hooks and timers, and forwards KIP-848 groups to `self.consumer`."""
from __future__ import annotations

import logging

from broker.groups.classic.group_metadata import (COMPLETING_REBALANCE, CONSUMER_PROTOCOL_TYPE, DEAD, DEFAULT_RETENTION_TIME, EMPTY,
                                  PREPARING_REBALANCE, STABLE, UNKNOWN_MEMBER, GroupMetadata, GroupOverview,
                                  GroupSummary)
from broker.groups.records import OffsetAndMetadata
from protocol.errors import ErrorCode

log = logging.getLogger("strata.groups")


class GroupOffsetsAndAdmin:
    """Mixed into GroupCoordinator; see the module docstring."""

    # -- offsets -----------------------------------------------------------------------------------------------------
    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       offsets: dict[tuple[str, int], tuple[int, int, str | None]],
                       retention_ms: int = DEFAULT_RETENTION_TIME,
                       api_version: int | None = None) -> dict[tuple[str, int], int]:
        """offsets: {(topic, partition): (offset, leader_epoch, metadata)} -> {(topic, partition): error}.
        For a consumer-protocol group generation_id is the member epoch (checked by the consumer coordinator)."""
        def all_(err):
            return {tp: err for tp in offsets}

        if not self._valid_group_id(group_id, allow_empty=True):
            return all_(ErrorCode.invalid_group_id)
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            return all_(err)
        if group_id in self.consumer.groups:
            return self.consumer.commit_offsets(self.consumer.groups[group_id], generation_id, member_id,
                                                group_instance_id, offsets, retention_ms, api_version)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # From an older generation of a group that no longer exists: reject (v9+: ErrorCode.group_id_not_found,
                # which both protocols' clients understand).
                return all_(ErrorCode.group_id_not_found if api_version is not None and api_version >= 9
                            else ErrorCode.illegal_generation)
            # The group does not use Kafka's group management; it only stores offsets here.
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
        if group.is_(DEAD):
            return all_(ErrorCode.coordinator_not_available)
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER or group_instance_id is not None:
            err = self._validate_current_member(group, member_id, group_instance_id, "offset-commit")
            if err == ErrorCode.none and generation_id != group.generation_id:
                err = ErrorCode.illegal_generation
            if err != ErrorCode.none:
                return all_(err)
        elif not group.is_(EMPTY):
            # generation -1 (admin client or a consumer without group management) may only commit for a group
            # with no members.
            return all_(ErrorCode.unknown_member_id)
        state = group.state
        if state == COMPLETING_REBALANCE:
            return all_(ErrorCode.rebalance_in_progress)
        if state in (STABLE, PREPARING_REBALANCE):
            # Committing during PreparingRebalance is fine: the heartbeat tells the member to rejoin.
            self._schedule_heartbeat(group, group.get(member_id))
        now = self.now_ms()
        expire = now + retention_ms if retention_ms != DEFAULT_RETENTION_TIME else None
        results: dict[tuple[str, int], int] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = "" if metadata is None else metadata
            if len(metadata) > self.max_metadata_size:
                results[tp] = ErrorCode.offset_metadata_too_large
            else:
                accepted[tp] = OffsetAndMetadata(offset, leader_epoch if leader_epoch is not None else -1, metadata,
                                                 now, expire)
        if accepted:
            err = self._store_offsets(group_id, accepted)
            if err == ErrorCode.none and not group.is_(DEAD):
                group.offsets.update(accepted)
            for tp in accepted:
                results[tp] = err
        return {tp: results[tp] for tp in offsets}

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[int, dict[tuple[str, int], OffsetAndMetadata | None]]:
        """-> (group error, {(topic, partition): OffsetAndMetadata or None for "no committed offset"}).
        partitions None means every partition the group has offsets for. Offsets are returned whatever the group's
        state: groups that only store offsets here have no members. member_id/member_epoch (OffsetFetch v9+) are
        checked for consumer-protocol groups."""
        if not self._valid_group_id(group_id, allow_empty=True):
            return ErrorCode.invalid_group_id, {}
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            return err, {}
        group = self.consumer.groups.get(group_id)
        if group is not None:
            err = self.consumer.validate_offset_fetch(group, member_id, member_epoch)
            if err != ErrorCode.none:
                return err, {}
        else:
            group = self.groups.get(group_id)
        if group is None or getattr(group, "state", None) == DEAD:
            return ErrorCode.none, {tp: None for tp in (partitions or [])}
        if partitions is None:
            return ErrorCode.none, dict(group.offsets)
        return ErrorCode.none, {tp: group.offsets.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str,
                       partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: -> (group error, {(topic, partition): error}); partition errors are empty on a group
        error."""
        if not self._valid_group_id(group_id, allow_empty=False):
            return ErrorCode.invalid_group_id, {}
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            return err, {}
        if group_id in self.consumer.groups:
            return ErrorCode.none, self.consumer.delete_offsets(self.consumer.groups[group_id], partitions)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.group_id_not_found, {}
        errors: dict[tuple[str, int], int] = {}
        if group.is_(EMPTY):
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
            errors.update({tp: ErrorCode.group_subscribed_to_topic for tp in partitions if group.is_subscribed_to_topic(tp[0])})
        else:
            return ErrorCode.non_empty_group, {}
        if eligible:
            removed = {tp: None for tp in eligible if tp in group.offsets}
            err = self._store_offsets(group_id, removed) if removed else ErrorCode.none
            if err == ErrorCode.none:
                for tp in removed:
                    group.offsets.pop(tp, None)
            for tp in eligible:
                errors[tp] = err
            log.info("group %s: deleted %d offsets", group_id, len(removed))
        return ErrorCode.none, {tp: errors[tp] for tp in partitions}

    # -- admin -------------------------------------------------------------------------------------------------------
    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[GroupOverview]:
        want_states = {s.lower() for s in states} if states else None
        want_types = {t.lower() for t in types} if types else None
        out = []
        for group in self.groups.values():
            if group.is_(DEAD):
                continue
            out.append(group.overview())
        for group in self.consumer.groups.values():
            if group.exists:
                out.append(GroupOverview(group.group_id, CONSUMER_PROTOCOL_TYPE, group.state(), "consumer"))
        return [ov for ov in out if (want_states is None or ov.state.lower() in want_states)
                and (want_types is None or ov.group_type in want_types)]

    def describe_group(self, group_id: str) -> GroupSummary:
        if not self._valid_group_id(group_id, allow_empty=True):
            return GroupSummary(ErrorCode.invalid_group_id, DEAD, "", "", [])
        err = self._unavailable(group_id)
        if err != ErrorCode.none:
            return GroupSummary(err, DEAD, "", "", [])
        group = self.groups.get(group_id)   # a consumer-protocol group is not a classic group: ErrorCode.group_id_not_found
        if group is None or group.is_(DEAD):
            return GroupSummary(ErrorCode.group_id_not_found, DEAD, "", "", [])
        return group.summary()

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        errors: dict[str, int] = {}
        for group_id in group_ids:
            if not self._valid_group_id(group_id, allow_empty=True):
                errors[group_id] = ErrorCode.invalid_group_id
                continue
            err = self._unavailable(group_id)
            if err != ErrorCode.none:
                errors[group_id] = err
                continue
            if group_id in self.consumer.groups:
                errors[group_id] = self.consumer.delete_group(self.consumer.groups[group_id])
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(DEAD):
                errors[group_id] = ErrorCode.group_id_not_found
            elif not group.is_(EMPTY):
                errors[group_id] = ErrorCode.non_empty_group
            else:
                err = self._store_offsets(group_id, {tp: None for tp in group.offsets}) if group.offsets else ErrorCode.none
                if err != ErrorCode.none:
                    errors[group_id] = err
                    continue
                self._remove_group(group)
                log.info("group %s deleted", group_id)
                errors[group_id] = ErrorCode.none
        return errors

    def _remove_group(self, group: GroupMetadata) -> None:
        self._cancel_join(group)
        self._remove_sync_expiration(group)
        for timer in group.pending_members.values():
            if timer is not None:
                timer.cancel()
        group.pending_members.clear()
        group.transition_to(DEAD, self.now_ms())
        group.offsets.clear()
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        self._store_group(group)   # tombstone

    def on_topics_deleted(self, topics) -> int:
        """Kafka's onPartitionsDeleted: drop committed offsets of deleted topics (Empty groups left without offsets
        die). Returns the number of offsets removed."""
        topics = set(topics)
        removed = 0
        for group in list(self.groups.values()):
            gone = [tp for tp in group.offsets if tp[0] in topics]
            if gone and self._store_offsets(group.group_id, {tp: None for tp in gone}) == ErrorCode.none:
                for tp in gone:
                    del group.offsets[tp]
                removed += len(gone)
            if gone and group.is_(EMPTY) and not group.offsets:
                self._remove_group(group)
        return removed + self.consumer.on_topics_deleted(topics)

    # -- offset retention --------------------------------------------------------------------------------------------
    def _schedule_cleanup(self) -> None:
        if self._cleanup_timer is not None:
            self._cleanup_timer.cancel()
        self._cleanup_timer = self._loop().call_later(self.retention_check_interval_ms / 1000, self._run_cleanup)

    def _run_cleanup(self) -> None:
        self._cleanup_timer = None
        try:
            self.cleanup_expired_offsets()
        except Exception:
            log.exception("offset retention check failed")
        if self._active:
            self._schedule_cleanup()

    def cleanup_expired_offsets(self, now_ms: int | None = None) -> int:
        """Drop offsets past offsets.retention.minutes and groups left Empty without offsets; returns the number of
        offsets removed."""
        now = self.now_ms() if now_ms is None else now_ms
        removed = 0
        for group in list(self.groups.values()):
            expired = group.expired_offsets(now, self.offsets_retention_ms)
            if expired:
                if self._store_offsets(group.group_id, {tp: None for tp in expired}) == ErrorCode.none:
                    for tp in expired:
                        del group.offsets[tp]
                    removed += len(expired)
                    log.info("group %s: removed %d expired offsets", group.group_id, len(expired))
            if group.is_(EMPTY) and not group.offsets:
                log.info("group %s is now Dead (empty, no offsets)", group.group_id)
                self._remove_group(group)
        return removed + self.consumer.cleanup_expired_offsets(now, self.offsets_retention_ms)
