"""CreateTopics (key 19)."""
from __future__ import annotations

import uuid

from broker.security.authorization import (CREATE, DESCRIBE_CONFIGS, TOPIC, TOPIC_DENIED, authorize_cluster,
                                           filter_authorized)
from broker.topic_admin import AdminError, create_topic
from broker.handlers.describe_configs import topic_config_entries
from broker.quotas import _from_a_broker, mutation_quota
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 19
VERSIONS = (2, 7)
DECODABLE = (2, 7)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    results = []
    seen: dict[str, int] = {}
    for t in body.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    # Kafka's ControllerApis.createTopics: CREATE on the cluster or on each topic; the configs are answered only for
    # topics the principal may DESCRIBE_CONFIGS
    creatable = set(seen) if authorize_cluster(broker, req, CREATE) else filter_authorized(broker, req, CREATE, TOPIC,
                                                                                            seen)
    configs_visible = filter_authorized(broker, req, DESCRIBE_CONFIGS, TOPIC, seen)
    quota = mutation_quota(broker, req, strict=v >= 6)
    by_a_broker = _from_a_broker(broker, req)        # its internal topics are not held to max.broker.partitions
    for t in body.topics:
        res = {"name": t.name, "topic_id": None, "error_code": 0, "error_message": None,
               "num_partitions": -1, "replication_factor": -1, "configs": None}
        if seen[t.name] < 0:
            continue                        # one answer per duplicated name, as Kafka's ControllerApis gives
        try:
            if seen[t.name] > 1:
                seen[t.name] = -1
                raise AdminError(ErrorCode.invalid_request,
                                 f"Create topics request from client contains duplicate topic {t.name}")
            if t.name not in creatable:
                raise AdminError(TOPIC_DENIED, "Authorization failed.")
            assignment, cfg, topic_id = await create_topic(
                broker, t.name, t.num_partitions, t.replication_factor, [a.broker_ids for a in t.assignments],
                {c.name: c.value for c in t.configs}, validate_only=body.validate_only,
                indexes=[a.partition_index for a in t.assignments], quota=quota, by_a_broker=by_a_broker)
            if topic_id:
                res["topic_id"] = uuid.UUID(topic_id)
            if t.name not in configs_visible:
                res.update(configs=[], topic_config_error_code=TOPIC_DENIED)
                results.append(res)
                continue
            res.update(num_partitions=len(assignment), replication_factor=len(assignment[0]))
            if v >= 5:
                res["configs"] = [{"name": e["name"], "value": e["value"], "read_only": False,
                                   "config_source": e["config_source"], "is_sensitive": False}
                                  for e in topic_config_entries(broker, cfg)]
        except AdminError as e:
            res.update(error_code=e.code, error_message=str(e))
        results.append(res)
    req.throttle_ms = max(req.throttle_ms, quota.throttle_ms())
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": req.throttle_ms, "topics": results})
