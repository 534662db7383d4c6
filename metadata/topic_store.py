"""Topics, partition counts, topic ids and config overrides, persisted in one JSON file in the log dir.

A single broker needs no metadata log yet; the cluster issue replaces this file with the object-store-backed
metadata log. Writes are atomic (temp file, fsync, rename) so a kill -9 leaves the old or the new state.
"""
from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import msgspec

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
PRODUCER_ID_BLOCK = 1000


class TopicInfo(msgspec.Struct):
    name: str
    topic_id: str                  # UUID hex
    partitions: int
    configs: dict[str, str] = {}

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)


class _State(msgspec.Struct):
    topics: dict[str, TopicInfo] = {}
    next_producer_id_block: int = 0


def topic_name_error(name: str | None) -> str | None:
    """Kafka's Topic.validate: None when legal, else the reason."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
    if not LEGAL_TOPIC.match(name):
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


class TopicStore:
    def __init__(self, log_dir: Path):
        self.path = log_dir / "__strata_metadata.json"
        log_dir.mkdir(parents=True, exist_ok=True)
        self._state = msgspec.json.decode(self.path.read_bytes(), type=_State) if self.path.exists() else _State()
        self._by_id = {t.uuid: t for t in self._state.topics.values()}
        self._pid_next = self._pid_end = 0

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(msgspec.json.encode(self._state))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def topics(self) -> list[TopicInfo]:
        return list(self._state.topics.values())

    def get(self, name: str) -> TopicInfo | None:
        return self._state.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        t = TopicInfo(name=name, topic_id=uuid.uuid4().hex, partitions=partitions, configs=dict(configs))
        self._state.topics[name] = t
        self._by_id[t.uuid] = t
        self._save()
        return t

    def delete(self, name: str) -> None:
        t = self._state.topics.pop(name)
        self._by_id.pop(t.uuid, None)
        self._save()

    def set_partitions(self, name: str, count: int) -> None:
        self._state.topics[name].partitions = count
        self._save()

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self._state.topics[name].configs = dict(configs)
        self._save()

    def next_producer_id(self) -> int:
        """Producer ids come from persisted blocks, so ids stay unique across restarts without a write per id."""
        if self._pid_next >= self._pid_end:
            start = self._state.next_producer_id_block
            self._state.next_producer_id_block = start + PRODUCER_ID_BLOCK
            self._save()
            self._pid_next, self._pid_end = start, start + PRODUCER_ID_BLOCK
        pid = self._pid_next
        self._pid_next += 1
        return pid
