"""One module per API key. Each declares API_KEY, the advertised VERSIONS range, the DECODABLE range it can parse, and
`handle(broker, request)`; ApiVersions is derived from these declarations (as franz-go's kfake does).

`handle` returns the encoded response body (bytes or a list of chunks), None for no response (acks=0), or an
awaitable of either when it has to wait (Fetch long-polling).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

_MODULES = (
    "produce", "fetch", "list_offsets", "metadata", "api_versions", "create_topics", "delete_topics",
    "delete_records", "init_producer_id", "describe_configs", "incremental_alter_configs", "create_partitions",
    "describe_cluster",
    "find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group", "offset_commit", "offset_fetch",
    "list_groups", "describe_groups", "delete_groups", "offset_delete",
    "consumer_group_heartbeat", "consumer_group_describe",
)


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    frame: bytearray          # the whole request (without the 4-byte size); writable so batches are rewritten in place
    body_offset: int          # where the body starts in frame
    flexible: bool
    client_host: str | None = None   # "/ip" as Kafka shows it in DescribeGroups

    def readonly(self) -> memoryview:
        """kio's native reader rejects writable buffers."""
        return memoryview(self.frame).toreadonly()


def load_handlers() -> dict[int, object]:
    handlers = {}
    for name in _MODULES:
        mod = importlib.import_module(f"broker.handlers.{name}")
        handlers[mod.API_KEY] = mod
    return handlers
