"""ConsumerGroupDescribe (key 69, KIP-848): state, epochs, assignor and members (current and target assignments) of
consumer-protocol groups; GROUP_ID_NOT_FOUND for unknown and classic groups. See broker/groups/consumer/consumer_group.py."""
from __future__ import annotations

from broker.security.authorization import (DESCRIBE, GROUP, GROUP_DENIED, NOT_REQUESTED, authorized_operations,
                                           filter_authorized)
from protocol import kio_codec

API_KEY = 69
VERSIONS = (0, 1)
DECODABLE = (0, 1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    ids = list(body.group_ids)
    allowed = filter_authorized(broker, req, DESCRIBE, GROUP, ids)
    refused = [{"group_id": g, "error_code": GROUP_DENIED, "error_message": None, "group_state": "", "group_epoch": 0,
                "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": NOT_REQUESTED}
               for g in ids if g not in allowed]
    groups = broker.groups.consumer.describe([g for g in ids if g in allowed])
    for g in groups:            # KIP-430: the operations on each group found, when asked
        g["authorized_operations"] = authorized_operations(broker, req, GROUP, g["group_id"]) \
            if body.include_authorized_operations and not g["error_code"] else NOT_REQUESTED
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "groups": refused + groups})
