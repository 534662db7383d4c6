"""AlterClientQuotas (key 49): set and remove client quotas through the controller (metadata/quota_control.py,
Kafka's ClientQuotaControlManager); validate_only answers without writing. Needs ALTER_CONFIGS on the cluster, as in
Kafka's ControllerApis."""
from __future__ import annotations

from broker.security.authorization import CLUSTER_DENIED, DENIED_MESSAGE, authorize_cluster
from broker.topic_admin import AdminError, submit
from metadata.acls import AclOperation
from metadata.quota_control import QuotaAlteration, alter_quotas
from protocol import kio_codec

API_KEY = 49
VERSIONS = (0, 1)
DECODABLE = (0, 1)
FORWARDED_TO_CONTROLLER = True


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    alterations = [QuotaAlteration([(e.entity_type, e.entity_name) for e in entry.entity],
                                   [(op.key, None if op.remove else float(op.value)) for op in entry.ops])
                   for entry in body.entries]
    if not authorize_cluster(broker, req, AclOperation.ALTER_CONFIGS):
        # Kafka's getErrorResponse: every entry, as sent, with the error
        results = [(a.entity, CLUSTER_DENIED, DENIED_MESSAGE[CLUSTER_DENIED]) for a in alterations]
    else:
        try:
            results = await submit(broker, alter_quotas(alterations, bool(body.validate_only)))
        except AdminError as e:
            results = [(a.entity, e.code, str(e)) for a in alterations]
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": message,
         "entity": [{"entity_type": t, "entity_name": n} for t, n in entity]} for entity, code, message in results]})
