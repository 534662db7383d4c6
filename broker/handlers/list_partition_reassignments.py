"""ListPartitionReassignments (key 46, KIP-455): the reassignments in progress, from the metadata image."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 46
VERSIONS = (0, 0)
DECODABLE = (0, 0)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    image = broker.topics.image
    if body.topics is None:
        wanted = [(t, range(t.partitions)) for t in image.topics()]
    else:
        wanted = [(image.get(t.name), t.partition_indexes) for t in body.topics]
    topics = []
    for info, indexes in wanted:
        if info is None:
            continue
        parts = []
        for i in indexes:
            p = info.partition(i)
            if p is not None and (p.adding or p.removing):
                parts.append({"partition_index": i, "replicas": list(p.replicas), "adding_replicas": list(p.adding),
                              "removing_replicas": list(p.removing)})
        if parts:
            topics.append({"name": info.name, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": 0, "error_message": None,
                                                  "topics": topics})
