"""CreatePartitions (key 37): grow a topic's partition count."""
from __future__ import annotations

from broker.topic_admin import (MAX_PARTITIONS, AdminError, check_broker_partitions, check_replica_assignment,
                                max_broker_partitions, partition_records, place, submit, take_mutations)
from broker.security.authorization import ALTER, TOPIC, TOPIC_DENIED, filter_authorized
from broker.quotas import mutation_quota
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 37
VERSIONS = (0, 3)
DECODABLE = (0, 3)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)


def _grow(broker, t, validate_only: bool, quota):
    """The controller operation: new partitions for topic `t.name` as the latest image has it."""
    def operation(image):
        info = image.get(t.name)
        if info is None:
            raise AdminError(ErrorCode.unknown_topic_or_partition, None)      # Kafka's controller: no message
        if t.count <= info.partitions:     # Kafka's ReplicationControlManager.createPartitions, word for word
            raise AdminError(ErrorCode.invalid_partitions,
                             f"The topic {t.name} currently has {info.partitions} partition(s); {t.count} would not "
                             f"be an increase." if t.count < info.partitions else
                             f"Topic already has {info.partitions} partition(s).")
        if t.count > MAX_PARTITIONS:
            raise AdminError(ErrorCode.invalid_partitions, f"Partition count {t.count} exceeds {MAX_PARTITIONS}")
        if t.assignments is not None and len(t.assignments) != t.count - info.partitions:
            raise AdminError(ErrorCode.invalid_replica_assignment,
                             f"Attempted to add {t.count - info.partitions} additional partition(s), but only "
                             f"{len(t.assignments)} assignment(s) were specified.")
        rf = len(info.partition(0).replicas)
        limit = max_broker_partitions(broker)
        if t.assignments is not None:
            assignment = check_replica_assignment(image, [a.broker_ids for a in t.assignments])
            if len(assignment[0]) != rf:
                raise AdminError(ErrorCode.invalid_replica_assignment, f"Inconsistent replication factor between "
                                 f"partitions, partition 0 has {rf} while partitions [{info.partitions}] have "
                                 f"replication factors [{len(assignment[0])}], respectively.")
        else:
            assignment = place(image, t.count - info.partitions, rf, first_partition=info.partitions, limit=limit)
        check_broker_partitions(image, assignment, limit)
        take_mutations(quota, t.count - info.partitions)
        return ([] if validate_only else partition_records(info.topic_id, info.partitions, assignment)), None
    return operation


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    names = [t.name for t in body.topics]
    alterable = filter_authorized(broker, req, ALTER, TOPIC, names)     # Kafka: ALTER on each topic
    results = []
    quota = mutation_quota(broker, req, strict=v >= 3)
    for t in body.topics:
        res = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            if names.count(t.name) > 1:
                raise AdminError(ErrorCode.invalid_request, "Duplicate topic in request.")
            if t.name not in alterable:
                raise AdminError(TOPIC_DENIED, None)
            await submit(broker, _grow(broker, t, body.validate_only, quota))
        except AdminError as e:
            res.update(error_code=e.code, error_message=e.args[0])
        results.append(res)
    req.throttle_ms = max(req.throttle_ms, quota.throttle_ms())
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": req.throttle_ms, "results": results})
