"""The offset, admin and offset-retention APIs of the classic coordinator (Kafka's OffsetMetadataManager side):
OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups, onPartitionsDeleted and the
offsets.retention.minutes check. A mixin of GroupCoordinator, kept apart so neither file outgrows a reading; it uses
the coordinator's groups, persistence hooks and timers, and forwards KIP-848 groups to `self.consumer`."""
from __future__ import annotations

import logging

from broker.groups.classic.group_metadata import (COMPLETING_REBALANCE, CONSUMER_PROTOCOL_TYPE, DEAD, DEFAULT_RETENTION_TIME, EMPTY,
                                  PREPARING_REBALANCE, STABLE, UNKNOWN_MEMBER, GroupMetadata, GroupOverview,
                                  GroupSummary)
from broker.groups.errors import (COORDINATOR_NOT_AVAILABLE, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC,
                                 ILLEGAL_GENERATION, INVALID_GROUP_ID, NONE, NON_EMPTY_GROUP,
                                 OFFSET_METADATA_TOO_LARGE, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID)
from broker.groups.records import OffsetAndMetadata

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
            return all_(INVALID_GROUP_ID)
        err = self._unavailable(group_id)
        if err != NONE:
            return all_(err)
        if group_id in self.consumer.groups:
            return self.consumer.commit_offsets(self.consumer.groups[group_id], generation_id, member_id,
                                                group_instance_id, offsets, retention_ms, api_version)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # From an older generation of a group that no longer exists: reject (v9+: GROUP_ID_NOT_FOUND,
                # which both protocols' clients understand).
                return all_(GROUP_ID_NOT_FOUND if api_version is not None and api_version >= 9
                            else ILLEGAL_GENERATION)
            # The group does not use Kafka's group management; it only stores offsets here.
            group = self.groups[group_id] = GroupMetadata(group_id, EMPTY, self.now_ms())
        if group.is_(DEAD):
            return all_(COORDINATOR_NOT_AVAILABLE)
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER or group_instance_id is not None:
            err = self._validate_current_member(group, member_id, group_instance_id, "offset-commit")
            if err == NONE and generation_id != group.generation_id:
                err = ILLEGAL_GENERATION
            if err != NONE:
                return all_(err)
        elif not group.is_(EMPTY):
            # generation -1 (admin client or a consumer without group management) may only commit for a group
            # with no members.
            return all_(UNKNOWN_MEMBER_ID)
        state = group.state
        if state == COMPLETING_REBALANCE:
            return all_(REBALANCE_IN_PROGRESS)
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
                results[tp] = OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = OffsetAndMetadata(offset, leader_epoch if leader_epoch is not None else -1, metadata,
                                                 now, expire)
        if accepted:
            err = self._store_offsets(group_id, accepted)
            if err == NONE and not group.is_(DEAD):
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
            return INVALID_GROUP_ID, {}
        err = self._unavailable(group_id)
        if err != NONE:
            return err, {}
        group = self.consumer.groups.get(group_id)
        if group is not None:
            err = self.consumer.validate_offset_fetch(group, member_id, member_epoch)
            if err != NONE:
                return err, {}
        else:
            group = self.groups.get(group_id)
        if group is None or getattr(group, "state", None) == DEAD:
            return NONE, {tp: None for tp in (partitions or [])}
        if partitions is None:
            return NONE, dict(group.offsets)
        return NONE, {tp: group.offsets.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str,
                       partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: -> (group error, {(topic, partition): error}); partition errors are empty on a group
        error."""
        if not self._valid_group_id(group_id, allow_empty=False):
            return INVALID_GROUP_ID, {}
        err = self._unavailable(group_id)
        if err != NONE:
            return err, {}
        if group_id in self.consumer.groups:
            return NONE, self.consumer.delete_offsets(self.consumer.groups[group_id], partitions)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return GROUP_ID_NOT_FOUND, {}
        errors: dict[tuple[str, int], int] = {}
        if group.is_(EMPTY):
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp[0])]
            errors.update({tp: GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if group.is_subscribed_to_topic(tp[0])})
        else:
            return NON_EMPTY_GROUP, {}
        if eligible:
            removed = {tp: None for tp in eligible if tp in group.offsets}
            err = self._store_offsets(group_id, removed) if removed else NONE
            if err == NONE:
                for tp in removed:
                    group.offsets.pop(tp, None)
            for tp in eligible:
                errors[tp] = err
            log.info("group %s: deleted %d offsets", group_id, len(removed))
        return NONE, {tp: errors[tp] for tp in partitions}

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
            return GroupSummary(INVALID_GROUP_ID, DEAD, "", "", [])
        err = self._unavailable(group_id)
        if err != NONE:
            return GroupSummary(err, DEAD, "", "", [])
        group = self.groups.get(group_id)   # a consumer-protocol group is not a classic group: GROUP_ID_NOT_FOUND
        if group is None or group.is_(DEAD):
            return GroupSummary(GROUP_ID_NOT_FOUND, DEAD, "", "", [])
        return group.summary()

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        errors: dict[str, int] = {}
        for group_id in group_ids:
            if not self._valid_group_id(group_id, allow_empty=True):
                errors[group_id] = INVALID_GROUP_ID
                continue
            err = self._unavailable(group_id)
            if err != NONE:
                errors[group_id] = err
                continue
            if group_id in self.consumer.groups:
                errors[group_id] = self.consumer.delete_group(self.consumer.groups[group_id])
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(DEAD):
                errors[group_id] = GROUP_ID_NOT_FOUND
            elif not group.is_(EMPTY):
                errors[group_id] = NON_EMPTY_GROUP
            else:
                err = self._store_offsets(group_id, {tp: None for tp in group.offsets}) if group.offsets else NONE
                if err != NONE:
                    errors[group_id] = err
                    continue
                self._remove_group(group)
                log.info("group %s deleted", group_id)
                errors[group_id] = NONE
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
            if gone and self._store_offsets(group.group_id, {tp: None for tp in gone}) == NONE:
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
                if self._store_offsets(group.group_id, {tp: None for tp in expired}) == NONE:
                    for tp in expired:
                        del group.offsets[tp]
                    removed += len(expired)
                    log.info("group %s: removed %d expired offsets", group.group_id, len(expired))
            if group.is_(EMPTY) and not group.offsets:
                log.info("group %s is now Dead (empty, no offsets)", group.group_id)
                self._remove_group(group)
        return removed + self.consumer.cleanup_expired_offsets(now, self.offsets_retention_ms)
