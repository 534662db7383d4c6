"""InitProducerId (key 22): producer ids for idempotent producers (transactions arrive later).

A producer that sends its current id and epoch (KIP-360, after an unknown-producer or sequence error) gets the same id
with the epoch bumped, so its sequence numbers restart at 0.
"""
from __future__ import annotations

from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 22
VERSIONS = (0, 5)
DECODABLE = (0, 5)

MAX_EPOCH = 32767


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    resp = {"throttle_time": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
    if body.transactional_id is not None:
        # No transaction coordinator yet: retriable error, as Kafka answers while its coordinator is unavailable.
        resp["error_code"] = ErrorCode.coordinator_not_available
    else:
        pid = getattr(body, "producer_id", -1)
        epoch = getattr(body, "producer_epoch", -1)
        if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
            resp.update(producer_id=pid, producer_epoch=epoch + 1)
        else:
            pid = await broker.producer_ids.next_producer_id()
            if pid < 0:          # no controller to allocate a block: retriable, as Kafka answers then
                resp["error_code"] = ErrorCode.coordinator_load_in_progress
            else:
                resp.update(producer_id=pid, producer_epoch=0)
    return kio_codec.encode_response(API_KEY, v, resp)
