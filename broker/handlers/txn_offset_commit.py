"""TxnOffsetCommit (key 28): a transactional producer commits a group's offsets inside its transaction. The group
coordinator writes them to `__consumer_offsets` as a transactional batch of the producer; they take effect when the
transaction's COMMIT marker reaches that partition, and vanish with an ABORT (Kafka's pending transactional
offsets). Generation and member are checked like OffsetCommit's when the producer sends them (KIP-447). From v5
(transaction version 2) the group's partition joins the transaction here, without AddOffsetsToTxn."""
from __future__ import annotations

from broker.groups.metadata_store import OFFSETS_TOPIC
from broker.security.authorization import (GROUP, GROUP_DENIED, READ, TOPIC_DENIED, TRANSACTIONAL_ID,
                                           TRANSACTIONAL_ID_DENIED, WRITE, authorize, name_checker)
from broker.transactions.verification import add_or_verify, client_error
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 28
VERSIONS = (0, 5)
DECODABLE = (0, 5)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    errors: dict[tuple[str, int], int] = {}
    offsets = {}
    order = []
    # Kafka: WRITE on the transactional id, READ on the group (either refusal answers every partition), READ on topics
    denied = TRANSACTIONAL_ID_DENIED if not authorize(broker, req, WRITE, TRANSACTIONAL_ID, body.transactional_id) \
        else GROUP_DENIED if not authorize(broker, req, READ, GROUP, body.group_id) else 0
    readable = name_checker(broker, req, READ)
    for t in body.topics:
        info = broker.topics.get(t.name)
        topic_denied = denied or (TOPIC_DENIED if readable is not None and not readable(t.name) else 0)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if topic_denied:
                errors[tp] = topic_denied
            elif info is None or not 0 <= p.partition_index < info.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[tp] = (p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
    if offsets:
        verification = {}
        if (v >= 5 or broker.transactions.verification_enabled) and broker.groups.store is not None:
            err, guard = await _verify(broker, body, add=v >= 5)
            if err:
                offsets = {}
                errors.update({tp: client_error(err, v >= 4, produce=False) for tp in order if tp not in errors})
            verification = {"verification_guard": guard}
    if offsets:
        result = broker.groups.txn_commit_offsets(
            body.group_id, body.transactional_id, body.producer_id, body.producer_epoch,
            getattr(body, "member_id", ""), getattr(body, "group_instance_id", None),
            getattr(body, "generation_id", -1), offsets, **verification)
        if not isinstance(result, dict):
            result = await result
        errors.update(result)
    by_topic: dict[str, list] = {}
    for tp in order:
        by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": errors[tp]})
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})


async def _verify(broker, body, add: bool) -> tuple[int, object]:
    """KIP-890 for the group's __consumer_offsets partition, as for a Produce: (coordinator error, guard)."""
    p = broker.groups.store.partition_for(body.group_id)
    part = broker.replicas.get(OFFSETS_TOPIC, p)
    if part is None or not part.is_leader:
        return 0, None                     # the group coordinator answers NOT_COORDINATOR
    def guards() -> dict:                  # none when its transaction is open in that partition already
        guard = part.log.producer_state.start_verification(body.producer_id, body.producer_epoch)
        return {} if guard is None else {(OFFSETS_TOPIC, p): guard}
    answers = await add_or_verify(broker, body.transactional_id, body.producer_id, body.producer_epoch, guards, add)
    return answers.get((OFFSETS_TOPIC, p), (0, None))
