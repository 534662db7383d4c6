"""ListTransactions (key 66): the transactional ids this broker coordinates, filtered by state, producer id and
(v1+) how long the transaction has been open (kafka-transactions.sh list / find-hanging)."""
from __future__ import annotations

from broker.security.authorization import DESCRIBE, TRANSACTIONAL_ID, name_checker
from protocol import kio_codec

API_KEY = 66
VERSIONS = (0, 1)
DECODABLE = (0, 1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    duration = getattr(body, "duration_filter", -1)
    if hasattr(duration, "total_seconds"):
        duration = int(duration.total_seconds() * 1000)
    err, unknown, found = broker.transactions.list(set(body.state_filters or ()), set(body.producer_id_filters or ()),
                                                   int(duration if duration is not None else -1))
    describable = name_checker(broker, req, DESCRIBE, TRANSACTIONAL_ID)     # only the ids the principal may describe
    if describable is not None:
        found = [f for f in found if describable(f[0])]
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": err, "unknown_state_filters": unknown,
        "transaction_states": [{"transactional_id": t, "producer_id": pid, "transaction_state": s}
                               for t, pid, s in found]})
