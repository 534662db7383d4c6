"""DescribeCluster (key 60): this broker is the whole cluster and its controller."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 60
VERSIONS = (0, 1)
DECODABLE = (0, 1)


def handle(broker, req):
    v = req.api_version
    kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    host, port = broker.config.advertised
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
        "cluster_id": broker.cluster_id, "controller_id": broker.node_id,
        "brokers": [{"broker_id": broker.node_id, "host": host, "port": port, "rack": None, "is_fenced": False}],
        "cluster_authorized_operations": -2147483648,
    })
