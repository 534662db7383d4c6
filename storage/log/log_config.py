"""Topic-level log configuration, with Kafka's names and defaults.

Each topic config has a broker-level default (Kafka's `log.*` names) that a topic override replaces.
`LogConfig` is the resolved view a `Log` reads; it is immutable so a config change swaps the object.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class TopicConfigDef:
    name: str            # topic-level name, e.g. "segment.bytes"
    broker_name: str     # broker default it falls back to, e.g. "log.segment.bytes"
    kind: type           # int, float, str or bool
    default: object
    valid: tuple = ()    # allowed values for enums


# Order matters only for DescribeConfigs output.
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in (
    TopicConfigDef("cleanup.policy", "log.cleanup.policy", str, "delete"),
    TopicConfigDef("compression.type", "compression.type", str, "producer",
                   ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    TopicConfigDef("delete.retention.ms", "log.cleaner.delete.retention.ms", int, 86_400_000),
    TopicConfigDef("file.delete.delay.ms", "log.segment.delete.delay.ms", int, 60_000),
    TopicConfigDef("flush.messages", "log.flush.interval.messages", int, LONG_MAX),
    TopicConfigDef("flush.ms", "log.flush.interval.ms", int, LONG_MAX),
    TopicConfigDef("index.interval.bytes", "log.index.interval.bytes", int, 4096),
    TopicConfigDef("max.message.bytes", "message.max.bytes", int, 1_048_588),
    TopicConfigDef("message.timestamp.type", "log.message.timestamp.type", str, "CreateTime",
                   ("CreateTime", "LogAppendTime")),
    # how far a CreateTime timestamp may lie behind / ahead of the broker's clock (Kafka 4's defaults, KIP-937)
    TopicConfigDef("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", int, LONG_MAX),
    TopicConfigDef("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", int, 3_600_000),
    TopicConfigDef("min.insync.replicas", "min.insync.replicas", int, 1),
    TopicConfigDef("retention.bytes", "log.retention.bytes", int, -1),
    TopicConfigDef("retention.ms", "log.retention.ms", int, 604_800_000),
    TopicConfigDef("segment.bytes", "log.segment.bytes", int, 1_073_741_824),
    TopicConfigDef("segment.index.bytes", "log.index.size.max.bytes", int, 10_485_760),
    TopicConfigDef("segment.ms", "log.roll.ms", int, 604_800_000),
    TopicConfigDef("local.retention.ms", "log.local.retention.ms", int, -2),
    TopicConfigDef("local.retention.bytes", "log.local.retention.bytes", int, -2),
    TopicConfigDef("remote.storage.enable", "remote.storage.enable", bool, False),
    TopicConfigDef("remote.log.copy.disable", "remote.log.copy.disable", bool, False),
    TopicConfigDef("remote.log.delete.on.disable", "remote.log.delete.on.disable", bool, False),
    TopicConfigDef("remote.wal.enable", "remote.wal.enable", bool, False),      # KIP-1176 (Strata)
    TopicConfigDef("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", float, 0.5),
    TopicConfigDef("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", int, 0),
    TopicConfigDef("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", int, LONG_MAX),
)}


def parse_value(d: TopicConfigDef, raw: object) -> object:
    """Parse a config string as Kafka does; raises ValueError with a user-facing message."""
    if d.kind is bool:
        if isinstance(raw, bool):
            return raw
        s = str(raw).strip().lower()
        if s not in ("true", "false"):
            raise ValueError(f"Invalid value {raw} for configuration {d.name}: Expected value to be either true or false")
        return s == "true"
    if d.kind is float:
        try:
            f = float(str(raw).strip())
        except ValueError:
            raise ValueError(f"Invalid value {raw} for configuration {d.name}: Not a number of type DOUBLE") from None
        if d.name == "min.cleanable.dirty.ratio" and not 0.0 <= f <= 1.0:
            raise ValueError(f"Invalid value {f} for configuration {d.name}: Value must be between 0 and 1")
        return f
    if d.kind is int:
        try:
            v = int(str(raw).strip())
        except ValueError:
            raise ValueError(f"Invalid value {raw} for configuration {d.name}: Not a number of type LONG") from None
        if d.name in ("segment.bytes",) and v < 14:
            raise ValueError(f"Invalid value {v} for configuration {d.name}: Value must be at least 14")
        if d.name in ("index.interval.bytes", "max.message.bytes", "segment.index.bytes", "min.compaction.lag.ms",
                      "delete.retention.ms", "message.timestamp.before.max.ms",
                      "message.timestamp.after.max.ms") and v < 0:
            raise ValueError(f"Invalid value {v} for configuration {d.name}: Value must be at least 0")
        if d.name in ("segment.ms", "flush.ms", "flush.messages") and v < 1:
            raise ValueError(f"Invalid value {v} for configuration {d.name}: Value must be at least 1")
        if d.name in ("min.insync.replicas", "max.compaction.lag.ms") and v < 1:
            raise ValueError(f"Invalid value {v} for configuration {d.name}: Value must be at least 1")
        if d.name in ("retention.ms", "retention.bytes", "local.retention.ms", "local.retention.bytes") and v < -2:
            raise ValueError(f"Invalid value {v} for configuration {d.name}: Value must be at least -2")
        return v
    s = str(raw).strip()
    if d.name == "cleanup.policy":
        parts = [p.strip() for p in s.split(",") if p.strip()]
        if not parts or any(p not in ("delete", "compact") for p in parts):
            raise ValueError(f"Invalid value {raw} for configuration cleanup.policy: [{s}] is not a valid policy")
        return ",".join(parts)
    if d.valid and s not in d.valid:
        raise ValueError(f"Invalid value {raw} for configuration {d.name}: String must be one of: {', '.join(d.valid)}")
    return s


@dataclass(frozen=True)
class LogConfig:
    """Resolved per-partition log settings (attribute names are the Kafka names with '_' for '.')."""
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    segment_index_bytes: int = 10_485_760
    index_interval_bytes: int = 4096
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    cleanup_policy: str = "delete"
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    min_insync_replicas: int = 1
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_wal_enable: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX

    @classmethod
    def resolve(cls, broker_defaults: dict[str, object], overrides: dict[str, object]) -> "LogConfig":
        """Topic override, else broker default (by its `log.*` name), else Kafka's default."""
        kw = {}
        names = {f.name for f in fields(cls)}
        for d in TOPIC_CONFIGS.values():
            attr = d.name.replace(".", "_")
            if attr not in names:
                continue
            if d.name in overrides:
                kw[attr] = parse_value(d, overrides[d.name])
            elif d.broker_name in broker_defaults:
                kw[attr] = parse_value(d, broker_defaults[d.broker_name])
        return cls(**kw)

    def get(self, name: str) -> object:
        return getattr(self, name.replace(".", "_"))

    # Tiered storage (KIP-405): -2 means "same as the total retention" (Kafka's UnifiedLog.localRetentionMs/Size).
    @property
    def local_retention_ms_effective(self) -> int:
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def local_retention_bytes_effective(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes
