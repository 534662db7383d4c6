"""metadata.cluster_control.reassign: what the controller writes for AlterPartitionReassignments, against Kafka's
KRaft rules (ReplicationControlManager.changePartitionReassignment / cancelPartitionReassignment,
PartitionReassignmentReplicas, PartitionReassignmentRevert). Every result is applied to the image, and the ISR of
the partition must stay within its replicas."""
from __future__ import annotations

import uuid

from metadata.cluster_control import complete_reassignment, reassign
from metadata.image import MetadataImage
from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
from protocol.errors import ErrorCode

TOPIC_ID = uuid.UUID(int=0xBEEF).hex


def _image(replicas, isr, leader, adding=(), removing=(), brokers=(1, 2, 3, 4), fenced=()) -> MetadataImage:
    records: list = [RegisterBrokerRecord(b, f"inc-{b}", None, [("PLAINTEXT", f"b{b}", 9092)], fenced=b in fenced)
                     for b in brokers]
    records += [TopicRecord("t", TOPIC_ID),
                PartitionRecord(TOPIC_ID, 0, list(replicas), list(isr), leader, 3, 7, list(adding), list(removing))]
    return MetadataImage().apply(records)


def _apply(image: MetadataImage, target):
    err, msg, records = reassign(image, image.get("t"), 0, target)
    assert err == 0, msg
    after = image.apply(records)
    p = after.get("t").partition(0)
    assert set(p.isr) <= set(p.replicas) and (p.leader == -1 or p.leader in p.isr)
    return after, p


def test_a_move_adds_the_target_and_completes_when_the_target_is_in_sync():
    image, p = _apply(_image((1,), (1,), 1), [2, 3])
    assert (p.replicas, p.adding, p.removing, p.isr, p.leader) == ((2, 3, 1), (2, 3), (1,), (1,), 1)
    assert complete_reassignment(image, image.get("t"), 0) is None           # 2 and 3 are not in sync yet
    synced = image.apply([PartitionRecord(TOPIC_ID, 0, [2, 3, 1], [2, 3, 1], 1, 3, 9, [2, 3], [1])])
    done = synced.apply([complete_reassignment(synced, synced.get("t"), 0)]).get("t").partition(0)
    assert (done.replicas, done.isr, done.leader, done.adding, done.removing) == ((2, 3), (2, 3), 2, (), ())
    assert done.leader_epoch == 4


def test_cancel_goes_back_to_the_replicas_from_before_and_drops_the_added_ones_from_the_isr():
    image = _image((2, 3, 1), (2, 1), 1, adding=(2, 3), removing=(1,))
    _, p = _apply(image, None)
    assert (p.replicas, p.isr, p.leader, p.adding, p.removing, p.leader_epoch) == ((1,), (1,), 1, (), (), 3)


def test_cancel_moves_leadership_back_to_an_original_replica_in_sync():
    # broker 2 (being added) leads after broker 1 was fenced and came back; broker 1 is in sync again
    image = _image((2, 3, 1), (2, 1), 2, adding=(2, 3), removing=(1,))
    _, p = _apply(image, None)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((1,), (1,), 1, 4)


def test_cancel_is_refused_when_only_added_replicas_are_in_sync():
    """Going back would leave an ISR of replicas being dropped (they hold what was acknowledged): Kafka refuses it
    without unclean.leader.election.enable, with PartitionReassignmentRevert's message."""
    image = _image((2, 3, 1), (2,), 2, adding=(2, 3), removing=(1,), fenced=(1,))
    err, msg, records = reassign(image, image.get("t"), 0, None)
    assert (err, records) == (ErrorCode.invalid_replica_assignment, [])
    assert msg == "Unable to revert partition assignment for t:0 because it would require an unclean leader election."


def test_cancel_without_a_move_in_progress_is_an_error():
    image = _image((1,), (1,), 1)
    assert reassign(image, image.get("t"), 0, None)[0] == ErrorCode.no_reassignment_in_progress


def test_a_new_target_replaces_a_move_in_progress_from_the_current_replicas():
    """As KRaft's changePartitionReassignment: the current replicas (the ones being added included) are the base, so
    a replica being added that the new target leaves out is removed once the new target is in sync, and the ISR
    never names a broker that is not a replica."""
    image = _image((2, 3, 1), (2, 1), 1, adding=(2, 3), removing=(1,))
    _, p = _apply(image, [1, 4])
    assert (p.replicas, p.adding, p.removing, p.isr, p.leader) == ((1, 4, 2, 3), (4,), (2, 3), (2, 1), 1)


def test_a_new_target_equal_to_the_replicas_changes_nothing():
    image = _image((1, 2), (1, 2), 1)
    assert reassign(image, image.get("t"), 0, [1, 2]) == (0, "", [])


def test_bad_targets_are_refused():
    image = _image((1,), (1,), 1)
    for target, text in (([2, 2], "repeat a broker"), ([], "empty"), ([2, 9], "not registered")):
        err, msg, records = reassign(image, image.get("t"), 0, target)
        assert (err, records) == (ErrorCode.invalid_replica_assignment, []) and text in msg
