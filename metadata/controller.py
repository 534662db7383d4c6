"""The controller: the one writer of the metadata log. Admin handlers and the cluster's control requests are
operations (the latest image in; the records that express the change, and the caller's answer, out) that the
controller runs one at a time (`run`); it appends their records (durably), builds the next image and hands it to the
publishers, which apply it to the partition layer and the group coordinator (broker/metadata_publisher.py).

`Controller` is the interface the broker uses. `LocalController` is the one-broker implementation: in process, its
record log on local disk (metadata/metadata_log.py), synchronous. The cluster issue replaces it with a controller
whose log and lease live in the object store (conditional writes), behind the same interface.
"""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Callable, Protocol

import msgspec

from metadata.image import MetadataImage
from metadata.metadata_log import MetadataLog
from metadata.records import (TOPIC_RESOURCE, ConfigRecord, Envelope, PartitionRecord, ProducerIdsRecord,
                              RegisterBrokerRecord, TopicRecord)

log = logging.getLogger("strata.controller")

PRODUCER_ID_BLOCK = 1000
LEGACY_FILE = "__strata_metadata.json"      # the single-broker topic store before the metadata log

Publisher = Callable[[MetadataImage, MetadataImage], None]     # (previous image, new image)
Operation = Callable[[MetadataImage], "tuple[list, Any]"]      # latest image -> (records, the caller's answer)


def producer_ids_block(broker_id: int) -> Operation:
    """AllocateProducerIds as an operation: the next block after the image's, answered with its first id (Kafka's
    ProducerIdControlManager)."""
    def operation(image: MetadataImage):
        start = image.next_producer_id
        return [ProducerIdsRecord(broker_id, start + PRODUCER_ID_BLOCK)], start
    return operation


class _LegacyTopic(msgspec.Struct):
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str] = {}


class _LegacyState(msgspec.Struct):
    """`__strata_metadata.json` as the previous release wrote it."""
    topics: dict[str, _LegacyTopic] = {}
    next_producer_id_block: int = 0


class Controller(Protocol):
    epoch: int

    @property
    def image(self) -> MetadataImage: ...

    async def run(self, operation: Operation) -> Any:
        """Run `operation` against the latest image, append its records atomically, publish the resulting image and
        return its answer; operations run one at a time. Raises what the operation raises and ValueError if its
        records do not apply (nothing is written), NotControllerError when this node is not the active controller."""

    async def allocate_producer_ids(self, broker_id: int) -> int:
        """The first id of a new block of PRODUCER_ID_BLOCK producer ids for `broker_id`."""

    def add_publisher(self, publisher: Publisher) -> None: ...


class LocalController:
    epoch = 0

    def __init__(self, log_dir: Path, node_id: int):
        self.node_id = node_id
        self.log = MetadataLog(log_dir)
        self._publishers: list[Publisher] = []
        envelopes = self.log.read_all()
        self._image = MetadataImage(controller_id=node_id).apply((e.record for e in envelopes), strict=False)
        legacy = Path(log_dir) / LEGACY_FILE
        if not envelopes and legacy.exists():
            self._upgrade(legacy)
        log.info("metadata: %d record(s), %d topic(s)", self._image.offset + 1, len(self._image.topics_by_name))

    @property
    def image(self) -> MetadataImage:
        return self._image

    def add_publisher(self, publisher: Publisher) -> None:
        self._publishers.append(publisher)

    active = True

    async def run(self, operation: Operation) -> Any:
        """One broker: the operation runs and its records are appended with no await in between."""
        records, answer = operation(self._image)
        if records:
            self.append(records)
        return answer

    async def refresh(self) -> None:
        """Nothing to read: this process writes the only copy of the log."""

    def append(self, records: list) -> MetadataImage:
        """Append records the caller computed from the current image, with no await since (start-up, `run`)."""
        old = self._image
        new = old.apply(records)                 # validates: nothing is written if a record does not apply
        self.log.append([Envelope(self.epoch, r) for r in records])
        self._image = new
        for publish in self._publishers:
            publish(old, new)
        return new

    async def allocate_producer_ids(self, broker_id: int) -> int:
        return await self.run(producer_ids_block(broker_id))

    def register_broker(self, rack: str | None, endpoints: list[tuple[str, str, int]]) -> None:
        """This broker's registration, with a new incarnation id at every start (Kafka's BrokerRegistration), with
        the endpoint of each advertised listener."""
        self.append([RegisterBrokerRecord(self.node_id, uuid.uuid4().hex, rack, [list(e) for e in endpoints])])

    def _upgrade(self, legacy: Path) -> None:
        """Turn the previous release's JSON topic store into records: the same topic ids (data dirs and the remote
        tier key on them), partition counts, configs and producer-id block; then set the file aside."""
        state = msgspec.json.decode(legacy.read_bytes(), type=_LegacyState)
        records: list = []
        for t in state.topics.values():
            records.append(TopicRecord(t.name, t.topic_id))
            records += [PartitionRecord(t.topic_id, p, [self.node_id], [self.node_id], self.node_id)
                        for p in range(t.partitions)]
            records += [ConfigRecord(TOPIC_RESOURCE, t.name, k, v) for k, v in sorted(t.configs.items())]
        if state.next_producer_id_block > 0:
            records.append(ProducerIdsRecord(self.node_id, state.next_producer_id_block))
        self.append(records)
        legacy.rename(legacy.with_name(LEGACY_FILE + ".migrated"))
        log.info("upgraded %s to the metadata log: %d topic(s)", legacy.name, len(state.topics))
