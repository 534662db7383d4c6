"""ListOffsets (key 2): -1 latest, -2 earliest, -3 max timestamp (v7+), -4 earliest local (v8+), -5 latest tiered
(v9+), or the first offset whose record timestamp is at or after a given time (through the time index); any other
negative timestamp is UNSUPPORTED_VERSION, as in Kafka. Only current_leader_epoch -1 skips the leader epoch check:
Kafka takes any other negative one as an old epoch (FENCED_LEADER_EPOCH).

With tiered storage (KIP-405, KIP-1005) earliest is the log start offset including the remote tier, -4 the local log
start, -5 the highest offset in the remote tier (-1 with epoch -1 when the topic is not tiered), and a timestamp is
looked up in the remote tier first (remote time and offset indexes), then in the local log from its local start; the
remote lookup makes the response asynchronous (bounded by remote.list.offsets.request.timeout.ms).

A new leader whose high watermark still lags behind its epoch start answers OFFSET_NOT_AVAILABLE (v5+; older
versions get LEADER_NOT_AVAILABLE), as Kafka does, and the client retries."""
from __future__ import annotations

import asyncio

from broker.handlers.offset_for_leader_epoch import check_current_epoch
from broker.security.authorization import DESCRIBE, TOPIC_DENIED, name_checker
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 2
VERSIONS = (0, 9)      # min 0: librdkafka 2.0.2's feature detection, see produce.py
DECODABLE = (1, 9)

# The special timestamps and the version that introduced each; Kafka answers UNSUPPORTED_VERSION to one the request's
# version does not have, and to any other negative timestamp.
_MIN_VERSION = {-3: 7, -4: 8, -5: 9}


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    topics = []
    pending = []
    read_committed = getattr(body, "isolation_level", 0) == 1      # v2+: latest is the last stable offset
    describable = name_checker(broker, req, DESCRIBE)
    for t in body.topics:
        parts = []
        denied = describable is not None and not describable(t.name)
        for p in t.partitions:
            part = broker.replicas.get(t.name, p.partition_index) if not denied else None
            epoch = getattr(p, "current_leader_epoch", -1)
            if denied:
                res = TOPIC_DENIED, -1, -1, -1
            elif part is None:
                res = broker.replicas.missing_error(t.name, p.partition_index), -1, -1, -1
            elif p.timestamp < -2 and v < _MIN_VERSION.get(p.timestamp, 99):
                res = ErrorCode.unsupported_version, -1, -1, -1
            elif err := part.not_leader_error() or check_current_epoch(part, epoch):
                res = err, -1, -1, -1
            else:
                res = part.fetch_offset_for_timestamp(p.timestamp, read_committed)
            entry = {"partition_index": p.partition_index}
            parts.append(entry)
            if asyncio.iscoroutine(res):
                pending.append((entry, part, res))
            else:
                _fill(entry, v, res)
        topics.append({"name": t.name, "partitions": parts})
    if pending:
        return _finish_async(v, topics, pending)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})


def _fill(entry: dict, v: int, res) -> None:
    err, off, ts, leader_epoch = res
    if err == ErrorCode.offset_not_available and v < 5:
        err = ErrorCode.leader_not_available
    entry.update({"error_code": err, "timestamp": ts, "offset": off, "leader_epoch": leader_epoch,
                  "old_style_offsets": [off] if off >= 0 else []})


async def _finish_async(v, topics, pending):
    results = await asyncio.gather(*(coro for _, _, coro in pending))
    for (entry, _, _), res in zip(pending, results):
        _fill(entry, v, res)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})
