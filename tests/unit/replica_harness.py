"""A ReplicaManager for unit tests of what sits on the partition layer (groups, tiered storage), without a broker.

Topics come from a small registry kept per log dir for the test process (a reopened manager over the same dir finds
them, as a broker finds them in its metadata image), and internal topics are created through it the way the
controller and the metadata publisher create them in a broker."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from metadata.image import PartitionImage
from replication.replica_manager import ReplicaManager


@dataclass
class TopicInfo:
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)

    @property
    def partition_states(self) -> tuple[PartitionImage, ...]:
        """Every partition led by node 1 (BrokerConfig's default node.id), the only replica."""
        return (PartitionImage((1,), (1,), 1),) * self.partitions

    def partition(self, index: int) -> PartitionImage | None:
        return self.partition_states[index] if 0 <= index < self.partitions else None


class TopicRegistry:
    def __init__(self):
        self._topics: dict[str, TopicInfo] = {}

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self._topics.values() if t.uuid == topic_id), None)

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        t = self._topics[name] = TopicInfo(name, uuid.uuid4().hex, partitions, dict(configs))
        return t

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self._topics[name].configs = dict(configs)

    def delete(self, name: str) -> None:
        del self._topics[name]


_REGISTRIES: dict[Path, TopicRegistry] = {}


def open_replicas(config) -> ReplicaManager:
    """A ReplicaManager over config.log_dir (not started: call startup())."""
    topics = _REGISTRIES.setdefault(Path(config.log_dir).resolve(), TopicRegistry())
    replicas = ReplicaManager(config, topics)

    def create_topic(name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        info = topics.create(name, partitions, configs)
        replicas.apply_topic(info, None)
        return info
    replicas.create_topic = create_topic
    return replicas
