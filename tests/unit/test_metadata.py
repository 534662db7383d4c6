"""metadata/: the image built by applying records, the record log on disk (replay, torn tail, fencing envelope), the
local controller (validation before append, publishers, producer-id blocks) and the upgrade from the JSON store."""
from __future__ import annotations

import json
import uuid

import pytest

from fakes import append_op
from metadata.controller import LEGACY_FILE, PRODUCER_ID_BLOCK, LocalController
from metadata.image import MetadataImage
from metadata.metadata_log import MetadataLog
from metadata.records import (TOPIC_RESOURCE, ConfigRecord, Envelope, PartitionRecord, ProducerIdsRecord,
                              RegisterBrokerRecord, RemoveTopicRecord, TopicRecord)

TID = uuid.uuid4().hex



def _topic(name="t", tid=TID, partitions=2):
    return [TopicRecord(name, tid), *(PartitionRecord(tid, p, [1], [1], 1) for p in range(partitions))]


def test_image_is_built_by_applying_records_and_never_changes():
    empty = MetadataImage()
    one = empty.apply([RegisterBrokerRecord(1, "inc", "a", [("PLAINTEXT", "h", 9092)]), *_topic(),
                       ConfigRecord(TOPIC_RESOURCE, "t", "retention.ms", "5")])
    assert empty.topics() == [] and empty.offset == -1                  # the old image is untouched
    t = one.get("t")
    assert (t.partitions, t.configs, t.uuid.hex, one.offset) == (2, {"retention.ms": "5"}, TID, 4)
    assert one.by_id(uuid.UUID(TID)) is t and t.partition(1).leader == 1 and t.partition(2) is None
    assert one.brokers[1].rack == "a" and one.brokers[1].endpoint() == ("h", 9092)
    two = one.apply([PartitionRecord(TID, 1, [1, 2], [1], 1, leader_epoch=3, partition_epoch=1),
                     PartitionRecord(TID, 2, [1], [1], 1),
                     ConfigRecord(TOPIC_RESOURCE, "t", "retention.ms", None)])
    assert one.get("t").partition(1).leader_epoch == 0 and one.get("t").configs == {"retention.ms": "5"}
    assert two.get("t").partitions == 3 and two.get("t").partition(1).replicas == (1, 2)
    assert two.get("t").configs == {}
    three = two.apply([RemoveTopicRecord(TID), ProducerIdsRecord(1, 3000)])
    assert three.get("t") is None and three.by_id(uuid.UUID(TID)) is None and three.next_producer_id == 3000


@pytest.mark.parametrize("bad", [
    [PartitionRecord(TID, 0, [1], [1], 1)],                       # partition of an unknown topic
    [*_topic(), *_topic()],                                       # the same topic twice
    [TopicRecord("t", TID), PartitionRecord(TID, 1, [1], [1], 1)],   # a gap in partition numbers
    [RemoveTopicRecord(TID)],
    [ConfigRecord(TOPIC_RESOURCE, "nope", "retention.ms", "1")],
])
def test_records_that_do_not_fit_the_image_are_refused(bad):
    with pytest.raises(ValueError):
        MetadataImage().apply(bad)


@pytest.mark.parametrize("change, why", [
    ((1, 5, 1), "partition epoch 1 does not follow 1"),           # computed from the image before the last change
    ((4, 5, 1), "partition epoch 4 does not follow 1"),
    ((2, 4, 1), "leader 1 at epoch 4 after leader 1 at epoch 5"),  # a leader epoch going back
    ((2, 5, 2), "leader 2 at epoch 5 after leader 1 at epoch 5"),  # a new leader without a new epoch
])
def test_a_partition_change_must_follow_the_current_state(change, why):
    """KRaft's rule: each change of a partition carries the next partition epoch, and the leader epoch never goes back
    (and grows with every new leader), so a change decided from an older image is refused, not applied over a newer
    one."""
    image = MetadataImage().apply([*_topic(), PartitionRecord(TID, 0, [1, 2], [1, 2], 1, 5, 1)])
    partition_epoch, leader_epoch, leader = change
    with pytest.raises(ValueError, match=why):
        image.apply([PartitionRecord(TID, 0, [1, 2], [1, 2], leader, leader_epoch, partition_epoch)])
    ok = image.apply([PartitionRecord(TID, 0, [1, 2], [2], 2, 6, 2)])
    assert ok.get("t").partition(0).leader_epoch == 6


def test_producer_id_blocks_only_move_up():
    image = MetadataImage().apply([ProducerIdsRecord(1, 2000)])
    for stale in (1000, 2000):
        with pytest.raises(ValueError, match="not above 2000"):
            image.apply([ProducerIdsRecord(2, stale)])
    assert image.apply([ProducerIdsRecord(2, 3000)]).next_producer_id == 3000


def test_log_replays_and_cuts_a_torn_tail(tmp_path):
    mlog = MetadataLog(tmp_path)
    mlog.append([Envelope(0, r) for r in _topic()])
    mlog.append([Envelope(0, ConfigRecord(TOPIC_RESOURCE, "t", "a", "b"))])
    size = mlog.path.stat().st_size
    with open(mlog.path, "ab") as f:                       # kill -9 in the middle of the next append
        f.write(b"\x00\x00\x00\x40\x12\x34")
    assert [type(e.record).__name__ for e in MetadataLog(tmp_path).read_all()] == \
        ["TopicRecord", "PartitionRecord", "PartitionRecord", "ConfigRecord"]
    assert mlog.path.stat().st_size == size                 # the torn tail is gone
    data = bytearray(mlog.path.read_bytes())
    data[-1] ^= 0xFF                                        # a damaged last record fails its CRC
    mlog.path.write_bytes(bytes(data))
    assert len(MetadataLog(tmp_path).read_all()) == 3


async def test_controller_validates_appends_publishes_and_reloads(tmp_path):
    c = LocalController(tmp_path, 1)
    seen = []
    c.add_publisher(lambda old, new: seen.append((old.offset, new.offset)))
    await c.run(append_op(_topic()))
    with pytest.raises(ValueError):
        await c.run(append_op([*_topic()]))                        # exists already: nothing written, nothing published
    assert seen == [(-1, 2)]
    assert await c.allocate_producer_ids(1) == 0 and await c.allocate_producer_ids(1) == PRODUCER_ID_BLOCK
    reopened = LocalController(tmp_path, 1)
    assert reopened.image.get("t").partitions == 2 and reopened.image.next_producer_id == 2 * PRODUCER_ID_BLOCK
    assert await reopened.allocate_producer_ids(1) == 2 * PRODUCER_ID_BLOCK  # ids never repeat across restarts


async def test_upgrade_from_the_json_topic_store_keeps_ids_configs_and_producer_ids(tmp_path):
    legacy = {"topics": {"a": {"name": "a", "topic_id": TID, "partitions": 3, "configs": {"cleanup.policy": "compact"}},
                         "b": {"name": "b", "topic_id": uuid.uuid4().hex, "partitions": 1}},
              "next_producer_id_block": 5000}
    (tmp_path / LEGACY_FILE).write_text(json.dumps(legacy))
    c = LocalController(tmp_path, 7)
    a = c.image.get("a")
    assert (a.topic_id, a.partitions, a.configs) == (TID, 3, {"cleanup.policy": "compact"})
    assert a.partition(2).leader == 7 and c.image.get("b").partitions == 1
    assert await c.allocate_producer_ids(7) == 5000
    assert not (tmp_path / LEGACY_FILE).exists() and (tmp_path / (LEGACY_FILE + ".migrated")).exists()
    again = LocalController(tmp_path, 7)                   # the migrated file is not read twice
    assert [t.name for t in again.image.topics()] == ["a", "b"] and again.image.next_producer_id == 6000


def test_broker_and_group_configs_are_part_of_the_image_and_its_snapshot():
    from metadata.records import BROKER_RESOURCE, GROUP_RESOURCE
    image = MetadataImage().apply([ConfigRecord(BROKER_RESOURCE, "", "log.retention.ms", "1000"),
                                   ConfigRecord(BROKER_RESOURCE, "2", "message.max.bytes", "2000"),
                                   ConfigRecord(GROUP_RESOURCE, "g", "consumer.session.timeout.ms", "50000"),
                                   ConfigRecord(BROKER_RESOURCE, "2", "message.max.bytes", None)])
    assert dict(image.broker_configs) == {"": {"log.retention.ms": "1000"}}       # an emptied resource goes
    assert dict(image.group_configs) == {"g": {"consumer.session.timeout.ms": "50000"}}
    again = MetadataImage().apply(image.to_records())
    assert (dict(again.broker_configs), dict(again.group_configs)) == \
        (dict(image.broker_configs), dict(image.group_configs))
    with pytest.raises(ValueError):
        image.apply([ConfigRecord(99, "x", "a", "b")])


def test_replay_applies_what_older_releases_wrote_without_the_epoch_rules(tmp_path, caplog):
    """A log written before the controller checked epochs (the previous release's JSON migration wrote a zero
    producer-id block; its controller could write two changes at one partition epoch) still replays, with a warning:
    the rules are enforced where records are generated, as Kafka validates in the controller, not on replay."""
    mlog = MetadataLog(tmp_path)
    mlog.append([Envelope(0, r) for r in _topic()])
    mlog.append([Envelope(0, ProducerIdsRecord(1, 0)),
                 Envelope(0, PartitionRecord(TID, 0, [1, 2], [1, 2], 1, 0, 0))])     # epoch 0 again
    c = LocalController(tmp_path, node_id=1)
    assert c.image.get("t").partition(0).replicas == (1, 2)
    assert "applied as written" in caplog.text
