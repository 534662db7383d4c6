"""EndTxn (key 26): commit or abort the producer's transaction. Answered once the coordinator has written
PrepareCommit/PrepareAbort; the markers follow (broker/transactions/markers.py). v5 is transaction version 2
(KIP-890 part 2): the epoch is bumped with every transaction and the answer names the producer's next id and epoch."""
from __future__ import annotations

from broker.security.authorization import TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED, WRITE, authorize
from broker.transactions.verification import fenced_as_invalid_epoch
from protocol import kio_codec

API_KEY = 26
VERSIONS = (0, 5)
DECODABLE = (0, 5)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize(broker, req, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": TRANSACTIONAL_ID_DENIED,
                                                      "producer_id": -1, "producer_epoch": -1})
    err, pid, epoch = await broker.transactions.end_txn(body.transactional_id, body.producer_id,
                                                        body.producer_epoch, bool(body.committed),
                                                        client_version=2 if v >= 5 else 1)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": fenced_as_invalid_epoch(err, v < 2),
                                                  "producer_id": pid, "producer_epoch": epoch})
