"""The broker: wires configuration, the metadata image, the partition layer (replication/), tiered storage, groups
and the socket server together, and runs their start-up and shutdown in order (Kafka's BrokerServer)."""
from __future__ import annotations

import asyncio
import logging

from broker.fetch_session import FetchSessionCache
from broker.groups.classic.group_coordinator import GroupCoordinator
from broker.handlers import load_handlers
from broker.socket_server import KafkaConnection
from metadata.topic_store import TopicStore
from replication.internal_topics import InternalTopics
from replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.server")


class Broker:
    """Everything a handler needs: config, topics, partitions, fetch sessions."""

    def __init__(self, config):
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = config.cluster_id()
        self.handlers = load_handlers()
        self.topics = TopicStore(config.log_dir)
        self.replicas = ReplicaManager(config, self.topics, create_topic=self._create_topic_in_store)
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
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
        self.max_request_size = config.get_int("socket.request.max.bytes")
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.AbstractServer | None = None

    def _create_topic_in_store(self, name: str, partitions: int, configs: dict[str, str]):
        info = self.topics.create(name, partitions, configs)
        self.replicas.add_partitions(info, 0)
        return info

    async def start(self) -> None:
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
