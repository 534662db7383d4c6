"""Applies each new metadata image to this broker (Kafka's BrokerMetadataPublisher): replicas to open, lead, follow
or drop, topics to delete, configs to reconfigure, and the group coordinator told of deleted topics. Admin handlers never do
this themselves: they run operations on the controller, and this is what makes them take effect, on one broker
today and on every broker that follows the metadata log in the cluster."""
from __future__ import annotations

import logging

from broker.groups.metadata_store import OFFSETS_TOPIC
from broker.transactions.coordinator import TXN_TOPIC
from metadata.image import MetadataImage

log = logging.getLogger("strata.metadata_publisher")


class MetadataPublisher:
    def __init__(self, replicas, groups, config, traffic=None, transactions=None):
        self.replicas = replicas
        self.groups = groups
        self.config = config            # the BrokerConfig, whose dynamic layer follows the image
        self.traffic = traffic          # replication.traffic_metrics.TrafficMetrics: per-topic series to drop
        self.transactions = transactions  # the TransactionCoordinator: follows __transaction_state's leaders

    def load(self, image: MetadataImage) -> None:
        """The image this broker starts from, before it opens its replicas: its dynamic configs."""
        self._apply_broker_configs(image)
        self.groups.set_group_configs(image.group_configs)

    def __call__(self, old: MetadataImage, new: MetadataImage) -> None:
        if new.broker_configs is not old.broker_configs:
            self._apply_broker_configs(new)
        if new.group_configs is not old.group_configs:
            self.groups.set_group_configs(new.group_configs)
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
            elif t.name == TXN_TOPIC and self.transactions is not None:
                self.transactions.sync_leadership()

    def _apply_broker_configs(self, image: MetadataImage) -> None:
        """Dynamic broker configs take effect without a restart: the topic defaults among them reconfigure every
        open log (Kafka's DynamicLogConfig). Logs opened later read the new defaults anyway."""
        own = image.broker_configs.get(str(self.config.node_id), {})
        if self.config.set_dynamic(image.broker_configs.get("", {}), own):
            log.info("dynamic broker configs now: cluster default %s, this broker %s",
                     dict(image.broker_configs.get("", {})), dict(own))
            for t in image.topics():
                self.replicas.reconfigure(t)
