"""Broker configuration: a server.properties-style file plus `--override key=value`, Kafka's names and defaults."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from broker.replica_selector import load_selector
from broker.security.listeners import SECURITY_DEFAULTS
from replication.remote_wal import WAL_DEFAULTS
from replication.traffic_metrics import PRICE_DEFAULTS
from broker.transactions.config import TXN_DEFAULTS
from storage.cleaner.cleaner import CLEANER_DEFAULTS
from storage.log.log_config import TOPIC_CONFIGS, LogConfig

# Broker-level settings Strata reads, with Kafka's defaults. Log defaults (log.*) live in storage.log.log_config.
BROKER_DEFAULTS: dict[str, str] = {
    "node.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": "",
    "broker.rack": "",
    "replica.selector.class": "",    # KIP-392: unset = consumers fetch from leaders (broker/replica_selector.py)
    "log.dirs": "./data/logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "socket.request.max.bytes": str(100 * 1024 * 1024),
    # Connection and request-memory limits (broker/socket_limits.py), Kafka's defaults but for
    # queued.max.request.bytes: Kafka's is unbounded, Strata's socket.request.max.bytes, the least Kafka accepts
    # when it is bounded. queued.max.request.stall.ms (Strata) closes a frame that stops arriving while the pool is
    # empty, so a client that announces large frames and stalls cannot stop every other connection's reading
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "queued.max.request.bytes": str(100 * 1024 * 1024),
    # KIP-578's bound on the partition replicas one broker hosts, checked by the controller at topic creation and
    # partition addition (broker/topic_admin.py). Kafka has none; unset, Strata takes half of the open-file limit
    # (each hosted partition keeps its active segment open), so creating topics cannot exhaust a broker's files
    "max.broker.partitions": "",
    "queued.max.request.stall.ms": "10000",
    # client quotas (broker/quotas.py): the samples of the rate a client's quota is measured by, Kafka's QuotaConfig
    "quota.window.num": "11",
    "quota.window.size.seconds": "1",
    "log.retention.check.interval.ms": "300000",
    "max.incremental.fetch.session.cache.slots": "1000",
    "max.request.partition.size.limit": "2000",
    "cluster.id": "",
    # Tiered storage (KIP-405), Kafka's names and defaults; see docs/tiered-storage.md
    "remote.log.storage.system.enable": "false",
    "remote.log.storage.manager.store.url": "",
    "remote.log.manager.task.interval.ms": "30000",
    "remote.log.manager.copier.thread.pool.size": "10",
    "remote.log.manager.expiration.thread.pool.size": "10",
    "remote.log.reader.threads": "10",
    "remote.log.reader.max.pending.tasks": "100",
    "remote.fetch.max.wait.ms": "500",
    "remote.list.offsets.request.timeout.ms": "30000",
    "remote.log.metadata.topic.num.partitions": "50",
    "remote.log.metadata.topic.retention.ms": "-1",
    "remote.log.metadata.consume.wait.ms": "120000",
    "remote.log.index.file.cache.total.size.bytes": "1073741824",
    # Strata's remote reader (Kafka leaves chunking to the RSM plugin; these mirror Aiven's fetch.chunk.* settings)
    "remote.log.reader.chunk.size.bytes": "4194304",
    "remote.fetch.max.memory.bytes": str(256 << 20),
    "remote.log.reader.prefetch.chunks": "2",
    "metrics.port": "-1",
    # The cluster (docs/configuration.md): with metadata.log.storage.url set, the metadata log and the controller
    # lease live in that object store and this broker joins the cluster there; empty means one broker with its
    # metadata log in log.dirs. The rest are Kafka's names and defaults.
    "metadata.log.storage.url": "",
    "metadata.log.poll.interval.ms": "100",
    "process.roles": "broker,controller",
    "controller.quorum.fetch.timeout.ms": "2000",
    "metadata.log.max.record.bytes.between.snapshots": "20971520",
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
    "replica.lag.time.max.ms": "30000",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.backoff.ms": "1000",
    "replica.socket.timeout.ms": "30000",
    "offsets.topic.replication.factor": "3",
    "offsets.commit.timeout.ms": "5000",
    "remote.log.metadata.topic.replication.factor": "3",
    **TXN_DEFAULTS,                  # transaction.*: the transaction coordinator (broker/transactions/)
    **CLEANER_DEFAULTS,              # log.cleaner.*: the cleaner's own defaults, one list
    **WAL_DEFAULTS,                  # remote.wal.*: active-segment replication through the fast store (KIP-1176)
    **PRICE_DEFAULTS,                # cost.*: list prices behind strata_cost_dollars_total
    **SECURITY_DEFAULTS,             # listeners' security, SASL, TLS and the authorizer (docs/security.md)
}

# Broker configs an operator may change at run time (`strata configs --alter --entity-type brokers`, Kafka's
# IncrementalAlterConfigs/AlterConfigs on a BROKER resource), per broker or as the cluster-wide default: the topic
# defaults (Kafka's DynamicLogConfig; a change reconfigures every log without an override). The tiered-storage and
# WAL defaults stay static, because enabling them needs checks against each topic; everything else is read-only
# as in Kafka (listeners, log.dirs, node.id...) or not reconfigurable live in Strata yet (the cleaner's threads).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    {d.broker_name for d in TOPIC_CONFIGS.values() if not d.broker_name.startswith("remote.")} |
    {"log.retention.hours", "log.retention.minutes", "log.roll.hours"} |
    {k for k in SECURITY_DEFAULTS if k.startswith("sasl.kerberos.")})


_SENSITIVE_WORDS = ("secret", "password", "token", "access.key", "credential", "sasl.jaas.config", "ssl.keystore.key",
                    "ssl.keystore.certificate.chain", "ssl.truststore.certificates")


def is_sensitive(name: str) -> bool:
    """Kafka's PASSWORD-type configs (answered with a null value and isSensitive=true, shown as [hidden] in logs):
    key and store passwords, inline PEM keys and certificates, JAAS configs (with per-listener names), and
    Strata's object store credentials (`remote.log.storage.manager.store.secret.access.key` and the like)."""
    return any(w in name for w in _SENSITIVE_WORDS)


def setting(config, key: str, defaults: dict[str, str]) -> str:
    """`key` from a BrokerConfig, a plain mapping (unit tests) or None, falling back to a component's own defaults
    when unset or empty (BrokerConfig.get answers "" for keys outside BROKER_DEFAULTS)."""
    value = config.get(key) if config is not None else None
    return str(value) if value not in (None, "") else defaults[key]


_HOURS = 3_600_000
_MINUTES = 60_000


from protocol.properties import parse_properties  # noqa: E402  (re-exported: the broker's files use it too)


def env_properties(environ: dict[str, str], prefix: str = "STRATA_") -> dict[str, str]:
    """Settings from environment variables, mapped as Apache Kafka's container image maps KAFKA_*: the prefix goes,
    `___` stands for `-`, `__` for `_` and `_` for `.`, and the name is lower-cased (STRATA_NODE_ID -> node.id,
    STRATA_REMOTE_WAL_STORAGE_RACK_A_URL -> remote.wal.storage.rack.a.url)."""
    out = {}
    for name, value in environ.items():
        if not name.startswith(prefix) or name == prefix:
            continue
        key = name[len(prefix):].replace("___", "\0").replace("__", "\1").replace("_", ".")
        out[key.replace("\0", "-").replace("\1", "_").lower()] = value
    return out


def _log_defaults(props: dict[str, str]) -> dict[str, str]:
    """Fold Kafka's alternative units (hours/minutes) into the *.ms names the log config reads."""
    d = dict(props)
    if "log.retention.ms" not in d:
        if "log.retention.minutes" in d:
            d["log.retention.ms"] = str(int(d["log.retention.minutes"]) * _MINUTES)
        elif "log.retention.hours" in d:
            d["log.retention.ms"] = str(int(d["log.retention.hours"]) * _HOURS)
    if "log.roll.ms" not in d and "log.roll.hours" in d:
        d["log.roll.ms"] = str(int(d["log.roll.hours"]) * _HOURS)
    return d


@dataclass
class BrokerConfig:
    props: dict[str, str] = field(default_factory=dict)
    # Dynamic configs from the metadata image (cluster default, then this broker's own on top); they win over the
    # file, as Kafka's DYNAMIC_BROKER_CONFIG and DYNAMIC_DEFAULT_BROKER_CONFIG win over STATIC_BROKER_CONFIG.
    dynamic_default: dict[str, str] = field(default_factory=dict)
    dynamic_broker: dict[str, str] = field(default_factory=dict)

    def set_dynamic(self, default: dict[str, str], own: dict[str, str]) -> bool:
        """Take the image's dynamic configs; whether the effective ones changed."""
        before = (self.dynamic_default, self.dynamic_broker)
        self.dynamic_default, self.dynamic_broker = dict(default), dict(own)
        return before != (self.dynamic_default, self.dynamic_broker)

    @classmethod
    def load(cls, path: str | None, overrides: list[str] | None = None,
             env: dict[str, str] | None = None) -> "BrokerConfig":
        """The file, then `env` (settings from environment variables), then the overrides: later ones win."""
        props: dict[str, str] = {}
        if path:
            props.update(parse_properties(Path(path).read_text()))
        props.update(env or {})
        for ov in overrides or []:
            if "=" not in ov:
                raise ValueError(f"--override expects key=value, got {ov!r}")
            k, v = ov.split("=", 1)
            props[k.strip()] = v.strip()
        cfg = cls(props)
        # validate early: a bad value fails at start-up with a message, not as a traceback at first use
        cfg.log_config()
        load_selector(cfg.get("replica.selector.class"))
        from broker.socket_limits import validate as validate_socket_limits
        validate_socket_limits(cfg)
        for key in ("node.id", "metrics.port", "broker.session.timeout.ms", "broker.heartbeat.interval.ms"):
            try:
                cfg.get_int(key)
            except ValueError:
                raise ValueError(f"{key}={cfg.get(key)!r} is not an integer") from None
        for key in ("quota.window.num", "quota.window.size.seconds", "max.broker.partitions"):   # INT, atLeast(1)
            if key == "max.broker.partitions" and not cfg.get(key).strip():
                continue                 # unset: half the open-file limit (broker/topic_admin.py)
            try:
                if cfg.get_int(key) < 1:
                    raise ValueError
            except ValueError:
                raise ValueError(f"{key}={cfg.get(key)!r} must be an integer of at least 1") from None
        return cfg

    def get(self, key: str) -> str:
        if key in self.dynamic_broker:
            return self.dynamic_broker[key]
        if key in self.dynamic_default:
            return self.dynamic_default[key]
        if key in self.props:
            return self.props[key]
        return BROKER_DEFAULTS.get(key, "")

    def source_of(self, key: str) -> str:
        """Where `key`'s value comes from, by the name of Kafka's ConfigSource."""
        if key in self.dynamic_broker:
            return "DYNAMIC_BROKER_CONFIG"
        if key in self.dynamic_default:
            return "DYNAMIC_DEFAULT_BROKER_CONFIG"
        return "STATIC_BROKER_CONFIG" if key in self.props else "DEFAULT_CONFIG"

    def get_int(self, key: str) -> int:
        return int(self.get(key))

    def get_bool(self, key: str) -> bool:
        return self.get(key).strip().lower() == "true"

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    @property
    def listener(self) -> tuple[str, int]:
        first = self.get("listeners").split(",")[0].strip()
        u = urlparse(first if "://" in first else "PLAINTEXT://" + first)
        return (u.hostname or "0.0.0.0", u.port or 9092)

    @property
    def advertised(self) -> tuple[str, int]:
        adv = self.get("advertised.listeners").strip()
        if not adv:
            host, port = self.listener
            return ("127.0.0.1" if host in ("0.0.0.0", "") else host, port)
        u = urlparse(adv.split(",")[0].strip())
        return (u.hostname or "127.0.0.1", u.port or 9092)

    @property
    def log_dir(self) -> Path:
        return Path(self.get("log.dirs").split(",")[0].strip())

    REMOTE_STORE_PREFIX = "remote.log.storage.manager.store."

    def remote_store_url(self) -> str:
        return self.get(self.REMOTE_STORE_PREFIX + "url").strip()

    def remote_store_options(self) -> dict[str, str]:
        """`remote.log.storage.manager.store.<name>` (dots for underscores) -> open_object_store(**options),
        e.g. `...store.endpoint.url` -> endpoint_url, `...store.access.key.id` -> access_key_id."""
        return self.store_options(self.REMOTE_STORE_PREFIX)

    METADATA_STORE_PREFIX = "metadata.log.storage."
    WAL_STORE_PREFIX = "remote.wal.storage."

    def wal_store_urls(self) -> dict[str, str]:
        """The fast stores by name: "" from remote.wal.storage.url, a rack's from remote.wal.storage.rack.<rack>.url."""
        pre = self.WAL_STORE_PREFIX
        urls = {"": self.get(pre + "url").strip()}
        for k, v in self.props.items():
            if k.startswith(pre + "rack.") and k.endswith(".url") and v.strip():
                urls[k[len(pre) + 5:-4]] = v.strip()
        return {name: url for name, url in urls.items() if url}

    def wal_store_options(self) -> dict[str, str]:
        return {k: v for k, v in self.store_options(self.WAL_STORE_PREFIX).items() if not k.startswith("rack_")}

    def store_options(self, pre: str) -> dict[str, str]:
        return {k[len(pre):].replace(".", "_"): v for k, v in self.props.items()
                if k.startswith(pre) and k != pre + "url" and k != pre[:-1]}

    @property
    def cluster_mode(self) -> bool:
        return bool(self.get(self.METADATA_STORE_PREFIX + "url").strip())

    def log_defaults(self) -> dict[str, str]:
        return _log_defaults({**self.props, **self.dynamic_default, **self.dynamic_broker})

    def log_config(self, overrides: dict[str, object] | None = None) -> LogConfig:
        return LogConfig.resolve(self.log_defaults(), overrides or {})

    def cluster_id(self) -> str:
        """Stable cluster id: configured, else generated once and kept in the log dir's meta.properties."""
        configured = self.get("cluster.id")
        if configured:
            return configured
        meta = self.log_dir / "meta.properties"
        if meta.exists():
            p = parse_properties(meta.read_text())
            if p.get("cluster.id"):
                return p["cluster.id"]
        cid = uuid.uuid4().hex[:22]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"version=1\ncluster.id={cid}\nnode.id={self.node_id}\n")
        return cid
