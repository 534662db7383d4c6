"""Option parsing and validation, with the names, defaults and error messages of Spark's Kafka source and sink
(KafkaSourceProvider), plus Strata's `strata.*` options for direct reads from the object store.

Everything is checked here, on the driver, when Spark asks the data source for a reader or writer, so a wrong
combination fails the query before any task runs. The parsed options are plain frozen dataclasses: they are
pickled to every executor with the reader.
"""
from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Mapping

log = logging.getLogger("strata.spark")

EARLIEST, LATEST = -2, -1            # Kafka's ListOffsets sentinels, as Spark's JSON offsets use them
STORE_PREFIX = "strata.store."
KAFKA_PREFIX = "kafka."
STRATEGIES = ("assign", "subscribe", "subscribepattern")
_STRATEGY_NAMES = "assign, subscribe, subscribePattern"

# Kafka options Spark refuses because the connector owns them (KafkaSourceProvider.validateGeneralOptions).
_FORBIDDEN_READ = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
                         "'startingoffsets' to 'earliest' or 'latest' to specify where to start.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported, as keys are always read as byte arrays.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported, as values are always read as byte "
                          "arrays.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported, as the source does not commit any "
                          "offsets (they live in the checkpoint).",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported.",
}
_FORBIDDEN_WRITE = {
    "key.serializer": "Kafka option 'key.serializer' is not supported, as keys are always written as byte arrays.",
    "value.serializer": "Kafka option 'value.serializer' is not supported, as values are always written as byte "
                        "arrays.",
}
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
DEFAULT_MAX_TRIGGER_DELAY = "15m"
# KafkaSourceProvider.CUSTOM_GROUP_ID_ERROR_MESSAGE, for librdkafka consumers (assigned, never in a group)
_CUSTOM_GROUP_ID = ("Kafka option 'kafka.group.id' has been set on this query, it is not recommended to set this "
                    "option. Every consumer of the query (and of any other query or source with the same group id) "
                    "uses it; the connector never joins the group and never commits offsets, but group-based "
                    "quotas and ACLs apply to all of them together.")


class StrataOptionError(ValueError):
    """A wrong option or option combination (Spark's IllegalArgumentException for the Kafka source)."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends: `kind` is 'earliest', 'latest', 'offsets' (JSON with -2/-1) or 'timestamp'
    (one timestamp for every partition, or JSON per partition)."""
    kind: str
    offsets: tuple = ()          # ((topic, partition, offset or timestamp), ...) for 'offsets' / per-partition ts
    timestamp: int | None = None  # global timestamp (startingTimestamp / endingTimestamp)

    def per_partition(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self.offsets}


@dataclass(frozen=True)
class ClientOptions:
    """What every client of the connector needs (driver and executors)."""
    bootstrap: str
    kafka_conf: tuple = ()       # (name, value) pairs of kafka.* options, prefix stripped
    store_url: str | None = None
    store_options: tuple = ()    # (open_object_store name, value) pairs from strata.store.*
    broker_timeout_ms: int = 30_000
    fetch_offset_retries: int = 3          # fetchOffset.numRetries: attempts at an offset lookup
    fetch_offset_retry_interval_ms: int = 10   # fetchOffset.retryIntervalMs: pause between them
    read_committed: bool = False           # kafka.isolation.level=read_committed (kept out of kafka_conf)

    def conf(self, **extra) -> dict:
        base = {"bootstrap.servers": self.bootstrap, "broker.address.family": "v4"}
        base.update(dict(self.kafka_conf))
        base.update(extra)
        return base


@dataclass(frozen=True)
class ReadOptions:
    client: ClientOptions
    strategy: str                # 'assign' | 'subscribe' | 'subscribepattern'
    topics: tuple = ()           # subscribe
    pattern: str | None = None   # subscribePattern
    assign: tuple = ()           # ((topic, partition), ...)
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    group_id_prefix: str | None = None   # groupIdPrefix
    group_id: str | None = None          # kafka.group.id
    query_group_id: str | None = None    # <prefix>-<uuid> of one query (with_group_id)
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    direct_read: bool = True
    chunk_bytes: int = 8 << 20
    filter_pushdown: bool = False    # strata.filterPushdown: narrow the planned ranges by offset/partition/timestamp


@dataclass(frozen=True)
class WriteOptions:
    client: ClientOptions
    topic: str | None = None
    producer_conf: dict = field(default_factory=dict)
    flush_timeout_ms: int = 300_000


# ---- helpers ----------------------------------------------------------------------------------------------------
_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def time_string_ms(name: str, raw) -> int:
    """Spark's JavaUtils.timeStringAsMs: an integer with an optional unit (us, ms, s, m, min, h, d), ms without."""
    m = re.fullmatch(r"(-?[0-9]+)([a-z]+)?", str(raw).strip().lower())
    if m is None or (m.group(2) and m.group(2) not in _TIME_UNITS):
        raise StrataOptionError(f"Invalid value '{raw}' for option '{name}': time must be specified as seconds (s), "
                                "milliseconds (ms), microseconds (us), minutes (m or min), hour (h), or day (d). "
                                "E.g. 50s, 100ms, or 250us.")
    v = int(int(m.group(1)) * _TIME_UNITS[m.group(2) or "ms"])
    if v < 0:
        raise StrataOptionError(f"Invalid value '{raw}' for option '{name}', must not be negative")
    return v


def _integer(opts: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    """An integer option of at least `minimum` (0: non-negative, 1: positive), `default` when absent."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        v = int(str(raw).strip())
    except ValueError:
        v = minimum - 1
    if v < minimum:
        kind = "non-negative" if minimum == 0 else "positive"
        raise StrataOptionError(f"Invalid value '{raw}' for option '{name}', must be a {kind} integer")
    return v


def _non_negative(opts: Mapping[str, str], name: str, default: int) -> int:
    return _integer(opts, name, default, 0)


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise StrataOptionError(f"Invalid value '{raw}' for option '{name}', must be true or false")


def _positive(opts: Mapping[str, str], name: str, default: int | None) -> int | None:
    return _integer(opts, name, default, 1)


def _client(opts: Mapping[str, str], forbidden: dict[str, str]) -> ClientOptions:
    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap or not str(bootstrap).strip():
        raise StrataOptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    kafka_conf = []
    store_options = []
    for name, value in opts.items():
        if name.startswith(KAFKA_PREFIX) and name != "kafka.bootstrap.servers":
            key = name[len(KAFKA_PREFIX):]
            if key in forbidden:
                raise StrataOptionError(forbidden[key])
            kafka_conf.append((key, str(value)))
        elif name.startswith(STORE_PREFIX) and name != STORE_PREFIX + "url":
            store_options.append((name[len(STORE_PREFIX):].replace(".", "_"), str(value)))
    url = opts.get(STORE_PREFIX + "url")
    if url is not None and not str(url).strip():
        raise StrataOptionError(f"Option '{STORE_PREFIX}url' is empty")
    if url is not None and not re.match(r"^(file|s3)://", str(url).strip()):
        raise StrataOptionError(f"Invalid value '{url}' for option '{STORE_PREFIX}url': expected file:///path, "
                                "file://./relative/path or s3://bucket[/prefix]")
    return ClientOptions(str(bootstrap).strip(), tuple(sorted(kafka_conf)), str(url).strip() if url else None,
                         tuple(sorted(store_options)),
                         _positive(opts, "strata.brokerTimeoutMs", 30_000),
                         _positive(opts, "fetchOffset.numRetries", 3),
                         _non_negative(opts, "fetchOffset.retryIntervalMs", 10))


def _isolation(client: ClientOptions) -> ClientOptions:
    """`kafka.isolation.level` of a read (Spark passes it to its consumers and to the AdminClient's ListOffsets):
    read_uncommitted (the default, as in Spark: not librdkafka's read_committed) or read_committed. It is taken out
    of the client properties: the connector sets it on the consumers that need it (the AdminClient would warn)."""
    conf = dict(client.kafka_conf)
    raw = conf.pop("isolation.level", None)
    if raw is None:
        return client
    level = str(raw).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise StrataOptionError(f"Invalid value {raw} for configuration isolation.level (option "
                                f"'kafka.isolation.level'): String must be one of: {', '.join(ISOLATION_LEVELS)}")
    return replace(client, kafka_conf=tuple(sorted(conf.items())), read_committed=level == "read_committed")


def _strategy(opts: Mapping[str, str]) -> dict:
    given = [s for s in STRATEGIES if s in opts]
    if not given:
        raise StrataOptionError("One of the following options must be specified for Kafka source: "
                                f"{_STRATEGY_NAMES}. See the docs for more details.")
    if len(given) > 1:
        raise StrataOptionError("Only one of the following options can be specified for Kafka source: "
                                f"{_STRATEGY_NAMES}. See the docs for more details.")
    name, value = given[0], str(opts[given[0]])
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise StrataOptionError(f"No topics to subscribe to as specified topics string '{value}' is empty or "
                                    "only contains commas")
        return {"strategy": name, "topics": tuple(dict.fromkeys(topics))}
    if name == "subscribepattern":
        if not value.strip():
            raise StrataOptionError(f"Pattern to subscribe is empty as specified value for option 'subscribePattern'"
                                    f" is '{value}'")
        try:
            re.compile(value.strip())
        except re.error as e:
            raise StrataOptionError(f"Invalid regular expression '{value}' for option 'subscribePattern': {e}") \
                from None
        return {"strategy": name, "pattern": value.strip()}
    try:
        parsed = json.loads(value)
        pairs = tuple(sorted({(str(t), int(p)) for t, ps in parsed.items() for p in ps}))
        if any(isinstance(p, bool) or not isinstance(p, int) for ps in parsed.values() for p in ps):
            raise TypeError
    except (ValueError, TypeError, AttributeError):
        raise StrataOptionError(f"Expected e.g. {_ASSIGN_EXAMPLE}, got {value}") from None
    if not pairs:
        raise StrataOptionError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
    return {"strategy": name, "assign": pairs}


def _offset_json(name: str, value: str, example: str) -> tuple:
    try:
        parsed = json.loads(value)
        out = []
        for topic, parts in parsed.items():
            for p, off in parts.items():
                if isinstance(off, bool) or not isinstance(off, int):
                    raise TypeError
                out.append((str(topic), int(p), off))
    except (ValueError, TypeError, AttributeError):
        raise StrataOptionError(f"Invalid value for option '{name}'. Expected e.g. {example}, got {value}") \
            from None
    return tuple(sorted(out))


def _offset_spec(opts: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
    """Precedence as Spark: <prefix>Timestamp > <prefix>OffsetsByTimestamp > <prefix>Offsets."""
    ts = opts.get(f"{prefix}timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(str(ts).strip()))
        except ValueError:
            raise StrataOptionError(f"Invalid value '{ts}' for option '{prefix}Timestamp', must be a long "
                                    "(milliseconds since the epoch)") from None
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamp", offsets=_offset_json(f"{prefix}OffsetsByTimestamp", str(by_ts),
                                                              _TIMESTAMPS_EXAMPLE))
    raw = opts.get(f"{prefix}offsets")
    if raw is None:
        return OffsetSpec(default)
    v = str(raw).strip()
    if v.lower() in ("earliest", "latest"):
        return OffsetSpec(v.lower())
    offsets = _offset_json(f"{prefix}Offsets", v, _OFFSETS_EXAMPLE)
    for t, p, o in offsets:
        if o < EARLIEST:
            raise StrataOptionError(f"Invalid offset {o} for {t}-{p} in option '{prefix}Offsets': use a "
                                    "non-negative offset, -2 (earliest) or -1 (latest)")
    return OffsetSpec("offsets", offsets=offsets)


# ---- entry points -----------------------------------------------------------------------------------------------
def parse_read_options(opts: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Validate the options of a batch (`streaming=False`) or streaming read; `None` checks only what both have in
    common (DataSource.schema(), called when the DataFrame is created, does not know which it is)."""
    opts = {k.lower(): v for k, v in opts.items()}
    client = _isolation(_client(opts, _FORBIDDEN_READ))
    strategy = _strategy(opts)
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    if streaming is None:
        ending = _offset_spec(opts, "ending", "latest")
    elif streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise StrataOptionError("ending offset not valid in streaming queries")
        ending = OffsetSpec("latest")
    else:
        ending = _offset_spec(opts, "ending", "latest")
        if starting.kind == "latest":
            raise StrataOptionError("starting offset can't be latest for batch queries on Kafka")
        for t, p, o in starting.offsets if starting.kind == "offsets" else ():
            if o == LATEST:
                raise StrataOptionError(f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka")
        if ending.kind == "earliest":
            raise StrataOptionError("ending offset can't be earliest for batch queries on Kafka")
        for t, p, o in ending.offsets if ending.kind == "offsets" else ():
            if o == EARLIEST:
                raise StrataOptionError(f"endingOffsets for {t}-{p} can't be earliest for batch queries on Kafka")
    strategy_ts = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy_ts not in ("error", "latest"):
        raise StrataOptionError(f"Invalid value '{strategy_ts}' for option 'startingOffsetsByTimestampStrategy', "
                                "must be 'error' or 'latest'")
    chunk = _positive(opts, "strata.chunkSizeBytes", 8 << 20)
    max_offsets = _positive(opts, "maxOffsetsPerTrigger", None)
    min_offsets = _positive(opts, "minOffsetsPerTrigger", None)
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise StrataOptionError(f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
                                f"maxOffsetsPerTrigger({max_offsets}).")
    delay = time_string_ms("maxTriggerDelay", opts.get("maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY))
    prefix = opts.get("groupidprefix")
    if prefix is not None and not str(prefix).strip():
        raise StrataOptionError("Option 'groupIdPrefix' is empty")
    group_id = dict(client.kafka_conf).get("group.id")
    if streaming is not None:                     # once per query, not again for schema()
        if group_id is not None:
            log.warning(_CUSTOM_GROUP_ID)
            if prefix is not None:
                log.warning("Option groupIdPrefix will be ignored as option kafka.group.id has been set.")
        if not streaming:
            for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
                if name.lower() in opts:
                    log.warning("%s option ignored in batch queries", name)
    return ReadOptions(
        client=client, **strategy, starting=starting, ending=ending, by_timestamp_strategy=strategy_ts,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=max_offsets, min_offsets_per_trigger=min_offsets, max_trigger_delay_ms=delay,
        group_id_prefix=str(prefix).strip() if prefix is not None else None, group_id=group_id,
        min_partitions=_positive(opts, "minPartitions", None),
        max_records_per_partition=_positive(opts, "maxRecordsPerPartition", None),
        include_headers=_bool(opts, "includeHeaders", False),
        poll_timeout_ms=_positive(opts, "kafkaConsumer.pollTimeoutMs", 120_000),
        direct_read=_bool(opts, "strata.directRead", True),
        chunk_bytes=chunk,
        filter_pushdown=_bool(opts, "strata.filterPushdown", False))


def with_group_id(opts: ReadOptions, streaming: bool) -> ReadOptions:
    """The group.id of one query's consumers, as KafkaSourceProvider picks it: kafka.group.id if set, else
    `<groupIdPrefix>-<random UUID>` (prefix spark-kafka-relation for batch, spark-kafka-source for streaming) and
    `-executor`; the driver's consumer uses the same with `-driver`. Called once per query, on the driver."""
    prefix = opts.group_id_prefix or ("spark-kafka-source" if streaming else "spark-kafka-relation")
    return replace(opts, query_group_id=f"{prefix}-{uuid.uuid4()}")


def consumer_group_id(opts: ReadOptions, role: str) -> str:
    """group.id of the `role` ('executor' or 'driver') consumers of a query."""
    if opts.group_id is not None:
        return opts.group_id
    if opts.query_group_id is None:               # options parsed outside a query (tests, tools)
        opts = with_group_id(opts, streaming=False)
    return f"{opts.query_group_id}-{role}"


def parse_write_options(opts: Mapping[str, str]) -> WriteOptions:
    opts = {k.lower(): v for k, v in opts.items()}
    client = _client(opts, _FORBIDDEN_WRITE)
    topic = opts.get("topic")
    if topic is not None and not str(topic).strip():
        raise StrataOptionError("Option 'topic' is empty")
    conf = {"enable.idempotence": "true", "acks": "all", "linger.ms": "5"}
    conf.update(dict(client.kafka_conf))
    return WriteOptions(client, str(topic).strip() if topic else None, conf,
                        _positive(opts, "strata.flushTimeoutMs", 300_000))
