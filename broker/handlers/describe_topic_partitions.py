"""DescribeTopicPartitions (key 75, KIP-966): topics and their partitions, paginated, as Kafka's
DescribeTopicPartitionsRequestHandler and KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse answer it.
Admin clients (kafka-topics.sh --describe) use it instead of Metadata when the broker offers it.

- No topics named: every topic; named topics: those, each unknown one with UNKNOWN_TOPIC_OR_PARTITION (or
  INVALID_TOPIC_EXCEPTION for an invalid name), never created. Topics come sorted by name.
- At most min(response_partition_limit, max.request.partition.size.limit) partitions; when a topic does not fit,
  `next_cursor` names the first partition left out (the client asks again from there). A cursor starts the answer
  at its topic and partition; with named topics it must be one of them (INVALID_REQUEST otherwise).
- Replicas and ISR as in the image; offline replicas are those on unregistered or fenced brokers. Strata has no
  eligible leader replicas (KIP-966's ELR): both ELR lists are empty, as Kafka's with ELR disabled.
"""
from __future__ import annotations

import uuid

from broker.security.authorization import (DESCRIBE, NOT_REQUESTED, TOPIC, TOPIC_DENIED, authorized_operations,
                                           name_checker)
from broker.topic_admin import topic_name_error
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 75
VERSIONS = (0, 0)
DECODABLE = (0, 0)

# No authorizer: every operation a topic supports (Kafka's AuthHelper.authorizedOperations without one): READ,
# WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
_ZERO_UUID = uuid.UUID(int=0)


class _InvalidRequest(Exception):
    pass


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    try:
        answer = describe(broker, body, req)
    except _InvalidRequest:               # Kafka's getErrorResponse: the error on every topic asked for
        answer = {"topics": [{"error_code": ErrorCode.invalid_request, "name": t.name, "topic_id": _ZERO_UUID,
                              "is_internal": False, "partitions": [],
                              "topic_authorized_operations": -2147483648} for t in body.topics],
                  "next_cursor": None}
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, **answer})


def describe(broker, body, req=None) -> dict:
    """With an authorizer (Kafka's DescribeTopicPartitionsRequestHandler): only topics the principal may describe
    are paged; named ones it may not answer TOPIC_AUTHORIZATION_FAILED after the others, and each topic answered
    carries the principal's authorized operations on it."""
    image = broker.topics.image
    cursor = body.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not body.topics
    if fetch_all:
        names = {n for n in image.topics_by_name if n >= cursor_topic}
    else:
        names = {t.name for t in body.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            raise _InvalidRequest(f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                                  f"{cursor.topic_name}")
    describable = name_checker(broker, req, DESCRIBE) if req is not None else None
    refused = []
    if describable is not None:
        refused = [{"error_code": TOPIC_DENIED, "name": n, "topic_id": _ZERO_UUID, "is_internal": False,
                    "partitions": [], "topic_authorized_operations": NOT_REQUESTED}
                   for n in sorted(names) if not fetch_all and not describable(n)]
        names = {n for n in names if describable(n)}
    limit = min(broker.config.get_int("max.request.partition.size.limit"), body.response_partition_limit)
    remaining = limit
    topics, next_cursor = [], None
    live = {b for b, reg in image.brokers.items() if not reg.fenced}
    for name in sorted(names):
        if remaining == 0:                    # the previous topic filled the answer exactly: resume at this one
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if remaining < 0:                     # a negative limit: nothing (as Kafka)
            continue
        info = image.get(name)
        if info is None:
            if not fetch_all:
                topics.append(_topic_error(_unknown_error(name), name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        count = info.partitions
        upper = min(count, start + remaining)
        indexes = [i for i in range(start, upper) if i >= 0]      # a negative cursor index names no partition
        topics.append({"error_code": 0, "name": name, "topic_id": info.uuid, "is_internal": name.startswith("__"),
                       "partitions": [_partition(i, info.partition_states[i], live) for i in indexes],
                       "topic_authorized_operations": TOPIC_OPERATIONS})
        if upper < count:
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(indexes)
    if describable is not None:
        for t in topics:
            t["topic_authorized_operations"] = authorized_operations(broker, req, TOPIC, t["name"])
    return {"topics": topics + refused, "next_cursor": next_cursor}


def _partition(index: int, p, live: set[int]) -> dict:
    return {"error_code": 0, "partition_index": index, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
            "eligible_leader_replicas": [], "last_known_elr": [],
            "offline_replicas": [r for r in p.replicas if r not in live]}


def _topic_error(code: int, name: str) -> dict:
    return {"error_code": code, "name": name, "topic_id": _ZERO_UUID, "is_internal": name.startswith("__"),
            "partitions": [], "topic_authorized_operations": TOPIC_OPERATIONS}


def _unknown_error(name: str) -> int:
    return ErrorCode.invalid_topic_exception if topic_name_error(name) else ErrorCode.unknown_topic_or_partition
