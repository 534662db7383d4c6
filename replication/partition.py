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
from protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, compute_crc, iter_batches, read_header
from replication.remote_wal import RECORDS
from storage.log.log import AppendResult, Log, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from storage.tiered.eager import eager
from storage.tiered.remote_log_metadata import RemoteStorageException

log = logging.getLogger("strata.partition")

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
ALTER_PARTITION_RETRY_BACKOFF = 0.1        # seconds (Kafka's retry.backoff.ms default)
_RESET_PENDING_ISR = frozenset({ErrorCode.operation_not_attempted, ErrorCode.ineligible_replica})
_AWAIT_METADATA = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
                             ErrorCode.fenced_leader_epoch, ErrorCode.invalid_update_version,
                             ErrorCode.invalid_request, ErrorCode.new_leader_elected})


def _park(waiters: list, offset: int, reached: int) -> asyncio.Future | None:
    """A future for a delayed request waiting until a watermark reaches `offset` (None: it has), kept in `waiters`."""
    if reached >= offset:
        return None
    fut = asyncio.get_running_loop().create_future()
    waiters.append((offset, fut))
    return fut


def _release(waiters: list, reached: int) -> list:
    """Complete the waiters whose offset the watermark `reached`; the ones still waiting."""
    keep = []
    for offset, fut in waiters:
        if fut.done():
            continue
        if offset <= reached:
            fut.set_result(0)
        else:
            keep.append((offset, fut))
    return keep


async def wait_for_all(waits: list, timeout: float) -> list[int]:
    """Kafka's purgatory for one request's delayed partitions (DelayedProduce, DelayedDeleteRecords): wait up to
    `timeout` seconds for the (partition, future) pairs; each one's answer is its future's result, or
    REQUEST_TIMED_OUT (and the partition forgets the waiter)."""
    if waits:
        await asyncio.wait([fut for _, fut in waits], timeout=max(timeout, 0))
    out = []
    for part, fut in waits:
        if fut.done() and not fut.cancelled():
            out.append(fut.result())
        else:
            fut.cancel()
            part.forget_waiter(fut)
            out.append(ErrorCode.request_timed_out)
    return out


def _end_of(views, start: int) -> int:
    """The offset after the last batch in `views` (`start` when there is none). A batch may span views (remote reads
    slice it at chunk boundaries), so they are walked as one."""
    if len(views) == 1:
        upper = start
        for _, h in iter_batches(views[0]):
            upper = max(upper, h.last_offset + 1)
        return upper
    upper, i, pos = start, 0, 0            # the headers are read where they are; only one that spans views is joined
    while i < len(views):
        v = views[i]
        if pos + HEADER_SIZE <= len(v):
            h = read_header(v, pos)
        else:
            head, j = bytes(v[pos:]), i + 1
            while len(head) < HEADER_SIZE and j < len(views):
                head += bytes(views[j][:HEADER_SIZE - len(head)])
                j += 1
            if len(head) < HEADER_SIZE:
                break
            h = read_header(head, 0)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            break
        upper = max(upper, h.last_offset + 1)
        pos += h.size
        while i < len(views) and pos >= len(views[i]):     # move to the view holding the next batch's start
            pos -= len(views[i])
            i += 1
    return upper


def _error_name(error: int) -> str:
    try:
        return ErrorCode(error).name
    except ValueError:
        return str(error)


class AlterPartitionListener:
    """Kafka's AlterPartitionListener, as plain counts the broker exports: ISR expansions and shrinks this broker's
    leaders got committed (IsrExpandsPerSec, IsrShrinksPerSec) and AlterPartition attempts that failed
    (FailedIsrUpdatesPerSec). Counted when the change is committed, as Kafka does, not when it is proposed."""
    __slots__ = ("expands", "shrinks", "failed")

    def __init__(self):
        self.expands = self.shrinks = self.failed = 0


class Partition:
    __slots__ = ("topic", "index", "log", "leader_epoch", "waiters", "remote", "local_broker_id", "isr",
                 "follower_end_offsets", "leader_id", "replicas", "partition_epoch", "topic_id", "last_caught_up",
                 "pending_isr", "hw_waiters", "alter_isr", "_leo_at_last_fetch", "wal", "closed", "isr_listener",
                 "follower_start_offsets", "leader_epoch_start_offset", "alive_brokers", "low_watermark_waiters")

    def __init__(self, topic: str, index: int, plog: Log, *, leader_epoch: int = 0, local_broker_id: int = -1,
                 remote=None, topic_id: str = "", alter_isr=None, isr_listener: AlterPartitionListener | None = None,
                 alive_brokers=None):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = plog
        self.leader_epoch = leader_epoch
        self.local_broker_id = local_broker_id
        self.leader_id = local_broker_id
        self.replicas: tuple[int, ...] = (local_broker_id,)
        self.partition_epoch = 0
        self.remote = remote                      # storage.tiered.remote_log_manager.RemoteLogManager or None
        self.alter_isr = alter_isr                # replication.isr.AlterPartitionManager.submit, or None (one broker)
        self.isr_listener = isr_listener          # counts committed ISR changes (the ReplicaManager's)
        self.waiters: list[asyncio.Future] = []   # parked Fetches (long poll)
        self.hw_waiters: list[tuple[int, asyncio.Future]] = []   # acks=all produces: (offset the HW must pass, fut)
        self.isr: tuple[int, ...] = (local_broker_id,)
        self.pending_isr: tuple[int, ...] | None = None    # an AlterPartition in flight (Kafka's PendingExpand/Shrink)
        self.follower_end_offsets: dict[int, int] = {}   # follower id -> log end offset from its fetches
        self.follower_start_offsets: dict[int, int] = {}  # follower id -> log start offset from its fetches
        self.leader_epoch_start_offset = -1       # our log end when we became leader of this epoch; -1 on a follower
        self.last_caught_up: dict[int, float] = {}       # follower id -> when it last had all of the leader's log
        self._leo_at_last_fetch: dict[int, tuple[int, float]] = {}
        self.wal = None                           # replication.remote_wal.PartitionWal when a fast store is set
        self.closed = False                       # removed from this broker (deleted, reassigned away, shut down)
        # the registered, unfenced brokers (a callable returning a set; None: every replica counts): DeleteRecords
        # waits for the log start of these replicas only, as Kafka's lowWatermarkIfLeader does
        self.alive_brokers = alive_brokers
        self.low_watermark_waiters: list[tuple[int, asyncio.Future]] = []   # DeleteRecords: (offset, fut)
        # The high watermark is the log's, restored from the replication-offset checkpoint by the ReplicaManager:
        # not the log end, which a restarted follower would otherwise serve to KIP-392 consumers. Becoming leader
        # raises it from there.

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
    def local_log_start_offset(self) -> int:
        return self.log.local_log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def size_bytes(self) -> int:
        """The bytes of this replica's local log segments (what DescribeLogDirs reports as partition_size)."""
        return self.log.size_bytes()

    @property
    def end_offset_lag(self) -> int:
        """How far the log end is below the high watermark (Kafka's getLogEndOffsetLag for a current log). A
        follower's high watermark is capped at its own log end, so this is 0 there, as in Kafka."""
        return max(self.log.high_watermark - self.log.log_end_offset, 0)

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

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark must wait for: while an expansion is in flight it already counts the new
        member, while a shrink is in flight the leaving one still counts (Kafka's maximalIsr)."""
        pending = self.pending_isr
        return self.isr if pending is None else tuple(set(self.isr) | set(pending))

    def not_leader_error(self) -> int:
        """0 when this replica leads, else NOT_LEADER_OR_FOLLOWER (what Produce, consumer Fetch and ListOffsets
        answer on a follower)."""
        return 0 if self.leader_id == self.local_broker_id else ErrorCode.not_leader_or_follower

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset over the ISR (Kafka's maybeIncrementLeaderHW); it never goes back."""
        leo = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.local_broker_id:
                leo = min(leo, self.follower_end_offsets.get(replica, 0))
        if leo > self.log.high_watermark:
            hw = self.log.update_high_watermark(leo)
            if self.hw_waiters:
                self.hw_waiters = _release(self.hw_waiters, hw)
            return True
        return False

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future | None:
        """acks=all (Kafka's DelayedProduce): a future that completes with 0 when the HW reaches `offset`, or
        with NOT_LEADER_OR_FOLLOWER if this replica stops leading first; None when it is already there."""
        return _park(self.hw_waiters, offset, self.log.high_watermark)

    def forget_waiter(self, fut: asyncio.Future) -> None:
        """A delayed request gave up on `fut` (it timed out): drop it now, not when the watermark next moves."""
        self.hw_waiters = [w for w in self.hw_waiters if w[1] is not fut]
        self.low_watermark_waiters = [w for w in self.low_watermark_waiters if w[1] is not fut]

    def acks_all_error(self) -> int:
        """After the HW passed an acks=all batch: NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
        min.insync.replicas meanwhile, as Kafka's Partition.checkEnoughReplicasReachOffset answers."""
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if len(self.maximal_isr) < self.log.config.min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return 0

    # ---- leadership (from the metadata image) -------------------------------------------------------------------
    def make_leader(self, state, now: float) -> None:
        """Become leader at `state.leader_epoch` (Kafka's Partition.makeLeader): the epoch starts at our log end
        (so OffsetForLeaderEpoch answers followers correctly before the first append), followers start unknown
        and count as caught up now, so none is dropped from the ISR before it could fetch."""
        self.leader_id = self.local_broker_id
        self.leader_epoch, self.partition_epoch = state.leader_epoch, state.partition_epoch
        self.replicas, self.isr, self.pending_isr = tuple(state.replicas), tuple(state.isr), None
        self.follower_end_offsets, self.follower_start_offsets = {}, {}
        self.last_caught_up = {r: now for r in self.replicas if r != self.local_broker_id}
        self._leo_at_last_fetch = {}
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.log.assign_epoch_start_offset(state.leader_epoch, self.log.log_end_offset)
        if self.wal is not None:
            self.wal.became_leader(self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        self.wake_waiters()

    def make_follower(self, state) -> None:
        """Follow `state.leader` (Kafka's Partition.makeFollower): parked acks=all produces fail with
        NOT_LEADER_OR_FOLLOWER (the client retries on the new leader); truncation happens in the fetcher."""
        self.leader_id = state.leader
        self.leader_epoch, self.partition_epoch = state.leader_epoch, state.partition_epoch
        self.replicas, self.isr, self.pending_isr = tuple(state.replicas), tuple(state.isr), None
        self.follower_end_offsets, self.last_caught_up, self._leo_at_last_fetch = {}, {}, {}
        self.follower_start_offsets, self.leader_epoch_start_offset = {}, -1
        if self.wal is not None:
            self.wal.became_follower()
        self.fail_waiters()

    def fail_waiters(self, error: int = ErrorCode.not_leader_or_follower) -> None:
        """This replica stops leading (or goes away, or its log dir failed: `error` KAFKA_STORAGE_ERROR): parked
        acks=all produces get `error`, parked fetches wake up and see the new state."""
        for _, fut in self.hw_waiters + self.low_watermark_waiters:
            if not fut.done():
                fut.set_result(error)
        self.hw_waiters, self.low_watermark_waiters = [], []
        self.wake_waiters()

    def update_isr_state(self, state) -> None:
        """A leader's ISR or partition epoch changed in the image without a leader change (its own AlterPartition
        applied, or the controller fenced a follower). A newer committed state replaces any proposal in flight: it
        is either that proposal (counted as committed) or a change the controller made since, which the proposal
        was not based on (Kafka's makeLeader / handleAlterPartitionUpdate). The same epoch again (the AlterPartition
        answer came first) still brings the replicas, which the answer does not carry: a reassignment it completed
        may have removed one, and a proposal naming it can never be committed."""
        if state.partition_epoch < self.partition_epoch:
            return
        if state.partition_epoch == self.partition_epoch:
            self.replicas = tuple(state.replicas)
            self._drop_pending_for_removed_replicas()
            return
        before = self.isr
        self.isr, self.partition_epoch = tuple(state.isr), state.partition_epoch
        self.replicas = tuple(state.replicas)
        if self.pending_isr is not None:
            if set(self.pending_isr) == set(self.isr) and self.isr_listener is not None:
                if len(self.isr) < len(before):
                    self.isr_listener.shrinks += 1
                elif len(self.isr) > len(before):
                    self.isr_listener.expands += 1
            self.pending_isr = None
        if self.maybe_increment_high_watermark():
            self.wake_waiters()

    # ---- leader: followers' fetch state and the ISR --------------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now: float, log_start: int = -1) -> None:
        """A follower fetched from `fetch_offset`, which is its log end offset (Kafka's updateFollowerFetchState):
        it is caught up if that reaches our log end now, or our log end at its previous fetch; then the HW may
        move and a follower outside the ISR may join it."""
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            self.last_caught_up[replica_id] = now
        else:
            prev = self._leo_at_last_fetch.get(replica_id)
            if prev is not None and fetch_offset >= prev[0]:
                self.last_caught_up[replica_id] = max(self.last_caught_up.get(replica_id, 0.0), prev[1])
        self._leo_at_last_fetch[replica_id] = (leo, now)
        self.follower_end_offsets[replica_id] = fetch_offset
        self.follower_start_offsets[replica_id] = log_start
        if self.maybe_increment_high_watermark():
            self.wake_waiters()
        if self.low_watermark_waiters:
            self.low_watermark_waiters = _release(self.low_watermark_waiters, self.low_watermark())
        if replica_id not in self.isr and self.pending_isr is None and replica_id in self.replicas and \
                fetch_offset >= self.log.high_watermark and \
                fetch_offset >= self.log.epoch_start_offset(self.leader_epoch):
            self._alter_isr(tuple(r for r in self.replicas if r in self.isr or r == replica_id))

    def maybe_shrink_isr(self, now: float, lag_max: float) -> None:
        """Drop followers that have not caught up within replica.lag.time.max.ms (Kafka's maybeShrinkIsr)."""
        if not self.is_leader or self.pending_isr is not None:
            return
        leo = self.log.log_end_offset            # Kafka's Replica.isCaughtUp: at our log end, or caught up lately
        out = [r for r in self.isr if r != self.local_broker_id and self.follower_end_offsets.get(r, -1) != leo
               and now - self.last_caught_up.get(r, now) > lag_max]
        if out:
            log.info("%s-%d: shrinking the ISR %s: %s lagged more than %.1fs", self.topic, self.index, self.isr, out,
                     lag_max)
            self._alter_isr(tuple(r for r in self.isr if r not in out))

    def _alter_isr(self, new_isr: tuple[int, ...]) -> None:
        if self.alter_isr is None:
            return
        self.pending_isr = new_isr
        self.alter_isr(self, new_isr)

    def alter_isr_done(self, error: int, state=None, proposed: tuple[int, ...] | None = None) -> None:
        """The controller's answer to our AlterPartition for `proposed` (Kafka's Partition.submitAlterPartition
        callbacks). The pending ISR is what the high watermark waits for, so it is only dropped when it is certain
        the change was not made:

        - committed: take the state (unless the leader epoch moved on: the image brings that);
        - OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA: the controller refused it; back to the committed ISR;
        - FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_*, INVALID_REQUEST, NEW_LEADER_ELECTED: our
          state is stale; keep the maximal ISR until the image brings the partition's new state;
        - anything else (NOT_CONTROLLER, a lost connection, a timeout): the change may or may not have been made;
          keep the maximal ISR and send it again.
        An answer to an older proposal than the one pending now is ignored."""
        if proposed is not None and self.pending_isr is not proposed:
            return
        if error == 0:
            if state is not None and state.leader_epoch == self.leader_epoch:
                if state.partition_epoch > self.partition_epoch:
                    self.update_isr_state(state)     # counts the change unless the image committed it first
                elif state.partition_epoch == self.partition_epoch:
                    self.pending_isr = None          # nothing to change: the ISR already was the proposed one
            return
        if self.isr_listener is not None:
            self.isr_listener.failed += 1
        if error in _RESET_PENDING_ISR:
            log.info("%s-%d: AlterPartition to %s refused (%s): back to the ISR %s", self.topic, self.index,
                     self.pending_isr, ErrorCode(error).name, self.isr)
            self.pending_isr = None
        elif error in _AWAIT_METADATA:
            log.info("%s-%d: AlterPartition to %s failed with %s: waiting for the metadata", self.topic, self.index,
                     self.pending_isr, ErrorCode(error).name)
            self._drop_pending_for_removed_replicas()       # the metadata may have told us already
        else:
            pending = self.pending_isr
            log.info("%s-%d: AlterPartition to %s failed with %s: sending it again", self.topic, self.index, pending,
                     _error_name(error))
            asyncio.get_running_loop().call_later(ALTER_PARTITION_RETRY_BACKOFF, self._resend_pending_isr, pending)

    def _drop_pending_for_removed_replicas(self) -> None:
        """A pending ISR that names a broker that is no longer a replica (a completed reassignment removed it) is
        refused for good: back to the committed ISR, or the high watermark would wait for that broker forever."""
        if self.pending_isr is not None and not set(self.pending_isr) <= set(self.replicas):
            log.info("%s-%d: the proposed ISR %s names a replica no longer assigned: back to the ISR %s", self.topic,
                     self.index, self.pending_isr, self.isr)
            self.pending_isr = None
            if self.maybe_increment_high_watermark():
                self.wake_waiters()

    def _resend_pending_isr(self, pending: tuple[int, ...] | None) -> None:
        if pending is not None and self.pending_isr is pending and self.is_leader and not self.closed:
            self.alter_isr(self, pending)

    def wake_waiters(self) -> None:
        if self.waiters:
            for fut in self.waiters:
                if not fut.done():
                    fut.set_result(None)
            self.waiters.clear()

    # ---- leader: appends ----------------------------------------------------------------------------------------
    def append_records_to_leader(self, records, headers, required_acks: int, coordinator_origin: bool = False,
                                 **verification) -> AppendResult:
        """Append validated batches at this leader's epoch. acks=all needs an ISR of at least min.insync.replicas
        before the append (NOT_ENOUGH_REPLICAS), as Kafka's Partition.appendRecordsToLeader."""
        if self.leader_id != self.local_broker_id:
            return AppendResult(-1, -1, -1, -1, ErrorCode.not_leader_or_follower,
                                f"This server is not the leader for partition {self.topic}-{self.index}")
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            return AppendResult(-1, -1, -1, self.log.log_start_offset, ErrorCode.not_enough_replicas,
                                f"The size of the current ISR {set(self.isr)} is insufficient to satisfy the "
                                f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}")
        result = self.log.append_as_leader(records, headers, self.leader_epoch, coordinator_origin, **verification)
        if result.error_code == 0 and not result.duplicate:
            self._appended(result, lambda: bytes(memoryview(records)[:sum(h.size for h in headers)]))
        return result

    def _appended(self, result: AppendResult, written) -> None:
        """After a leader append: the WAL upload (`written()`: the batches as written, offsets and epoch assigned),
        the high watermark, parked fetches."""
        if self.wal is not None and self.log.config.remote_wal_enable:
            if len(self.replicas) > 1:
                self.wal.manager.add(self, self.leader_epoch, result.base_offset, result.last_offset, written())
            else:                                     # no follower to read it: a later one gets records
                self.wal.failed(result.last_offset)
        self.maybe_increment_high_watermark()
        self.wake_waiters()

    def append_marker_to_leader(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                commit: bool) -> AppendResult:
        """A transaction marker from a coordinator's WriteTxnMarkers (acks=all, as Kafka writes markers): ends the
        producer's transaction in this partition."""
        if self.leader_id != self.local_broker_id:
            return AppendResult(-1, -1, -1, -1, ErrorCode.not_leader_or_follower,
                                f"This server is not the leader for partition {self.topic}-{self.index}")
        min_isr = self.log.config.min_insync_replicas
        if len(self.isr) < min_isr:
            return AppendResult(-1, -1, -1, self.log.log_start_offset, ErrorCode.not_enough_replicas,
                                f"The size of the current ISR {set(self.isr)} is insufficient to satisfy the "
                                f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}")
        result = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, self.leader_epoch)
        if result.error_code == 0:
            self._appended(result, lambda: b"".join(bytes(v) for v in self.log.read(
                result.base_offset, 1, max_offset=result.base_offset + 1)))
        return result

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def aborted_transactions(self, fetch_offset: int, views) -> list:
        """What a read_committed Fetch returns with `views` read from `fetch_offset`: the aborted transactions
        overlapping them (AbortedTxn entries of the local transaction indexes)."""
        upper = _end_of(views, fetch_offset)
        return self.log.collect_aborted_transactions(fetch_offset, upper) if upper > fetch_offset else []

    def local_aborted_transactions(self, start: int, end: int) -> list:
        """The aborted transactions of the local segments' indexes overlapping [start, end), for readers of object
        storage that plan their own ranges (DescribeWalPointers v1); remote segments have their own index objects."""
        return self.log.collect_aborted_transactions(start, end) if end > start else []

    async def remote_aborted_transactions(self, fetch_offset: int, views) -> list:
        """The same for `views` read from the remote tier (its segments' TRANSACTION indexes)."""
        upper = _end_of(views, fetch_offset)
        if upper <= fetch_offset:
            return []
        return await self.remote.collect_aborted_transactions(self.topic, self.index, self.log, fetch_offset, upper)

    def remote_aborted_transactions_now(self, fetch_offset: int, views) -> asyncio.Future:
        """remote_aborted_transactions run eagerly (storage/tiered/eager.py): done at once when the transaction
        indexes it walks are cached, else a task going on with it."""
        return eager(self.remote_aborted_transactions(fetch_offset, views))

    # ---- leader: reads -------------------------------------------------------------------------------------------
    def read(self, fetch_offset: int, max_bytes: int, *, min_one_message: bool,
             fetch_only_committed: bool = True, local_only: bool = False, read_committed: bool = False):
        """(record views, remote read task or None). Consumers read below the high watermark (read_committed ones
        below the last stable offset); an offset below the local log start of a tiered log starts (or joins) a
        remote read, or for a follower (`local_only`) is OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405). Raises ApiError."""
        plog = self.log
        limit = plog.last_stable_offset if read_committed else \
            plog.high_watermark if fetch_only_committed else plog.log_end_offset
        try:
            return plog.read(fetch_offset, max_bytes, min_one_message=min_one_message, max_offset=limit), None
        except OffsetOutOfRangeError as e:
            rlm = self.remote
            if rlm is None or not rlm.in_remote_range(plog, fetch_offset):
                raise ApiError(ErrorCode.offset_out_of_range, str(e)) from None
            if local_only:
                raise ApiError(ErrorCode.offset_moved_to_tiered_storage, str(e)) from None
        try:
            return (), self.remote.remote_read(self.topic, self.index, plog, fetch_offset, max(max_bytes, 1),
                                               min_one_message, read_committed)
        except RemoteStorageException as e:       # the reader queue is full: what Kafka answers for it
            raise ApiError(ErrorCode.unknown_server_error, str(e)) from None

    def read_for_follower(self, replica_id: int, fetch_offset: int, max_bytes: int, *, min_one_message: bool,
                          now: float):
        """A follower's read: (record views, WAL pointers). With a fast store and `remote.wal.enable`, pointers
        instead of records where the pointer file has them, nothing while the range is still being uploaded, and
        records otherwise (replication/remote_wal.py says when)."""
        wal = self.wal
        if wal is not None and self.log.config.remote_wal_enable and self.is_leader and \
                fetch_offset >= self.log.local_log_start_offset:
            what, pointers = wal.serve(replica_id, fetch_offset, max(max_bytes, 1), now)
            if what != RECORDS:
                return (), pointers
        views, _ = self.read(fetch_offset, max_bytes, min_one_message=min_one_message, fetch_only_committed=False,
                             local_only=True)
        return views, ()

    def committed_wal_pointers(self, offset: int, max_bytes: int) -> tuple[str, list]:
        """A reader's way to the fast store (issue 15): (store name, pointers) to the uploaded chunks from `offset`
        on, below the high watermark, while this broker leads the partition with WAL on. The chunks hold the batches
        exactly as in the log, so a reader decoding them sees what Fetch would return."""
        wal = self.wal
        if wal is None or not self.log.config.remote_wal_enable or not self.is_leader or \
                offset < self.log.local_log_start_offset:
            return "", []
        return wal.store_name, wal.committed_pointers(offset, self.high_watermark, max(max_bytes, 1))

    @property
    def remote_fetch_max_wait(self) -> float:
        return self.remote.fetch_max_wait

    def remote_read_result(self, fetch_offset: int, task: asyncio.Task) -> tuple[list, int]:
        """(record views, error code) of a remote read once a Fetch stops waiting (Kafka's DelayedRemoteFetch). A
        read still running answers the whole batches it has read so far (a slow store then delays the consumer by
        remote.fetch.max.wait.ms, never by a whole read; what follows is likely in the chunk cache by the next
        fetch); with none yet it answers nothing and no error and stays registered, so the client's retry of the
        same offset gets its result. A failed read is UNKNOWN_SERVER_ERROR (Kafka's mapping of
        RemoteStorageException)."""
        rlm = self.remote
        if not task.done():
            rlm.metrics.fetch_expires.inc()
            partial = list(getattr(task, "progress", ()))
            if partial:                      # the client moves past it: the rest of the read is not wanted
                rlm.consumed(self.topic, self.index, fetch_offset, task)
                task.cancel()                # its GETs go on into the chunk cache (shielded)
            return partial, 0
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
    @property
    def high_watermark_lagging(self) -> bool:
        """A new leader whose high watermark is still below where its epoch started: the followers have not fetched
        from it yet, so the HW it knows may be older than the one its predecessor gave out."""
        return self.leader_epoch_start_offset > self.log.high_watermark

    def fetch_offset_for_timestamp(self, timestamp: int, read_committed: bool = False):
        """ListOffsets: (error, offset, timestamp, leader epoch) or a coroutine giving that when the remote tier must
        be searched. -1 latest (the high watermark), -2 earliest (incl. the remote tier), -3 max timestamp, -4
        earliest local, -5 latest tiered (KIP-1005), else the first offset with a timestamp at or after it.

        Like Kafka's Partition.fetchOffsetForTimestamp, a leader whose HW lags behind its epoch start answers
        OFFSET_NOT_AVAILABLE (retriable) for latest, and for lookups that find nothing below the HW, instead of an
        offset lower than one a client may already have seen."""
        plog = self.log
        if read_committed and timestamp not in (LATEST, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED):
            res = self.fetch_offset_for_timestamp(timestamp)
            if asyncio.iscoroutine(res):
                return self._below_lso(res)
            return res if res[1] < plog.last_stable_offset else (0, -1, -1, -1)
        if timestamp == LATEST:
            if self.high_watermark_lagging:
                return self._not_available()
            return self._found(plog.last_stable_offset if read_committed else plog.high_watermark, -1)
        if timestamp == EARLIEST:
            return self._found(plog.log_start_offset, -1)
        if timestamp == EARLIEST_LOCAL:
            return self._found(plog.local_log_start_offset, -1)
        if timestamp == LATEST_TIERED:
            if not self.remote_log_enabled:
                return self._checked(0, -1, -1, -1)
            offset, epoch = self.remote.latest_tiered(plog)
            return self._checked(0, offset, -1, epoch)
        if timestamp >= 0 and self.remote_log_enabled and plog.log_start_offset < plog.local_log_start_offset:
            return self._lookup_tiered(timestamp)
        if timestamp == MAX_TIMESTAMP:
            entry = plog.max_timestamp_entry()
        else:
            entry = plog.fetch_offset_by_timestamp(timestamp)
        return self._checked(*(self._found(*entry) if entry else (0, -1, -1, -1)))

    async def _below_lso(self, lookup):
        """read_committed (Kafka's lastFetchableOffset): an offset found at or above the last stable offset is none."""
        res = await lookup
        return res if res[1] < self.log.last_stable_offset else (0, -1, -1, -1)

    def _not_available(self) -> tuple[int, int, int, int]:
        return ErrorCode.offset_not_available, -1, -1, -1

    def _checked(self, err: int, offset: int, ts: int, epoch: int) -> tuple[int, int, int, int]:
        """ReplicaManager.fetchOffset: while the HW lags, a lookup that finds nothing, or an offset at or above the
        HW, is OFFSET_NOT_AVAILABLE."""
        if err == 0 and self.high_watermark_lagging and (offset < 0 or offset >= self.log.high_watermark):
            return self._not_available()
        return err, offset, ts, epoch

    def _found(self, offset: int, ts: int) -> tuple[int, int, int, int]:
        return 0, offset, ts, (self.leader_epoch if offset >= 0 else -1)

    async def _lookup_tiered(self, timestamp: int):
        rlm = self.remote
        try:
            async with asyncio.timeout(rlm.list_offsets_timeout):
                found = await rlm.find_offset_by_timestamp(self.topic, self.index, self.log, timestamp)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("ListOffsets by timestamp in the remote tier of %s-%d failed: %s", self.topic, self.index, e)
            return ErrorCode.unknown_server_error, -1, -1, -1
        if found is None:
            found = self.log.fetch_offset_by_timestamp(timestamp)
        return self._checked(*(self._found(*found) if found else (0, -1, -1, -1)))

    def low_watermark(self) -> int:
        """The smallest log start offset over this leader and its followers on live brokers (Kafka's
        lowWatermarkIfLeader): what DeleteRecords answers once every replica deleted the records. A follower that has
        not fetched since we became leader counts as unknown (-1)."""
        low = self.log.log_start_offset
        alive = self.alive_brokers() if self.alive_brokers is not None else None
        for r in self.replicas:
            if r != self.local_broker_id and (alive is None or r in alive):
                low = min(low, self.follower_start_offsets.get(r, -1))
        return low

    def wait_for_low_watermark(self, offset: int) -> asyncio.Future | None:
        """DeleteRecords (Kafka's DelayedDeleteRecords): a future that completes with 0 once every live replica's log
        starts at `offset` or later (each follower learns the leader's log start from its fetches), or with
        NOT_LEADER_OR_FOLLOWER if this replica stops leading first; None when that is so already."""
        return _park(self.low_watermark_waiters, offset, self.low_watermark())

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: move the log start to `offset` (-1 = the high watermark); returns the new log start.
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
        try:
            result = self.log.append_as_follower(records, headers)
        except UnexpectedAppendOffsetError:
            # Kafka's doAppendRecordsToFollowerOrFutureReplica: an empty log whose start (the leader's log start,
            # moved by DeleteRecords into the middle of a batch) falls inside the first batch starts over at that
            # batch's first offset; any other mismatch is the fetcher's to handle.
            first, last, leo = headers[0].base_offset, headers[-1].last_offset, self.log.log_end_offset
            if not (leo == self.log.log_start_offset and first < leo <= last):
                raise
            log.info("%s-%d: the first batch from the leader starts at %d, below our log start %d: starting the "
                     "log there", self.topic, self.index, first, leo)
            self.log.restart_at(first)
            result = self.log.append_as_follower(records, headers)
        if leader_high_watermark is not None:
            self.update_follower_high_watermark(leader_high_watermark)
        return result

    def update_log_start_from_leader(self, leader_log_start: int) -> None:
        """The leader's log start offset, from its fetch responses: DeleteRecords reaches the followers this way
        (Kafka's maybeIncrementLogStartOffset with LeaderOffsetIncremented), never past our high watermark."""
        target = min(leader_log_start, self.log.high_watermark)
        if target > self.log.log_start_offset:
            self.log.delete_records(target)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """Take the leader's HW, capped at our log end. Consumers fetching from this follower (KIP-392) are parked
        on it: wake them when it moves, as Kafka's fetcher completes delayed fetches of partitions whose HW moved."""
        before = self.log.high_watermark
        if self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset)) > before:
            self.wake_waiters()

    def truncate_to(self, offset: int) -> bool:
        """Drop a divergent tail from `offset` on (after OffsetForLeaderEpoch, KIP-101/279)."""
        removed = self.log.truncate_to(offset)
        if removed:
            log.info("%s-%d truncated to offset %d", self.topic, self.index, offset)
        return removed

    def restart_at(self, offset: int, log_start: int | None = None, epochs=(), producer_snapshot=None) -> None:
        """Our whole log is below the leader's (local) log start: drop it and continue at `offset`."""
        self.log.restart_at(offset, log_start, epochs, producer_snapshot)
        log.info("%s-%d restarts at offset %d (log start %d, %d leader epoch(s), %d producer(s))", self.topic,
                 self.index, offset, self.log.log_start_offset, len(self.log.leader_epoch_cache.entries),
                 len(self.log.producer_state.producers))

    def last_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch`, its end offset), (-1, -1) when unknown."""
        return self.log.end_offset_for_epoch(epoch)

    def update_follower_end_offset(self, replica_id: int, end_offset: int) -> bool:
        """The HW part of update_follower_fetch_state; True when the high watermark moved."""
        self.follower_end_offsets[replica_id] = end_offset
        if self.maybe_increment_high_watermark():
            self.wake_waiters()
            return True
        return False
