"""AlterPartition (key 56, controller): a leader's ISR change, fenced by leader epoch and partition epoch."""
from __future__ import annotations

from broker.handlers.controller_api import serve
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 56
VERSIONS = (2, 3)
DECODABLE = (2, 3)
CONTROLLER_ONLY = True


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)

    async def answer(control):
        changes, keys = [], []
        for t in body.topics:
            for p in t.partitions:
                isr = list(p.new_isr) if v < 3 else [s.broker_id for s in p.new_isr_with_epochs]
                changes.append((t.topic_id.hex, p.partition_index, p.leader_epoch, p.partition_epoch, isr))
                keys.append((t.topic_id, p.partition_index))
        results = await control.alter_partition(body.broker_id, body.broker_epoch, changes)
        if any(r.error_code == ErrorCode.stale_broker_epoch for r in results):
            # the sender's epoch is checked before any partition (ReplicationControlManager.alterPartition's
            # checkBrokerEpoch throws), so Kafka answers it at the top level, with no topics
            return {"error_code": ErrorCode.stale_broker_epoch, "topics": []}
        topics: dict = {}
        for (tid, index), r in zip(keys, results):
            part = {"partition_index": index, "error_code": r.error_code, "leader_id": -1, "leader_epoch": -1,
                    "isr": [], "partition_epoch": -1}
            if r.error_code == 0 and r.partition is not None:
                part.update(leader_id=r.partition.leader, leader_epoch=r.partition.leader_epoch,
                            isr=list(r.partition.isr), partition_epoch=r.partition.partition_epoch)
            topics.setdefault(tid, []).append(part)
        return {"error_code": 0, "topics": [{"topic_id": tid, "partitions": ps} for tid, ps in topics.items()]}

    return serve(broker, API_KEY, v, answer, {"topics": []}, req)
