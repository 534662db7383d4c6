"""DescribeCluster (key 60): the active controller and the brokers, from the metadata image. As in Kafka, only
unfenced brokers are listed, unless a v2 request asks for the fenced ones too (`include_fenced_brokers`, KIP-1073),
which then carry `is_fenced`."""
from __future__ import annotations

from broker.security.authorization import NOT_REQUESTED, cluster_authorized_operations
from protocol import kio_codec

API_KEY = 60
VERSIONS = (0, 2)
DECODABLE = (0, 2)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    with_fenced = bool(getattr(body, "include_fenced_brokers", False))
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
        "cluster_id": broker.cluster_id, "controller_id": broker.topics.image.controller_id,
        "brokers": [{"broker_id": b.broker_id, "host": ep[0], "port": ep[1], "rack": b.rack, "is_fenced": b.fenced}
                    for b in broker.topics.image.brokers.values()
                    if (with_fenced or not b.fenced) and (ep := b.endpoint(req.listener)) is not None],
        # KIP-700: the principal's operations on the cluster when asked (0 without DESCRIBE on it), as Kafka answers
        "cluster_authorized_operations": cluster_authorized_operations(broker, req)
        if body.include_cluster_authorized_operations else NOT_REQUESTED,
    })
