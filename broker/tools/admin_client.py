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
    def __init__(self, bootstrap: str, timeout: float = 30.0):
        self.servers = []
        for s in bootstrap.split(","):
            host, _, port = s.strip().rpartition(":")
            if not host or not port.isdigit():
                raise AdminError(f"bad --bootstrap-server {s.strip()!r}: expected host:port")
            self.servers.append((host, int(port)))
        self.timeout = timeout
        self._conn: BrokerConnection | None = None
        self._nodes: dict[int, BrokerConnection] = {}

    async def send(self, api_key: int, version: int, body):
        """The request to the first reachable bootstrap broker; its decoded response."""
        last = None
        for conn in ([self._conn] if self._conn is not None else []) + \
                [BrokerConnection(h, p, client_id="strata-admin") for h, p in self.servers]:
            try:
                resp = await conn.send(api_key, version, body, timeout=self.timeout)
                self._conn = conn
                return resp
            except (ConnectionFailed, OSError, asyncio.TimeoutError) as e:
                last = e
                conn.close()
                self._conn = None if conn is self._conn else self._conn
        raise AdminError(f"no broker of {', '.join(f'{h}:{p}' for h, p in self.servers)} answered: {last}")

    async def metadata(self, topics: list[str] | None = None):
        return await self.send(3, 12, {"topics": None if topics is None else [{"name": t} for t in topics],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})

    async def send_to(self, node_id: int, api_key: int, version: int, body):
        """The request to broker `node_id` (found through Metadata), for requests only that broker can answer,
        such as DescribeConfigs of its own configs."""
        conn = self._nodes.get(node_id)
        if conn is None:
            md = await self.metadata([])
            b = next((b for b in md.brokers if b.node_id == node_id), None)
            if b is None:
                raise AdminError(f"Broker {node_id} is not in the cluster (brokers: "
                                 f"{', '.join(str(b.node_id) for b in sorted(md.brokers, key=lambda b: b.node_id))})")
            conn = self._nodes[node_id] = BrokerConnection(b.host, b.port, client_id="strata-admin")
        try:
            return await conn.send(api_key, version, body, timeout=self.timeout)
        except (ConnectionFailed, OSError, asyncio.TimeoutError) as e:
            self._nodes.pop(node_id, None).close()
            raise AdminError(f"broker {node_id} did not answer: {e}") from None

    def close(self) -> None:
        for conn in [self._conn, *self._nodes.values()]:
            if conn is not None:
                conn.close()
