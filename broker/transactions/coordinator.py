"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionStateManager).

Each transactional id maps to a partition of `__transaction_state` (Java's String.hashCode, as for groups); the broker
leading that partition is its coordinator, with the partition's leader epoch as the coordinator epoch. On becoming
leader it loads the partition (the latest record per id wins) and resumes what was in flight: markers of prepared
commits and aborts are sent again, open transactions are aborted when they time out. On losing it, it unloads.

Every state change follows Kafka's order: prepare the next state (the id is pending meanwhile: others get
CONCURRENT_TRANSACTIONS), append it to the log with acks=all, and only then apply it. EndTxn answers once
PrepareCommit/PrepareAbort is in the log; the markers then go to every partition's leader (markers.py) and the
transaction ends with CompleteCommit/CompleteAbort.

Both transaction versions are served, chosen per request as Kafka does: version 1 (AddPartitionsToTxn from the
client, markers at the producer's epoch) and version 2 (KIP-890 part 2: EndTxn v5 bumps the epoch with every
transaction and answers the producer's next id and epoch; partitions join implicitly when their leader adds them for
a Produce v12 or a TxnOffsetCommit v5). `transaction.version` is the level ApiVersions finalizes (2 by default).
"""
from __future__ import annotations

import asyncio
import logging
import time

from broker.config import setting
from broker.groups.metadata_store import OFFSETS_TOPIC, partition_for
from broker.transactions import state as S
from broker.transactions.config import TXN_DEFAULTS
from broker.transactions.markers import TransactionMarkerSender
from broker.transactions.metrics import TransactionMetrics
from protocol.errors import ErrorCode
from protocol.record_batch import split_and_validate
from protocol.records import build_records_batch
from replication.internal_topics import InternalTopics

log = logging.getLogger("strata.transactions")

TXN_TOPIC = "__transaction_state"

_UNAVAILABLE = {ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out}
_MOVED = {ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error}


def map_append_error(code: int) -> int:
    """TransactionStateManager.appendTransactionToLog's mapping of a failed append."""
    if code in _UNAVAILABLE:
        return ErrorCode.coordinator_not_available
    if code in _MOVED:
        return ErrorCode.not_coordinator
    return ErrorCode.unknown_server_error


def _int(config, key: str) -> int:
    return int(setting(config, key, TXN_DEFAULTS))


class TransactionCoordinator:
    def __init__(self, config, replicas, producer_ids, groups, send_markers=None, clock=None, registry=None):
        """`producer_ids`: the broker's ProducerIdManager; `groups`: the GroupCoordinator (transactional offsets);
        `send_markers(broker_id, request)`: WriteTxnMarkers to another broker (None on one broker)."""
        self.config = config
        self.replicas = replicas
        self.producer_ids = producer_ids
        self.groups = groups
        self.num_partitions = _int(config, "transaction.state.log.num.partitions")
        self.segment_bytes = _int(config, "transaction.state.log.segment.bytes")
        self.min_isr = _int(config, "transaction.state.log.min.isr")
        self.load_buffer_size = max(_int(config, "transaction.state.log.load.buffer.size"), 1)
        self.max_timeout_ms = _int(config, "transaction.max.timeout.ms")
        self.abort_interval_ms = _int(config, "transaction.abort.timed.out.transaction.cleanup.interval.ms")
        self.request_timeout_ms = _int(config, "request.timeout.ms")
        self.verification_enabled = setting(config, "transaction.partition.verification.enable",
                                            TXN_DEFAULTS).strip().lower() == "true"
        self.transaction_version = min(max(_int(config, "transaction.version"), 0), 2)
        self.add_retry_backoff_ms = max(_int(config, "add.partitions.to.txn.retry.backoff.ms"), 1)
        self.add_retry_max_ms = _int(config, "add.partitions.to.txn.retry.backoff.max.ms")
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.internal = InternalTopics(replicas)
        self.txns: dict[str, S.TransactionMetadata] = {}
        self.epochs: dict[int, int] = {}          # partition -> coordinator epoch (its leader epoch) while we lead it
        self.loading: set[int] = set()
        self.markers = TransactionMarkerSender(self, send_markers)
        self._active = False
        self._abort_task: asyncio.Task | None = None
        self.metrics = TransactionMetrics(registry, self.open_by_state)

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def topic_configs(self, replication_factor: int) -> dict[str, str]:
        # Kafka sets min.insync.replicas to transaction.state.log.min.isr; capped at the replication factor here so a
        # single broker's coordinator works without changing it (Kafka's quickstart sets the min.isr to 1 for that).
        return {"cleanup.policy": "compact", "compression.type": "uncompressed",
                "segment.bytes": str(self.segment_bytes),
                "min.insync.replicas": str(max(1, min(self.min_isr, replication_factor)))}

    def start(self) -> None:
        self._active = True
        self.sync_leadership()
        if self._abort_task is None:
            self._abort_task = asyncio.get_running_loop().create_task(self._abort_timed_out_loop())

    def stop(self) -> None:
        self._active = False
        if self._abort_task is not None:
            self._abort_task.cancel()
            self._abort_task = None
        self.markers.stop()
        self.txns.clear()
        self.epochs.clear()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def sync_leadership(self) -> None:
        """The leaders of __transaction_state changed (Kafka's onElection/onResignation): load what we now lead (or
        lead at a new epoch), unload what we no longer lead."""
        if not self._active:
            return
        info = self.replicas.topics.get(TXN_TOPIC)
        if info is None:
            return
        self.num_partitions = info.partitions
        now: dict[int, int] = {}
        for p in range(info.partitions):
            part = self.replicas.get(TXN_TOPIC, p)
            if part is not None and part.is_leader:
                now[p] = part.leader_epoch
        for p in [p for p in self.epochs if now.get(p) != self.epochs[p]]:
            self._unload(p)
        gained = [p for p in now if p not in self.epochs]
        for p in gained:
            self.epochs[p] = now[p]
            self.loading.add(p)
        if gained:
            log.info("transaction coordinator for %s partitions %s: loading", TXN_TOPIC, sorted(gained))
            asyncio.get_running_loop().create_task(self._load(sorted(gained)))

    def _unload(self, p: int) -> None:
        del self.epochs[p]
        self.loading.discard(p)
        gone = [t for t in self.txns if self.partition_for(t) == p]
        for t in gone:
            del self.txns[t]
        self.markers.forget_partition(p)
        log.info("unloaded %d transactional id(s) of %s-%d: no longer its leader", len(gone), TXN_TOPIC, p)

    async def _load(self, partitions: list[int]) -> None:
        for p in partitions:
            epoch = self.epochs.get(p)
            if epoch is None or p not in self.loading:
                continue
            loaded: dict[str, S.TransactionMetadata | None] = {}
            try:
                for records in self.internal.read(TXN_TOPIC, p, self.load_buffer_size):
                    for r in records:
                        try:
                            tid = S.decode_key(r.key) if r.key is not None else None
                            if tid is None:
                                continue
                            loaded[tid] = None if r.value is None else S.decode_value(tid, r.value)
                        except S.CorruptTxnRecord as e:
                            log.warning("skipping an undecodable %s-%d record: %s", TXN_TOPIC, p, e)
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed", TXN_TOPIC, p)
            if self.epochs.get(p) != epoch:
                continue                               # resigned (or re-elected) meanwhile
            resumed = 0
            for tid, meta in loaded.items():
                if meta is None or meta.state == S.DEAD:
                    continue
                self.txns[tid] = meta
                if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    self.markers.send(tid, epoch, meta)
                    resumed += 1
            self.loading.discard(p)
            log.info("loaded %d transactional id(s) from %s-%d at coordinator epoch %d (%d with markers to resend)",
                     sum(1 for m in loaded.values() if m is not None), TXN_TOPIC, p, epoch, resumed)

    # ---- checks ------------------------------------------------------------------------------------------------
    def coordinator_error(self, transactional_id: str) -> int:
        """NOT_COORDINATOR unless we lead the id's partition; COORDINATOR_LOAD_IN_PROGRESS while it loads."""
        if not self._active:
            return ErrorCode.not_coordinator
        p = self.partition_for(transactional_id)
        if p not in self.epochs:
            return ErrorCode.not_coordinator
        if p in self.loading:
            return ErrorCode.coordinator_load_in_progress
        return 0

    def now_ms(self) -> int:
        return self._clock()

    # ---- the log -----------------------------------------------------------------------------------------------
    async def _write(self, meta: S.TransactionMetadata, transit: S.TxnTransit) -> int:
        """Append the transit with acks=all and apply it; the client-facing error (the pending state is dropped on
        failure). NOT_COORDINATOR when our coordinator epoch changed meanwhile."""
        tid = meta.transactional_id
        p = self.partition_for(tid)
        epoch = self.epochs.get(p)
        part = self.replicas.get(TXN_TOPIC, p)
        err = 0
        if epoch is None or part is None or not part.is_leader or part.leader_epoch != epoch:
            err = ErrorCode.not_coordinator
        else:
            value = S.value_bytes(transit, 1 if self.transaction_version >= 1 else 0)
            batch = bytearray(build_records_batch([(S.key_bytes(tid), value)], 0,
                                                  timestamp_ms=self.now_ms()))
            try:
                headers = split_and_validate(batch, max(part.config.max_message_bytes, len(batch)))
                result = part.append_records_to_leader(batch, headers, required_acks=-1)
                err = result.error_code
            except OSError as e:
                log.error("append to %s-%d failed: %s", TXN_TOPIC, p, e)
                err = ErrorCode.kafka_storage_error
            if not err:
                fut = part.wait_for_high_watermark(result.last_offset + 1)
                if fut is not None:
                    try:
                        err = await asyncio.wait_for(fut, self.request_timeout_ms / 1000)
                    except asyncio.TimeoutError:
                        part.forget_waiter(fut)
                        err = ErrorCode.request_timed_out
                if not err:
                    err = part.acks_all_error()
            if err:
                log.info("writing %s's %s to %s-%d failed: %s", tid, S.STATE_NAMES[transit.state], TXN_TOPIC, p,
                         ErrorCode(err).name)
                err = map_append_error(err)
        if self.epochs.get(p) != epoch or self.txns.get(tid) is not meta:
            return ErrorCode.not_coordinator          # resigned meanwhile: the new coordinator has the log
        if err:
            meta.abort_pending()
            return err
        meta.complete(transit)
        return 0

    # ---- InitProducerId ----------------------------------------------------------------------------------------
    async def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None):
        """-> (error, producer id, epoch). `expected`: the producer's (id, epoch) when it asks to recover (KIP-360)."""
        if tid == "":
            return ErrorCode.invalid_request, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        err = self.coordinator_error(tid)
        if err:
            return err, -1, -1
        meta = self.txns.get(tid)
        if meta is None:
            pid = await self.producer_ids.next_producer_id()
            if pid < 0:
                return ErrorCode.coordinator_not_available, -1, -1
            err = self.coordinator_error(tid)
            if err:
                return err, -1, -1
            meta = self.txns.get(tid)
            if meta is None:
                meta = self.txns[tid] = S.TransactionMetadata(tid, pid, txn_timeout_ms=timeout_ms,
                                                              txn_last_update_ms=self.now_ms())
        if meta.pending:
            return ErrorCode.concurrent_transactions, -1, -1
        if expected is not None and not (meta.producer_epoch == S.NO_PRODUCER_EPOCH or expected[0] == meta.producer_id
                                         or (expected[0] == meta.prev_producer_id
                                             and S.epoch_exhausted(expected[1]))):
            return ErrorCode.producer_fenced, -1, -1
        if meta.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.concurrent_transactions, -1, -1
        if meta.state == S.ONGOING:
            # fence the current producer: bump the epoch and abort its transaction; the client retries and then gets
            # the epoch after that (Kafka's PrepareEpochFence)
            fence = meta.prepare_fence_producer_epoch()
            err = (await self._end(meta, meta.producer_id, fence.producer_epoch, commit=False, from_client=False,
                                   fence=fence))[0]
            return (err or ErrorCode.concurrent_transactions), -1, -1
        if meta.state not in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            return ErrorCode.concurrent_transactions, -1, -1
        now = self.now_ms()
        if S.epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            before = (meta.producer_id, meta.producer_epoch, meta.state)
            pid = await self.producer_ids.next_producer_id()
            if pid < 0:
                return ErrorCode.coordinator_not_available, -1, -1
            if meta.pending or self.txns.get(tid) is not meta or \
                    (meta.producer_id, meta.producer_epoch, meta.state) != before:
                return ErrorCode.concurrent_transactions, -1, -1     # changed while we waited: the client retries
            # not the client's: Kafka records the cluster's transaction.version for InitProducerId
            transit = meta.prepare_producer_id_rotation(pid, timeout_ms, self.now_ms(),
                                                        expected is not None, self.transaction_version)
        else:
            transit = meta.prepare_increment_producer_epoch(timeout_ms, expected[1] if expected else None, now,
                                                            self.transaction_version)
            if isinstance(transit, int):
                return transit, -1, -1
        err = await self._write(meta, transit)
        if err:
            return err, -1, -1
        log.info("initialized transactional id %s with producer id %d epoch %d", tid, meta.producer_id,
                 meta.producer_epoch)
        return 0, meta.producer_id, meta.producer_epoch

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------------------
    def _check_producer(self, tid: str, pid: int, epoch: int) -> tuple[int, S.TransactionMetadata | None]:
        if not tid:
            return ErrorCode.invalid_request, None
        err = self.coordinator_error(tid)
        if err:
            return err, None
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping, None
        if meta.producer_epoch != epoch:
            return ErrorCode.producer_fenced, None
        return 0, meta

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: set, client_version: int = 0) -> int:
        """`client_version` 2: a partition leader adds partitions for a producer of transaction version 2."""
        err, meta = self._check_producer(tid, pid, epoch)
        if err:
            return err
        if meta.pending or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        if meta.state == S.ONGOING and partitions <= meta.partitions:
            return 0
        return await self._write(meta, meta.prepare_add_partitions(partitions, self.now_ms(), client_version))

    def verify_partitions(self, tid: str, pid: int, epoch: int, partitions: set) -> dict:
        """AddPartitionsToTxn v4+ verify_only (KIP-890): each partition NONE if in the transaction, else
        TRANSACTION_ABORTABLE; or one error for all."""
        err, meta = self._check_producer(tid, pid, epoch)
        if not err and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            err = ErrorCode.concurrent_transactions
        if err:
            return {tp: err for tp in partitions}
        return {tp: 0 if tp in meta.partitions else ErrorCode.transaction_abortable for tp in partitions}

    async def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str) -> int:
        p = partition_for(group_id, self.groups.store.num_partitions if self.groups.store is not None else 50)
        return await self.add_partitions(tid, pid, epoch, {(OFFSETS_TOPIC, p)})

    # ---- EndTxn ------------------------------------------------------------------------------------------------
    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool,
                      client_version: int = 1) -> tuple[int, int, int]:
        """-> (error, producer id, epoch): with transaction version 2 (EndTxn v5) the id and epoch the producer
        continues with; (-1, -1) on an error."""
        if not tid:
            return ErrorCode.invalid_request, -1, -1
        err = self.coordinator_error(tid)
        if err:
            return err, -1, -1
        meta = self.txns.get(tid)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping, -1, -1
        return await self._end(meta, pid, epoch, commit, from_client=True, client_version=client_version)

    async def _end(self, meta: S.TransactionMetadata, pid: int, epoch: int, commit: bool, from_client: bool,
                   fence: S.TxnTransit | None = None, client_version: int = 1) -> tuple[int, int, int]:
        """Kafka's endTransaction (also the coordinator's own aborts, a fence or a timeout, at version 1). Version
        2's answers, as Kafka 4.1 gives them: a retry carries the epoch before the bump; an abort with no transaction
        open (Empty, or after one ended) still bumps the epoch; a commit with none is INVALID_TXN_STATE. While the
        markers are written (PrepareCommit/PrepareAbort) every valid request is CONCURRENT_TRANSACTIONS, as Kafka's
        pending CompleteCommit/CompleteAbort makes it."""
        v2 = client_version >= 2
        retry = False
        if fence is None:
            meta_v2 = meta.client_txn_version >= 2
            retry_bump = meta_v2 and meta.producer_epoch == epoch + 1
            retry_overflow = meta_v2 and meta.prev_producer_id == pid and epoch == S.MAX_EPOCH - 1 and \
                meta.producer_epoch == 0
            retry = retry_bump or retry_overflow
            if meta.producer_id != pid and not retry_overflow:
                return ErrorCode.invalid_producer_id_mapping, -1, -1
            if not meta_v2:
                valid = (not from_client or epoch == meta.producer_epoch) and epoch >= meta.producer_epoch
            elif meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                valid = retry or epoch == meta.producer_epoch
            else:
                valid = epoch == meta.producer_epoch
            if not valid:
                return ErrorCode.producer_fenced, -1, -1
            if meta.pending:
                return ErrorCode.concurrent_transactions, -1, -1
        done = (0, meta.producer_id, meta.producer_epoch)
        state = meta.state
        if state == S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        elif state == S.COMPLETE_COMMIT:
            if commit:
                return done if retry or not v2 else (ErrorCode.invalid_txn_state, -1, -1)
            if not v2 or retry:
                return ErrorCode.invalid_txn_state, -1, -1
            target = S.PREPARE_ABORT
        elif state == S.COMPLETE_ABORT:
            if commit:
                return ErrorCode.invalid_txn_state, -1, -1
            if not v2 or retry:
                return done
            target = S.PREPARE_ABORT
        elif state == S.EMPTY and v2 and not commit:
            target = S.PREPARE_ABORT
        elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            # its markers are being written (Kafka's pending CompleteCommit/CompleteAbort): the client retries
            return ErrorCode.concurrent_transactions, -1, -1
        else:
            return ErrorCode.invalid_txn_state, -1, -1
        next_pid = S.NO_PRODUCER_ID
        if v2 and fence is None and S.epoch_exhausted(meta.producer_epoch):
            before = (meta.producer_id, meta.producer_epoch, meta.state)
            next_pid = await self.producer_ids.next_producer_id()
            if next_pid < 0:
                return ErrorCode.coordinator_not_available, -1, -1
            if meta.pending or self.txns.get(meta.transactional_id) is not meta or \
                    (meta.producer_id, meta.producer_epoch, meta.state) != before:
                return ErrorCode.concurrent_transactions, -1, -1     # changed while we waited: the client retries
        if fence is not None:                          # the fenced epoch goes into the abort (Kafka's isEpochFence)
            meta.pending_state = None
            meta.producer_epoch = fence.producer_epoch
            meta.last_producer_epoch = S.NO_PRODUCER_EPOCH
        transit = meta.prepare_abort_or_commit(target, self.now_ms(), client_version if v2 else 0, next_pid)
        p = self.partition_for(meta.transactional_id)
        coordinator_epoch = self.epochs.get(p)
        err = await self._write(meta, transit)
        if err:
            if fence is not None and self.txns.get(meta.transactional_id) is meta:
                meta.has_failed_epoch_fence = True
            return err, -1, -1
        answer = (0, *meta.ended_as())
        self.markers.send(meta.transactional_id, coordinator_epoch, meta)
        return answer

    async def complete_after_markers(self, tid: str, coordinator_epoch: int) -> None:
        """Every marker is written: CompleteCommit/CompleteAbort (Kafka's TransactionMarkerChannelManager then writes
        it, retrying while it is still the coordinator at that epoch)."""
        while True:
            meta = self.txns.get(tid)
            p = self.partition_for(tid)
            if meta is None or self.epochs.get(p) != coordinator_epoch or \
                    meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                return
            if meta.pending:
                await asyncio.sleep(0.05)
                continue
            err = await self._write(meta, meta.prepare_complete(self.now_ms()))
            if not err:
                self.metrics.completed.labels("commit" if meta.state == S.COMPLETE_COMMIT else "abort").inc()
                return
            if err == ErrorCode.not_coordinator:
                return
            await asyncio.sleep(0.1)

    # ---- timeouts ----------------------------------------------------------------------------------------------
    async def _abort_timed_out_loop(self) -> None:
        while True:
            await asyncio.sleep(self.abort_interval_ms / 1000)
            try:
                await self.abort_timed_out()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("aborting timed-out transactions failed")

    async def abort_timed_out(self) -> int:
        """Abort every open transaction older than its timeout, fencing its producer (Kafka's
        abortTimedOutTransactions): the producer's next request gets PRODUCER_FENCED / INVALID_PRODUCER_EPOCH."""
        now = self.now_ms()
        due = [(m, m.producer_id, m.producer_epoch, m.txn_start_ms) for m in self.txns.values()
               if m.state == S.ONGOING and not m.pending and self.coordinator_error(m.transactional_id) == 0
               and m.txn_start_ms + m.txn_timeout_ms < now]
        n = 0
        for meta, pid, epoch, start in due:
            # each abort awaits its write: what was due may have changed meanwhile (ended, a new transaction begun,
            # fenced); only the same transaction, still open and still timed out, is aborted now
            if meta.state != S.ONGOING or meta.pending or self.txns.get(meta.transactional_id) is not meta or \
                    (meta.producer_id, meta.producer_epoch, meta.txn_start_ms) != (pid, epoch, start) or \
                    meta.txn_start_ms + meta.txn_timeout_ms >= self.now_ms() or meta.producer_epoch >= S.MAX_EPOCH:
                continue
            log.info("aborting transaction of %s (producer id %d epoch %d): it timed out after %d ms",
                     meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.txn_timeout_ms)
            fence = meta.prepare_fence_producer_epoch()
            if not (await self._end(meta, pid, fence.producer_epoch, commit=False, from_client=False, fence=fence))[0]:
                n += 1
                self.metrics.timed_out.inc()
        return n

    # ---- admin -------------------------------------------------------------------------------------------------
    def describe(self, tid: str) -> dict:
        err = self.coordinator_error(tid) if tid else ErrorCode.invalid_request
        meta = self.txns.get(tid) if not err else None
        if not err and (meta is None or meta.state == S.DEAD):
            err = ErrorCode.transactional_id_not_found
        if err:
            return {"error_code": err, "transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
                    "transaction_start_time": 0, "producer_id": -1, "producer_epoch": 0, "topics": []}
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(p)
        return {"error_code": 0, "transactional_id": tid, "transaction_state": meta.state_name,
                "transaction_timeout": meta.txn_timeout_ms, "transaction_start_time": meta.txn_start_ms,
                "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

    def list(self, states: set[str], producer_ids: set[int], min_duration_ms: int = -1) -> tuple[int, list, list]:
        """(error, unknown state filters, [(transactional id, producer id, state name)]) of the ids we coordinate."""
        if not self._active:
            return ErrorCode.coordinator_not_available, [], []
        unknown = sorted(s for s in states if s not in S.STATE_NAMES)
        now = self.now_ms()
        out = []
        for tid, m in self.txns.items():
            if self.partition_for(tid) in self.loading or m.state == S.DEAD:
                continue
            if states and m.state_name not in states:
                continue
            if producer_ids and m.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (m.state != S.ONGOING or now - m.txn_start_ms < min_duration_ms):
                continue
            out.append((tid, m.producer_id, m.state_name))
        return (ErrorCode.coordinator_load_in_progress if self.loading else 0), unknown, out

    def open_by_state(self) -> dict[str, int]:
        """For the metrics (read from the scrape's thread: a copy, retried if the dict changes meanwhile)."""
        for _ in range(3):
            try:
                out: dict[str, int] = {}
                for m in list(self.txns.values()):
                    out[m.state_name] = out.get(m.state_name, 0) + 1
                return out
            except RuntimeError:
                continue
        return {}
