"""metadata.cluster_control: what the active controller decides about brokers and partitions, checked against the
rules of Kafka's KRaft controller (ClusterControlManager, ReplicationControlManager, BrokerHeartbeatManager).

The pure functions take an image and return records (or an error); every test also applies the records to the
image, so they are checked to be valid for it and to produce the intended PartitionImage / BrokerRegistration.
`ClusterControl` runs over a fake controller (it applies what is submitted) and a fake clock."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from metadata.cluster_control import (ClusterControl, alter_partition, fence_records, register_records,
                                      unfence_records)
from metadata.controller import PRODUCER_ID_BLOCK
from metadata.image import MetadataImage, PartitionImage
from metadata.records import BrokerRegistrationChangeRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from protocol.errors import ErrorCode
from fakes import Clock, append_op

TOPIC_ID = uuid.UUID(int=0xA11CE).hex


def _endpoints(b: int) -> list[tuple[str, str, int]]:
    return [("PLAINTEXT", f"broker-{b}", 9092 + b)]


def _register(b: int, fenced: bool = False, incarnation: str | None = None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(b, incarnation or f"inc-{b}", None, _endpoints(b), fenced=fenced)


def _image(brokers, partitions=(), fenced=()) -> MetadataImage:
    """Brokers registered in order (each one's epoch is the offset of its record), then topic "t" with
    `partitions`: (replicas, isr, leader, leader_epoch, partition_epoch) per partition."""
    records: list = [_register(b, fenced=b in fenced) for b in brokers]
    records.append(TopicRecord("t", TOPIC_ID))
    records += [PartitionRecord(TOPIC_ID, i, list(r), list(isr), leader, le, pe)
                for i, (r, isr, leader, le, pe) in enumerate(partitions)]
    return MetadataImage().apply(records)


def _part(image: MetadataImage, index: int = 0) -> PartitionImage:
    return image.topics_by_id[TOPIC_ID].partition(index)


def _partition_records(records) -> dict[int, PartitionRecord]:
    return {r.partition: r for r in records if isinstance(r, PartitionRecord)}


# ---- register_records -------------------------------------------------------------------------------------------

def test_new_broker_registers_fenced_with_the_record_offset_as_epoch():
    image = _image([1, 2])                                    # offsets 0, 1 (brokers), 2 (topic)
    records = register_records(image, 3, "inc-3", "rack-a", _endpoints(3))
    assert len(records) == 1
    r = records[0]
    assert isinstance(r, RegisterBrokerRecord) and r.broker_id == 3 and r.fenced
    after = image.apply(records)
    b = after.brokers[3]
    assert b.fenced and b.incarnation_id == "inc-3" and b.rack == "rack-a"
    assert b.epoch == after.offset == 3                       # the metadata offset of its RegisterBrokerRecord
    assert b.endpoint() == ("broker-3", 9095)


def test_retried_registration_with_the_same_incarnation_writes_nothing():
    image = _image([1, 2], [((1, 2), (1, 2), 1, 0, 0)])
    assert register_records(image, 1, "inc-1", None, _endpoints(1)) == []
    fenced = _image([1], fenced=[1])
    assert register_records(fenced, 1, "inc-1", None, _endpoints(1)) == []


def test_new_incarnation_of_a_leader_first_fences_the_old_one():
    # p0: broker 1 leads, the next ISR replica in assignment order is 3 (not the lower id 2)
    # p1: broker 1 follows broker 2: it only leaves the ISR
    # p2: broker 1 is not a replica: untouched
    image = _image([1, 2, 3], [((1, 3, 2), (1, 2, 3), 1, 5, 7),
                               ((2, 1, 3), (2, 1), 2, 4, 2),
                               ((2, 3), (2, 3), 2, 1, 1)])
    old_epoch = image.brokers[1].epoch
    records = register_records(image, 1, "inc-1-restarted", None, _endpoints(1))
    assert isinstance(records[0], BrokerRegistrationChangeRecord)
    assert (records[0].broker_id, records[0].broker_epoch, records[0].fenced) == (1, old_epoch, True)
    assert isinstance(records[-1], RegisterBrokerRecord) and records[-1].fenced
    changed = _partition_records(records)
    assert set(changed) == {0, 1}
    assert changed[0].leader == 3 and changed[0].leader_epoch == 6 and changed[0].partition_epoch == 8
    assert sorted(changed[0].isr) == [2, 3]
    assert changed[1].leader == 2 and changed[1].leader_epoch == 4 and changed[1].partition_epoch == 3
    assert changed[1].isr == [2]

    after = image.apply(records)
    b = after.brokers[1]
    assert b.incarnation_id == "inc-1-restarted" and b.fenced
    assert b.epoch == after.offset and b.epoch > old_epoch       # a new broker epoch: its new record's offset
    p0, p1, p2 = (_part(after, i) for i in range(3))
    assert (p0.leader, p0.leader_epoch, p0.partition_epoch, set(p0.isr)) == (3, 6, 8, {2, 3})
    assert p0.replicas == (1, 3, 2)                               # the assignment does not change
    assert (p1.leader, p1.leader_epoch, p1.partition_epoch, p1.isr) == (2, 4, 3, (2,))
    assert p2 == _part(image, 2)


# ---- fence_records ----------------------------------------------------------------------------------------------

def test_fenced_leader_moves_only_to_an_unfenced_isr_member():
    # replicas in order 1, 4, 2, 3: 4 is unfenced but out of the ISR, 2 is in the ISR but fenced: 3 must lead
    image = _image([1, 2, 3, 4], [((1, 4, 2, 3), (1, 2, 3), 1, 2, 3)], fenced=[2])
    records = fence_records(image, 1)
    assert records[0] == BrokerRegistrationChangeRecord(1, image.brokers[1].epoch, True)
    (rec,) = _partition_records(records).values()
    assert (rec.leader, rec.leader_epoch, rec.partition_epoch) == (3, 3, 4)
    after = image.apply(records)
    assert after.brokers[1].fenced and not after.brokers[3].fenced
    p = _part(after)
    assert p.leader == 3 and set(p.isr) == {2, 3} and 1 not in p.isr
    assert (p.leader_epoch, p.partition_epoch) == (3, 4)


def test_fencing_the_last_isr_member_takes_the_partition_offline_without_unclean_election():
    # broker 2 is alive and a replica, but not in the ISR: it must not become leader
    image = _image([1, 2], [((1, 2), (1,), 1, 4, 9)])
    records = fence_records(image, 1)
    (rec,) = _partition_records(records).values()
    assert rec.leader == -1 and rec.isr == [1]
    assert (rec.leader_epoch, rec.partition_epoch) == (5, 10)
    p = _part(image.apply(records))
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (-1, (1,), 5, 10)


def test_fencing_the_leader_when_every_other_isr_member_is_fenced_goes_offline():
    image = _image([1, 2, 3], [((1, 2, 3), (1, 2), 1, 0, 0)], fenced=[2])
    after = image.apply(fence_records(image, 1))
    p = _part(after)
    assert p.leader == -1 and p.leader_epoch == 1 and 1 not in p.isr and p.isr == (2,)


def test_fenced_follower_leaves_the_isr_without_a_leader_epoch_bump():
    image = _image([1, 2, 3], [((2, 1, 3), (2, 1, 3), 2, 6, 11)])
    records = fence_records(image, 1)
    (rec,) = _partition_records(records).values()
    assert (rec.leader, rec.leader_epoch, rec.partition_epoch) == (2, 6, 12)
    p = _part(image.apply(records))
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (2, 6, 12)
    assert set(p.isr) == {2, 3} and p.replicas == (2, 1, 3)


def test_fence_records_leave_unrelated_partitions_and_unknown_brokers_alone():
    image = _image([1, 2, 3], [((2, 3), (2, 3), 2, 0, 0), ((2, 1), (2,), 2, 0, 0)])
    assert fence_records(image, 1) == [BrokerRegistrationChangeRecord(1, image.brokers[1].epoch, True)]
    assert fence_records(image, 9) == []
    already = image.apply(fence_records(image, 1))
    assert fence_records(already, 1) == []                    # fenced already, in no ISR: nothing to write


# ---- unfence_records --------------------------------------------------------------------------------------------

def test_unfenced_broker_leads_the_offline_partitions_whose_isr_names_it():
    image = _image([1, 2], [((1, 2), (1,), 1, 4, 9),         # broker 1 the last ISR member
                            ((2, 1), (2,), 2, 0, 0),         # led by 2
                            ((1, 2), (1, 2), 2, 3, 3)])      # led by 2, 1 in the ISR
    offline = image.apply(fence_records(image, 1))
    assert _part(offline, 0).leader == -1
    records = unfence_records(offline, 1)
    assert records[0] == BrokerRegistrationChangeRecord(1, offline.brokers[1].epoch, False)
    changed = _partition_records(records)
    assert set(changed) == {0}
    after = offline.apply(records)
    assert not after.brokers[1].fenced
    p = _part(after, 0)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1,), 6, 11)   # offline +1, back +1
    assert _part(after, 1) == _part(offline, 1) and _part(after, 2) == _part(offline, 2)


def test_unfencing_never_elects_a_replica_outside_the_isr():
    # offline partition whose last ISR member is broker 2 (fenced): broker 1 is a replica but not in the ISR
    image = _image([1, 2], [((1, 2), (2,), -1, 3, 3)], fenced=[1, 2])
    records = unfence_records(image, 1)
    assert records == [BrokerRegistrationChangeRecord(1, image.brokers[1].epoch, False)]
    assert _part(image.apply(records)).leader == -1
    assert unfence_records(image.apply(records), 1) == []     # unfenced already: nothing


# ---- alter_partition --------------------------------------------------------------------------------------------

@pytest.fixture
def alter_image() -> MetadataImage:
    """Brokers 1, 2 unfenced, 3 fenced (registered in the order 3, 2, 1: broker 1's epoch is 2); partition 0:
    replicas 1,2,3, ISR 1,2, leader 1 at leader epoch 4, partition epoch 6."""
    return _image([3, 2, 1], [((1, 2, 3), (1, 2), 1, 4, 6)], fenced=[3])


def _alter(image, broker=1, broker_epoch=None, leader_epoch=4, partition_epoch=6, isr=(1,), topic_id=TOPIC_ID,
           index=0):
    epoch = image.brokers[broker].epoch if broker_epoch is None and broker in image.brokers else broker_epoch
    return alter_partition(image, broker, -2 if epoch is None else epoch, topic_id, index, leader_epoch,
                           partition_epoch, list(isr))


def test_alter_partition_stale_broker_epoch(alter_image):
    good = alter_image.brokers[1].epoch
    assert _alter(alter_image, broker_epoch=good + 1).error_code == ErrorCode.stale_broker_epoch
    assert _alter(alter_image, broker_epoch=good - 1).error_code == ErrorCode.stale_broker_epoch
    assert _alter(alter_image, broker=7, broker_epoch=0).error_code == ErrorCode.stale_broker_epoch
    assert _alter(alter_image, broker_epoch=good).error_code == 0


def test_alter_partition_broker_epoch_minus_one_is_stale(alter_image):
    assert _alter(alter_image, broker_epoch=-1).error_code == ErrorCode.stale_broker_epoch


def test_alter_partition_leader_epoch_checks(alter_image):
    r = _alter(alter_image, leader_epoch=3)
    assert r.error_code == ErrorCode.fenced_leader_epoch and r.record is None
    r = _alter(alter_image, leader_epoch=5)        # newer than the controller knows: it is behind (Kafka's answer)
    assert r.error_code == ErrorCode.not_controller and r.record is None


def test_alter_partition_wrong_partition_epoch(alter_image):
    r = _alter(alter_image, partition_epoch=5)
    assert r.error_code == ErrorCode.invalid_update_version and r.record is None
    assert r.partition == _part(alter_image)                  # the current state, for the leader to catch up


def test_alter_partition_cannot_add_a_fenced_broker(alter_image):
    r = _alter(alter_image, isr=(1, 2, 3))
    assert r.error_code == ErrorCode.ineligible_replica and r.record is None


def test_alter_partition_invalid_requests(alter_image):
    # from a follower (with its own valid broker epoch and the current epochs)
    assert _alter(alter_image, broker=2, isr=(2,)).error_code == ErrorCode.invalid_request
    # a broker that is not a replica, or an ISR without the leader
    assert _alter(alter_image, isr=(1, 4)).error_code == ErrorCode.invalid_request
    assert _alter(alter_image, isr=(2,)).error_code == ErrorCode.invalid_request
    assert _alter(alter_image, topic_id=uuid.UUID(int=7).hex).error_code == ErrorCode.unknown_topic_id
    assert _alter(alter_image, index=3).error_code == ErrorCode.unknown_topic_or_partition


def test_alter_partition_from_a_deposed_leader_is_fenced_by_its_epoch(alter_image):
    deposed = alter_image.apply(fence_records(alter_image, 1))   # broker 2 leads at epoch 5
    deposed = deposed.apply(unfence_records(deposed, 1))         # broker 1 is back, as a follower
    assert (_part(deposed).leader, _part(deposed).leader_epoch) == (2, 5) and not deposed.brokers[1].fenced
    # broker 1 has not seen the change yet: it still thinks it leads at epoch 4
    assert _alter(deposed, broker=1, leader_epoch=4, partition_epoch=6,
                  isr=(1, 2)).error_code == ErrorCode.fenced_leader_epoch


def test_alter_partition_shrink_bumps_the_partition_epoch_only(alter_image):
    r = _alter(alter_image, isr=(1,))
    assert r.error_code == 0 and r.record is not None
    assert (r.record.leader, r.record.leader_epoch, r.record.partition_epoch, r.record.isr) == (1, 4, 7, [1])
    p = _part(alter_image.apply([r.record]))
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch, p.replicas) == (1, (1,), 4, 7, (1, 2, 3))


def test_alter_partition_expand_with_an_unfenced_broker(alter_image):
    image = alter_image.apply(unfence_records(alter_image, 3))
    r = _alter(image, isr=(3, 1, 2))
    assert r.error_code == 0
    p = _part(image.apply([r.record]))
    assert set(p.isr) == {1, 2, 3} and (p.leader_epoch, p.partition_epoch) == (4, 7)


def test_alter_partition_to_the_same_isr_writes_nothing(alter_image):
    r = _alter(alter_image, isr=(2, 1))
    assert r.error_code == 0 and r.record is None and r.partition == _part(alter_image)


# ---- ClusterControl ---------------------------------------------------------------------------------------------

class FakeController:
    """The part of ObjectStoreController that ClusterControl uses: run applies an operation's records to the image."""

    def __init__(self, image: MetadataImage):
        self.image = image
        self.epoch = image.controller_epoch
        self.active = True
        self.batches: list[list] = []

    async def run(self, operation):
        records, answer = operation(self.image)
        if records:
            self.batches.append(list(records))
            self.image = self.image.apply(records)
        return answer


def _control(image: MetadataImage | None = None, session_timeout_ms: int = 9000):
    ctl = FakeController(image if image is not None else _image([]))
    clock = Clock()
    return ctl, clock, ClusterControl(ctl, session_timeout_ms, clock=clock)


async def _register_unfenced(cc: ClusterControl, ctl: FakeController, b: int) -> int:
    epoch = await cc.register(b, f"inc-{b}", None, _endpoints(b))
    assert await cc.heartbeat(b, epoch, ctl.image.offset, False) == (0, True, False, False)
    return epoch


async def test_register_returns_the_offset_of_the_registration_record():
    ctl, clock, cc = _control(_image([]))                    # a topic record only: offset 0
    epoch = await cc.register(1, "inc-1", None, _endpoints(1))
    assert epoch == ctl.image.offset == 1
    assert ctl.image.brokers[1].fenced and ctl.image.brokers[1].epoch == 1
    # a retry with the same incarnation writes nothing and answers the same epoch
    n = len(ctl.batches)
    assert await cc.register(1, "inc-1", None, _endpoints(1)) == 1 and len(ctl.batches) == n


async def test_heartbeat_unfences_once_caught_up_with_the_registration():
    ctl, clock, cc = _control()
    epoch = await cc.register(1, "inc-1", None, _endpoints(1))
    await cc.register(2, "inc-2", None, _endpoints(2))          # the log moves on
    assert await cc.heartbeat(1, epoch, epoch - 1, False) == (0, False, True, False)
    assert ctl.image.brokers[1].fenced
    assert await cc.heartbeat(1, epoch, epoch, False) == (0, True, False, False)
    assert not ctl.image.brokers[1].fenced
    assert await cc.heartbeat(1, epoch, ctl.image.offset, False) == (0, True, False, False)


async def test_heartbeat_with_a_wrong_broker_epoch_is_stale():
    ctl, clock, cc = _control()
    epoch = await cc.register(1, "inc-1", None, _endpoints(1))
    err, *_ = await cc.heartbeat(1, epoch + 1, ctl.image.offset, False)
    assert err == ErrorCode.stale_broker_epoch
    err, *_ = await cc.heartbeat(5, 0, ctl.image.offset, False)
    assert err == ErrorCode.stale_broker_epoch
    assert ctl.image.brokers[1].fenced                           # nothing changed


async def test_new_incarnation_fences_the_old_one_and_gets_a_new_epoch():
    ctl, clock, cc = _control()
    e1 = await _register_unfenced(cc, ctl, 1)
    await _register_unfenced(cc, ctl, 2)
    await ctl.run(append_op([PartitionRecord(TOPIC_ID, 0, [1, 2], [1, 2], 1, 0, 0)]))
    e1b = await cc.register(1, "inc-1-b", None, _endpoints(1))
    assert e1b == ctl.image.offset and e1b > e1
    assert ctl.image.brokers[1].fenced
    p = _part(ctl.image)
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2,), 1)
    err, *_ = await cc.heartbeat(1, e1, ctl.image.offset, False)   # the old incarnation's epoch
    assert err == ErrorCode.stale_broker_epoch


async def test_controlled_shutdown_fences_and_moves_leadership():
    ctl, clock, cc = _control()
    e1 = await _register_unfenced(cc, ctl, 1)
    await _register_unfenced(cc, ctl, 2)
    await ctl.run(append_op([PartitionRecord(TOPIC_ID, 0, [1, 2], [1, 2], 1, 3, 3)]))
    assert await cc.heartbeat(1, e1, ctl.image.offset, True) == (0, True, True, True)
    assert ctl.image.brokers[1].fenced
    p = _part(ctl.image)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2,), 4, 4)


async def test_allocate_producer_ids_hands_out_disjoint_increasing_blocks():
    ctl, clock, cc = _control()
    starts = [await cc.allocate_producer_ids(b) for b in (1, 2, 1)]
    assert starts == sorted(starts)
    for a, b in zip(starts, starts[1:]):
        assert b - a >= PRODUCER_ID_BLOCK                       # [a, a + block) and [b, b + block) do not overlap
    assert ctl.image.next_producer_id >= starts[-1] + PRODUCER_ID_BLOCK


async def test_cluster_control_alter_partition_applies_the_accepted_changes():
    ctl, clock, cc = _control()
    e1 = await _register_unfenced(cc, ctl, 1)
    await _register_unfenced(cc, ctl, 2)
    await ctl.run(append_op([PartitionRecord(TOPIC_ID, 0, [1, 2], [1, 2], 1, 2, 5),
                      PartitionRecord(TOPIC_ID, 1, [1, 2], [1], 1, 2, 5)]))
    ok, bad = await cc.alter_partition(1, e1, [(TOPIC_ID, 0, 2, 5, [1]), (TOPIC_ID, 1, 2, 4, [1, 2])])
    assert ok.error_code == 0 and ok.partition.isr == (1,) and ok.partition.partition_epoch == 6
    assert bad.error_code == ErrorCode.invalid_update_version
    assert _part(ctl.image, 0).isr == (1,) and _part(ctl.image, 1).isr == (1,)


async def _one_session_check(cc: ClusterControl) -> None:
    """Let the session task run at least one check (it sleeps max(timeout / 8, 50 ms) between checks); the fake
    clock does not move meanwhile, so the outcome only depends on what the test set."""
    cc.start()
    try:
        await asyncio.sleep(0.15)
    finally:
        await cc.stop()


async def test_expired_session_fences_the_broker_and_moves_its_leadership():
    ctl, clock, cc = _control(session_timeout_ms=100)
    await _register_unfenced(cc, ctl, 1)
    e2 = await _register_unfenced(cc, ctl, 2)
    await ctl.run(append_op([PartitionRecord(TOPIC_ID, 0, [1, 2], [1, 2], 1, 0, 0)]))
    clock.now += 0.09
    await cc.heartbeat(2, e2, ctl.image.offset, False)           # broker 2 keeps its session
    await _one_session_check(cc)
    assert not ctl.image.brokers[1].fenced                       # 90 ms < 100 ms: nobody expired yet
    clock.now += 0.05                                             # broker 1: 140 ms, broker 2: 50 ms
    await _one_session_check(cc)
    assert ctl.image.brokers[1].fenced and not ctl.image.brokers[2].fenced
    p = _part(ctl.image)
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2,), 1)


async def test_a_new_active_controller_gives_every_broker_a_full_session():
    ctl, clock, cc = _control(session_timeout_ms=100)
    await _register_unfenced(cc, ctl, 1)
    ctl.active = False
    clock.now += 10                                               # long past the session, but not active
    await _one_session_check(cc)
    assert not ctl.image.brokers[1].fenced
    ctl.active, ctl.epoch = True, ctl.epoch + 1                   # took over again: sessions restart now
    await _one_session_check(cc)
    assert not ctl.image.brokers[1].fenced
    clock.now += 0.2
    await _one_session_check(cc)
    assert ctl.image.brokers[1].fenced


def test_an_election_that_names_a_partition_twice_elects_it_once():
    """Kafka collects the partitions of an ElectLeaders request into a set: a partition listed twice is one
    election, not two records at one partition epoch (which the image would refuse, failing the whole request)."""
    from metadata.cluster_control import elect_preferred_operation
    image = _image([1, 2], [((1, 2), (1, 2), 2, 3, 4)])
    records, outcome = elect_preferred_operation([("t", 0), ("t", 0)])(image)
    assert len(records) == 1 and outcome == {("t", 0): 0}
    p = _part(image.apply(records))
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 4, 5)
