"""The hand-written MetadataResponse encoder gives the bytes kio's generic encoder gives, for every version, and the
error counts Kafka's MetadataResponse.errorCounts gives."""
import uuid

import pytest

from broker.handlers import metadata
from metadata.image import PartitionImage, TopicImage
from protocol import kio_codec
from protocol.errors import ErrorCode

TOPIC = TopicImage("orders", uuid.uuid4().hex, (PartitionImage((1, 2, 3), (1, 3), 1, 7),
                                                PartitionImage((2, 3, 1), (2,), 2, 0),
                                                PartitionImage((3,), (), -1, 4)))
INTERNAL = TopicImage("__consumer_offsets", uuid.uuid4().hex, (PartitionImage((1,), (1,), 1, 0),))
MISSING_ID = uuid.uuid4()
BROKERS = [(1, "127.0.0.1", 9092, None), (2, "broker-2", 9093, "rack-b")]
TOPICS = [(0, TOPIC.name, TOPIC, None), (0, INTERNAL.name, INTERNAL, None),
          (ErrorCode.unknown_topic_or_partition, "nope", None, None)]


def kio_bytes(v: int, topics) -> kio_codec.EncodedResponse:
    entries = []
    for error, name, info, topic_id in topics:
        if info is None:
            entries.append({"error_code": error, "name": name, "topic_id": topic_id, "partitions": []})
            continue
        parts = [{"error_code": 0, "partition_index": i, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                  "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr), "offline_replicas": []}
                 for i, p in enumerate(info.partition_states)]
        entries.append({"error_code": 0, "name": info.name, "topic_id": info.uuid,
                        "is_internal": info.name.startswith("__"), "partitions": parts,
                        "topic_authorized_operations": -2147483648})
    return kio_codec.encode_response(3, v, {
        "throttle_time": 0, "cluster_id": "strata-test", "controller_id": 2, "topics": entries,
        "brokers": [{"node_id": n, "host": h, "port": p, "rack": r} for n, h, p, r in BROKERS],
        "cluster_authorized_operations": -2147483648})


@pytest.mark.parametrize("v", range(0, 13))
def test_same_bytes_and_error_counts_as_kio(v):
    topics = TOPICS + ([(ErrorCode.unknown_topic_id, None, None, MISSING_ID)] if v >= 12 else [])
    ours = metadata.encode_response(v, BROKERS, "strata-test", 2, topics)
    expected = kio_bytes(v, topics)
    assert bytes(ours) == bytes(expected)
    assert ours.error_counts == expected.error_counts
    again = metadata.encode_response(v, BROKERS, "strata-test", 2, topics)     # from the partitions cache
    assert bytes(again) == bytes(expected)


def test_a_changed_image_is_encoded_anew():
    first = metadata.encode_response(12, BROKERS, "strata-test", 2, [(0, TOPIC.name, TOPIC, None)])
    moved = TopicImage(TOPIC.name, TOPIC.topic_id, (PartitionImage((1, 2, 3), (2, 3), 2, 8),) +
                       TOPIC.partition_states[1:])
    second = metadata.encode_response(12, BROKERS, "strata-test", 2, [(0, moved.name, moved, None)])
    assert bytes(second) == bytes(kio_bytes(12, [(0, moved.name, moved, None)]))
    assert bytes(first) != bytes(second)
