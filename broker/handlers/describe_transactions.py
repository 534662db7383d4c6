"""DescribeTransactions (key 65): the coordinator's state of each transactional id (kafka-transactions.sh describe)."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 65
VERSIONS = (0, 0)
DECODABLE = (0, 0)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    states = [broker.transactions.describe(tid) for tid in body.transactional_ids]
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "transaction_states": states})
