"""The broker's way to the active controller (Kafka's NodeToControllerChannelManager): the controller is whichever
node the metadata image names, reached at the endpoint of its broker registration. Admin requests a client sent to
any broker are forwarded with their body bytes unchanged (Kafka forwards them in an Envelope), so the controller
validates and answers them exactly as if the client had asked it.

A node that is itself the active controller goes through its own listener too: one code path, and the request
is served by the same handler either way. (It uses its own listener address: it may not be registered yet.)
"""
from __future__ import annotations

import asyncio
import logging

from protocol import kio_codec
from protocol.client import BrokerConnection, ConnectionFailed
from protocol.errors import ErrorCode

log = logging.getLogger("strata.controller_channel")


class ControllerUnavailable(Exception):
    """No active controller is known, or it cannot be reached: retriable."""


class ControllerChannel:
    def __init__(self, node_id: int, topics, own_endpoint: tuple[str, int], *, request_timeout: float = 30.0,
                 listener: str = "", security=None):
        self.node_id = node_id
        self.own_endpoint = own_endpoint
        self.listener, self.security = listener, security    # controller.listener.names, and how to secure it
        self.topics = topics                     # the MetadataCache: image.controller_id and the registrations
        self.request_timeout = request_timeout
        self._conn: BrokerConnection | None = None
        self._conn_for: tuple | None = None

    def _connection(self) -> BrokerConnection:
        image = self.topics.image
        controller = image.controller_id
        if controller == self.node_id:
            endpoint = self.own_endpoint        # the controller registers itself through this, before it is known
        else:
            reg = image.brokers.get(controller)
            if reg is None:
                raise ControllerUnavailable(f"no reachable controller (controller id {controller})")
            endpoint = reg.endpoint(self.listener)
            if endpoint is None:
                raise ControllerUnavailable(f"controller {controller} has no {self.listener} listener")
        key = (controller, endpoint)
        if self._conn_for != key:
            if self._conn is not None:
                self._conn.close()
            self._conn = BrokerConnection(*endpoint, client_id=f"strata-broker-{self.node_id}", security=self.security)
            self._conn_for = key
        return self._conn

    async def send(self, api_key: int, version: int, body, *, timeout: float | None = None):
        """A request to the controller as a dict; its decoded response. ControllerUnavailable on failure."""
        try:
            return await self._connection().send(api_key, version, body, timeout=timeout or self.request_timeout)
        except ConnectionFailed as e:
            raise ControllerUnavailable(str(e)) from None

    async def forward(self, req) -> bytes:
        """A client's request, passed to the controller as it came inside an Envelope (KIP-590) that names the
        client's principal and address, so the controller authorizes the client; the controller's response body."""
        from broker.handlers.envelope import wrap
        try:
            resp = await self._connection().send(58, 0, wrap(req), timeout=self.request_timeout)
        except (ConnectionFailed, ControllerUnavailable) as e:
            raise ControllerUnavailable(str(e)) from None
        if resp.error_code == ErrorCode.not_controller:
            raise ControllerUnavailable(f"broker {self._conn_for[0]} is no longer the controller")
        if resp.error_code:
            raise RuntimeError(f"the controller refused a forwarded request: {resp.error_code.name} (the "
                               f"inter-broker principal needs CLUSTER_ACTION on the cluster)")
        return bytes(resp.response_data)[5 if req.flexible else 4:]

    async def wait_for_offset(self, offset: int, timeout: float = 10.0) -> bool:
        """Wait until this broker's image has applied the metadata log up to `offset`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.topics.image.offset < offset:
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._conn_for = None        # a request after this opens a new connection


async def forward(broker, req):
    """Kafka's request forwarding: a broker that is not the active controller passes an admin request on to it and
    returns its answer; then it reads the metadata log so its own image shows the change. Without a reachable
    controller it keeps trying until the request timeout, as Kafka's forwarding manager does."""
    deadline = asyncio.get_running_loop().time() + broker.controller_channel.request_timeout
    while True:
        try:
            body = await broker.controller_channel.forward(req)
            if len(body) >= 4 and kio_codec.throttle_time_first(req.api_key, req.api_version):
                # the controller's throttle (a controller mutation quota) mutes the client's connection here, as
                # the controller mutes only connections of its own clients
                req.throttle_ms = max(req.throttle_ms, int.from_bytes(body[:4], "big", signed=True))
            await broker.controller.refresh()
            return kio_codec.with_error_counts(req.api_key, req.api_version, body)   # counted as if answered here
        except ControllerUnavailable as e:
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"no controller to forward api key {req.api_key} to: {e}") from None
            await asyncio.sleep(0.1)
