"""BrokerRegistration (key 62, controller): a broker joins with its id, incarnation, rack and listeners."""
from __future__ import annotations

from broker.handlers.controller_api import serve
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 62
VERSIONS = (0, 3)
DECODABLE = (0, 3)
CONTROLLER_ONLY = True


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)

    async def answer(control):
        if body.cluster_id != broker.cluster_id:
            return {"error_code": ErrorCode.inconsistent_cluster_id, "broker_epoch": -1}
        endpoints = [(listener.name, listener.host, listener.port) for listener in body.listeners]
        epoch = await control.register(body.broker_id, body.incarnation_id.hex, body.rack, endpoints)
        return {"error_code": 0, "broker_epoch": epoch}

    return serve(broker, API_KEY, v, answer, {"broker_epoch": -1}, req)
