"""Writes and reads of the topics the broker keeps for itself (`__consumer_offsets`, `__remote_log_metadata`): one
writer/reader for both, through the partition layer, so they are replicated like any topic and their users (the
group coordinator, the remote log metadata manager) never hold a log. It satisfies storage.tiered's InternalTopic
protocol."""
from __future__ import annotations

from typing import Iterator

from protocol.record_batch import split_and_validate
from protocol.records import Record, records_from


class InternalTopicError(OSError):
    """An append to an internal topic failed; `error_code` is the Kafka error the log answered."""

    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = error_code


class InternalTopics:
    def __init__(self, replicas):
        self.replicas = replicas

    def ensure(self, name: str, partitions: int, configs: dict[str, str]) -> int:
        """Create the topic on first use; returns its partition count (an existing topic keeps its own)."""
        return self.replicas.ensure_internal_topic(name, partitions, configs).partitions

    def max_message_bytes(self, name: str, partition: int) -> int:
        return self._partition(name, partition).config.max_message_bytes

    def append(self, name: str, partition: int, batch: bytes) -> int:
        """Append one batch the broker built; returns its base offset. KeyError when the partition is not hosted
        here, InternalTopicError when the log refuses it."""
        part = self._partition(name, partition)
        buf = bytearray(batch)
        headers = split_and_validate(buf, max(part.config.max_message_bytes, len(buf)))
        result = part.append_records_to_leader(buf, headers, required_acks=1)
        if result.error_code:
            raise InternalTopicError(result.error_code, f"append to {name}-{partition} failed with error "
                                                        f"{result.error_code}: {result.error_message}")
        return result.base_offset

    def read(self, name: str, partition: int, chunk_bytes: int = 1 << 20) -> Iterator[list[Record]]:
        """Every record from the log start to the log end, a list per read of about `chunk_bytes`; a log
        start that moves meanwhile (retention, the cleaner) is followed. Control batches are skipped."""
        part = self.replicas.get(name, partition)
        if part is None:
            return
        offset = part.log_start_offset
        while offset < part.log_end_offset:      # to the log end, as Kafka's loaders: a new leader's HW may lag
            try:
                views, _ = part.read(offset, chunk_bytes, min_one_message=True, fetch_only_committed=False)
            except Exception:
                if part.log_start_offset > offset:
                    offset = part.log_start_offset
                    continue
                raise
            records, nxt = records_from(views, offset)
            if nxt <= offset:
                break
            offset = nxt
            yield records

    def _partition(self, name: str, partition: int):
        part = self.replicas.get(name, partition)
        if part is None:
            raise KeyError(f"{name}-{partition} is not hosted by this broker")
        return part
