"""DeleteTopics (key 20): by name, or by topic id from v6."""
from __future__ import annotations

from metadata.records import RemoveTopicRecord
from protocol import kio_codec

API_KEY = 20
VERSIONS = (1, 6)
DECODABLE = (1, 6)

UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_DELETION_DISABLED = 73
UNKNOWN_TOPIC_ID = 100
INVALID_REQUEST = 42


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if v >= 6:
        wanted = [(t.name, t.topic_id if t.topic_id is not None and t.topic_id.int else None) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = []
    for name, tid in wanted:
        info = broker.topics.by_id(tid) if tid is not None else broker.topics.get(name)
        res = {"name": info.name if info else name, "topic_id": info.uuid if info else tid, "error_code": 0,
               "error_message": None}
        if name is not None and tid is not None:
            res.update(error_code=INVALID_REQUEST, error_message="Only one of topic name and topic id may be set")
        elif not broker.config.get_bool("delete.topic.enable"):
            res["error_code"] = TOPIC_DELETION_DISABLED
        elif info is None:
            res["error_code"] = UNKNOWN_TOPIC_ID if tid is not None else UNKNOWN_TOPIC_OR_PARTITION
        else:
            broker.controller.submit([RemoveTopicRecord(info.topic_id)])     # the publisher deletes the logs
        results.append(res)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "responses": results})
