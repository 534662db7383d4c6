"""Metadata (key 3): brokers, topics with ids (needed for Fetch v13+), partitions with leader, leader epoch,
replicas and ISR, all from one metadata image; auto-creates topics."""
from __future__ import annotations

from broker.topic_admin import auto_create
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 3
VERSIONS = (0, 12)
DECODABLE = (0, 12)



def _topic_entry(info, error: int = 0):
    parts = [{"error_code": 0, "partition_index": i, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
              "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr), "offline_replicas": []}
             for i, p in enumerate(info.partition_states)]
    return {"error_code": error, "name": info.name, "topic_id": info.uuid, "is_internal": info.name.startswith("__"),
            "partitions": parts, "topic_authorized_operations": -2147483648}


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    allow_auto = getattr(body, "allow_auto_topic_creation", True) and broker.config.get_bool("auto.create.topics.enable")
    requested = body.topics
    if requested is not None and allow_auto:
        missing = [rt.name for rt in requested if getattr(rt, "name", None) and broker.topics.get(rt.name) is None]
        if missing:
            return _create_then_answer(broker, v, requested, missing)
    return _answer(broker, v, requested, {})


async def _create_then_answer(broker, v, requested, missing):
    errors = {}
    for name in missing:
        err, _ = await auto_create(broker, name)
        if err:
            errors[name] = err
    return _answer(broker, v, requested, errors)


def _answer(broker, v, requested, create_errors: dict):
    topics = []
    if requested is None or (v == 0 and len(requested) == 0):
        topics = [_topic_entry(t) for t in broker.topics.topics()]
    else:
        for rt in requested:
            name = getattr(rt, "name", None)
            topic_id = getattr(rt, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int != 0:
                info = broker.topics.by_id(topic_id)
                if info is None:
                    topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": topic_id,
                                   "partitions": []})
                else:
                    topics.append(_topic_entry(info))
                continue
            info = broker.topics.get(name) if name else None
            if info is None:
                topics.append({"error_code": create_errors.get(name, ErrorCode.unknown_topic_or_partition),
                               "name": name, "topic_id": None, "partitions": []})
            else:
                topics.append(_topic_entry(info))
    image = broker.topics.image
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0,
        "brokers": [{"node_id": b.broker_id, "host": b.endpoint()[0], "port": b.endpoint()[1], "rack": b.rack}
                    for b in image.brokers.values() if not b.fenced],
        "cluster_id": broker.cluster_id,
        "controller_id": image.controller_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    })
