"""CreatePartitions (key 37): grow a topic's partition count."""
from __future__ import annotations

from broker.topic_admin import (MAX_PARTITIONS, AdminError, check_replica_assignment, partition_records,
                                place, submit)
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 37
VERSIONS = (0, 3)
DECODABLE = (0, 3)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    names = [t.name for t in body.topics]
    results = []
    for t in body.topics:
        res = {"name": t.name, "error_code": 0, "error_message": None}
        info = broker.topics.get(t.name)
        if names.count(t.name) > 1:
            res.update(error_code=ErrorCode.invalid_request, error_message="Duplicate topic in request.")
        elif info is None:
            res.update(error_code=ErrorCode.unknown_topic_or_partition, error_message=f"The topic '{t.name}' does not exist.")
        elif t.count <= info.partitions:
            res.update(error_code=ErrorCode.invalid_partitions,
                       error_message=f"Topic currently has {info.partitions} partitions, which is higher than the "
                                     f"requested {t.count}." if t.count < info.partitions else
                                     f"Topic already has {info.partitions} partitions.")
        elif t.count > MAX_PARTITIONS:
            res.update(error_code=ErrorCode.invalid_partitions, error_message=f"Partition count {t.count} exceeds {MAX_PARTITIONS}")
        elif t.assignments is not None and len(t.assignments) != t.count - info.partitions:
            res.update(error_code=ErrorCode.invalid_replica_assignment,
                       error_message=f"Increasing the number of partitions by {t.count - info.partitions} but "
                                     f"{len(t.assignments)} assignments provided.")
        else:
            rf = len(info.partition(0).replicas)
            try:
                if t.assignments is not None:
                    assignment = check_replica_assignment(broker, [a.broker_ids for a in t.assignments])
                    if len(assignment[0]) != rf:
                        raise AdminError(ErrorCode.invalid_replica_assignment, f"Inconsistent replication factor "
                                         f"between partitions, partition 0 has {rf} while partitions "
                                         f"[{info.partitions}] have replication factors [{len(assignment[0])}], "
                                         f"respectively.")
                else:
                    assignment = place(broker, t.count - info.partitions, rf, first_partition=info.partitions)
                if not body.validate_only:
                    await submit(broker, partition_records(info.topic_id, info.partitions, assignment))
            except AdminError as e:
                res.update(error_code=e.code, error_message=str(e))
        results.append(res)
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "results": results})
