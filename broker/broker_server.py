"""The broker: wires configuration, the metadata image, the partition layer (replication/), tiered storage, groups
and the socket server together, and runs their start-up and shutdown in order (Kafka's BrokerServer)."""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from broker.fetch_session import FetchSessionCache
from broker.replica_selector import load_selector
from broker.security.authorizer import load_authorizer
from broker.groups.classic.group_coordinator import GroupCoordinator
from broker.handlers import load_handlers
from broker.socket_limits import ConnectionQuotas, RequestMemoryPool, SocketLimitsCollector
from broker.quotas import ClientQuotas
from broker.socket_server import MAX_IN_FLIGHT, KafkaConnection, listen
from broker.metadata_publisher import MetadataPublisher
from broker.topic_admin import create_through_controller, place, topic_records
from broker.broker_lifecycle import BrokerLifecycle
from broker.controller_channel import ControllerChannel, ControllerUnavailable
from broker.security.broker_security import BrokerSecurity
from metadata.cluster_control import ClusterControl
from metadata.controller import PRODUCER_ID_BLOCK, LocalController
from metadata.object_store_controller import ObjectStoreController
from metadata.reachability import ReachabilityReports
from protocol.client import BrokerConnection
from protocol.errors import ErrorCode
from replication.alter_partition_manager import AlterPartitionManager
from replication.replica_fetcher import FetchSettings, ReplicaFetcherManager
from storage.objectstore.object_store import ObjectNotFound, PreconditionFailed, open_object_store, until_answered
from metadata.metadata_cache import MetadataCache
from replication.internal_topics import InternalTopics
from replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.server")


class ProducerIdManager:
    """Hands out producer ids from blocks the controller allocates (Kafka's ProducerIdManager), so ids stay unique
    across restarts and across brokers without a metadata write per id. `allocate()` returns the first id of a new
    block of PRODUCER_ID_BLOCK, or -1 when no controller could give one (the client retries)."""

    def __init__(self, allocate):
        self.allocate = allocate
        self._next = self._end = 0
        self._lock = asyncio.Lock()

    async def next_producer_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                start = await self.allocate()
                if start < 0:
                    return -1
                self._next, self._end = start, start + PRODUCER_ID_BLOCK
            pid = self._next
            self._next += 1
            return pid


class Broker:
    """Everything a handler needs: config, the controller and the metadata cache, partitions, groups, sessions.

    One broker (no `metadata.log.storage.url`): the LocalController keeps the metadata log in log.dirs. In a
    cluster: the ObjectStoreController follows the metadata log in the object store (and campaigns for the lease
    when this node has the controller role), the broker registers and heartbeats (BrokerLifecycle), followers fetch
    from leaders (ReplicaFetcherManager), leaders send ISR changes (AlterPartitionManager), and admin requests go
    to the active controller (ControllerChannel)."""

    def __init__(self, config):
        self.config = config
        self.node_id = config.node_id
        self.cluster_mode = config.cluster_mode
        self.cluster_id = config.get("cluster.id") if self.cluster_mode else config.cluster_id()
        self.handlers = load_handlers()
        self.security = BrokerSecurity(config)        # listeners, TLS, SASL (docs/security.md)
        config.log_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_control = None
        self.lifecycle = None
        if self.cluster_mode:
            self.metadata_store = open_object_store(config.get(config.METADATA_STORE_PREFIX + "url"),
                                                    **config.store_options(config.METADATA_STORE_PREFIX))
            roles = {r.strip() for r in config.get("process.roles").split(",")}
            self.controller = ObjectStoreController(
                self.metadata_store, self.node_id, controller_role="controller" in roles,
                lease_timeout=config.get_int("controller.quorum.fetch.timeout.ms") / 1000,
                poll_interval=config.get_int("metadata.log.poll.interval.ms") / 1000,
                snapshot_bytes=config.get_int("metadata.log.max.record.bytes.between.snapshots"))
            self.reachability = ReachabilityReports(self.metadata_store, self.controller.log.prefix, self.node_id)
            if "controller" in roles:
                self.cluster_control = ClusterControl(self.controller, config.get_int("broker.session.timeout.ms"),
                                                      reports=self.reachability)
        else:
            self.controller = LocalController(config.log_dir, self.node_id)
        self.topics = MetadataCache(self.controller.image)
        self.security.topics = self.topics
        self.controller.add_publisher(self.topics.update)
        lc = self.security.listeners
        own = lc.by_name(lc.controller)
        self.controller_channel = ControllerChannel(self.node_id, self.topics,
                                                    (lc.advertised_of(own.name).host, own.port),
                                                    listener=lc.controller, security=self.security.controller)
        self.producer_ids = ProducerIdManager(self._allocate_producer_ids)
        self.replicas = ReplicaManager(config, self.topics, create_topic=self.create_internal_topic)
        from prometheus_client import CollectorRegistry
        self.metrics_registry = CollectorRegistry()
        from broker.broker_metrics import BrokerStateCollector, RequestErrors, RequestTimes
        self.request_times = RequestTimes(self.request_name, max(self.handlers))
        self.metrics_registry.register(self.request_times)
        self.request_errors = RequestErrors(self.request_name, max(self.handlers))
        self.metrics_registry.register(self.request_errors)
        self.metrics_registry.register(BrokerStateCollector(self))
        from broker.group_metrics import GroupMetricsCollector
        self.group_metrics = GroupMetricsCollector(self)
        self.metrics_registry.register(self.group_metrics)
        from replication.traffic_metrics import PRICE_DEFAULTS, TrafficMetrics
        self.traffic = TrafficMetrics(self.metrics_registry, {k: float(config.get(k)) for k in PRICE_DEFAULTS})
        self.wal_reader = None
        if self.cluster_mode:
            self._start_wal(config)
            self.lifecycle = BrokerLifecycle(self.node_id, self.controller_channel, self.topics,
                                             cluster_id=self.cluster_id, rack=config.get("broker.rack") or None,
                                             endpoint=self._advertised_endpoints(with_protocol=True),
                                             heartbeat_interval_ms=config.get_int("broker.heartbeat.interval.ms"),
                                             session_timeout_ms=config.get_int("broker.session.timeout.ms"),
                                             reports=self.reachability)
            settings = FetchSettings.from_config(config)
            settings.security = self.security.inter_broker
            self.replicas.fetchers = ReplicaFetcherManager(settings, self.replicas,
                                                           self._endpoint_of, self.wal_reader, self.traffic)
            self.replicas.alter_partitions = AlterPartitionManager(self.node_id, lambda: self.lifecycle.broker_epoch,
                                                                   self.controller_channel.send)
        # Tiered storage (KIP-405) and the Prometheus endpoint (metrics.port, -1 = off)
        self._metrics_server = None
        self.remote_log_manager = None
        if config.get_bool("remote.log.storage.system.enable"):
            from storage.tiered.remote_log_manager import RemoteLogManager
            internal = InternalTopics(self.replicas, self._produce_to_leader if self.cluster_mode else None)
            self.remote_log_manager = RemoteLogManager(config, self.replicas, internal,
                                                       registry=self.metrics_registry)
            self.replicas.remote_log_manager = self.remote_log_manager
        self.groups = GroupCoordinator(config, replicas=self.replicas)
        from broker.transactions.coordinator import TransactionCoordinator
        self.transactions = TransactionCoordinator(config, self.replicas, self.producer_ids, self.groups,
                                                   send_markers=self._send_markers if self.cluster_mode else None,
                                                   registry=self.metrics_registry)
        self.transactions.markers.local_id = self.node_id
        self.transactions.markers.groups = self.groups
        self._txn_topic_task: asyncio.Task | None = None
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
        self.replica_selector = load_selector(config.get("replica.selector.class"))
        self.authorizer = load_authorizer(config)
        self.max_request_size = config.get_int("socket.request.max.bytes")
        # max.connections* and queued.max.request.bytes (broker/socket_limits.py, docs/configuration.md)
        self.quotas = ConnectionQuotas(config, self.security.listeners)
        self.memory_pool = RequestMemoryPool(config.get_int("queued.max.request.bytes"))
        self.client_quotas = ClientQuotas.from_config(config)     # producer/consumer byte rates (broker/quotas.py)
        from broker.quota_metrics import ClientQuotaCollector
        self.metrics_registry.register(ClientQuotaCollector(self.client_quotas))
        self.metrics_registry.register(SocketLimitsCollector(self.quotas, self.memory_pool))
        self.connections: set[KafkaConnection] = set()
        self._servers: list = []             # per listener: an Acceptor, or the loop's server when no limit is set
        self._reaper: asyncio.Task | None = None
        self._stall_reaper: asyncio.Task | None = None
        self._jwks_refresh: asyncio.Task | None = None
        self._starting: asyncio.Task | None = None
        # Set when the log dir fails (replication/replica_manager.py log_dir_failed): the process then stops, as Kafka
        # halts when its last log dir fails, and exits non-zero (broker/cli.py).
        self.log_dir_failed = asyncio.Event()
        self.replicas.on_log_dir_offline = self.log_dir_failed.set
        self._peer_connections: dict[int, BrokerConnection] = {}
        self.started_at = 0.0                   # event-loop time of start()

    def _advertised_endpoints(self, with_protocol: bool = False) -> list[tuple]:
        """(listener name, host, port[, security protocol code]) of every advertised listener: what registration
        records, so each client is answered with the endpoints of the listener it came in on."""
        codes = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
        return [(a.name, a.host, a.port, codes[a.security_protocol]) if with_protocol else (a.name, a.host, a.port)
                for a in self.security.listeners.advertised]

    def request_name(self, api_key: int) -> str:
        """Kafka's ApiKeys name of an API (Produce, ListOffsets, ...), from its handler module's name."""
        mod = self.handlers.get(api_key)
        return "".join(w.capitalize() for w in mod.__name__.rsplit(".", 1)[1].split("_")) if mod else str(api_key)

    def _start_wal(self, config) -> None:
        """With a fast store (remote.wal.storage.url): the WAL combiner of this broker's leaders and the WAL reader
        of its followers (KIP-1176)."""
        urls = config.wal_store_urls()
        if not urls:
            return
        from replication.remote_wal import RemoteWalManager
        from replication.wal_follower import WalReader
        from storage.wal.wal_stores import WalStores
        stores = WalStores(urls, config.wal_store_options(), config.get("broker.rack"))
        self.replicas.remote_wal = RemoteWalManager(config, stores, self.traffic, self.node_id)
        self.wal_reader = WalReader(stores, self.traffic,
                                    timeout=config.get_int("remote.wal.follower.stall.timeout.ms") / 1000)
        log.info("WAL replication on: uploads to fast store %r (%s)", stores.local_name, urls[stores.local_name])

    def peer_connection(self, broker_id: int) -> BrokerConnection:
        """This broker's connection to another one (internal-topic produces, group lag's end offsets)."""
        conn = self._peer_connections.get(broker_id)
        endpoint = self._endpoint_of(broker_id)
        if conn is None or (conn.host, conn.port) != endpoint:
            conn = self._peer_connections[broker_id] = BrokerConnection(*endpoint,
                                                                        client_id=f"strata-broker-{self.node_id}",
                                                                        security=self.security.inter_broker)
        return conn

    async def _produce_to_leader(self, leader_id: int, topic: str, partition: int, batch: bytes) -> int:
        """One batch to the leader of an internal topic's partition (acks=all); the partition's error code."""
        resp = await self.peer_connection(leader_id).send(0, 8, {
            "transactional_id": None, "acks": -1, "timeout": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
        return int(resp.responses[0].partition_responses[0].error_code)

    async def _send_markers(self, broker_id: int, markers) -> list[dict]:
        """WriteTxnMarkers (v1) to the broker leading the partitions; per marker {(topic, partition): error}."""
        resp = await self.peer_connection(broker_id).send(27, 1, {"markers": [
            {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
             "coordinator_epoch": coordinator_epoch,
             "topics": [{"name": t, "partition_indexes": [p for tt, p in parts if tt == t]}
                        for t in dict.fromkeys(t for t, _ in parts)]}
            for pid, epoch, commit, coordinator_epoch, parts in markers]})
        return [{(t.name, p.partition_index): int(p.error_code) for t in m.topics for p in t.partitions}
                for m in resp.markers]

    def ensure_transaction_topic(self) -> None:
        """`__transaction_state` is created when first needed (FindCoordinator, InitProducerId, a Metadata request),
        with its own settings, as Kafka's AutoTopicCreationManager does; the coordinator loads what it leads then."""
        from broker.transactions.coordinator import TXN_TOPIC
        if self.topics.get(TXN_TOPIC) is not None:
            return
        if not self.cluster_mode:
            self.create_internal_topic(TXN_TOPIC, *self.internal_topic(TXN_TOPIC)[:2])
            return
        if self._txn_topic_task is None or self._txn_topic_task.done():
            self._txn_topic_task = asyncio.get_running_loop().create_task(self.ensure_internal_topic(TXN_TOPIC))

    def _endpoint_of(self, broker_id: int) -> tuple[str, int]:
        reg = self.topics.image.brokers.get(broker_id)
        if reg is None:
            raise KeyError(f"broker {broker_id} is not registered")
        endpoint = reg.endpoint(self.security.listeners.inter_broker)
        if endpoint is None:
            raise KeyError(f"broker {broker_id} has no {self.security.listeners.inter_broker} listener")
        return endpoint

    async def _allocate_producer_ids(self) -> int:
        if not self.cluster_mode:
            return await self.controller.allocate_producer_ids(self.node_id)
        try:
            resp = await self.controller_channel.send(67, 0, {"broker_id": self.node_id,
                                                              "broker_epoch": self.lifecycle.broker_epoch})
        except ControllerUnavailable as e:
            log.warning("no producer ids: %s", e)
            return -1
        return resp.producer_id_start if resp.error_code == 0 else -1

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]):
        """Internal topics (`__consumer_offsets`, `__remote_log_metadata`) go through the controller like any other.
        In a cluster they are created before their users start (ensure_internal_topic), so this only finds them."""
        existing = self.topics.get(name)
        if existing is not None:
            return existing
        if self.cluster_mode:
            raise RuntimeError(f"internal topic {name} does not exist yet")
        self.controller.append(topic_records(name, place(self.topics.image, partitions, 1), configs))
        return self.topics.get(name)

    def internal_topic(self, name: str) -> tuple[int, dict[str, str], int] | None:
        """(partitions, configs, replication factor) of an internal topic this broker's services keep their state
        in, or None for any other name. Whoever asks first (the broker starting its services, or a client's
        Metadata request that allows auto-creation) creates it with these, never with num.partitions and
        default.replication.factor (Kafka's AutoTopicCreationManager.creatableTopic)."""
        from broker.groups.metadata_store import OFFSETS_TOPIC
        if name == OFFSETS_TOPIC:
            store = self.groups.store
            return store.num_partitions, store.topic_configs(), self.config.get_int("offsets.topic.replication.factor")
        from broker.transactions.coordinator import TXN_TOPIC
        if name == TXN_TOPIC:
            txn = self.transactions
            rf = self.internal_replication_factor(self.config.get_int("transaction.state.log.replication.factor"))
            wanted = self.config.get_int("transaction.state.log.replication.factor")
            return txn.num_partitions, txn.topic_configs(rf if rf is not None else wanted), wanted
        if self.remote_log_manager is not None:
            from storage.tiered.remote_log_metadata import REMOTE_LOG_METADATA_TOPIC
            if name == REMOTE_LOG_METADATA_TOPIC:
                rlmm = self.remote_log_manager.rlmm
                return rlmm.num_partitions, rlmm.topic_configs(), \
                    self.config.get_int("remote.log.metadata.topic.replication.factor")
        return None

    def internal_replication_factor(self, wanted: int) -> int | None:
        """An internal topic's replication factor now: `wanted` once that many brokers are unfenced, None until then
        (callers answer COORDINATOR_NOT_AVAILABLE or LEADER_NOT_AVAILABLE meanwhile), as Kafka never creates
        `__consumer_offsets` with fewer replicas than offsets.topic.replication.factor: a cluster that started slowly
        would otherwise keep an under-replicated coordinator topic for good."""
        if not self.cluster_mode:
            return 1                             # one broker: its internal topics have one replica
        return wanted if len(self.topics.image.unfenced_brokers()) >= wanted else None

    async def ensure_internal_topic(self, name: str) -> None:
        """Cluster: create an internal topic through the controller (Kafka's AutoTopicCreationManager), with its
        own settings, once internal_replication_factor allows."""
        partitions, configs, wanted = self.internal_topic(name)
        while self.topics.get(name) is None:
            rf = self.internal_replication_factor(wanted)
            if rf is not None:
                err = await create_through_controller(self, name, partitions, rf, configs)
                if err == 0:
                    log.info("created internal topic %s: %d partitions, replication factor %d", name, partitions, rf)
                elif err not in (ErrorCode.topic_already_exists, ErrorCode.leader_not_available):
                    log.warning("creating internal topic %s failed: %s", name, ErrorCode(err).name)
            if self.topics.get(name) is None:
                await asyncio.sleep(0.2)

    async def start(self) -> None:
        self.started_at = asyncio.get_running_loop().time()
        if self.cluster_mode:
            await self._start_cluster_member()
        else:
            self.controller.register_broker(self.config.get("broker.rack") or None, self._advertised_endpoints())
            self._start_replicas()
            self._start_internal_users()
            await self._listen()

    def _start_replicas(self) -> None:
        publisher = MetadataPublisher(self.replicas, self.groups, self.config, self.traffic, self.transactions)
        publisher.load(self.topics.image)          # dynamic configs first: the logs open with them
        self.replicas.startup()
        self.controller.add_publisher(publisher)
        self.replicas.start_background()
        if self.replicas.remote_wal is not None:
            self.replicas.remote_wal.start()
        self._start_metrics()

    def _start_internal_users(self) -> None:
        if self.remote_log_manager is not None:
            self.remote_log_manager.startup()
            self.remote_log_manager.start_background()
        self.groups.start()
        self.transactions.start()

    async def _start_cluster_member(self) -> None:
        """Join the cluster: agree on the cluster id, follow the metadata log, listen (this node may be the
        controller its own registration goes to), register (which fences a previous incarnation of this broker),
        and only then open the replicas, with the image that registration produced."""
        self.cluster_id = await until_answered(lambda: ensure_cluster_id(self.metadata_store, self.cluster_id),
                                               "reading the cluster id", log)
        self.lifecycle.cluster_id = self.cluster_id
        await self.controller.start()
        if self.cluster_control is not None:
            self.cluster_control.start()
        await self._listen()
        self.lifecycle.start()
        self._starting = asyncio.create_task(self._join())

    async def _join(self) -> None:
        await self.lifecycle.registered.wait()
        await self.controller_channel.wait_for_offset(self.lifecycle.broker_epoch, timeout=3600)
        self._start_replicas()
        from broker.groups.metadata_store import OFFSETS_TOPIC
        await self.ensure_internal_topic(OFFSETS_TOPIC)
        if self.remote_log_manager is not None:
            from storage.tiered.remote_log_metadata import REMOTE_LOG_METADATA_TOPIC
            await self.ensure_internal_topic(REMOTE_LOG_METADATA_TOPIC)
        self._start_internal_users()
        log.info("broker %d joined the cluster", self.node_id)

    def _start_metrics(self) -> None:
        metrics_port = self.config.get_int("metrics.port")
        if metrics_port >= 0:
            self.group_metrics.start()
            from prometheus_client import start_http_server
            self._metrics_server, _ = start_http_server(metrics_port, addr=self.config.listener[0],
                                                        registry=self.metrics_registry)
            log.info("metrics on http://%s:%d/metrics", self.config.listener[0], self._metrics_server.server_port)

    async def _listen(self) -> None:
        """One accept loop per listener (Kafka's Acceptor per endpoint), TLS on SSL and SASL_SSL ones."""
        loop = asyncio.get_running_loop()
        for lst in self.security.listeners.listeners:
            self._servers.append(await listen(self, lst, self.security.server_contexts.get(lst.name), backlog=1024))
            log.info("Strata broker %d listening on %s://%s:%d (%s; cluster %s)", self.node_id, lst.name,
                     lst.host, lst.port, lst.security_protocol, self.cluster_id)
        self._reaper = loop.create_task(self._close_idle_connections())
        self._stall_reaper = loop.create_task(self._evict_stalled_frames())
        if self.security.jwks_refreshes:
            self._jwks_refresh = loop.create_task(self.security.refresh_jwks())

    async def _close_idle_connections(self) -> None:
        """Close connections idle for connections.max.idle.ms (Kafka's Selector does; -1 never), which also ends
        connections that never finish authenticating."""
        idle = self.config.get_int("connections.max.idle.ms") / 1000
        if idle < 0:
            return
        while True:
            await asyncio.sleep(max(0.05, min(idle / 4, 30.0)))
            cutoff = time.monotonic() - idle
            for conn in [c for c in self.connections if c.last_active < cutoff and not c.queue]:
                conn.close_quietly(f"idle for more than connections.max.idle.ms={int(idle * 1000)}")

    async def _evict_stalled_frames(self) -> None:
        """While connections wait for queued.max.request.bytes memory, close those whose partly read frame holds
        pool memory and has had no byte for queued.max.request.stall.ms (Strata): a frame's declared size is taken
        from the pool when its length is read (Kafka's accounting, which cannot deadlock), so without this a client
        that announces large frames and stops sending would stop every connection's reading, inter-broker ones
        included, until connections.max.idle.ms. A client that keeps sending, however slowly, is never closed, nor one
        whose reading the broker paused on its own account (a quota's mute, MAX_IN_FLIGHT requests being handled):
        that silence is not the client's. One paused because it does not read its answers is."""
        stall = self.config.get_int("queued.max.request.stall.ms") / 1000
        pool = self.memory_pool
        if not pool.bounded or stall <= 0:
            return
        while True:
            await asyncio.sleep(min(1.0, stall / 4))
            if not any(not c.closed for c in pool.waiters):
                continue
            cutoff = time.monotonic() - stall
            for conn in [c for c in self.connections if c.frame_charge and c.last_active < cutoff and
                         c.reading_since < cutoff and c.throttle_timer is None and len(c.queue) < MAX_IN_FLIGHT]:
                conn.close("stalled for more than queued.max.request.stall.ms=%d in a %d-byte frame (%d read) "
                           "while the queued.max.request.bytes pool is empty", int(stall * 1000), conn.frame_size,
                           len(conn.frame or b""))
                conn.transport.abort()          # its unsent replies are not worth holding the socket for

    async def stop(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
        if self.lifecycle is not None:
            await self.lifecycle.stop(controlled=True)
        if self.cluster_mode:                 # no more metadata (and so no new fetchers) from here on
            if self.cluster_control is not None:
                await self.cluster_control.stop()
            await self.controller.stop()
        if self.replicas.fetchers is not None:
            await self.replicas.fetchers.shutdown()
        self.groups.stop()
        self.transactions.stop()
        if self._txn_topic_task is not None:
            self._txn_topic_task.cancel()
        for server in self._servers:
            server.close()
        if self._reaper is not None:
            self._reaper.cancel()
            self._stall_reaper.cancel()
        if self._jwks_refresh is not None:
            self._jwks_refresh.cancel()
        for conn in list(self.connections):
            conn.transport.close()
        if self.remote_log_manager is not None:
            await self.remote_log_manager.stop()
        if self.replicas.remote_wal is not None:
            await self.replicas.remote_wal.stop()
            await self.replicas.remote_wal.stores.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        if self.cluster_mode:
            self.controller_channel.close()
            for conn in self._peer_connections.values():
                conn.close()
        self.replicas.shutdown()


async def ensure_cluster_id(store, configured: str) -> str:
    """The cluster id lives in the metadata store, written once with put_if_absent: every broker that joins reads
    the same one (a configured cluster.id must match it)."""
    key = "metadata/cluster-id"
    try:
        data = await store.get(key)
    except ObjectNotFound:
        try:
            await store.put_if_absent(key, (configured or uuid.uuid4().hex[:22]).encode())
        except PreconditionFailed:
            pass
        data = await store.get(key)
    stored = data.decode()
    if configured and configured != stored:
        raise ValueError(f"cluster.id {configured} does not match the cluster's {stored} in the metadata store")
    return stored
