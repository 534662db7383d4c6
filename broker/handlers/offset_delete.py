"""OffsetDelete (key 47): deletes a group's committed offsets; GROUP_SUBSCRIBED_TO_TOPIC for topics the active
members still subscribe to, NON_EMPTY_GROUP for active non-consumer groups."""
from __future__ import annotations

from broker.security.authorization import (DELETE, GROUP, GROUP_DENIED, READ, TOPIC_DENIED, authorize,
                                           name_checker)
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 47
VERSIONS = (0, 0)
DECODABLE = (0, 0)



def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize(broker, req, DELETE, GROUP, body.group_id):
        return kio_codec.encode_response(API_KEY, v, {"error_code": GROUP_DENIED, "throttle_time": 0, "topics": []})
    readable = name_checker(broker, req, READ)       # Kafka checks READ (not DELETE) on the topics
    errors: dict[tuple[str, int], int] = {}
    order: list[tuple[str, int]] = []
    known: list[tuple[str, int]] = []
    for t in body.topics:
        info = broker.topics.get(t.name) if t.name is not None else None
        denied = readable is not None and not readable(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if denied:
                errors[tp] = TOPIC_DENIED
            elif info is None or not 0 <= p.partition_index < info.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                known.append(tp)
    group_error, partition_errors = broker.groups.delete_offsets(body.group_id, known)
    if group_error:
        return kio_codec.encode_response(API_KEY, v, {"error_code": group_error, "throttle_time": 0, "topics": []})
    errors.update(partition_errors)
    topics: dict[str, list] = {}
    for tp in dict.fromkeys(order):
        topics.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": errors[tp]})
    return kio_codec.encode_response(API_KEY, v, {
        "error_code": 0, "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
