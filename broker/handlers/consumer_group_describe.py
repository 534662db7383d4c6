"""ConsumerGroupDescribe (key 69, KIP-848): state, epochs, assignor and members (current and target assignments) of
consumer-protocol groups; GROUP_ID_NOT_FOUND for unknown and classic groups. See broker/groups/consumer/consumer_group.py."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 69
VERSIONS = (0, 1)
DECODABLE = (0, 1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    groups = broker.groups.consumer.describe(list(body.group_ids), bool(body.include_authorized_operations))
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "groups": groups})
