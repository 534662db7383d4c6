"""DescribeProducers (key 61): the producer state of partitions this broker leads: each producer's epoch, last
sequence and timestamp, coordinator epoch and the first offset of its open transaction (kafka-transactions.sh
describe-producers, find-hanging)."""
from __future__ import annotations

from broker.security.authorization import DENIED_MESSAGE, READ, TOPIC_DENIED, name_checker
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 61
VERSIONS = (0, 0)
DECODABLE = (0, 0)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    topics = []
    readable = name_checker(broker, req, READ)          # Kafka asks READ (not DESCRIBE) on the topic
    for t in body.topics:
        parts = []
        denied = readable is not None and not readable(t.name)
        for index in t.partition_indexes:
            part = broker.replicas.get(t.name, index) if not denied else None
            entry = {"partition_index": index, "error_code": 0, "error_message": None, "active_producers": []}
            if denied:
                entry.update(error_code=TOPIC_DENIED, error_message=DENIED_MESSAGE[TOPIC_DENIED])
            elif part is None:
                entry["error_code"] = broker.replicas.missing_error(t.name, index) if broker.topics.get(t.name) \
                    else ErrorCode.unknown_topic_or_partition
            elif part.not_leader_error():
                entry["error_code"] = ErrorCode.not_leader_or_follower
            else:
                for pid, e in sorted(part.log.producer_snapshot().items()):
                    entry["active_producers"].append({
                        "producer_id": pid, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                        "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                        "current_txn_start_offset": e.current_txn_first_offset})
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})
