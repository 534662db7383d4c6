"""The broker: wires configuration, the metadata image, the partition layer (replication/), tiered storage, groups
and the socket server together, and runs their start-up and shutdown in order (Kafka's BrokerServer)."""
from __future__ import annotations

import asyncio
import logging

from broker.fetch_session import FetchSessionCache
from broker.groups.classic.group_coordinator import GroupCoordinator
from broker.handlers import load_handlers
from broker.socket_server import KafkaConnection
from broker.metadata_publisher import MetadataPublisher
from broker.topic_admin import place, topic_records
from metadata.controller import PRODUCER_ID_BLOCK, LocalController
from metadata.metadata_cache import MetadataCache
from replication.internal_topics import InternalTopics
from replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.server")


class ProducerIdManager:
    """Hands out producer ids from blocks the controller allocates (Kafka's ProducerIdManager), so ids stay unique
    across restarts (and, in the cluster, across brokers) without a metadata write per id."""

    def __init__(self, controller, broker_id: int):
        self.controller, self.broker_id = controller, broker_id
        self._next = self._end = 0

    def next_producer_id(self) -> int:
        if self._next >= self._end:
            self._next = self.controller.allocate_producer_ids(self.broker_id)
            self._end = self._next + PRODUCER_ID_BLOCK
        pid = self._next
        self._next += 1
        return pid


class Broker:
    """Everything a handler needs: config, the controller and the metadata cache, partitions, groups, sessions."""

    def __init__(self, config):
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = config.cluster_id()
        self.handlers = load_handlers()
        config.log_dir.mkdir(parents=True, exist_ok=True)
        self.controller = LocalController(config.log_dir, self.node_id)
        self.topics = MetadataCache(self.controller.image)
        self.controller.add_publisher(self.topics.update)
        self.producer_ids = ProducerIdManager(self.controller, self.node_id)
        self.replicas = ReplicaManager(config, self.topics, create_topic=self.create_internal_topic)
        # Tiered storage (KIP-405) and the Prometheus endpoint (metrics.port, -1 = off)
        from prometheus_client import CollectorRegistry
        self.metrics_registry = CollectorRegistry()
        self._metrics_server = None
        self.remote_log_manager = None
        if config.get_bool("remote.log.storage.system.enable"):
            from storage.tiered.remote_log_manager import RemoteLogManager
            self.remote_log_manager = RemoteLogManager(config, self.replicas, InternalTopics(self.replicas),
                                                       registry=self.metrics_registry)
            self.replicas.remote_log_manager = self.remote_log_manager
        self.groups = GroupCoordinator(config, replicas=self.replicas)
        self.controller.add_publisher(MetadataPublisher(self.replicas, self.groups))
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
        self.max_request_size = config.get_int("socket.request.max.bytes")
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.AbstractServer | None = None

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]):
        """Internal topics (`__consumer_offsets`, `__remote_log_metadata`) go through the controller like any other."""
        existing = self.topics.get(name)
        if existing is not None:
            return existing
        self.controller.submit(topic_records(name, place(self, partitions, 1), configs))
        return self.topics.get(name)

    async def start(self) -> None:
        host, port = self.config.advertised
        self.controller.register_broker(self.config.get("broker.rack") or None, host, port)
        self.replicas.startup()
        if self.remote_log_manager is not None:
            self.remote_log_manager.startup()
        self.replicas.start_background()
        if self.remote_log_manager is not None:
            self.remote_log_manager.start_background()
        metrics_port = self.config.get_int("metrics.port")
        if metrics_port >= 0:
            from prometheus_client import start_http_server
            self._metrics_server, _ = start_http_server(metrics_port, addr=self.config.listener[0],
                                                        registry=self.metrics_registry)
            log.info("metrics on http://%s:%d/metrics", self.config.listener[0], self._metrics_server.server_port)
        self.groups.start()
        host, port = self.config.listener
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: KafkaConnection(self), host, port, reuse_address=True,
                                                backlog=1024)
        log.info("Strata broker %d listening on %s:%d (cluster %s)", self.node_id, host, port, self.cluster_id)

    async def stop(self) -> None:
        self.groups.stop()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.transport.close()
        if self.remote_log_manager is not None:
            await self.remote_log_manager.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        self.replicas.shutdown()
