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
        """confluent-kafka properties: the kafka.* options (Kafka's Java client security names, as Spark users give
        them, translated to librdkafka's: see librdkafka_conf) with `extra` on top."""
        base = {"bootstrap.servers": self.bootstrap, "broker.address.family": "v4"}
        base.update(dict(self.kafka_conf))
        base.update(extra)
        return librdkafka_conf(base)

    def security(self):
        """protocol.client_security.ClientSecurity for the connector's own connections (the reachability probe,
        DescribeWalPointers), from the same kafka.* options; None for PLAINTEXT. Not kept on the options (an
        SSLContext does not pickle): callers keep it for as long as they need it."""
        import ssl
        try:
            return client_security(dict(self.kafka_conf))
        except (OSError, ValueError, ssl.SSLError) as e:
            raise StrataOptionError(f"Invalid Kafka security option (kafka.security.protocol, kafka.sasl.*, "
                                    f"kafka.ssl.*): {e}") from None


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
    read_memory_bytes: int = 128 << 20
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


# ---- security: kafka.security.protocol, kafka.sasl.*, kafka.ssl.* ---------------------------------------------------
# Spark's Kafka source hands kafka.* to Kafka's Java client, so Spark users write Kafka's names (sasl.mechanism,
# sasl.jaas.config, ssl.truststore.location with ssl.truststore.type=PEM, ...). The connector's clients are
# librdkafka's (confluent-kafka), plus its own connections (the reachability probe, DescribeWalPointers), which
# Strata's protocol code secures from Kafka's names. Both namings are accepted: Kafka's are translated for librdkafka
# (protocol.client_security.librdkafka_config), librdkafka's back to Kafka's for the connector's own connections.
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The Kafka names librdkafka_config translates (or drops): without any of them the translation is skipped (so
# executors of a PLAINTEXT query do not import the protocol codec just to copy a dict)
_JAVA_SECURITY_NAMES = frozenset((
    "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.truststore.type", "ssl.truststore.password", "ssl.keystore.location", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.keystore.type", "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm"))
# Kafka (JVM) client settings librdkafka has no property for (it would refuse the configuration): left out of
# librdkafka's; ssl.enabled.protocols still applies to the connector's own connections (librdkafka uses OpenSSL's
# defaults, TLS 1.2 and 1.3, Kafka's default too)
_JVM_ONLY = frozenset(("ssl.enabled.protocols", "ssl.protocol", "ssl.keymanager.algorithm",
                       "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.provider"))


def librdkafka_conf(conf: Mapping) -> dict:
    """confluent-kafka properties from Kafka client ones: Kafka's security names become librdkafka's
    (sasl.mechanism -> sasl.mechanisms, sasl.jaas.config -> sasl.username/sasl.password or the unsecured
    OAUTHBEARER token, PEM ssl.truststore.location -> ssl.ca.location, ssl.keystore.location ->
    ssl.certificate.location and ssl.key.location, ssl.endpoint.identification.algorithm= -> none); librdkafka's own
    names pass unchanged. ValueError on a non-PEM store or a malformed sasl.jaas.config."""
    out = {k: v for k, v in conf.items() if k not in _JVM_ONLY}
    if _JAVA_SECURITY_NAMES.isdisjoint(out):
        return out
    from protocol.client_security import librdkafka_config
    return librdkafka_config(out)


def _jaas_quote(value) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _oauthbearer_jaas(config: str) -> str:
    """librdkafka's unsecured OAUTHBEARER token settings (`sasl.oauthbearer.config`: space-separated principal=,
    principalClaimName=, scope=, scopeClaimName=, lifeSeconds=, extension_<name>=) as the OAuthBearerLoginModule
    options of Kafka's unsecured login handler, which makes the same token."""
    given = dict(item.split("=", 1) for item in config.split() if "=" in item)
    sub, scope = given.get("principalClaimName", "sub"), given.get("scopeClaimName", "scope")
    opts = {}
    if sub != "sub":
        opts["unsecuredLoginPrincipalClaimName"] = sub
    if scope != "scope":
        opts["unsecuredLoginScopeClaimName"] = scope
    if "principal" in given:
        opts[f"unsecuredLoginStringClaim_{sub}"] = given["principal"]
    if "scope" in given:
        opts[f"unsecuredLoginListClaim_{scope}"] = "," + given["scope"]
    if "lifeSeconds" in given:
        opts["unsecuredLoginLifetimeSeconds"] = given["lifeSeconds"]
    opts.update({"unsecuredLoginExtension_" + k[len("extension_"):]: v for k, v in given.items()
                 if k.startswith("extension_")})
    return f"{_OAUTH_MODULE} required " + " ".join(f"{k}={_jaas_quote(v)}" for k, v in opts.items()) + ";"


def security_properties(conf: Mapping) -> dict[str, str]:
    """The security settings of Kafka client properties `conf` (Kafka's or librdkafka's names, or a mix) in Kafka's
    names, what protocol.client_security.ClientSecurity reads. librdkafka's sasl.username/sasl.password become a
    PlainLoginModule or ScramLoginModule sasl.jaas.config, its sasl.oauthbearer.config an unsecured
    OAuthBearerLoginModule one; ssl.ca.location / ssl.ca.pem the PEM truststore; ssl.certificate.location with
    ssl.key.location (one file) or ssl.certificate.pem with ssl.key.pem the PEM keystore (separate certificate and
    key files come back as the private `ssl.certificate.location` / `ssl.key.location`, for client_security to
    read)."""
    def given(*names):
        for n in names:
            v = conf.get(n)
            if v is not None and str(v).strip():
                return str(v)
        return None

    out: dict[str, str] = {}
    protocol = given("security.protocol")
    if protocol is not None:
        out["security.protocol"] = protocol.strip().upper()
    mechanism = given("sasl.mechanism", "sasl.mechanisms")
    if mechanism is not None:
        out["sasl.mechanism"] = mechanism.strip()
    jaas = given("sasl.jaas.config")
    user, password = conf.get("sasl.username"), conf.get("sasl.password")
    kind = (mechanism or "GSSAPI").strip().upper()
    if jaas is not None:
        out["sasl.jaas.config"] = jaas
    elif kind in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and user is not None and password is not None:
        module = _PLAIN_MODULE if kind == "PLAIN" else _SCRAM_MODULE
        out["sasl.jaas.config"] = f"{module} required username={_jaas_quote(user)} password={_jaas_quote(password)};"
    elif kind == "OAUTHBEARER" and given("sasl.oauthbearer.config") is not None and \
            str(conf.get("sasl.oauthbearer.method", "default")).strip().lower() == "default":
        out["sasl.jaas.config"] = _oauthbearer_jaas(given("sasl.oauthbearer.config"))
    truststore = given("ssl.truststore.location", "ssl.ca.location")
    if truststore is not None and truststore.strip().lower() != "probe":      # librdkafka's "probe": system CAs
        out["ssl.truststore.location"] = truststore
    inline_ca = given("ssl.truststore.certificates", "ssl.ca.pem")
    if inline_ca is not None:
        out["ssl.truststore.certificates"] = inline_ca
    if "ssl.truststore.location" in out or inline_ca is not None:
        out["ssl.truststore.type"] = given("ssl.truststore.type") or "PEM"
    keystore = given("ssl.keystore.location")
    cert_file, key_file = given("ssl.certificate.location"), given("ssl.key.location")
    inline_key = given("ssl.keystore.key", "ssl.key.pem")
    if keystore is None and cert_file is not None and cert_file == key_file:
        keystore = cert_file
    if keystore is not None:
        out["ssl.keystore.location"] = keystore
    elif inline_key is not None:
        out["ssl.keystore.key"] = inline_key
        chain = given("ssl.keystore.certificate.chain", "ssl.certificate.pem")
        if chain is not None:
            out["ssl.keystore.certificate.chain"] = chain
    elif cert_file is not None and key_file is not None:
        out["ssl.certificate.location"], out["ssl.key.location"] = cert_file, key_file
    if keystore is not None or inline_key is not None or cert_file is not None:
        out["ssl.keystore.type"] = given("ssl.keystore.type") or "PEM"
    if given("ssl.key.password") is not None:
        out["ssl.key.password"] = given("ssl.key.password")
    if given("ssl.enabled.protocols") is not None:
        out["ssl.enabled.protocols"] = given("ssl.enabled.protocols")
    algorithm = conf.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:                         # Kafka's "" (no host name check) is librdkafka's "none"
        out["ssl.endpoint.identification.algorithm"] = "" if str(algorithm).strip().lower() in ("", "none") \
            else str(algorithm).strip()
    return out


def client_security(conf: Mapping):
    """protocol.client_security.ClientSecurity for the connector's own connections from Kafka client properties
    (either naming), None for PLAINTEXT. SASL settings only librdkafka understands (GSSAPI, OIDC token retrieval)
    give a ClientSecurity without a SASL client: those connections then do TLS only, and DescribeWalPointers is
    refused (its offsets are fetched). ValueError on bad settings."""
    from protocol.client_security import ClientSecurity
    props = security_properties(conf)
    cert_file, key_file = props.pop("ssl.certificate.location", None), props.pop("ssl.key.location", None)
    if cert_file is not None:                         # separate PEM files: the inline keystore tls.py reads
        with open(key_file) as k, open(cert_file) as c:
            props["ssl.keystore.key"], props["ssl.keystore.certificate.chain"] = k.read(), c.read()
    protocol = props.get("security.protocol", "PLAINTEXT")
    if protocol.startswith("SASL") and "sasl.jaas.config" not in props:
        tls = ClientSecurity.from_properties({**props, "security.protocol": protocol[len("SASL_"):]})
        return ClientSecurity(tls.ssl_context if tls is not None else None,
                              (props.get("sasl.mechanism") or "GSSAPI").upper(), None)
    return ClientSecurity.from_properties(props)


def check_security(conf: Mapping) -> None:
    """Fail on the driver, with the setting's name, on security settings that cannot work (nothing is read: files
    are opened when a connection is made)."""
    from protocol.client_security import PROTOCOLS
    librdkafka_conf(conf)
    props = security_properties(conf)
    protocol = props.get("security.protocol", "PLAINTEXT")
    if protocol not in PROTOCOLS:
        raise ValueError(f"security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}")
    if protocol.startswith("SASL") and "sasl.jaas.config" in props:
        from protocol.sasl import client_from_config
        client_from_config({k: props[k] for k in ("sasl.mechanism", "sasl.jaas.config") if k in props})


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
    try:
        check_security(dict(kafka_conf))
    except ValueError as e:
        raise StrataOptionError(f"Invalid Kafka security option (kafka.security.protocol, kafka.sasl.*, "
                                f"kafka.ssl.*): {e}") from None
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
        read_memory_bytes=_positive(opts, "strata.readMemoryBytes", 128 << 20),
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
