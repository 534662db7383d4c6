"""ListPartitionReassignments (key 46, KIP-455): the reassignments in progress, from the metadata image."""
from __future__ import annotations

from broker.security.authorization import CLUSTER_DENIED, DENIED_MESSAGE, DESCRIBE, authorize_cluster
from protocol import kio_codec

API_KEY = 46
VERSIONS = (0, 0)
DECODABLE = (0, 0)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize_cluster(broker, req, DESCRIBE):    # Kafka: DESCRIBE on the cluster (getErrorResponse's answer)
        return kio_codec.encode_response(API_KEY, v, {
            "throttle_time": 0, "error_code": CLUSTER_DENIED, "error_message": DENIED_MESSAGE[CLUSTER_DENIED],
            "topics": [{"name": t.name, "partitions": [{"partition_index": i, "replicas": [], "adding_replicas": [],
                                                        "removing_replicas": []} for i in t.partition_indexes]}
                       for t in (body.topics or ())]})
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
