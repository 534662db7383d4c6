"""The high watermark survives a restart (issue 22, fault 7): the ReplicaManager writes every partition's high
watermark to `replication-offset-checkpoint` in Kafka's format, and a replica opened at start-up starts from it, not
from its log end. A restarted follower used to take its whole log as committed and serve KIP-392 consumers records
the cluster had not committed (or that a new leader would truncate)."""
from __future__ import annotations

import uuid

from broker.config import BrokerConfig
from metadata.image import MetadataImage
from metadata.metadata_cache import MetadataCache
from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
from protocol.record_batch import build_batch, split_and_validate
from protocol.records import iter_all_records
from replication.replica_manager import ReplicaManager
from storage.log.offset_checkpoint import REPLICATION_OFFSET_CHECKPOINT, read_offsets, write_offsets

TOPIC_ID = uuid.UUID(int=0xC0FFEE).hex


def _image(leader: int, leader_epoch: int) -> MetadataImage:
    records = [RegisterBrokerRecord(b, f"inc-{b}", None, [("PLAINTEXT", "localhost", 9090 + b)]) for b in (1, 2)]
    records += [TopicRecord("t", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, [1, 2], [1, 2], leader, leader_epoch, 0)]
    return MetadataImage().apply(records)


def _replicas(tmp_path, image: MetadataImage) -> ReplicaManager:
    replicas = ReplicaManager(BrokerConfig({"log.dirs": str(tmp_path / "logs"), "node.id": "1"}), MetadataCache(image))
    replicas.startup()
    return replicas


def test_a_restarted_follower_serves_only_up_to_the_checkpointed_high_watermark(tmp_path):
    leader = _replicas(tmp_path, _image(leader=1, leader_epoch=0))
    part = leader.get("t", 0)
    for i in range(10):
        buf = bytearray(build_batch([(None, b"v%d" % i)]))
        assert part.append_records_to_leader(buf, split_and_validate(buf, 10**6), required_acks=1).error_code == 0
    part.update_follower_fetch_state(2, 6, 0.0)                  # broker 2 has 6 of the 10 records
    assert (part.high_watermark, part.log_end_offset) == (6, 10)
    leader.shutdown()                                            # writes the checkpoint (as the periodic task does)
    assert read_offsets(tmp_path / "logs" / REPLICATION_OFFSET_CHECKPOINT) == {("t", 0): 6}

    # broker 2 took over while this one was down; this one comes back as its follower
    follower = _replicas(tmp_path, _image(leader=2, leader_epoch=1))
    part = follower.get("t", 0)
    assert not part.is_leader and part.log_end_offset == 10
    assert part.high_watermark == 6                              # not 10
    views, _ = part.read(0, 1 << 20, min_one_message=True)       # a consumer reading from this follower (KIP-392)
    assert [r.offset for v in views for r in iter_all_records(v)] == list(range(6))
    follower.shutdown()


def test_the_checkpoint_file_is_kafkas_and_a_damaged_one_is_ignored(tmp_path):
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    write_offsets(path, {("a.b-c", 3): 17, ("t", 0): 5})
    assert path.read_text() == "0\n2\na.b-c 3 17\nt 0 5\n"
    assert read_offsets(path) == {("a.b-c", 3): 17, ("t", 0): 5}
    assert read_offsets(tmp_path / "missing") == {}
    path.write_text("0\n3\nt 0 5\n")                             # fewer entries than the header says
    assert read_offsets(path) == {}
    path.write_text("garbage")
    assert read_offsets(path) == {}
