"""Sends leaders' ISR changes to the controller (Kafka's AlterPartitionManager): changes made in the same loop
iteration go out as one AlterPartition request; each partition gets the controller's answer through
`Partition.alter_isr_done`. The request travels through a callable the broker passes in (this layer does not know
how the controller is reached)."""
from __future__ import annotations

import asyncio
import logging
import uuid
from types import SimpleNamespace
from typing import Awaitable, Callable

from protocol.errors import ErrorCode

log = logging.getLogger("strata.alter_partition")

ALTER_PARTITION, VERSION = 56, 2


class AlterPartitionManager:
    def __init__(self, node_id: int, broker_epoch: Callable[[], int],
                 send: Callable[[int, int, dict], Awaitable[object]]):
        self.node_id, self.broker_epoch, self.send = node_id, broker_epoch, send
        self._queue: dict[tuple[str, int], tuple[object, tuple[int, ...]]] = {}
        self._task: asyncio.Task | None = None

    def submit(self, part, new_isr: tuple[int, ...]) -> None:
        self._queue[(part.topic, part.index)] = (part, new_isr)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        await asyncio.sleep(0)                   # let changes of the same moment join the request
        batch, self._queue = list(self._queue.values()), {}
        topics: dict[str, list] = {}
        for part, isr in batch:
            topics.setdefault(part.topic_id, []).append({
                "partition_index": part.index, "leader_epoch": part.leader_epoch, "new_isr": list(isr),
                "partition_epoch": part.partition_epoch})
        by_key = {(part.topic_id, part.index): (part, isr) for part, isr in batch}
        try:
            resp = await self.send(ALTER_PARTITION, VERSION, {
                "broker_id": self.node_id, "broker_epoch": self.broker_epoch(),
                "topics": [{"topic_id": uuid.UUID(tid), "partitions": ps} for tid, ps in topics.items()]})
        except Exception as e:
            log.warning("AlterPartition for %d partition(s) failed: %s", len(batch), e)
            for part, isr in batch:            # the change may or may not have been made: the partition retries
                part.alter_isr_done(ErrorCode.unknown_server_error, proposed=isr)
            return
        answered = set()
        for t in resp.topics:
            for p in t.partitions:
                sent = by_key.get((t.topic_id.hex, p.partition_index))
                if sent is None:
                    continue
                part, isr = sent
                answered.add((t.topic_id.hex, p.partition_index))
                state = SimpleNamespace(leader_epoch=p.leader_epoch, isr=tuple(p.isr),
                                        partition_epoch=p.partition_epoch, replicas=part.replicas)
                part.alter_isr_done(int(p.error_code), state, proposed=isr)
        for key, (part, isr) in by_key.items():
            if key not in answered:
                part.alter_isr_done(int(resp.error_code) or ErrorCode.unknown_server_error, proposed=isr)
        if self._queue and (self._task is None or self._task.done() or self._task is asyncio.current_task()):
            self._task = asyncio.get_running_loop().create_task(self._flush())
