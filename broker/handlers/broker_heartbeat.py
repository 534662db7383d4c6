"""BrokerHeartbeat (key 63, controller): keeps a broker's session alive; unfences it once caught up; a controlled
shutdown asks to be fenced."""
from __future__ import annotations

from broker.handlers.controller_api import serve
from protocol import kio_codec

API_KEY = 63
VERSIONS = (0, 1)
DECODABLE = (0, 1)
CONTROLLER_ONLY = True


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)

    async def answer(control):
        err, caught_up, fenced, shut_down = await control.heartbeat(
            body.broker_id, body.broker_epoch, body.current_metadata_offset, body.want_shut_down)
        return {"error_code": err, "is_caught_up": caught_up, "is_fenced": fenced, "should_shut_down": shut_down}

    return serve(broker, API_KEY, v, answer, {"is_caught_up": False, "is_fenced": True, "should_shut_down": False}, req)
