"""An async Kafka client connection for broker-to-broker requests (Kafka's NetworkClient, cut to what a broker
needs): followers fetching from leaders, BrokerRegistration/BrokerHeartbeat/AlterPartition to the controller, and
admin requests forwarded to it. Requests are pipelined on one connection and matched by correlation id.

Bodies are either kio entities (encoded and decoded here) or raw bytes: a forwarded admin request keeps the
client's own body bytes, so no re-encoding happens on the way to the controller.
"""
from __future__ import annotations

import asyncio
import io
import itertools
import struct

from protocol import kio_codec
from protocol.wire import I32

_HEADER = struct.Struct(">hhi")


class ConnectionFailed(Exception):
    """The peer could not be reached, or the connection broke before the response came."""


def encode_request(api_key: int, version: int, body) -> bytes:
    schema = kio_codec.request_schema(api_key, version)
    out = io.BytesIO()
    kio_codec._writer(schema)(out, kio_codec.to_entity(schema, body))
    return out.getvalue()


def decode_response(api_key: int, version: int, data):
    schema = kio_codec.response_schema(api_key, version)
    entity, _ = kio_codec._reader(schema)(memoryview(bytes(data)).toreadonly(), 0)
    return entity


class BrokerConnection:
    """One connection to `host:port`, opened on first use and re-opened after a failure."""

    def __init__(self, host: str, port: int, client_id: str, *, connect_timeout: float = 5.0, security=None):
        self.host, self.port, self.client_id = host, port, client_id
        self.connect_timeout = connect_timeout
        self.security = security                 # protocol.client_security.ClientSecurity, None for PLAINTEXT
        self._session_end: float | None = None   # KIP-368: when the broker ends this connection's SASL session
        self._retired: set[asyncio.Task] = set()  # read loops of re-authenticated-away connections still answering
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._corr = itertools.count(1)
        self._read_task: asyncio.Task | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        cid = client_id.encode()
        self._client_id = struct.pack(">h", len(cid)) + cid

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    async def _connect(self) -> None:
        async with self._connecting:
            if self._writer is not None:
                return
            sec = self.security
            try:
                async with asyncio.timeout(self.connect_timeout):
                    reader, writer = await asyncio.open_connection(self.host, self.port,
                                                                   ssl=sec.ssl_context if sec else None)
            except (OSError, asyncio.TimeoutError) as e:
                raise ConnectionFailed(f"cannot connect to {self.host}:{self.port}: {e}") from None
            if sec is not None and sec.sasl_client is not None:
                from protocol.client_security import AuthenticationFailed
                from protocol.sasl import SaslAuthenticationFailed
                try:
                    async with asyncio.timeout(self.connect_timeout):
                        lifetime_ms = await self._authenticate(reader, writer)
                except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                    writer.close()
                    raise ConnectionFailed(f"SASL authentication with {self.host}:{self.port} failed: {e!r}") from None
                except AuthenticationFailed:
                    writer.close()
                    raise
                except SaslAuthenticationFailed as e:          # the broker's answers did not check out
                    writer.close()
                    raise AuthenticationFailed(f"{self.host}:{self.port}: {e.message}") from None
                except Exception as e:                         # an answer that does not decode
                    writer.close()
                    raise AuthenticationFailed(f"{self.host}:{self.port}: bad SASL answer: {e!r}") from None
                except BaseException:
                    writer.close()
                    raise
                # re-authenticate by reconnecting a little before the broker would close the session
                self._session_end = (asyncio.get_running_loop().time() + lifetime_ms * 0.85 / 1000
                                     if lifetime_ms > 0 else None)
            self._reader, self._writer = reader, writer
            self._read_task = asyncio.create_task(self._read_loop(reader, writer, self._pending))

    async def _authenticate(self, reader, writer) -> int:
        """SaslHandshake v1 then SaslAuthenticate v2 until the mechanism completes (before any other request, as
        Kafka's SaslClientAuthenticator does); the session lifetime the broker answers, in ms (0: none)."""
        from protocol.client_security import AuthenticationFailed
        sec = self.security
        client = sec.sasl_client()

        async def call(api_key: int, version: int, body):
            flexible = kio_codec.is_flexible(api_key, version)
            header = _HEADER.pack(api_key, version, 0) + self._client_id + (b"\x00" if flexible else b"")
            data = encode_request(api_key, version, body)
            writer.writelines([I32.pack(len(header) + len(data)), header, data])
            size = I32.unpack(await reader.readexactly(4))[0]
            frame = await reader.readexactly(size)
            return decode_response(api_key, version, memoryview(frame)[5 if flexible else 4:])

        hs = await call(17, 1, {"mechanism": sec.sasl_mechanism})
        if hs.error_code:
            raise AuthenticationFailed(f"{self.host}:{self.port} does not enable SASL mechanism "
                                       f"{sec.sasl_mechanism} (it enables {', '.join(hs.mechanisms)})")
        token = client.initial()
        while True:
            resp = await call(36, 2, {"auth_bytes": token})
            if resp.error_code:
                raise AuthenticationFailed(f"{self.host}:{self.port}: {resp.error_message or resp.error_code.name}")
            token = client.evaluate(resp.auth_bytes)
            if client.complete:
                return int(resp.session_lifetime.total_seconds() * 1000)
            if token is None:
                raise AuthenticationFailed(f"{self.host}:{self.port}: SASL exchange ended early")

    async def _read_loop(self, reader: asyncio.StreamReader, writer, pending: dict) -> None:
        """Answers for the requests of one connection (`pending`); a retired connection (re-authentication) ends
        once its last request is answered."""
        try:
            while True:
                if pending is not self._pending and not pending:
                    writer.close()
                    self._retired.discard(asyncio.current_task())
                    return
                size = I32.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                corr = I32.unpack_from(frame, 0)[0]
                fut = pending.pop(corr, None)
                if fut is not None and not fut.done():
                    fut.set_result(frame)
        except (OSError, asyncio.IncompleteReadError) as e:
            self._fail_connection(pending, writer, ConnectionFailed(f"connection to {self.host}:{self.port} lost: {e}"))
        except asyncio.CancelledError:
            self._fail_connection(pending, writer, ConnectionFailed(f"connection to {self.host}:{self.port} closed"))
            raise

    def _fail_connection(self, pending: dict, writer, exc: Exception) -> None:
        if pending is self._pending:
            self._fail(exc)
            return
        writer.close()                          # a retired connection: only its own requests fail
        self._retired.discard(asyncio.current_task())
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        pending.clear()

    def _retire(self) -> None:
        """KIP-368 by reconnecting: new requests go to a new connection, which authenticates again; the old one
        closes once the requests already sent on it are answered (they are not failed, so nothing is resent)."""
        task, writer, pending = self._read_task, self._writer, self._pending
        self._reader = self._writer = self._read_task = None
        self._pending = {}
        self._session_end = None
        if task is None:
            return
        if pending and not task.done():
            self._retired.add(task)
        else:
            task.cancel()                      # nothing to wait for: its read loop closes it
            if writer is not None:
                writer.close()

    def _fail(self, exc: Exception) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    async def send_raw(self, api_key: int, version: int, body, *, flexible: bool | None = None,
                       timeout: float = 30.0) -> memoryview:
        """Send `body` (bytes) as a request; the response body (after the response header) as a memoryview."""
        if flexible is None:
            flexible = kio_codec.is_flexible(api_key, version)
        if self._session_end is not None and asyncio.get_running_loop().time() >= self._session_end:
            self._retire()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._writer is None:
            # `timeout` bounds the connection's set-up too: a heartbeat must give up within half a session
            # (broker_lifecycle.py) even when the controller's address silently drops packets, or the broker is
            # fenced while it waits for a connection to a controller that is gone. asyncio.timeout, not wait_for:
            # Python 3.11's wait_for runs the attempt as a task of its own, whose failure nobody reads when the
            # request is cancelled in the same loop turn (logged as "Task exception was never retrieved")
            try:
                async with asyncio.timeout(timeout):
                    await self._connect()
            except asyncio.TimeoutError:
                raise ConnectionFailed(f"cannot connect to {self.host}:{self.port} within {timeout}s") from None
        corr = next(self._corr) & 0x7FFFFFFF
        header = _HEADER.pack(api_key, version, corr) + self._client_id + (b"\x00" if flexible else b"")
        fut = asyncio.get_running_loop().create_future()
        pending = self._pending
        pending[corr] = fut
        writer = self._writer
        writer.writelines([I32.pack(len(header) + len(body)), header, body])
        try:
            frame = await asyncio.wait_for(fut, max(deadline - loop.time(), 0.001))
        except asyncio.TimeoutError:
            pending.pop(corr, None)
            if pending is self._pending:
                self.close()           # a late response would otherwise be matched to nothing, forever
            raise ConnectionFailed(f"no response from {self.host}:{self.port} within {timeout}s") from None
        skip = 4
        if flexible and api_key != 18:          # ApiVersions answers with response header v0
            skip = 5                           # no tagged fields in the response headers brokers send
        return memoryview(frame)[skip:]

    async def send(self, api_key: int, version: int, body, *, timeout: float = 30.0):
        """Send a request given as a dict or kio entity; the decoded kio response entity."""
        data = await self.send_raw(api_key, version, encode_request(api_key, version, body), timeout=timeout)
        return decode_response(api_key, version, data)

    def close(self) -> None:
        for task in list(self._retired):
            task.cancel()
        self._retired.clear()
        if self._read_task is not None:
            self._read_task.cancel()
            self._read_task = None
        self._fail(ConnectionFailed(f"connection to {self.host}:{self.port} closed"))
