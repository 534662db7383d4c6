"""OffsetCommit (key 8): group-managed commits (generation and member checked) and simple commits (generation -1,
only while the group has no members). For consumer-protocol (KIP-848) groups the generation is the member epoch
(STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID).

Advertised from v0 like Produce/Fetch (librdkafka 2.0.2 feature detection); kio decodes v2+ and clients use v2+.
"""
from __future__ import annotations

import datetime

from broker.groups.classic.group_metadata import DEFAULT_RETENTION_TIME
from broker.security.authorization import GROUP, GROUP_DENIED, READ, TOPIC_DENIED, authorize, name_checker
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 8
VERSIONS = (0, 9)
DECODABLE = (2, 9)

_MS = datetime.timedelta(milliseconds=1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    retention = getattr(body, "retention_time", None)
    retention_ms = retention // _MS if retention is not None else DEFAULT_RETENTION_TIME
    errors: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    order: list[tuple[str, int]] = []
    # Kafka: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED), then READ on each topic
    group_denied = not authorize(broker, req, READ, GROUP, body.group_id)
    readable = name_checker(broker, req, READ)
    for t in body.topics:
        info = broker.topics.get(t.name) if t.name is not None else None
        denied = GROUP_DENIED if group_denied else \
            TOPIC_DENIED if readable is not None and not readable(t.name) else 0
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if denied:
                errors[tp] = denied
            elif info is None or not 0 <= p.partition_index < info.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[tp] = (p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
    if offsets:
        errors.update(broker.groups.commit_offsets(
            body.group_id, body.generation_id_or_member_epoch, body.member_id,
            getattr(body, "group_instance_id", None), offsets, retention_ms, api_version=v))
        pending = broker.groups.replicated(body.group_id)
        if pending is not None:
            return _after_replication(v, order, errors, pending,
                                      broker.config.get_int("offsets.commit.timeout.ms") / 1000)
    return _encode(v, order, errors)


async def _after_replication(v, order, errors, pending, timeout_s: float):
    """The commit is answered once the ISR has it (Kafka appends offset commits with acks=all); REQUEST_TIMED_OUT
    if the followers do not get it in time, NOT_COORDINATOR if this broker stopped leading the partition."""
    import asyncio
    try:
        err = await asyncio.wait_for(pending, timeout_s)
    except asyncio.TimeoutError:
        err = ErrorCode.request_timed_out
    if err:
        code = ErrorCode.not_coordinator if err == ErrorCode.not_leader_or_follower else err
        errors = {tp: e or code for tp, e in errors.items()}
    return _encode(v, order, errors)


def _encode(v, order, errors):
    topics: dict[str, list] = {}
    for tp in dict.fromkeys(order):
        topics.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": errors[tp]})
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
