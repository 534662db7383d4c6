"""Where a broker's bytes go, by path (producers in, consumers out, leader to follower, leader to the fast store,
fast store to follower: KIP-1176's reason to exist), the fast store's requests, and an estimate in dollars from
configurable list prices, as Prometheus counters.

Defaults are AWS's list prices (us-east-1): cross-zone transfer $0.01/GB each way ($0.02/GB counted once, on the
sender), S3 Express One Zone PUT $0.00113 and GET $0.00003 per 1,000 requests, upload $0.0032/GB, retrieval
$0.0006/GB, storage $0.11/GB-month (0.000151/GB-hour)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily

GB = 1e9

PRICE_DEFAULTS: dict[str, str] = {
    "cost.cross.zone.dollars.per.gb": "0.02",
    "cost.wal.put.dollars.per.1000": "0.00113",
    "cost.wal.get.dollars.per.1000": "0.00003",
    "cost.wal.upload.dollars.per.gb": "0.0032",
    "cost.wal.retrieval.dollars.per.gb": "0.0006",
    "cost.wal.storage.dollars.per.gb.hour": "0.000151",
}


class TopicTraffic:
    """One topic's BrokerTopicMetrics (BytesInPerSec, MessagesInPerSec, BytesOutPerSec with topic=...): plain ints the
    request path adds to (a labelled prometheus_client child takes a lock per inc), read when Prometheus scrapes."""
    __slots__ = ("bytes_in", "messages_in", "bytes_out")

    def __init__(self):
        self.bytes_in = self.messages_in = self.bytes_out = 0


class TrafficMetrics:
    def __init__(self, registry: CollectorRegistry | None, prices: dict[str, float] | None = None):
        reg = registry if registry is not None else CollectorRegistry()
        p = {k: float(v) for k, v in PRICE_DEFAULTS.items()}
        p.update(prices or {})
        self.prices = p
        self.topics: dict[str, TopicTraffic] = {}
        reg.register(self)                   # collect() below: the per-topic counters
        self.replication_bytes_in = Counter("strata_replication_bytes_in", "record bytes this broker received "
                                            "from leaders as a follower (Kafka's ReplicationBytesInPerSec)",
                                            registry=reg)
        self.replication_bytes_out = Counter("strata_replication_bytes_out", "record bytes this broker sent to "
                                             "followers as a leader (ReplicationBytesOutPerSec)", ["zone"],
                                             registry=reg)
        self.upload_bytes = Counter("strata_wal_upload_bytes", "bytes uploaded to the fast store in WAL objects",
                                    registry=reg)
        self.upload_objects = Counter("strata_wal_upload_objects", "WAL objects uploaded", registry=reg)
        self.upload_errors = Counter("strata_wal_upload_errors", "WAL uploads that failed or timed out",
                                     registry=reg)
        self.download_bytes = Counter("strata_wal_download_bytes", "bytes a follower downloaded from WAL objects",
                                      registry=reg)
        self.download_errors = Counter("strata_wal_download_errors", "WAL downloads that failed or did not match "
                                       "their CRC", ["reason"], registry=reg)
        self.store_requests = Counter("strata_wal_store_requests", "requests to the fast stores",
                                      ["store", "operation"], registry=reg)
        self.stored_bytes = Gauge("strata_wal_stored_bytes", "bytes of this broker's WAL objects in the fast store",
                                  registry=reg)
        self.mode = Gauge("strata_wal_mode", "1 when this broker's followers get pointers (the fast store is "
                          "healthy), 0 when they get records (fallback to classic replication)", registry=reg)
        self.cost = Counter("strata_cost_dollars", "estimated spend caused by this broker, by item", ["item"],
                            registry=reg)

    def topic(self, name: str) -> TopicTraffic:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = TopicTraffic()
        return t

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series go, as Kafka removes its BrokerTopicMetrics."""
        self.topics.pop(name, None)

    def collect(self):
        b_in = CounterMetricFamily("kafka_server_brokertopicmetrics_bytes_in", "BytesInPerSec: record bytes appended "
                                   "from producers, by topic", labels=["topic"])
        m_in = CounterMetricFamily("kafka_server_brokertopicmetrics_messages_in", "MessagesInPerSec: records "
                                   "appended from producers, by topic", labels=["topic"])
        b_out = CounterMetricFamily("kafka_server_brokertopicmetrics_bytes_out", "BytesOutPerSec: record bytes sent "
                                    "to consumers, by topic (followers: strata_replication_bytes_out)",
                                    labels=["topic"])
        for name, t in list(self.topics.items()):
            b_in.add_metric([name], t.bytes_in)
            m_in.add_metric([name], t.messages_in)
            b_out.add_metric([name], t.bytes_out)
        return [b_in, m_in, b_out]

    def sent_to_follower(self, nbytes: int, cross_zone: bool) -> None:
        self.replication_bytes_out.labels("cross" if cross_zone else "same").inc(nbytes)
        if cross_zone:
            self.cost.labels("cross_zone_transfer").inc(nbytes / GB * self.prices["cost.cross.zone.dollars.per.gb"])

    def uploaded(self, store: str, nbytes: int) -> None:
        self.upload_bytes.inc(nbytes)
        self.upload_objects.inc()
        self.store_requests.labels(store, "put").inc()
        self.cost.labels("wal_put").inc(self.prices["cost.wal.put.dollars.per.1000"] / 1000)
        self.cost.labels("wal_upload_transfer").inc(nbytes / GB * self.prices["cost.wal.upload.dollars.per.gb"])

    def downloaded(self, store: str, nbytes: int, requests: int) -> None:
        self.download_bytes.inc(nbytes)
        self.store_requests.labels(store, "get").inc(requests)
        self.cost.labels("wal_get").inc(requests * self.prices["cost.wal.get.dollars.per.1000"] / 1000)
        self.cost.labels("wal_retrieval_transfer").inc(nbytes / GB * self.prices["cost.wal.retrieval.dollars.per.gb"])

    def deleted(self, store: str) -> None:
        self.store_requests.labels(store, "delete").inc()

    def stored(self, nbytes: int, hours: float) -> None:
        self.stored_bytes.set(nbytes)
        self.cost.labels("wal_storage").inc(nbytes / GB * hours * self.prices["cost.wal.storage.dollars.per.gb.hour"])
