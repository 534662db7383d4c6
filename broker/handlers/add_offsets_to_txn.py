"""AddOffsetsToTxn (key 25): a transactional producer is about to commit a group's offsets in its transaction
(TxnOffsetCommit); the coordinator adds the group's `__consumer_offsets` partition to the transaction."""
from __future__ import annotations

from broker.security.authorization import (GROUP, GROUP_DENIED, READ, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED,
                                           WRITE, authorize)
from broker.transactions.verification import fenced_as_invalid_epoch
from protocol import kio_codec

API_KEY = 25
VERSIONS = (0, 4)
DECODABLE = (0, 4)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize(broker, req, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": TRANSACTIONAL_ID_DENIED})
    if not authorize(broker, req, READ, GROUP, body.group_id):
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": GROUP_DENIED})
    err = await broker.transactions.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch,
                                                body.group_id)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": fenced_as_invalid_epoch(err, v < 2)})
