"""One partition replica on this broker (Kafka's cluster.Partition): the only way handlers reach a partition's data.

It owns what replication decides: the leader epoch, the ISR and the high watermark (the smallest log end offset in
the ISR; with one replica, the leader's log end offset), the acks rules for appends, and the follower operations
(append as follower, truncate to an offset, end offset for a leader epoch). Reads below the local log start go to
the remote tier (KIP-405) through the RemoteLogManager; the handler only sees records or a pending remote read.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ApiError, ErrorCode
from protocol.record_batch import compute_crc, iter_batches
from storage.log.log import AppendResult, Log, OffsetOutOfRangeError
from storage.tiered.remote_log_metadata import RemoteStorageException

log = logging.getLogger("strata.partition")

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


class Partition:
    __slots__ = ("topic", "index", "log", "leader_epoch", "waiters", "remote", "local_broker_id", "isr",
                 "follower_end_offsets")

    def __init__(self, topic: str, index: int, plog: Log, *, leader_epoch: int = 0, local_broker_id: int = -1,
                 remote=None):
        self.topic = topic
        self.index = index
        self.log = plog
        self.leader_epoch = leader_epoch
        self.local_broker_id = local_broker_id
        self.remote = remote                      # storage.tiered.remote_log_manager.RemoteLogManager or None
        self.waiters: list[asyncio.Future] = []   # parked Fetches (long poll)
        self.isr: tuple[int, ...] = (local_broker_id,)
        self.follower_end_offsets: dict[int, int] = {}   # follower id -> log end offset from its fetches
        self.maybe_increment_high_watermark()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, epoch={self.leader_epoch})"

    # ---- state -------------------------------------------------------------------------------------------------
    @property
    def config(self):
        return self.log.config

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def remote_log_enabled(self) -> bool:
        return self.remote is not None and self.log.remote_log_enabled

    def check_leader_epoch(self, current_leader_epoch: int) -> int:
        """KIP-320: a request's current_leader_epoch (-1 = not checked) against ours: FENCED_LEADER_EPOCH when it is
        older, UNKNOWN_LEADER_EPOCH when newer (this broker has not learnt it yet), 0 when it matches."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return 0
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset over the ISR (Kafka's maybeIncrementLeaderHW); it never goes back."""
        leo = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.local_broker_id:
                leo = min(leo, self.follower_end_offsets.get(replica, 0))
        if leo > self.log.high_watermark:
            self.log.update_high_watermark(leo)
            return True
        return False

    def wake_waiters(self) -> None:
        if self.waiters:
            for fut in self.waiters:
                if not fut.done():
                    fut.set_result(None)
            self.waiters.clear()

    # ---- leader: appends ----------------------------------------------------------------------------------------
    def append_records_to_leader(self, records, headers, required_acks: int) -> AppendResult:
        """Append validated batches at this leader's epoch. acks=all needs an ISR of at least min.insync.replicas
        before the append (NOT_ENOUGH_REPLICAS), as Kafka's Partition.appendRecordsToLeader."""
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            return AppendResult(-1, -1, -1, self.log.log_start_offset, ErrorCode.not_enough_replicas,
                                f"The size of the current ISR {set(self.isr)} is insufficient to satisfy the "
                                f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}")
        result = self.log.append_as_leader(records, headers, self.leader_epoch)
        if result.error_code == 0 and not result.duplicate:
            self.maybe_increment_high_watermark()
            self.wake_waiters()
        return result

    # ---- leader: reads -------------------------------------------------------------------------------------------
    def read(self, fetch_offset: int, max_bytes: int, *, min_one_message: bool,
             fetch_only_committed: bool = True):
        """(record views, remote read task or None). Consumers read below the high watermark; an offset below the
        local log start of a tiered log starts (or joins) a remote read. Raises OffsetOutOfRangeError or ApiError."""
        plog = self.log
        limit = plog.high_watermark if fetch_only_committed else plog.log_end_offset
        try:
            return plog.read(fetch_offset, max_bytes, min_one_message=min_one_message, max_offset=limit), None
        except OffsetOutOfRangeError as e:
            rlm = self.remote
            if rlm is None or not rlm.in_remote_range(plog, fetch_offset):
                raise ApiError(ErrorCode.offset_out_of_range, str(e)) from None
        try:
            return (), self.remote.remote_read(self.topic, self.index, plog, fetch_offset, max(max_bytes, 1),
                                               min_one_message)
        except RemoteStorageException as e:       # the reader queue is full: what Kafka answers for it
            raise ApiError(ErrorCode.unknown_server_error, str(e)) from None

    @property
    def remote_fetch_max_wait(self) -> float:
        return self.remote.fetch_max_wait

    def remote_read_result(self, fetch_offset: int, task: asyncio.Task) -> tuple[list, int]:
        """(record views, error code) of a remote read once a Fetch stops waiting (Kafka's DelayedRemoteFetch). A
        read still running yields nothing and no error: it stays registered, so the client's retry of the same
        offset gets its result. A failed read is UNKNOWN_SERVER_ERROR (Kafka's mapping of RemoteStorageException)."""
        rlm = self.remote
        if not task.done():
            rlm.metrics.fetch_expires.inc()
            return [], 0
        rlm.consumed(self.topic, self.index, fetch_offset, task)
        if task.cancelled():
            return [], ErrorCode.unknown_server_error
        exc = task.exception()
        if exc is None:
            return task.result(), 0
        if isinstance(exc, OffsetOutOfRangeError):
            return [], ErrorCode.offset_out_of_range
        return [], ErrorCode.unknown_server_error

    # ---- leader: offsets -----------------------------------------------------------------------------------------
    def fetch_offset_for_timestamp(self, timestamp: int):
        """ListOffsets: (error, offset, timestamp, leader epoch) or a coroutine giving that when the remote tier must
        be searched. -1 latest (the high watermark), -2 earliest (incl. the remote tier), -3 max timestamp, -4
        earliest local, -5 latest tiered (KIP-1005), else the first offset with a timestamp at or after it."""
        plog = self.log
        if timestamp == LATEST:
            return self._found(plog.high_watermark, -1)
        if timestamp == EARLIEST:
            return self._found(plog.log_start_offset, -1)
        if timestamp == EARLIEST_LOCAL:
            return self._found(plog.local_log_start_offset, -1)
        if timestamp == LATEST_TIERED:
            if not self.remote_log_enabled:
                return 0, -1, -1, -1
            offset, epoch = self.remote.latest_tiered(plog)
            return 0, offset, -1, epoch
        if timestamp >= 0 and self.remote_log_enabled and plog.log_start_offset < plog.local_log_start_offset:
            return self._lookup_tiered(timestamp)
        if timestamp == MAX_TIMESTAMP:
            entry = plog.max_timestamp_entry()
        else:
            entry = plog.fetch_offset_by_timestamp(timestamp)
        return self._found(*entry) if entry else (0, -1, -1, -1)

    def _found(self, offset: int, ts: int) -> tuple[int, int, int, int]:
        return 0, offset, ts, (self.leader_epoch if offset >= 0 else -1)

    async def _lookup_tiered(self, timestamp: int):
        rlm = self.remote
        try:
            found = await asyncio.wait_for(rlm.find_offset_by_timestamp(self.topic, self.index, self.log, timestamp),
                                           rlm.list_offsets_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("ListOffsets by timestamp in the remote tier of %s-%d failed: %s", self.topic, self.index, e)
            return ErrorCode.unknown_server_error, -1, -1, -1
        if found is None:
            found = self.log.fetch_offset_by_timestamp(timestamp)
        return self._found(*found) if found else (0, -1, -1, -1)

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: move the log start to `offset` (-1 = the high watermark); returns the low watermark.
        Kafka refuses it on compacted-only topics (POLICY_VIOLATION) and beyond the high watermark."""
        policy = self.log.config.cleanup_policy
        if "delete" not in policy:
            raise ApiError(ErrorCode.policy_violation,
                           f"Records of partition {self.topic}-{self.index} can not be deleted due to the configured "
                           f"policy")
        target = self.log.high_watermark if offset == -1 else offset
        if target < 0 or target > self.log.high_watermark:
            raise ApiError(ErrorCode.offset_out_of_range,
                           f"Cannot increment the log start offset to {target} of partition {self.topic}-"
                           f"{self.index} since it is larger than the high watermark {self.log.high_watermark}")
        return self.log.delete_records(target)

    # ---- follower ------------------------------------------------------------------------------------------------
    def append_records_to_follower(self, records, leader_high_watermark: int | None = None) -> AppendResult:
        """Append what the leader sent (offsets and epochs as the leader wrote them), then take the leader's high
        watermark, capped at our own log end (Kafka's Partition.appendRecordsToFollowerOrFutureReplica). Batches
        are checked for framing, magic and CRC as Kafka's analyzeAndValidateRecords does: a damaged one is
        refused whole (CORRUPT_MESSAGE), never appended."""
        headers = []
        end = 0
        for pos, h in iter_batches(records):
            if h.magic != 2 or compute_crc(records, pos, h.size) != h.crc:
                raise ApiError(ErrorCode.corrupt_message, f"replicated batch at offset {h.base_offset} of "
                                                          f"{self.topic}-{self.index} is corrupt")
            headers.append(h)
            end = pos + h.size
        if end != len(records):
            raise ApiError(ErrorCode.corrupt_message, f"replicated records of {self.topic}-{self.index} end in a "
                                                      f"partial batch")
        result = self.log.append_as_follower(records, headers)
        if leader_high_watermark is not None:
            self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))
        return result

    def truncate_to(self, offset: int) -> bool:
        """Drop a divergent tail from `offset` on (after OffsetForLeaderEpoch, KIP-101/279)."""
        removed = self.log.truncate_to(offset)
        if removed:
            log.info("%s-%d truncated to offset %d", self.topic, self.index, offset)
        return removed

    def last_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch`, its end offset), (-1, -1) when unknown."""
        return self.log.end_offset_for_epoch(epoch)

    def update_follower_end_offset(self, replica_id: int, end_offset: int) -> bool:
        """A follower's fetch offset is its log end offset (Kafka's updateFollowerFetchState); returns True when
        that moved the high watermark (parked acks=all produces and fetches may then complete)."""
        self.follower_end_offsets[replica_id] = end_offset
        if self.maybe_increment_high_watermark():
            self.wake_waiters()
            return True
        return False
