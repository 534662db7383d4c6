"""ElectLeaders (key 43): move leadership back to the preferred (first assigned) replica. Only PREFERRED elections:
unclean elections (type 1) are refused, as unclean.leader.election.enable is false. Served by the controller;
other brokers forward it."""
from __future__ import annotations

from broker.topic_admin import AdminError, submit
from metadata.cluster_control import elect_preferred
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
    image = broker.topics.image
    election = getattr(body, "election_type", PREFERRED)
    if body.topic_partitions is None:        # every partition
        wanted = [(t.name, i) for t in image.topics() for i in range(t.partitions)]
    else:
        wanted = [(tp.topic, i) for tp in body.topic_partitions for i in tp.partitions]
    outcome: dict[tuple[str, int], tuple[int, str | None]] = {}
    records = []
    for name, index in wanted:
        t = image.get(name)
        if election != PREFERRED:
            outcome[(name, index)] = (ErrorCode.invalid_request, "Only preferred leader elections are supported")
        elif t is None or t.partition(index) is None:
            outcome[(name, index)] = (ErrorCode.unknown_topic_or_partition, None)
        else:
            err, record = elect_preferred(image, t, index)
            outcome[(name, index)] = (err, None)
            if record is not None:
                records.append(record)
    if records:
        try:
            await submit(broker, records)
        except AdminError as e:
            outcome = {k: (e.code, str(e)) if err == 0 else (err, msg) for k, (err, msg) in outcome.items()}
    if body.topic_partitions is None:        # Kafka lists only the partitions it changed or failed for
        outcome = {k: r for k, r in outcome.items() if r[0] != ErrorCode.election_not_needed}
    topics: dict[str, list] = {}
    for (name, index), (err, msg) in outcome.items():
        topics.setdefault(name, []).append({"partition_id": index, "error_code": err, "error_message": msg})
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": 0,
        "replica_election_results": [{"topic": n, "partition_result": ps} for n, ps in topics.items()]})
