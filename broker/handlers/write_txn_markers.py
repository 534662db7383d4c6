"""WriteTxnMarkers (key 27): a transaction coordinator's COMMIT/ABORT markers for the partitions this broker leads
(broker/transactions/markers.write_markers), answered once each is replicated (acks=all), as Kafka does. Sent only
by brokers (Kafka advertises it on the broker listener too)."""
from __future__ import annotations

from broker.security.authorization import ALTER, CLUSTER_ACTION, CLUSTER_DENIED, authorize_cluster
from broker.transactions.markers import write_markers
from protocol import kio_codec

API_KEY = 27
VERSIONS = (1, 1)
DECODABLE = (1, 1)


async def handle(broker, req):
    v = req.api_version
    body = kio_codec.decode_request(API_KEY, v, req.readonly(), req.body_offset)
    markers = [(m.producer_id, m.producer_epoch, bool(m.transaction_result), m.coordinator_epoch,
                [(t.name, p) for t in m.topics for p in t.partition_indexes]) for m in body.markers]
    if not authorize_cluster(broker, req, ALTER) and not authorize_cluster(broker, req, CLUSTER_ACTION):
        # Kafka: ALTER or CLUSTER_ACTION on the cluster, else every partition CLUSTER_AUTHORIZATION_FAILED
        return kio_codec.encode_response(API_KEY, v, {"markers": [
            {"producer_id": pid, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "error_code": CLUSTER_DENIED}
                                           for tt, p in parts if tt == t]}
                for t in dict.fromkeys(t for t, _ in parts)]}
            for pid, _, _, _, parts in markers]})
    results = await write_markers(broker.replicas, broker.groups, markers,
                                  broker.transactions.request_timeout_ms / 1000)
    out = []
    for (pid, *_), errors in zip(markers, results):
        by_topic: dict[str, list] = {}
        for (topic, p), err in errors.items():
            by_topic.setdefault(topic, []).append({"partition_index": p, "error_code": err})
        out.append({"producer_id": pid, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return kio_codec.encode_response(API_KEY, v, {"markers": out})
