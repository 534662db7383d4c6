"""AlterPartitionReassignments (key 45, KIP-455): move partitions to other brokers, or cancel a move (null
replicas). New replicas catch up as followers and join the ISR; then the controller drops the old ones. Served by
the controller; other brokers forward it."""
from __future__ import annotations

from broker.topic_admin import AdminError, submit
from metadata.cluster_control import complete_reassignment, reassign
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 45
VERSIONS = (0, 0)
DECODABLE = (0, 0)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    responses = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            err, msg = 0, None
            image = broker.topics.image
            info = image.get(t.name)
            if info is None:
                err, msg = ErrorCode.unknown_topic_or_partition, f"Topic {t.name} does not exist"
            else:
                target = None if p.replicas is None else list(p.replicas)
                err, msg, records = reassign(image, info, p.partition_index, target)
                try:
                    if records:
                        image = await submit(broker, records)
                        done = complete_reassignment(image, image.get(t.name), p.partition_index)
                        if done is not None:          # e.g. only removals: the target is in sync already
                            await submit(broker, [done])
                except AdminError as e:
                    err, msg = e.code, str(e)
            parts.append({"partition_index": p.partition_index, "error_code": err, "error_message": msg or None})
        responses.append({"name": t.name, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": 0, "error_message": None,
                                                  "responses": responses})
