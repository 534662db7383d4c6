"""ElectLeaders (key 43): move leadership back to the preferred (first assigned) replica. Only PREFERRED elections:
unclean elections (type 1) are refused, as unclean.leader.election.enable is false. Served by the controller;
other brokers forward it."""
from __future__ import annotations

from broker.topic_admin import AdminError, submit
from metadata.cluster_control import elect_preferred_operation, partitions_of
from protocol import kio_codec
from protocol.errors import ErrorCode

API_KEY = 43
VERSIONS = (0, 2)
DECODABLE = (0, 2)
FORWARDED_TO_CONTROLLER = True     # other brokers pass it on (socket_server)
PREFERRED = 0


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    election = getattr(body, "election_type", PREFERRED)
    if body.topic_partitions is None:
        wanted = None                         # every partition
    else:
        wanted = [(tp.topic, i) for tp in body.topic_partitions for i in tp.partitions]

    top_error = 0
    try:
        if election != PREFERRED:
            outcome = {k: (ErrorCode.invalid_request, "Only preferred leader elections are supported")
                       for k in partitions_of(broker.topics.image, wanted)}
        else:
            outcome = {k: (err, None) for k, err in (await submit(broker, elect_preferred_operation(wanted))).items()}
    except AdminError as e:                  # NOT_CONTROLLER: for each partition asked for, or for the request
        top_error, outcome = (e.code, {}) if wanted is None else (0, {k: (e.code, str(e)) for k in wanted})
    if body.topic_partitions is None:        # Kafka lists only the partitions it changed or failed for
        outcome = {k: r for k, r in outcome.items() if r[0] != ErrorCode.election_not_needed}
    topics: dict[str, list] = {}
    for (name, index), (err, msg) in outcome.items():
        topics.setdefault(name, []).append({"partition_id": index, "error_code": err, "error_message": msg})
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": top_error,
        "replica_election_results": [{"topic": n, "partition_result": ps} for n, ps in topics.items()]})
