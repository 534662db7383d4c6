"""Transaction markers: sending them (Kafka's TransactionMarkerChannelManager) and writing them (the partition
leader's side of WriteTxnMarkers, shared by the handler and the coordinator's own partitions).

The coordinator hands over a prepared commit or abort; one task per transactional id sends a marker to the leader of
every partition in the transaction (grouped per leader, one WriteTxnMarkers request each, written locally when this
broker leads the partition), retries the partitions that failed with a retriable error after a short backoff,
forgets partitions of deleted topics, and when every marker is in writes CompleteCommit/CompleteAbort. It stops when
the coordinator loses the id's partition (the next coordinator resends from the log).
"""
from __future__ import annotations

import asyncio
import logging
import time

from broker.groups.metadata_store import OFFSETS_TOPIC
from protocol.errors import ErrorCode

log = logging.getLogger("strata.transactions.markers")

RETRY_BACKOFF = 0.1
# Kafka's TransactionMarkerRequestCompletionHandler: these end the sending for the id (another coordinator or a newer
# producer epoch got there first), these skip one partition for good; anything else is retried.
_STOP = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
_SKIP = frozenset({ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version,
                   ErrorCode.corrupt_message, ErrorCode.message_too_large, ErrorCode.record_list_too_large,
                   ErrorCode.invalid_required_acks})


async def write_markers(replicas, groups, markers, timeout_s: float) -> list[dict]:
    """Write each marker (producer id, epoch, commit, coordinator epoch, [(topic, partition)]) to the partitions this
    broker leads, acks=all; -> per marker {(topic, partition): error}. A committed or aborted transaction that holds
    offsets of `__consumer_offsets` partitions is handed to the group coordinator once its marker is replicated."""
    results = []
    waits = []
    for pid, epoch, commit, coordinator_epoch, partitions in markers:
        errors: dict[tuple[str, int], int] = {}
        for topic, index in partitions:
            part = replicas.get(topic, index)
            if part is None:
                errors[(topic, index)] = replicas.missing_error(topic, index) if replicas.topics.get(topic) \
                    else ErrorCode.unknown_topic_or_partition
                continue
            try:
                result = part.append_marker_to_leader(pid, epoch, coordinator_epoch, commit)
            except OSError as e:
                log.error("writing a marker to %s-%d failed: %s", topic, index, e)
                errors[(topic, index)] = ErrorCode.kafka_storage_error
                continue
            errors[(topic, index)] = result.error_code
            if not result.error_code:
                waits.append((errors, (topic, index), part, part.wait_for_high_watermark(result.last_offset + 1),
                              pid, commit))
        results.append(errors)
    if waits:
        futs = [w[3] for w in waits if w[3] is not None]
        if futs:
            await asyncio.wait(futs, timeout=timeout_s)
        for errors, tp, part, fut, pid, commit in waits:
            err = 0
            if fut is not None:
                if fut.done() and not fut.cancelled():
                    err = fut.result()
                else:
                    fut.cancel()
                    part.forget_waiter(fut)
                    err = ErrorCode.request_timed_out
            errors[tp] = err
            if not err and tp[0] == OFFSETS_TOPIC and groups is not None:
                groups.complete_transaction(pid, tp[1], commit)
    return results


class TransactionMarkerSender:
    def __init__(self, coordinator, send_remote=None):
        """`send_remote(broker_id, markers) -> [ {(topic, partition): error} ]`: WriteTxnMarkers to another broker."""
        self.coordinator = coordinator
        self.send_remote = send_remote
        self.local_id = -1
        self.groups = None
        self.tasks: dict[str, asyncio.Task] = {}
        self.timeout_s = 30.0

    def send(self, tid: str, coordinator_epoch: int, meta) -> None:
        old = self.tasks.get(tid)
        if old is not None and not old.done():
            old.cancel()
        self.tasks[tid] = asyncio.get_running_loop().create_task(self._run(
            tid, coordinator_epoch, meta.producer_id, meta.producer_epoch, meta.state == 2, set(meta.partitions)))

    def forget_partition(self, p: int) -> None:
        for tid in [t for t in self.tasks if self.coordinator.partition_for(t) == p]:
            self.tasks.pop(tid).cancel()

    def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()

    def _still_coordinator(self, tid: str, coordinator_epoch: int) -> bool:
        return self.coordinator.epochs.get(self.coordinator.partition_for(tid)) == coordinator_epoch

    async def _run(self, tid: str, coordinator_epoch: int, pid: int, epoch: int, commit: bool, partitions: set):
        t0 = time.monotonic()
        pending = set(partitions)
        topics = self.coordinator.replicas.topics
        try:
            while pending:
                if not self._still_coordinator(tid, coordinator_epoch):
                    return
                by_leader: dict[int, list] = {}
                for topic, index in list(pending):
                    info = topics.get(topic)
                    if info is None or not 0 <= index < info.partitions:
                        pending.discard((topic, index))       # deleted: nothing to mark
                        continue
                    leader = info.partition(index).leader
                    if leader >= 0:
                        by_leader.setdefault(leader, []).append((topic, index))
                answers = await asyncio.gather(*(self._send_to(leader, pid, epoch, commit, coordinator_epoch, parts)
                                                 for leader, parts in by_leader.items()))
                stop = False
                for errors in answers:
                    for tp, err in errors.items():
                        if not err or err in _SKIP:
                            if err:
                                log.error("marker for %s (producer %d) to %s-%d refused for good: %s", tid, pid,
                                          tp[0], tp[1], ErrorCode(err).name)
                            pending.discard(tp)
                        elif err in _STOP:
                            log.info("marker for %s (producer %d epoch %d) to %s-%d: %s; no more markers for it",
                                     tid, pid, epoch, tp[0], tp[1], ErrorCode(err).name)
                            stop = True
                if stop:
                    return
                if pending:
                    await asyncio.sleep(RETRY_BACKOFF)
            self.coordinator.metrics.marker_latency.observe(time.monotonic() - t0)
            await self.coordinator.complete_after_markers(tid, coordinator_epoch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sending markers for %s failed", tid)
        finally:
            if self.tasks.get(tid) is asyncio.current_task():
                del self.tasks[tid]

    async def _send_to(self, leader: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                       parts: list) -> dict:
        marker = (pid, epoch, commit, coordinator_epoch, parts)
        try:
            if leader == self.local_id or self.send_remote is None:
                return (await write_markers(self.coordinator.replicas, self.groups, [marker], self.timeout_s))[0]
            return (await self.send_remote(leader, [marker]))[0]
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return {tp: ErrorCode.request_timed_out for tp in parts}
