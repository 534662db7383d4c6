"""EndTxn (key 26): commit or abort the producer's transaction. Answered once the coordinator has written
PrepareCommit/PrepareAbort; the markers follow (broker/transactions/markers.py)."""
from __future__ import annotations

from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 26
VERSIONS = (0, 4)
DECODABLE = (0, 5)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    err = await broker.transactions.end_txn(body.transactional_id, body.producer_id, body.producer_epoch,
                                            bool(body.committed))
    if err == ErrorCode.producer_fenced and v < 2:       # KIP-588: older clients know INVALID_PRODUCER_EPOCH
        err = ErrorCode.invalid_producer_epoch
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": err, "producer_id": -1,
                                                  "producer_epoch": -1})
