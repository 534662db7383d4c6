"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1 means the high watermark). As
Kafka's DelayedDeleteRecords, the answer waits until every live replica has moved its log start there too (the
followers learn it from their fetches), up to the request's timeout: otherwise a new leader could serve the deleted
records again. A partition whose replicas do not get there in time answers REQUEST_TIMED_OUT."""
from __future__ import annotations

from broker.security.authorization import DELETE, TOPIC_DENIED, name_checker
from protocol import kio_codec
from protocol.errors import ApiError
from replication.partition import wait_for_all

API_KEY = 21
VERSIONS = (0, 2)
DECODABLE = (0, 2)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    topics, waits = [], []
    deletable = name_checker(broker, req, DELETE)       # Kafka: DELETE on each topic
    for t in body.topics:
        parts = []
        denied = deletable is not None and not deletable(t.name)
        for p in t.partitions:
            part = broker.replicas.get(t.name, p.partition_index) if not denied else None
            res = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
            if denied:
                res["error_code"] = TOPIC_DENIED
            elif part is None:
                res["error_code"] = broker.replicas.missing_error(t.name, p.partition_index)
            elif part.not_leader_error():
                res["error_code"] = part.not_leader_error()
            else:
                try:
                    start = part.delete_records_on_leader(p.offset)
                    waits.append((res, part, part.wait_for_low_watermark(start)))
                except ApiError as e:
                    res["error_code"] = e.error_code
            parts.append(res)
        topics.append({"name": t.name, "partitions": parts})
    delayed = [(part, w) for _, part, w in waits if w is not None]
    answers = iter(await wait_for_all(delayed, body.timeout.total_seconds()))
    for res, part, waiter in waits:
        err = next(answers) if waiter is not None else 0     # REQUEST_TIMED_OUT, or the replica stopped leading
        if err:
            res["error_code"] = err
        else:
            res["low_watermark"] = part.low_watermark()
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "topics": topics})
