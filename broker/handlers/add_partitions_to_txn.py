"""AddPartitionsToTxn (key 24): a transactional producer names the partitions it is about to write (v0-3), or a
partition leader asks whether a producer's partitions are in its transaction (v4+, KIP-890 part 1, `verify_only`;
several transactions per request), or adds them for a producer of transaction version 2 (v4+ without `verify_only`:
KIP-890 part 2's implicit add, for a Produce v12 or a TxnOffsetCommit v5). One coordinator error answers every
partition of a transaction."""
from __future__ import annotations

from broker.handlers.produce import INTERNAL_TOPICS
from broker.security.authorization import (CLUSTER_ACTION, CLUSTER_DENIED, TOPIC_DENIED, TRANSACTIONAL_ID,
                                           TRANSACTIONAL_ID_DENIED, WRITE, authorize, authorize_cluster, name_checker)
from broker.transactions.verification import fenced_as_invalid_epoch
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 24
VERSIONS = (0, 5)
DECODABLE = (0, 5)


def _unknown(broker, topic: str, p: int) -> bool:
    info = broker.topics.get(topic)
    return info is None or not 0 <= p < info.partitions


async def _one(broker, tid, pid, epoch, topics, verify_only: bool, version: int = 4, req=None) -> dict:
    """`req`: a client's request (v0-3), authorized as Kafka does: WRITE on the transactional id (else every partition
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (internal topics never pass)."""
    wanted = {(t.name, p) for t in topics for p in t.partitions}
    denied = set()
    if req is not None and getattr(broker, "authorizer", None) is not None:
        if not authorize(broker, req, WRITE, TRANSACTIONAL_ID, tid):
            return _result(tid, {tp: TRANSACTIONAL_ID_DENIED for tp in wanted})
        writable = name_checker(broker, req, WRITE)
        denied = {tp for tp in wanted if tp[0] in INTERNAL_TOPICS or not writable(tp[0])}
    unknown = {tp for tp in wanted if tp not in denied and _unknown(broker, *tp)}
    if denied or unknown:
        # Kafka: UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the rest, nothing added
        errors = {tp: TOPIC_DENIED if tp in denied else ErrorCode.unknown_topic_or_partition if tp in unknown
                  else ErrorCode.operation_not_attempted for tp in wanted}
    elif verify_only:
        errors = broker.transactions.verify_partitions(tid, pid, epoch, wanted)
    else:
        err = await broker.transactions.add_partitions(tid, pid, epoch, wanted,
                                                       client_version=2 if version >= 4 else 0)
        errors = {tp: fenced_as_invalid_epoch(err, version < 2) for tp in wanted}
    return _result(tid, errors)


def _result(tid, errors: dict) -> dict:
    by_topic: dict[str, list] = {}
    for (topic, p), err in sorted(errors.items()):
        by_topic.setdefault(topic, []).append({"partition_index": p, "partition_error_code": err})
    return {"transactional_id": tid,
            "topic_results": [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]}


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if v >= 4:
        if not authorize_cluster(broker, req, CLUSTER_ACTION):      # only brokers send v4+ (KIP-890)
            return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": CLUSTER_DENIED,
                                                          "results_by_transaction": []})
        results = [await _one(broker, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only, v)
                   for t in body.transactions]
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": 0,
                                                      "results_by_transaction": results})
    one = await _one(broker, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                     body.v3_and_below_producer_epoch, body.v3_and_below_topics, False, v, req)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0,
                                                  "results_by_topic_v3_and_below": one["topic_results"]})
