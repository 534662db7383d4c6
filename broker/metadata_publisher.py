"""Applies each new metadata image to this broker (Kafka's BrokerMetadataPublisher): replicas to open, lead, follow
or drop, topics to delete, configs to reconfigure, and the group coordinator told of deleted topics. Admin handlers never do
this themselves: they submit records to the controller, and this is what makes them take effect, on one broker
today and on every broker that follows the metadata log in the cluster."""
from __future__ import annotations

import logging

from broker.groups.metadata_store import OFFSETS_TOPIC
from metadata.image import MetadataImage

log = logging.getLogger("strata.metadata_publisher")


class MetadataPublisher:
    def __init__(self, replicas, groups, traffic=None):
        self.replicas = replicas
        self.groups = groups
        self.traffic = traffic          # replication.traffic_metrics.TrafficMetrics: per-topic series to drop

    def __call__(self, old: MetadataImage, new: MetadataImage) -> None:
        deleted = [t for tid, t in old.topics_by_id.items() if tid not in new.topics_by_id]
        for t in deleted:
            self.replicas.delete_topic(t)
            if self.traffic is not None:
                self.traffic.forget_topic(t.name)
            log.info("deleted topic %s", t.name)
        if deleted:
            self.groups.on_topics_deleted([t.name for t in deleted])
        for tid, t in new.topics_by_id.items():
            before = old.topics_by_id.get(tid)
            if before is t:
                continue
            self.replicas.apply_topic(t, before)
            if before is not None and t.configs != before.configs:
                self.replicas.reconfigure(t)
            if t.name == OFFSETS_TOPIC:
                self.groups.sync_leadership()
