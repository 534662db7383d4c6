"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1 means the high watermark)."""
from __future__ import annotations

from protocol import kio_codec
from protocol.errors import ApiError

API_KEY = 21
VERSIONS = (0, 2)
DECODABLE = (0, 2)



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
                err = broker.replicas.missing_error(t.name, p.partition_index)
            elif part.not_leader_error():
                err = part.not_leader_error()
            else:
                try:
                    low = part.delete_records_on_leader(p.offset)
                except ApiError as e:
                    err = e.error_code
            parts.append({"partition_index": p.partition_index, "low_watermark": low, "error_code": err})
        topics.append({"name": t.name, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})
