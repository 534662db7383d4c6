"""Metadata (key 3): brokers, topics with ids (needed for Fetch v13+), partitions; auto-creates topics."""
from __future__ import annotations

from broker.topic_admin import auto_create
from protocol import kio_codec

API_KEY = 3
VERSIONS = (0, 12)
DECODABLE = (0, 12)

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
INVALID_TOPIC_EXCEPTION = 17


def _topic_entry(broker, info, error: int = 0):
    parts = []
    for p in range(info.partitions):
        part = broker.replicas.get(info.name, p)
        parts.append({"error_code": 0, "partition_index": p, "leader_id": broker.node_id,
                      "leader_epoch": part.leader_epoch if part is not None else 0,
                      "replica_nodes": [broker.node_id], "isr_nodes": [broker.node_id], "offline_replicas": []})
    return {"error_code": error, "name": info.name, "topic_id": info.uuid, "is_internal": info.name.startswith("__"),
            "partitions": parts, "topic_authorized_operations": -2147483648}


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    allow_auto = getattr(body, "allow_auto_topic_creation", True) and broker.config.get_bool("auto.create.topics.enable")
    topics = []
    requested = body.topics
    if requested is None or (v == 0 and len(requested) == 0):
        topics = [_topic_entry(broker, t) for t in broker.topics.topics()]
    else:
        for rt in requested:
            name = getattr(rt, "name", None)
            topic_id = getattr(rt, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int != 0:
                info = broker.topics.by_id(topic_id)
                if info is None:
                    topics.append({"error_code": UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id,
                                   "partitions": []})
                else:
                    topics.append(_topic_entry(broker, info))
                continue
            info = broker.topics.get(name) if name else None
            if info is None and allow_auto and name:
                err, info = auto_create(broker, name)
                if info is None:
                    topics.append({"error_code": err, "name": name, "topic_id": None, "partitions": []})
                    continue
            if info is None:
                topics.append({"error_code": UNKNOWN_TOPIC_OR_PARTITION, "name": name, "topic_id": None,
                               "partitions": []})
            else:
                topics.append(_topic_entry(broker, info))
    host, port = broker.config.advertised
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.node_id, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    })
