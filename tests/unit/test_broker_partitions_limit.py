"""max.broker.partitions (KIP-578): the image's per-broker replica counts through every record that changes them
(creation, reassignment, deletion, snapshot replay), and placement that leaves brokers at the bound out."""
from __future__ import annotations

import pytest

from broker.topic_admin import AdminError, check_broker_partitions, place
from metadata.image import MetadataImage
from metadata.records import PartitionRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord
from protocol.errors import ErrorCode


def recount(image: MetadataImage) -> dict[int, int]:
    out: dict[int, int] = {}
    for t in image.topics():
        for p in t.partition_states:
            for b in p.replicas:
                out[b] = out.get(b, 0) + 1
    return out


def brokers(*ids: int) -> list:
    return [RegisterBrokerRecord(b, f"i{b}", None, [("PLAINTEXT", "h", 9000 + b)]) for b in ids]


def test_replica_counts_follow_creation_reassignment_deletion_and_snapshots():
    img = MetadataImage().apply([*brokers(1, 2, 3), TopicRecord("a", "a" * 32),
                                 PartitionRecord("a" * 32, 0, [1, 2], [1, 2], 1),
                                 PartitionRecord("a" * 32, 1, [2, 3], [2, 3], 2),
                                 TopicRecord("b", "b" * 32), PartitionRecord("b" * 32, 0, [3], [3], 3)])
    assert dict(img.replica_counts) == recount(img) == {1: 1, 2: 2, 3: 2}
    # a reassignment of a-0 from [1, 2] to [3, 2]: 3 joins, then 1 leaves
    img = img.apply([PartitionRecord("a" * 32, 0, [1, 2, 3], [1, 2], 1, 0, 1, [3], [1])])
    assert dict(img.replica_counts) == recount(img) == {1: 1, 2: 2, 3: 3}
    img = img.apply([PartitionRecord("a" * 32, 0, [2, 3], [2, 3], 2, 1, 2)])
    assert dict(img.replica_counts) == recount(img) == {2: 2, 3: 3}
    assert MetadataImage().apply(img.to_records()).replica_counts == img.replica_counts
    img = img.apply([RemoveTopicRecord("a" * 32)])
    assert dict(img.replica_counts) == recount(img) == {3: 1}
    img = img.apply([RemoveTopicRecord("b" * 32)])
    assert dict(img.replica_counts) == {}


def test_placement_leaves_full_brokers_out_and_the_check_refuses_what_does_not_fit():
    img = MetadataImage().apply([*brokers(1, 2, 3), TopicRecord("a", "a" * 32),
                                 *(PartitionRecord("a" * 32, i, [1], [1], 1) for i in range(4))])
    assert place(img, 6, 1, limit=4) and all(r != [1] for r in place(img, 6, 1, limit=4))
    check_broker_partitions(img, place(img, 8, 1, limit=4), 4)               # 4 each on brokers 2 and 3
    with pytest.raises(AdminError) as e:
        check_broker_partitions(img, place(img, 9, 1, limit=4), 4)
    assert e.value.code == ErrorCode.policy_violation and "max.broker.partitions=4" in e.value.args[0]
    with pytest.raises(AdminError):                                            # rf 3 needs broker 1 too
        check_broker_partitions(img, place(img, 1, 3, limit=4), 4)
