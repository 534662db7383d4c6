"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1 means the high watermark)."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 21
VERSIONS = (0, 2)
DECODABLE = (0, 2)

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
POLICY_VIOLATION = 44


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            part = broker.replicas.get(t.name, p.partition_index)
            low, err = -1, 0
            if part is None:
                err = UNKNOWN_TOPIC_OR_PARTITION
            elif "compact" in part.log.config.cleanup_policy and "delete" not in part.log.config.cleanup_policy:
                err = POLICY_VIOLATION
            else:
                target = part.log.high_watermark if p.offset == -1 else p.offset
                if target < 0 or target > part.log.high_watermark:
                    err = OFFSET_OUT_OF_RANGE
                else:
                    low = part.log.delete_records(target)
            parts.append({"partition_index": p.partition_index, "low_watermark": low, "error_code": err})
        topics.append({"name": t.name, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})
