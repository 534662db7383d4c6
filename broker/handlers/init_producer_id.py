"""InitProducerId (key 22): producer ids for idempotent and transactional producers.

Without a transactional id every request gets a new producer id at epoch 0, also one that names its current id and
epoch, as Kafka's TransactionCoordinator answers: an idempotent producer bumps its epoch itself (KIP-360), and the
producer state takes epoch + 1 from sequence 0. With one, the transaction coordinator answers (broker/transactions/):
an epoch bump that fences the previous producer of the id, aborting its open transaction first.
"""
from __future__ import annotations

from broker.security.authorization import (CLUSTER_DENIED, IDEMPOTENT_WRITE, TOPIC, TRANSACTIONAL_ID,
                                           TRANSACTIONAL_ID_DENIED, WRITE, authorize, authorize_by_resource_type,
                                           authorize_cluster)
from broker.transactions.verification import fenced_as_invalid_epoch
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 22
VERSIONS = (0, 5)
DECODABLE = (0, 5)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    resp = {"throttle_time": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
    # Kafka: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on
    # some topic (KIP-679)
    if body.transactional_id is not None:
        if not authorize(broker, req, WRITE, TRANSACTIONAL_ID, body.transactional_id):
            return kio_codec.encode_response(API_KEY, v, {**resp, "error_code": TRANSACTIONAL_ID_DENIED})
    elif not authorize_cluster(broker, req, IDEMPOTENT_WRITE) and \
            not authorize_by_resource_type(broker, req, WRITE, TOPIC):
        return kio_codec.encode_response(API_KEY, v, {**resp, "error_code": CLUSTER_DENIED})
    if body.transactional_id is not None:
        pid, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        expected = (pid, epoch) if pid >= 0 else None
        timeout_ms = round(body.transaction_timeout.total_seconds() * 1000)
        err, pid, epoch = await broker.transactions.init_producer_id(body.transactional_id, timeout_ms, expected)
        resp.update(error_code=fenced_as_invalid_epoch(err, v < 4), producer_id=pid, producer_epoch=epoch)
    else:
        pid = await broker.producer_ids.next_producer_id()
        if pid < 0:          # no controller to allocate a block: retriable, as Kafka answers then
            resp["error_code"] = ErrorCode.coordinator_load_in_progress
        else:
            resp.update(producer_id=pid, producer_epoch=0)
    return kio_codec.encode_response(API_KEY, v, resp)
