"""Gauges Kafka operators alert on, computed when Prometheus scrapes (nothing is counted on the request path):
ReplicaManager's partition, leader, under-replicated and under-min-ISR counts from this broker's replicas, and the
controller's active, offline-partition and broker counts from the metadata image (non-zero only on the active
controller, as in Kafka, so that a sum over the cluster counts each once)."""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily


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
