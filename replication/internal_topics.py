"""Writes and reads of the topics the broker keeps for itself (`__consumer_offsets`, `__remote_log_metadata`): one
writer/reader for both, through the partition layer, so they are replicated like any topic and their users (the
group coordinator, the remote log metadata manager) never hold a log. It satisfies storage.tiered's InternalTopic
protocol."""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Awaitable, Callable, Iterator

from protocol.record_batch import split_and_validate
from protocol.records import Record, batches_from, records_from


class InternalTopicError(OSError):
    """An append to an internal topic failed; `error_code` is the Kafka error the log answered."""

    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = error_code


log = logging.getLogger("strata.internal_topics")


class InternalTopics:
    def __init__(self, replicas, send: Callable[[int, str, int, bytes], Awaitable[int]] | None = None):
        """`send(leader_id, topic, partition, batch)` produces a batch to another broker (acks=all) and returns
        the error code; in a cluster it carries `publish` batches to partitions led elsewhere."""
        self.replicas = replicas
        self.send = send
        self._outbox: deque[tuple[str, int, bytes, asyncio.Future]] = deque()
        self._sender: asyncio.Task | None = None

    def ensure(self, name: str, partitions: int, configs: dict[str, str]) -> int:
        """Create the topic on first use; returns its partition count (an existing topic keeps its own)."""
        return self.replicas.ensure_internal_topic(name, partitions, configs).partitions

    def max_message_bytes(self, name: str, partition: int) -> int:
        return self._partition(name, partition).config.max_message_bytes

    def append(self, name: str, partition: int, batch: bytes, coordinator_origin: bool = False, **verification) -> int:
        """Append one batch the broker built; returns its base offset. KeyError when the partition is not hosted
        here, InternalTopicError when the log refuses it. `coordinator_origin`: a producer's batch a coordinator
        writes for it (transactional offsets): its epoch is checked, not its sequence."""
        part = self._partition(name, partition)
        buf = bytearray(batch)
        headers = split_and_validate(buf, max(part.config.max_message_bytes, len(buf)))
        result = part.append_records_to_leader(buf, headers, required_acks=1, coordinator_origin=coordinator_origin,
                                               **verification)
        if result.error_code:
            raise InternalTopicError(result.error_code, f"append to {name}-{partition} failed with error "
                                                        f"{result.error_code}: {result.error_message}")
        return result.base_offset

    def publish(self, name: str, partition: int, batch: bytes) -> asyncio.Future | None:
        """Append a batch wherever the partition's leader is (Kafka's RLMM writes `__remote_log_metadata` with an
        acks=all producer): here when this broker leads it, else queued and produced to the leader in order, retried
        until it is in. The caller has applied the event to its own view already.

        Returns None when the batch is committed (below the high watermark) already, else a future that completes
        with 0 once it is, or with NOT_LEADER_OR_FOLLOWER when this broker stopped leading the partition before its
        local append was committed (the append may then be truncated). Batches of one partition commit in order."""
        part = self.replicas.get(name, partition)
        if not self._outbox and (self.send is None or (part is not None and part.is_leader)):
            return self._append_committed(name, partition, batch)
        fut = asyncio.get_running_loop().create_future()
        self._outbox.append((name, partition, batch, fut))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._deliver())
        return fut

    def _append_committed(self, name: str, partition: int, batch: bytes) -> asyncio.Future | None:
        """Append here (as leader) and return the partition's wait for the high watermark to pass the batch."""
        self.append(name, partition, batch)
        part = self._partition(name, partition)
        return part.wait_for_high_watermark(part.log_end_offset)

    async def _deliver(self) -> None:
        while self._outbox:
            name, partition, batch, fut = self._outbox[0]
            try:
                part = self.replicas.get(name, partition)
                if part is not None and part.is_leader:
                    committed = self._append_committed(name, partition, batch)
                    if committed is None:
                        _complete(fut, 0)
                    else:
                        committed.add_done_callback(lambda c, f=fut: _complete(f, c.result() if not c.cancelled()
                                                                               else -1))
                    err = 0
                else:
                    info = self.replicas.topics.get(name)
                    state = info.partition(partition) if info is not None else None
                    err = await self.send(state.leader, name, partition, batch) if state and state.leader >= 0 \
                        else -1
                    if not err:                      # produced with acks=all: committed
                        _complete(fut, 0)
            except Exception as e:
                log.warning("publishing to %s-%d failed: %s", name, partition, e)
                err = -1
            if err:
                await asyncio.sleep(0.5)
                continue
            self._outbox.popleft()

    def read(self, name: str, partition: int, chunk_bytes: int = 1 << 20, start: int = 0,
             committed_only: bool = False, by_batch: bool = False) -> Iterator[list[Record]]:
        """Every record from the log start (or `start`, if later) to the log end, a list per read of about `chunk_bytes`; a log
        start that moves meanwhile (retention, the cleaner) is followed. Control batches are skipped. Loaders read to
        the log end (a new leader's HW may lag, as for Kafka's); `committed_only` stops at the high watermark, as a
        consumer does. `by_batch`: lists of (batch header, records) instead, control batches included."""
        part = self.replicas.get(name, partition)
        if part is None:
            return
        offset = max(part.log_start_offset, start)
        while offset < (part.high_watermark if committed_only else part.log_end_offset):
            try:
                views, _ = part.read(offset, chunk_bytes, min_one_message=True, fetch_only_committed=committed_only)
            except Exception:
                if part.log_start_offset > offset:
                    offset = part.log_start_offset
                    continue
                raise
            records, nxt = (batches_from if by_batch else records_from)(views, offset)
            if nxt <= offset:
                break
            offset = nxt
            yield records

    def _partition(self, name: str, partition: int):
        part = self.replicas.get(name, partition)
        if part is None:
            raise KeyError(f"{name}-{partition} is not hosted by this broker")
        return part


def _complete(fut: asyncio.Future, err: int) -> None:
    if not fut.done():
        fut.set_result(err)
