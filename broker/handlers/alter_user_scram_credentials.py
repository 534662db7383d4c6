"""AlterUserScramCredentials (key 51): create, replace and delete users' SCRAM credentials through the controller
(metadata/scram_control.py), which keeps only the keys derived from the salted password the client sent."""
from __future__ import annotations

from broker.security.authorization import authorize
from broker.topic_admin import AdminError, submit
from metadata.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata.scram_control import ScramDeletion, ScramUpsertion, alter_credentials
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 51
VERSIONS = (0, 0)
DECODABLE = (0, 0)
FORWARDED_TO_CONTROLLER = True


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    users = sorted({a.name for a in (*body.deletions, *body.upsertions)})
    if not authorize(broker, req, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = [(u, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.") for u in users]
    else:
        deletions = [ScramDeletion(d.name, int(d.mechanism)) for d in body.deletions]
        upsertions = [ScramUpsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                                     bytes(u.salted_password)) for u in body.upsertions]
        try:
            results = await submit(broker, alter_credentials(deletions, upsertions))
        except AdminError as e:
            results = [(u, e.code, str(e)) for u in users]
    return kio_codec.encode_response(API_KEY, v, {"throttle_time": 0, "results": [
        {"user": user, "error_code": code, "error_message": message} for user, code, message in results]})
