"""DescribeTransactions (key 65): the coordinator's state of each transactional id (kafka-transactions.sh describe)."""
from __future__ import annotations

from broker.security.authorization import (DESCRIBE, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED, authorize,
                                           name_checker)
from protocol import kio_codec

API_KEY = 65
VERSIONS = (0, 0)
DECODABLE = (0, 0)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    describable = name_checker(broker, req, DESCRIBE)
    states = []
    for tid in body.transactional_ids:     # Kafka: DESCRIBE on the id, and only the topics the principal may describe
        if not authorize(broker, req, DESCRIBE, TRANSACTIONAL_ID, tid):
            states.append({"transactional_id": tid, "error_code": TRANSACTIONAL_ID_DENIED, "transaction_state": "",
                           "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
                           "producer_epoch": 0, "topics": []})     # Kafka's defaults beside the error
            continue
        state = broker.transactions.describe(tid)
        if describable is not None:
            state["topics"] = [t for t in state["topics"] if describable(t["topic"])]
        states.append(state)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "transaction_states": states})
