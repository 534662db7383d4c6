"""DeleteTopics (key 20): by name, or by topic id from v6."""
from __future__ import annotations

from broker.security.authorization import DELETE, DESCRIBE, TOPIC_DENIED, authorize_cluster, name_checker
from broker.topic_admin import AdminError, submit, take_mutations
from metadata.records import RemoveTopicRecord
from broker.quotas import mutation_quota
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 20
VERSIONS = (1, 6)
DECODABLE = (1, 6)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)



_UNKNOWN = {True: ErrorCode.unknown_topic_id, False: ErrorCode.unknown_topic_or_partition}


def _remove(name, tid, quota):
    """The controller operation: remove the topic as the latest image names it."""
    def operation(image):
        info = image.by_id(tid) if tid is not None else image.get(name)
        if info is None:
            raise AdminError(_UNKNOWN[tid is not None], "")
        take_mutations(quota, info.partitions)
        return [RemoveTopicRecord(info.topic_id)], info
    return operation


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    if v >= 6:
        wanted = [(t.name, t.topic_id if t.topic_id is not None and t.topic_id.int else None) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = []
    quota = mutation_quota(broker, req, strict=v >= 5)
    # Kafka's ControllerApis.deleteTopics: DELETE on the cluster, or DELETE on each topic; a topic the principal may
    # not even DESCRIBE is refused without its name (by id) or its id (by name)
    describable = deletable = None
    if not authorize_cluster(broker, req, DELETE):
        describable, deletable = name_checker(broker, req, DESCRIBE), name_checker(broker, req, DELETE)
    for name, tid in wanted:
        info = broker.topics.by_id(tid) if tid is not None else broker.topics.get(name)
        res = {"name": info.name if info else name, "topic_id": info.uuid if info else tid, "error_code": 0,
               "error_message": None}
        if name is not None and tid is not None:
            res.update(error_code=ErrorCode.invalid_request, error_message="Only one of topic name and topic id may be set")
        elif not broker.config.get_bool("delete.topic.enable"):
            res["error_code"] = ErrorCode.topic_deletion_disabled
        elif deletable is not None and tid is None and not (describable(name) and deletable(name)):
            res.update(error_code=TOPIC_DENIED, topic_id=None)
        elif deletable is not None and info is not None and not deletable(info.name):
            res.update(error_code=TOPIC_DENIED, name=info.name if describable(info.name) else None)
        else:
            try:
                info = await submit(broker, _remove(name, tid, quota))     # the publisher deletes the logs
                res.update(name=info.name, topic_id=info.uuid)
            except AdminError as e:
                res.update(error_code=e.code, error_message=str(e) or None)
        results.append(res)
    req.throttle_ms = max(req.throttle_ms, quota.throttle_ms())
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": req.throttle_ms, "responses": results})
