"""AlterPartitionReassignments (key 45, KIP-455): move partitions to other brokers, or cancel a move (null
replicas). New replicas catch up as followers and join the ISR; then the controller drops the old ones. Served by
the controller; other brokers forward it."""
from __future__ import annotations

from broker.security.authorization import ALTER, CLUSTER_DENIED, DENIED_MESSAGE, authorize_cluster
from broker.topic_admin import AdminError, submit
from metadata.cluster_control import reassign_operation
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 45
VERSIONS = (0, 0)
DECODABLE = (0, 0)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize_cluster(broker, req, ALTER):       # Kafka: ALTER on the cluster (getErrorResponse's answer)
        msg = DENIED_MESSAGE[CLUSTER_DENIED]
        return kio_codec.encode_response(API_KEY, v, {
            "throttle_time": 0, "error_code": CLUSTER_DENIED, "error_message": msg,
            "responses": [{"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                           "error_code": CLUSTER_DENIED, "error_message": msg}
                                                          for p in t.partitions]} for t in body.topics]})
    responses = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            err, msg = 0, None
            target = None if p.replicas is None else list(p.replicas)
            try:
                err, msg = await submit(broker, reassign_operation(t.name, p.partition_index, target))
            except AdminError as e:
                err, msg = e.code, str(e)
            parts.append({"partition_index": p.partition_index, "error_code": err, "error_message": msg or None})
        responses.append({"name": t.name, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": 0, "error_message": None,
                                                  "responses": responses})
