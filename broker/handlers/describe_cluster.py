"""DescribeCluster (key 60): the registered brokers and the active controller, from the metadata
image."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 60
VERSIONS = (0, 1)
DECODABLE = (0, 1)


def handle(broker, req):
    v = req.api_version
    kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
        "cluster_id": broker.cluster_id, "controller_id": broker.topics.image.controller_id,
        "brokers": [{"broker_id": b.broker_id, "host": b.endpoint()[0], "port": b.endpoint()[1], "rack": b.rack,
                     "is_fenced": b.fenced} for b in broker.topics.image.brokers.values()],
        "cluster_authorized_operations": -2147483648,
    })
