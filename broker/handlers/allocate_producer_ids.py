"""AllocateProducerIds (key 67, controller): a block of producer ids for a broker's InitProducerId answers."""
from __future__ import annotations

from broker.handlers.controller_api import serve
from metadata.controller import PRODUCER_ID_BLOCK
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 67
VERSIONS = (0, 0)
DECODABLE = (0, 0)
CONTROLLER_ONLY = True


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)

    async def answer(control):
        start = await control.allocate_producer_ids(body.broker_id, body.broker_epoch)
        if start < 0:                          # not the registered incarnation of that broker (Kafka checks it too)
            return {"error_code": ErrorCode.stale_broker_epoch, "producer_id_start": -1, "producer_id_len": 0}
        return {"error_code": 0, "producer_id_start": start, "producer_id_len": PRODUCER_ID_BLOCK}

    return serve(broker, API_KEY, v, answer, {"producer_id_start": -1, "producer_id_len": 0}, req)
