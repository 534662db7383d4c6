"""Kafka's limits on connections and on request memory, with Kafka's names and defaults (docs/configuration.md):
`max.connections` (also per listener as `listener.name.<l>.max.connections`), `max.connections.per.ip`,
`max.connections.per.ip.overrides` (Kafka's ConnectionQuotas) and `queued.max.request.bytes` (Kafka's
SimpleMemoryPool, non-strict). The socket server's Acceptor and KafkaConnection apply them; this module keeps the
counts and says yes or no, so it holds no sockets."""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import deque

from broker.security.listeners import listener_setting

INT_MAX = 2**31 - 1
SMALL_FRAME = 64 * 1024      # frames up to this size never wait for the request memory pool (RequestMemoryPool)


def parse_ip_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides` ("host:count,host:count"), as Kafka's getMap: host -> count."""
    out: dict[str, int] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().lstrip("-").isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        out[host] = int(count)
    return out


def _addresses(host: str) -> list[str]:
    """The addresses a host of the overrides stands for (Kafka resolves it once, with InetAddress.getByName)."""
    try:
        return [normal_ip(host)]
    except ValueError:
        pass
    try:
        return sorted({normal_ip(ai[4][0]) for ai in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})
    except (socket.gaierror, UnicodeError) as e:
        raise ValueError(f"max.connections.per.ip.overrides contains invalid addresses: {host} ({e})") from None


def normal_ip(ip: str) -> str:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped                         # a dual-stack socket's view of an IPv4 client
    return str(addr)


def validate(config) -> None:
    """Kafka's start-up checks (KafkaConfig): the limits are integers >= 0, and max.connections.per.ip may be 0
    only when overrides let some address in. Unlike Kafka, queued.max.request.bytes may be below
    socket.request.max.bytes: a larger request is still read when it is the only one (the pool is not strict)."""
    for key in ("max.connections", "max.connections.per.ip", "queued.max.request.bytes",
                "queued.max.request.stall.ms"):
        try:
            value = config.get_int(key)
        except ValueError:
            raise ValueError(f"{key}={config.get(key)!r} is not an integer") from None
        if value < 0 and not key.startswith("queued."):
            raise ValueError(f"{key}={value} must be at least 0")
    for key in [k for k in config.props if k.startswith("listener.name.") and k.endswith(".max.connections")]:
        if not config.props[key].strip().isdigit():
            raise ValueError(f"{key}={config.props[key]!r} is not an integer >= 0")
    overrides = parse_ip_overrides(config.get("max.connections.per.ip.overrides"))
    for host in overrides:
        _addresses(host)                                # an unknown host name fails here, with a message
    if config.get_int("max.connections.per.ip") == 0 and not overrides:
        raise ValueError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                         "property is set.")


class ConnectionQuotas:
    """Kafka's ConnectionQuotas for an event loop. An Acceptor accepts a connection, then waits for a slot
    (`wait_for_slot`: the listener's limit, then the broker-wide max.connections) before it counts it, so further
    clients wait in the listen backlog, as Kafka's acceptor thread blocks in waitForConnectionSlot. `inc` then
    refuses an address already at its max.connections.per.ip (or override): Kafka's TooManyConnectionsException,
    the connection closed at once. With more than one listener the inter-broker listener is protected: it does not
    wait for the broker-wide limit, and when its connections push the total above it the least recently active
    connections of the other listeners are closed (Kafka's closeExcessConnections)."""

    def __init__(self, config, listeners):
        validate(config)
        self.max_connections = config.get_int("max.connections")
        self.per_ip = config.get_int("max.connections.per.ip")
        self.per_ip_overrides: dict[str, int] = {}
        for host, count in parse_ip_overrides(config.get("max.connections.per.ip.overrides")).items():
            for ip in _addresses(host):
                self.per_ip_overrides[ip] = count
        names = [lst.name for lst in listeners.listeners]
        self.listener_max = {n: int(listener_setting(config, n, "max.connections")) for n in names}
        self.listener_counts = {n: 0 for n in names}
        self.protected = listeners.inter_broker if len(names) > 1 else None   # Kafka: listenerCounts.size > 1
        # A listener of controller.listener.names of its own is outside these limits altogether: Kafka serves it
        # from the controller's SocketServer, so clients filling max.connections never delay a heartbeat
        self.exempt = {listeners.controller} - {listeners.inter_broker} if len(names) > 1 else set()
        self.limited = (self.max_connections < INT_MAX or self.per_ip < INT_MAX or bool(self.per_ip_overrides)
                        or any(n < INT_MAX for n in self.listener_max.values()))
        self.counts: dict[str, int] = {}
        self.total = 0
        self.rejected = 0                                # over max.connections.per.ip
        self._freed = asyncio.Event()
        self._waiting = 0                                # acceptors in wait_for_slot

    def slot_available(self, listener: str) -> bool:
        if self.listener_counts[listener] >= self.listener_max[listener]:
            return False
        return listener == self.protected or self.total < self.max_connections

    async def wait_for_slot(self, listener: str) -> None:
        """Returns at once (without yielding) when there is room, else when a connection closes and there is."""
        while not self.slot_available(listener):
            self._waiting += 1
            try:
                await self._freed.wait()
            finally:
                self._waiting -= 1

    def max_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.per_ip)

    def inc(self, listener: str, ip: str) -> bool:
        """Count a new connection; False (not counted) when its address is at its limit."""
        count = self.counts.get(ip, 0)
        if count >= self.max_for(ip):
            self.rejected += 1
            return False
        self.counts[ip] = count + 1
        self.total += 1
        self.listener_counts[listener] += 1
        return True

    def dec(self, listener: str, ip: str) -> None:
        count = self.counts.get(ip, 0)
        if count <= 1:
            self.counts.pop(ip, None)
        else:
            self.counts[ip] = count - 1
        self.total -= 1
        self.listener_counts[listener] -= 1
        if self._waiting:                               # wake the acceptors waiting for a slot
            freed, self._freed = self._freed, asyncio.Event()
            freed.set()

    def exceeded(self) -> int:
        """How many connections are over max.connections (only the protected listener can push it there)."""
        return self.total - self.max_connections

    def close_excess(self, connections) -> None:
        """Close the least recently active connections of the unprotected listeners until the total is back at
        max.connections, counting those already closing (Kafka closes one per processor poll until it is)."""
        excess = self.exceeded()
        if excess <= 0:
            return
        closing = [c for c in connections if c.closed and c.quota_ip is not None]
        excess -= len(closing)
        if excess <= 0:
            return
        candidates = sorted((c for c in connections if not c.closed and c.listener is not None
                             and c.listener.name != self.protected), key=lambda c: c.last_active)
        for conn in candidates[:excess]:
            conn.close_quietly(f"max.connections={self.max_connections} reached with inter-broker listener "
                               f"{self.protected} connections; closing the least recently used")


class RequestMemoryPool:
    """Kafka's SimpleMemoryPool in non-strict mode, for the bytes of requests read from sockets: a frame's size is
    taken from the pool when its length prefix is read and given back once its handler has returned (Kafka
    releases the request buffer after KafkaApis.handle, so an acks=all Produce parked for its followers holds no
    pool memory and cannot stop the followers' fetches from being read). An allocation succeeds while anything is
    left, so one frame may take the pool below zero: a request larger than the pool is served when it is the only
    one. A connection whose allocation fails stops reading (Kafka mutes the channel) and waits in FIFO order; it
    is woken when memory comes back, before any connection that did not wait (so a few busy clients cannot starve
    the others; Kafka shuffles its read order for the same reason). Nothing is dropped or failed. `size` <= 0:
    unbounded, as Kafka's -1. Unlike Kafka's, a frame of at most SMALL_FRAME bytes is always let in (and charged):
    heartbeats, fetch and metadata requests never queue behind large produce frames, so clients that announce
    large frames and stall cannot hold up the cluster's own traffic while queued.max.request.stall.ms runs."""

    __slots__ = ("size", "available", "waiters", "_wake_scheduled", "_waking", "depleted_since", "depleted_seconds")

    def __init__(self, size: int):
        self.size = size
        self.available = size
        self.waiters: deque = deque()
        self._wake_scheduled = False
        self._waking = False
        self.depleted_since: float | None = None       # monotonic time the current dry spell began
        self.depleted_seconds = 0.0                    # Kafka's MemoryPoolDepletedTimeTotal, in seconds

    @property
    def bounded(self) -> bool:
        return self.size > 0

    def try_allocate(self, n: int) -> bool:
        if self.size <= 0 or n <= SMALL_FRAME or (self.available > 0 and (not self.waiters or self._waking)):
            self.available -= n
            return True
        if self.available <= 0 and self.depleted_since is None:
            self.depleted_since = time.monotonic()
        return False

    def release(self, n: int) -> None:
        self.available += n
        if self.available > 0:
            if self.depleted_since is not None:
                self.depleted_seconds += time.monotonic() - self.depleted_since
                self.depleted_since = None
            self._schedule_wake()

    def wait(self, conn) -> None:
        self.waiters.append(conn)
        if self.available > 0:
            self._schedule_wake()

    def _schedule_wake(self) -> None:
        if self.waiters and not self._wake_scheduled:
            self._wake_scheduled = True                     # not from inside another connection's handler
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        self._waking = True
        try:
            while self.waiters and self.available > 0:
                conn = self.waiters.popleft()
                if not conn.closed:
                    conn.memory_available()           # allocates, or waits again at the back
        finally:
            self._waking = False

    def used(self) -> int:
        return self.size - self.available if self.size > 0 else 0


class SocketLimitsCollector:
    """Prometheus: Kafka's MemoryPoolAvailable / MemoryPoolUsed gauges, MemoryPoolDepletedTimeTotal, and the
    socket-server connection-count per listener (docs/metrics.md)."""

    def __init__(self, quotas: ConnectionQuotas, pool: RequestMemoryPool):
        self.quotas, self.pool = quotas, pool

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        pool = self.pool
        yield GaugeMetricFamily("kafka_network_socketserver_memory_pool_available", "MemoryPoolAvailable: bytes left "
                                "in the queued.max.request.bytes pool (negative while one request overshoots it)",
                                pool.available if pool.bounded else INT_MAX)
        yield GaugeMetricFamily("kafka_network_socketserver_memory_pool_used", "MemoryPoolUsed: bytes of requests "
                                "read and not yet handled", pool.used())
        depleted = pool.depleted_seconds
        if pool.depleted_since is not None:
            depleted += time.monotonic() - pool.depleted_since
        yield CounterMetricFamily("kafka_server_socket_server_metrics_memory_pool_depleted_time_seconds",
                                  "MemoryPoolDepletedTimeTotal: time the pool had nothing left and connections "
                                  "stopped reading", depleted)
        count = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count", "connection-count: open "
                                  "connections per listener", labels=["listener"])
        for name, n in self.quotas.listener_counts.items():
            count.add_metric([name], n)
        yield count
        yield CounterMetricFamily("kafka_server_socket_server_metrics_connections_rejected",
                                  "connections closed at once for max.connections.per.ip", self.quotas.rejected)
