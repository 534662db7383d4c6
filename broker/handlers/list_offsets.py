"""ListOffsets (key 2): -1 latest, -2 earliest, -3 max timestamp, -4 earliest local, -5 latest tiered, or the first
offset whose record timestamp is at or after a given time (through the time index).

With tiered storage (KIP-405, KIP-1005) earliest is the log start offset including the remote tier, -4 the local log
start, -5 the highest offset in the remote tier (-1 with epoch -1 when the topic is not tiered), and a timestamp is
looked up in the remote tier first (remote time and offset indexes), then in the local log from its local start; the
remote lookup makes the response asynchronous (bounded by remote.list.offsets.request.timeout.ms)."""
from __future__ import annotations

import asyncio
import logging

from protocol import kio_codec

API_KEY = 2
VERSIONS = (0, 9)      # min 0: librdkafka 2.0.2's feature detection, see produce.py
DECODABLE = (1, 9)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


log = logging.getLogger("strata.list_offsets")


def lookup(part, timestamp: int, rlm=None):
    """(error, offset, timestamp[, leader epoch]) for one partition, or a coroutine giving that when the remote
    tier has to be searched."""
    plog = part.log
    if timestamp == LATEST:
        return 0, plog.high_watermark, -1
    if timestamp == EARLIEST:
        return 0, plog.log_start_offset, -1
    if timestamp == EARLIEST_LOCAL:
        return 0, plog.local_log_start_offset, -1
    if timestamp == LATEST_TIERED:
        if rlm is None or not plog.remote_log_enabled:
            return 0, -1, -1, -1
        offset, epoch = rlm.latest_tiered(part)
        return 0, offset, -1, epoch
    if timestamp >= 0 and rlm is not None and plog.remote_log_enabled and plog.log_start_offset < \
            plog.local_log_start_offset:
        return _lookup_tiered(part, timestamp, rlm)
    if timestamp == MAX_TIMESTAMP:
        entry = plog.max_timestamp_entry()
        return (0, entry[0], entry[1]) if entry else (0, -1, -1)
    found = plog.fetch_offset_by_timestamp(timestamp)
    return (0, found[0], found[1]) if found else (0, -1, -1)


async def _lookup_tiered(part, timestamp: int, rlm):
    try:
        found = await asyncio.wait_for(rlm.find_offset_by_timestamp(part, timestamp), rlm.list_offsets_timeout)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.warning("ListOffsets by timestamp in the remote tier of %s-%d failed: %s", part.topic, part.index, e)
        return UNKNOWN_SERVER_ERROR, -1, -1
    if found is None:
        found = part.log.fetch_offset_by_timestamp(timestamp)
    return (0, found[0], found[1]) if found else (0, -1, -1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    rlm = getattr(broker, "remote_log_manager", None)
    topics = []
    pending = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            part = broker.replicas.get(t.name, p.partition_index)
            epoch = getattr(p, "current_leader_epoch", -1)
            if part is None:
                res = UNKNOWN_TOPIC_OR_PARTITION, -1, -1
            elif epoch >= 0 and epoch != part.leader_epoch:
                res = (FENCED_LEADER_EPOCH if epoch < part.leader_epoch else UNKNOWN_LEADER_EPOCH), -1, -1
            else:
                res = lookup(part, p.timestamp, rlm)
            entry = {"partition_index": p.partition_index}
            parts.append(entry)
            if asyncio.iscoroutine(res):
                pending.append((entry, part, res))
            else:
                _fill(entry, part, res)
        topics.append({"name": t.name, "partitions": parts})
    if pending:
        return _finish_async(v, topics, pending)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})


def _fill(entry: dict, part, res) -> None:
    err, off, ts = res[:3]
    leader_epoch = res[3] if len(res) > 3 else (part.leader_epoch if part is not None and off >= 0 else -1)
    entry.update({"error_code": err, "timestamp": ts, "offset": off, "leader_epoch": leader_epoch,
                  "old_style_offsets": [off] if off >= 0 else []})


async def _finish_async(v, topics, pending):
    results = await asyncio.gather(*(coro for _, _, coro in pending))
    for (entry, part, _), res in zip(pending, results):
        _fill(entry, part, res)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})
