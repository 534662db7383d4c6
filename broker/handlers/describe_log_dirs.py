"""DescribeLogDirs (key 35): this broker's log directory with the size of each partition replica in it (Kafka's
ReplicaManager.describeLogDirs), what kafka-log-dirs.sh shows and how `strata reassign --progress` sees how far an
added replica has copied. Each broker answers for its own replicas only; a client asks every broker. Null topics
means every replica here. One log dir per broker, so no future (AlterReplicaLogDirs) logs: is_future_key is false.
"""
from __future__ import annotations

import shutil

from broker.security.authorization import CLUSTER_DENIED, DESCRIBE, authorize_cluster
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 35
VERSIONS = (1, 4)          # v0 is gone since Kafka 4.0 (KIP-896)
DECODABLE = (1, 4)


def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if not authorize_cluster(broker, req, DESCRIBE):
        return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": CLUSTER_DENIED, "results": []})
    wanted = None if body.topics is None else {(t.topic, p) for t in body.topics for p in t.partitions}
    topics: dict[str, list[dict]] = {}
    for part in broker.replicas.hosted():
        if part.closed or (wanted is not None and (part.topic, part.index) not in wanted):
            continue
        topics.setdefault(part.topic, []).append({"partition_index": part.index, "partition_size": part.size_bytes,
                                                  "offset_lag": part.end_offset_lag, "is_future_key": False})
    log_dir = broker.config.log_dir.resolve()
    result = {"error_code": 0, "log_dir": str(log_dir), "total_bytes": -1, "usable_bytes": -1,
              "topics": [{"name": name, "partitions": sorted(parts, key=lambda p: p["partition_index"])}
                         for name, parts in sorted(topics.items())]}
    try:
        usage = shutil.disk_usage(log_dir)
        result.update(total_bytes=usage.total, usable_bytes=usage.free)
    except OSError:                      # Kafka answers KAFKA_STORAGE_ERROR for a log dir it cannot read
        result.update(error_code=ErrorCode.kafka_storage_error, topics=[])
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "error_code": 0, "results": [result]})
