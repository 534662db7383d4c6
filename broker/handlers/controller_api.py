"""Shared by the controller's APIs (registration, heartbeat, AlterPartition, AllocateProducerIds): only the active
controller answers them; any other node, or one that loses the role meanwhile, answers NOT_CONTROLLER so the
sender looks the controller up again. "Active" means `acting`: holding a lease that has not lapsed by this node's own
clock, so a controller woken from a pause never answers from the image it had before it. Not a handler itself (no API_KEY): the loader skips it."""
from __future__ import annotations

import logging

from broker.security.authorization import CLUSTER_ACTION, CLUSTER_DENIED, authorize_cluster
from metadata.object_store_controller import NotControllerError
from protocol import kio_codec
from protocol.errors import ErrorCode

log = logging.getLogger("strata.controller")


def serve(broker, api_key: int, version: int, answer, refusal: dict, req=None):
    """`req`: the request, authorized as Kafka's ControllerApis does (CLUSTER_ACTION on the cluster: only brokers
    may send these)."""
    if req is not None and not authorize_cluster(broker, req, CLUSTER_ACTION):
        return kio_codec.encode_response(api_key, version, {"throttle_time": 0, **refusal,
                                                            "error_code": CLUSTER_DENIED})
    control = broker.cluster_control

    async def run():
        body = None
        if control is not None and broker.controller.acting:
            try:
                body = await answer(control)
            except NotControllerError:
                body = None
            except ValueError as e:          # records that do not apply: a bug or a race with another change
                log.warning("controller request %d refused: %s", api_key, e)
                body = {**refusal, "error_code": ErrorCode.unknown_server_error}
        if body is None:
            body = {**refusal, "error_code": ErrorCode.not_controller}
        return kio_codec.encode_response(api_key, version, {"throttle_time": 0, **body})

    return run()
