"""ElectLeaders (key 43): move leadership back to the preferred (first assigned) replica. Only PREFERRED elections:
an unclean election (type 1) is refused for a partition without a leader, as unclean.leader.election.enable is
false; for one with a leader it is not needed (ELECTION_NOT_NEEDED, as Kafka answers). Served by the controller;
other brokers forward it."""
from __future__ import annotations

from broker.security.authorization import ALTER, CLUSTER_DENIED, DENIED_MESSAGE, authorize_cluster
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
        if not authorize_cluster(broker, req, ALTER):     # Kafka: ALTER on the cluster, the error on every partition
            raise AdminError(CLUSTER_DENIED, DENIED_MESSAGE[CLUSTER_DENIED])
        if election != PREFERRED:
            outcome = {k: _unclean(broker.topics.image, *k) for k in partitions_of(broker.topics.image, wanted)}
        else:
            outcome = {k: (err, None) for k, err in (await submit(broker, elect_preferred_operation(wanted))).items()}
    except AdminError as e:                  # NOT_CONTROLLER: for each partition asked for, or for the request
        top_error, outcome = (e.code, {}) if wanted is None else (0, {k: (e.code, str(e)) for k in wanted})
        if e.code == CLUSTER_DENIED:         # ElectLeadersRequest.getErrorResponse: at the top level too
            top_error = e.code
    if body.topic_partitions is None:        # Kafka lists only the partitions it changed or failed for
        outcome = {k: r for k, r in outcome.items() if r[0] != ErrorCode.election_not_needed}
    topics: dict[str, list] = {}
    for (name, index), (err, msg) in outcome.items():
        if err == ErrorCode.unknown_topic_or_partition and msg is None:     # Kafka's controller's words
            msg = f"No such topic as {name}" if broker.topics.get(name) is None else \
                f"No such partition as {name}-{index}"
        topics.setdefault(name, []).append({"partition_id": index, "error_code": err, "error_message": msg})
    return kio_codec.encode_response(API_KEY, v, {
        "throttle_time": 0, "error_code": top_error,
        "replica_election_results": [{"topic": n, "partition_result": ps} for n, ps in topics.items()]})


def _unclean(image, name: str, index: int) -> tuple[int, str | None]:
    """An UNCLEAN election's outcome for one partition: Kafka's ReplicationControlManager answers
    ELECTION_NOT_NEEDED while the partition has a leader; Strata never elects outside the ISR."""
    t = image.get(name)
    p = t.partition(index) if t is not None else None
    if p is None:
        return ErrorCode.unknown_topic_or_partition, None
    if p.leader >= 0:
        return ErrorCode.election_not_needed, None
    return ErrorCode.invalid_request, "Unclean leader elections are not supported"
