"""ListOffsets (key 2): -1 latest, -2 earliest, -3 max timestamp, -4 earliest local, -5 latest tiered, or the first
offset whose record timestamp is at or after a given time (through the time index)."""
from __future__ import annotations

from protocol import kio_codec

API_KEY = 2
VERSIONS = (0, 9)      # min 0: librdkafka 2.0.2's feature detection, see produce.py
DECODABLE = (1, 9)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
UNKNOWN_TOPIC_OR_PARTITION = 3
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


def lookup(part, timestamp: int) -> tuple[int, int, int]:
    """(error, offset, timestamp) for one partition."""
    plog = part.log
    if timestamp == LATEST:
        return 0, plog.high_watermark, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return 0, plog.log_start_offset, -1
    if timestamp == LATEST_TIERED:
        return 0, -1, -1      # nothing is tiered until remote storage is enabled
    if timestamp == MAX_TIMESTAMP:
        entry = plog.max_timestamp_entry()
        return (0, entry[0], entry[1]) if entry else (0, -1, -1)
    found = plog.fetch_offset_by_timestamp(timestamp)
    return (0, found[0], found[1]) if found else (0, -1, -1)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            part = broker.replicas.get(t.name, p.partition_index)
            epoch = getattr(p, "current_leader_epoch", -1)
            if part is None:
                err, off, ts = UNKNOWN_TOPIC_OR_PARTITION, -1, -1
            elif epoch >= 0 and epoch != part.leader_epoch:
                err, off, ts = (FENCED_LEADER_EPOCH if epoch < part.leader_epoch else UNKNOWN_LEADER_EPOCH), -1, -1
            else:
                err, off, ts = lookup(part, p.timestamp)
            parts.append({"partition_index": p.partition_index, "error_code": err, "timestamp": ts, "offset": off,
                          "leader_epoch": part.leader_epoch if part is not None and off >= 0 else -1,
                          "old_style_offsets": [off] if off >= 0 else []})
        topics.append({"name": t.name, "partitions": parts})
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})
