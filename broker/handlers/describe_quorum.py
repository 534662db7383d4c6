"""DescribeQuorum (key 55): where the metadata log stands, as kafka-metadata-quorum.sh shows it. Strata's metadata log
lives in the object store with the active controller as its only writer (conditional writes, not Raft), so the
"quorum" is that controller, whose epoch is the leader epoch and whose last record is the high watermark; every other
broker is an observer at the offset its last heartbeat reported."""
from __future__ import annotations

import time

from broker.security.authorization import CLUSTER_DENIED, DESCRIBE, authorize_cluster
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 55
VERSIONS = (0, 2)
DECODABLE = (0, 2)
FORWARDED_TO_CONTROLLER = True
METADATA_TOPIC = "__cluster_metadata"


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize_cluster(broker, req, DESCRIBE):    # Kafka's controller: DESCRIBE on the cluster
        return kio_codec.encode_response(API_KEY, v, {"error_code": CLUSTER_DENIED, "error_message": None,
                                                      "topics": [], "nodes": []})
    asked = [(t.topic_name, p.partition_index) for t in body.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)]:
        return kio_codec.encode_response(API_KEY, v, {"error_code": ErrorCode.unknown_topic_or_partition,
                                                      "error_message": None, "topics": [], "nodes": []})
    image = broker.topics.image
    now = int(time.time() * 1000)
    leader = image.controller_id if image.controller_id >= 0 else broker.node_id
    control = broker.cluster_control
    positions = control.metadata_positions if control is not None else {}

    def replica(node: int, offset: int, fetched: int = -1, caught_up: int = -1) -> dict:
        return {"replica_id": node, "replica_directory_id": None, "log_end_offset": offset,
                "last_fetch_timestamp": fetched, "last_caught_up_timestamp": caught_up}

    observers = []
    for b in sorted(image.brokers):
        if b != leader:               # heartbeats report the last applied offset; the log end is one past it
            offset, fetched, caught_up = positions.get(b, (-1, -1, -1))
            observers.append(replica(b, offset + 1 if offset >= 0 else -1, fetched, caught_up))
    nodes = []
    reg = image.brokers.get(leader)
    if reg is not None:
        nodes = [{"node_id": leader, "listeners": [{"name": name, "host": host, "port": port}
                                                   for name, host, port in reg.endpoints]}]
    partition = {"partition_index": 0, "error_code": 0, "error_message": None, "leader_id": leader,
                 "leader_epoch": image.controller_epoch, "high_watermark": image.offset + 1,
                 # the leader is caught up with itself as of now (Kafka's LeaderState reports its own replica so)
                 "current_voters": [replica(leader, image.offset + 1, now, now)], "observers": observers}
    return kio_codec.encode_response(API_KEY, v, {"error_code": 0, "error_message": None, "nodes": nodes,
                                                  "topics": [{"topic_name": METADATA_TOPIC,
                                                              "partitions": [partition]}]})
