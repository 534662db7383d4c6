"""The admin tools' way to a cluster: the Kafka protocol to any broker of `--bootstrap-server`, as Kafka's own
command-line tools do, so they work against Apache Kafka too. Requests that must reach the controller are sent to
any broker, which forwards them (KIP-590)."""
from __future__ import annotations

import asyncio

from protocol.client import BrokerConnection, ConnectionFailed
from protocol.errors import ErrorCode


class AdminError(Exception):
    """Something the user must be told; the tools print it and exit 1."""


def error_name(code: int) -> str:
    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"error {int(code)}"


class AdminClient:
    @classmethod
    def for_args(cls, args) -> "AdminClient":
        """The client of a tool's `--bootstrap-server` and `--command-config` (Kafka's client security settings:
        security.protocol, ssl.*, sasl.mechanism, sasl.jaas.config)."""
        from protocol.client_security import ClientSecurity, load_properties
        try:
            security = ClientSecurity.from_properties(load_properties(getattr(args, "command_config", None)))
        except (OSError, ValueError) as e:
            raise AdminError(f"--command-config: {e}") from None
        return cls(args.bootstrap_server, security=security)

    def __init__(self, bootstrap: str, timeout: float = 30.0, security=None):
        self.security = security
        self.servers = []
        for s in bootstrap.split(","):
            host, _, port = s.strip().rpartition(":")
            if not host or not port.isdigit():
                raise AdminError(f"bad --bootstrap-server {s.strip()!r}: expected host:port")
            self.servers.append((host, int(port)))
        self.timeout = timeout
        self._conn: BrokerConnection | None = None
        self._brokers: dict[tuple[str, int], BrokerConnection] = {}

    async def send(self, api_key: int, version: int, body):
        """The request to the first reachable bootstrap broker; its decoded response."""
        last = None
        for conn in ([self._conn] if self._conn is not None else []) + \
                [BrokerConnection(h, p, client_id="strata-admin", security=self.security) for h, p in self.servers]:
            try:
                resp = await conn.send(api_key, version, body, timeout=self.timeout)
                if self._conn not in (None, conn):
                    conn.close()              # a concurrent request got there first: keep one connection
                else:
                    self._conn = conn
                return resp
            except (ConnectionFailed, OSError, asyncio.TimeoutError) as e:
                last = e
                conn.close()
                self._conn = None if conn is self._conn else self._conn
        raise AdminError(f"no broker of {', '.join(f'{h}:{p}' for h, p in self.servers)} answered: {last}")

    async def send_to(self, host: str, port: int, api_key: int, version: int, body):
        """The request to one given broker (a group's coordinator, a partition's leader), over a kept connection."""
        conn = self._brokers.get((host, port)) or self._brokers.setdefault(
            (host, port), BrokerConnection(host, port, client_id="strata-admin", security=self.security))
        try:
            return await conn.send(api_key, version, body, timeout=self.timeout)
        except (ConnectionFailed, OSError, asyncio.TimeoutError) as e:
            if self._brokers.get((host, port)) is conn:
                del self._brokers[(host, port)]
            conn.close()
            raise AdminError(f"broker {host}:{port} did not answer: {e}") from None

    async def send_to_node(self, node_id: int, api_key: int, version: int, body):
        """The request to broker `node_id`, found through Metadata, for what only that broker can answer (its own
        configs in DescribeConfigs)."""
        md = await self.metadata([])
        b = next((b for b in md.brokers if b.node_id == node_id), None)
        if b is None:
            raise AdminError(f"Broker {node_id} is not in the cluster (brokers: "
                             f"{', '.join(str(b.node_id) for b in sorted(md.brokers, key=lambda b: b.node_id))})")
        return await self.send_to(b.host, b.port, api_key, version, body)

    async def metadata(self, topics: list[str] | None = None):
        return await self.send(3, 12, {"topics": None if topics is None else [{"name": t} for t in topics],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        for conn in self._brokers.values():
            conn.close()
