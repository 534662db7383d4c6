"""Broker metrics (docs/metrics.md), in Kafka's names turned Prometheus' way.

Most are computed when Prometheus scrapes, from state the broker keeps anyway: ReplicaManager's partition, leader,
under-replicated and under-min-ISR counts and its ISR change counts (counted by the replication layer as plain
ints), each local log's size, and the controller's active, offline-partition and broker counts from the metadata
image (non-zero only on the active controller, as in Kafka, so that a sum over the cluster counts each once).
What is counted on the request path, the request-time histogram (RequestTimes) and ErrorsPerSec (RequestErrors), is
counted as plain ints as well: prometheus_client's Histogram.observe (a lock and a loop over the buckets per request)
cost a measurable share of a small Produce request."""
from __future__ import annotations

from bisect import bisect_left

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from protocol.errors import ErrorCode


def error_name(code: int) -> str:
    """Kafka's Errors enum name (NONE, NOT_LEADER_OR_FOLLOWER, ...), the `error` label of ErrorsPerSec."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


class RequestTimes:
    """Kafka's RequestMetrics TotalTimeMs as the histogram kafka_network_requestmetrics_total_time_seconds{request}
    (its _count is RequestsPerSec): per API key a list of bucket counts and the sum, the family built at scrape."""

    BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)

    def __init__(self, request_name, max_api_key: int):
        self.request_name = request_name
        self.counts: list[list[int] | None] = [None] * (max_api_key + 1)   # per bucket, then +Inf
        self.sums = [0.0] * (max_api_key + 1)

    def observe(self, api_key: int, seconds: float) -> None:
        counts = self.counts[api_key]
        if counts is None:
            counts = self.counts[api_key] = [0] * (len(self.BUCKETS) + 1)
        counts[bisect_left(self.BUCKETS, seconds)] += 1
        self.sums[api_key] += seconds

    def collect(self):
        fam = HistogramMetricFamily("kafka_network_requestmetrics_total_time_seconds", "TotalTimeMs: time from a "
                                    "request's arrival to its response, by API (its _count is RequestsPerSec)",
                                    labels=["request"])
        for api_key, counts in enumerate(self.counts):
            if counts is None:
                continue
            cumulative, buckets = 0, []
            for bound, n in zip((*map(floatToGoString, self.BUCKETS), "+Inf"), counts):
                cumulative += n
                buckets.append((bound, cumulative))
            fam.add_metric([self.request_name(api_key)], buckets, self.sums[api_key])
        yield fam


class RequestErrors:
    """Kafka's RequestMetrics ErrorsPerSec: every error code in every response, NONE included, by API, as the
    counter kafka_network_requestmetrics_errors_total{request, error}. Produce and Fetch (hand-encoded) count in
    their handlers, every other response where the socket server sends it (its EncodedResponse carries the codes).
    NONE counts sit in a list slot per API key and other codes in a dict: an add is a few list and dict operations
    on the request path; the counter family is built when Prometheus scrapes."""

    def __init__(self, request_name, max_api_key: int):
        self.request_name = request_name              # api key -> "Produce", "Fetch", ...
        self.none = [0] * (max_api_key + 1)
        self.errors: dict[tuple[int, int], int] = {}  # (api key, error code) -> count, codes other than NONE

    def add(self, api_key: int, none: int, errors: dict[int, int] | None = None) -> None:
        self.none[api_key] += none
        if errors:
            counts = self.errors
            for code, n in errors.items():
                key = (api_key, int(code))
                counts[key] = counts.get(key, 0) + n

    def add_counts(self, api_key: int, counts: dict[int, int]) -> None:
        """A response's {code: count}, NONE among them."""
        self.none[api_key] += counts.get(0, 0)
        errors = self.errors
        for code, n in counts.items():
            if code:
                key = (api_key, code)
                errors[key] = errors.get(key, 0) + n

    def collect(self):
        fam = CounterMetricFamily("kafka_network_requestmetrics_errors", "ErrorsPerSec: error codes in responses, "
                                  "by API and error (NONE: successes), each code in a response counted",
                                  labels=["request", "error"])
        for api_key, n in enumerate(self.none):
            if n:
                fam.add_metric([self.request_name(api_key), "NONE"], n)
        for (api_key, code), n in sorted(self.errors.items()):
            fam.add_metric([self.request_name(api_key), error_name(code)], n)
        yield fam


class BrokerStateCollector:
    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        rm = "kafka_server_replicamanager_"
        parts = list(self.broker.replicas.partitions.values())
        leaders = [p for p in parts if p.is_leader]
        yield GaugeMetricFamily(rm + "partition_count", "PartitionCount: replicas hosted here", len(parts))
        yield GaugeMetricFamily(rm + "leader_count", "LeaderCount: partitions led here", len(leaders))
        yield GaugeMetricFamily(rm + "under_replicated_partitions", "UnderReplicatedPartitions: led here with an ISR "
                                "smaller than the replica set", sum(len(p.isr) < len(p.replicas) for p in leaders))
        yield GaugeMetricFamily(rm + "under_min_isr_partition_count", "UnderMinIsrPartitionCount: led here with an ISR "
                                "below min.insync.replicas",
                                sum(len(p.isr) < p.log.config.min_insync_replicas for p in leaders))
        isr = self.broker.replicas.isr_changes
        yield CounterMetricFamily(rm + "isr_shrinks", "IsrShrinksPerSec: ISR shrinks of partitions led here, "
                                  "counted when the controller committed them", isr.shrinks)
        yield CounterMetricFamily(rm + "isr_expands", "IsrExpandsPerSec: ISR expansions of partitions led here, "
                                  "counted when the controller committed them", isr.expands)
        yield CounterMetricFamily(rm + "failed_isr_updates", "FailedIsrUpdatesPerSec: ISR changes the controller "
                                  "refused or that went stale", isr.failed)
        size = GaugeMetricFamily("kafka_log_log_size", "Size: bytes of a partition's local log segments (replicas "
                                 "hosted here; a tiered topic's remote bytes: ..._remote_log_size_bytes)",
                                 labels=["topic", "partition"])
        for p in parts:
            size.add_metric([p.topic, str(p.index)], p.log.size_bytes())
        yield size
        image = self.broker.topics.image
        active = bool(getattr(self.broker.controller, "active", False))
        kc = "kafka_controller_kafkacontroller_"
        offline = sum(1 for t in image.topics() for s in t.partition_states if s.leader < 0) if active else 0
        fenced = sum(1 for b in image.brokers.values() if b.fenced) if active else 0
        yield GaugeMetricFamily(kc + "active_controller_count", "ActiveControllerCount: 1 on the active controller",
                                1 if active else 0)
        yield GaugeMetricFamily(kc + "offline_partitions_count", "OfflinePartitionsCount: partitions without a leader "
                                "(reported by the active controller)", offline)
        yield GaugeMetricFamily(kc + "fenced_broker_count", "FencedBrokerCount (reported by the active controller)",
                                fenced)
        yield GaugeMetricFamily(kc + "active_broker_count", "ActiveBrokerCount: registered, unfenced brokers "
                                "(reported by the active controller)",
                                len(image.brokers) - fenced if active else 0)
        yield GaugeMetricFamily("kafka_server_broker_metadata_metrics_last_applied_record_offset",
                                "last-applied-record-offset: the last metadata log record this broker applied "
                                "(every broker; a broker far below the others is not following the log)",
                                image.offset)
