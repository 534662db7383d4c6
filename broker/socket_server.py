"""The socket server: asyncio (uvloop) connections, 4-byte framing, request headers, dispatch to the handler of each
API key, in-order pipelined replies. It knows nothing of partitions or groups: handlers get the broker object."""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import socket
import time
from collections import deque

from broker.controller_channel import forward
from broker.handlers import Request, api_versions
from broker.security.sasl_authenticator import SASL_HANDSHAKE, AuthenticationEnded, SaslAuthenticator
from protocol import kio_codec
from protocol.errors import ErrorCode
from protocol.kio_codec import EncodedResponse
from protocol.wire import HEADER_FIXED, I32, MalformedRequest, read_i16, skip_tagged_fields

log = logging.getLogger("strata.server")

# What handlers return when they answer at once (anything else is checked for being awaitable): the common case
# skips inspect.isawaitable, an ABC check that cost more than parsing a small Produce request.
_IMMEDIATE = frozenset({bytes, bytearray, memoryview, list, EncodedResponse, type(None)})
MAX_IN_FLIGHT = 128  # per connection; reading pauses beyond this so one client cannot queue unbounded work


@functools.cache
def _flexible(api_key: int, version: int) -> bool:
    try:
        return kio_codec.is_flexible(api_key, version)
    except Exception:
        return False  # versions kio has no schema for (e.g. Produce v0-2) predate flexible encoding


class KafkaConnection(asyncio.Protocol):
    __slots__ = ("broker", "transport", "size_buf", "frame", "filled", "queue", "peer", "client_host", "paused", "closed",
                 "corked", "listener", "auth", "principal", "last_active")

    def __init__(self, broker, listener=None):
        self.broker = broker
        self.listener = listener            # broker.security.listeners.Listener (None: the broker's first)
        self.auth: SaslAuthenticator | None = None      # SASL listeners: the connection's authenticator
        self.principal = "User:ANONYMOUS"
        self.last_active = time.monotonic()
        self.size_buf = bytearray()         # a frame's 4-byte size when it is split across reads
        self.frame: bytearray | None = None  # the frame being filled, when it spans reads
        self.filled = 0
        self.queue: deque[list] = deque()   # [done, header, body] in request order
        self.paused = False
        self.closed = False
        self.peer = None
        self.corked: list | None = None     # replies made while a read is being handled, written once at its end

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.client_host = "/" + self.peer[0] if self.peer else None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.broker.connections.add(self)
        listener = self.listener
        if listener is None:
            return
        if listener.ssl and not listener.sasl:      # on SASL_SSL the principal comes from SASL, as in Kafka
            try:
                self.principal = self.broker.security.ssl_principal(listener.name,
                                                                    transport.get_extra_info("ssl_object"))
            except Exception as e:                 # a certificate the mapping rules do not fit
                self.close("no principal for the client certificate: %s", e)
                return
        if listener.sasl:
            self.auth = SaslAuthenticator(self.broker, listener.name)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.broker.connections.discard(self)

    def pause_writing(self) -> None:
        self._pause()

    def resume_writing(self) -> None:
        self._resume()

    def _pause(self) -> None:
        if not self.paused and not self.closed:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and not self.closed and len(self.queue) < MAX_IN_FLIGHT:
            self.paused = False
            self.transport.resume_reading()

    def close_quietly(self, reason: str) -> None:
        """A routine close (an idle connection): logged at debug, as Kafka's Selector does."""
        if not self.closed:
            self._uncork()
            log.debug("closing connection from %s: %s", self.peer, reason)
            self.closed = True
            self.transport.close()

    def close(self, reason: str, *args) -> None:
        if not self.closed:
            self._uncork()
            log.warning("closing connection from %s: " + reason, self.peer, *args)
            self.closed = True
            self.transport.close()

    # ---- framing ---------------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        """Cut frames out of the stream with one copy each: a frame that arrives whole is copied out of `data`; a
        frame that spans reads is filled in place into a buffer of its declared size (no growing receive buffer).
        The replies to every request of one read go out in one write: librdkafka sends one Produce request per
        partition, so with many partitions a read holds many small requests, and a send(2) per reply cost more than
        handling the request."""
        self.corked = []
        self.last_active = time.monotonic()
        try:
            self._frames(data)
        finally:
            self._uncork()

    def _uncork(self) -> None:
        out, self.corked = self.corked, None
        if out and not self.closed:
            self.transport.writelines(out)

    def _frames(self, data: bytes) -> None:
        mv = memoryview(data)
        i, n = 0, len(data)
        while i < n and not self.closed:
            frame = self.frame
            if frame is not None:                      # filling a frame whose size we know
                take = min(n - i, len(frame) - self.filled)
                frame[self.filled:self.filled + take] = mv[i:i + take]
                self.filled += take
                i += take
                if self.filled < len(frame):
                    return
                self.frame = None
                self._handle(frame)
                continue
            size_buf = self.size_buf
            if not size_buf and n - i >= 4:
                size = I32.unpack_from(data, i)[0]
                i += 4
            else:
                take = min(4 - len(size_buf), n - i)
                size_buf += mv[i:i + take]
                i += take
                if len(size_buf) < 4:
                    return
                size = I32.unpack_from(size_buf, 0)[0]
                size_buf.clear()
            if size < 0 or size > self.broker.max_request_size:
                self.close("frame size %d outside [0, socket.request.max.bytes=%d]", size, self.broker.max_request_size)
                return
            if self.auth is not None and not self.auth.authenticated and size > self.auth.max_receive:
                self._end_authentication(AuthenticationEnded(
                    f"frame of {size} bytes before authentication (sasl.server.max.receive.size="
                    f"{self.auth.max_receive})"))
                return
            if n - i >= size:
                frame = bytearray(mv[i:i + size])
                i += size
                self._handle(frame)
            else:
                self.frame = bytearray(size)
                self.filled = 0

    def _handle(self, frame: bytearray) -> None:
        try:
            self._dispatch(frame)
        except MalformedRequest as e:
            self.close("malformed request: %s", e)
        except AuthenticationEnded as e:
            self._end_authentication(e)
        except Exception:
            log.exception("request from %s failed", self.peer)
            self.close("internal error while handling a request")

    # ---- dispatch --------------------------------------------------------------------------------------------
    def _dispatch(self, frame: bytearray) -> None:
        auth = self.auth
        if auth is not None and (auth.state != "done" or auth.session_end is not None or
                                 (len(frame) > 1 and frame[1] == SASL_HANDSHAKE and frame[0] == 0)):
            if auth.state != "raw" and len(frame) < 10:
                raise AuthenticationEnded(f"request of {len(frame)} bytes is shorter than a request header")
            if self._authenticating(auth, frame):
                return
        if len(frame) < 10:
            raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a request header")
        api_key, version, corr = HEADER_FIXED.unpack_from(frame, 0)
        handler = self.broker.handlers.get(api_key)
        if handler is None:
            self.close("unknown api key %d (version %d)", api_key, version)
            return
        if api_key == api_versions.API_KEY and version > handler.VERSIONS[1]:
            self.broker.request_errors.add(api_key, 0, {ErrorCode.unsupported_version: 1})
            self._reply(corr, False, api_versions.unsupported_version_reply())
            return
        if not handler.DECODABLE[0] <= version <= handler.DECODABLE[1]:
            self.close("unsupported version %d of api key %d", version, api_key)
            return
        flexible = _flexible(api_key, version)
        n, pos = read_i16(frame, 8)
        if n >= 0:
            if pos + n > len(frame):
                raise MalformedRequest("client id overruns the frame")
            client_id = frame[pos:pos + n].decode("utf-8", "replace")
            pos += n
        else:
            client_id = None
        if flexible:
            pos = skip_tagged_fields(frame, pos)
        req = Request(api_key, version, corr, client_id, frame, pos, flexible, self.client_host, self.principal,
                      self.listener.name if self.listener is not None else "")
        started = time.perf_counter()
        if handler.__dict__.get("FORWARDED_TO_CONTROLLER") and not self.broker.controller.active:
            result = forward(self.broker, req)      # admin requests go to the active controller as they came
        else:
            result = handler.handle(self.broker, req)
        # ApiVersions always answers with response header v0 so any client can read it.
        flex_header = flexible and api_key != api_versions.API_KEY
        if result.__class__ not in _IMMEDIATE and inspect.isawaitable(result):
            slot = [False, corr, flex_header, None]
            self.queue.append(slot)
            task = asyncio.ensure_future(result)
            task.add_done_callback(functools.partial(self._completed, slot, api_key, started))
            if len(self.queue) >= MAX_IN_FLIGHT:
                self._pause()
            return
        self.broker.request_times.observe(api_key, time.perf_counter() - started)
        if result.__class__ is EncodedResponse:
            self.broker.request_errors.add_counts(api_key, result.error_counts)
        if self.queue:
            self.queue.append([True, corr, flex_header, result])
        elif result is not None:
            self._reply(corr, flex_header, result)

    # ---- SASL (broker/security/sasl_authenticator.py) ---------------------------------------------------------------
    def _authenticating(self, auth: SaslAuthenticator, frame: bytearray) -> bool:
        """Requests on a SASL listener before authentication completes, re-authentication (KIP-368) and expired
        sessions; True when the frame was consumed here, False when it goes on to its handler."""
        if auth.state == "raw":                          # SaslHandshake v0: a bare token, answered bare
            token = auth.raw_token(frame)
            self._write_raw(I32.pack(len(token)) + token)
            self._sasl_done(auth)
            return True
        api_key, version, corr = HEADER_FIXED.unpack_from(frame, 0)
        if auth.state == "done":
            if api_key == SASL_HANDSHAKE and auth.session_end is not None:
                auth.begin_reauthentication()
            elif auth.expired():
                self.close("SASL session of %s expired (connections.max.reauth.ms or token lifetime)", self.principal)
                return True
            else:
                return False
        if api_key == api_versions.API_KEY:
            return False
        handler = self.broker.handlers.get(api_key)
        if api_key not in (SASL_HANDSHAKE, 36) or handler is None:
            raise AuthenticationEnded(f"request of api key {api_key} before SASL authentication completed")
        if not handler.DECODABLE[0] <= version <= handler.DECODABLE[1]:
            raise AuthenticationEnded(f"unsupported version {version} of api key {api_key}")
        flexible = _flexible(api_key, version)
        n, pos = read_i16(frame, 8)
        pos += max(n, 0)
        if flexible:
            pos = skip_tagged_fields(frame, pos)
        body = kio_codec.decode_request(api_key, version, memoryview(frame).toreadonly(), pos)
        if api_key == SASL_HANDSHAKE:
            reply = auth.handshake(version, body, corr)
        else:
            reply = auth.authenticate(version, body, corr, flexible)
        if self.queue:
            self.queue.append([True, corr, flexible, reply])
        else:
            self._reply(corr, flexible, reply)
        self._sasl_done(auth)
        return True

    def _sasl_done(self, auth: SaslAuthenticator) -> None:
        if auth.state == "done" and self.principal != auth.principal:
            self.principal = auth.principal
            log.debug("%s authenticated as %s (%s)", self.peer, self.principal, auth.mechanism)

    def _end_authentication(self, e: AuthenticationEnded) -> None:
        """Answer (when there is an answer), then close after connection.failed.authentication.delay.ms, as Kafka
        slows down password guessing; the connection reads nothing more meanwhile."""
        if self.closed:
            return
        if e.reply is not None:
            self._reply(e.corr, e.flexible, e.reply)
        self._uncork()
        log.info("closing connection from %s on listener %s: %s", self.peer,
                 self.listener.name if self.listener else "", e)
        self.closed = True
        self.transport.pause_reading()
        delay = self.broker.config.get_int("connection.failed.authentication.delay.ms") / 1000
        asyncio.get_running_loop().call_later(delay, self.transport.close)

    def _write_raw(self, data: bytes) -> None:
        if self.corked is not None:
            self.corked.append(data)
        else:
            self.transport.write(data)

    def _completed(self, slot: list, api_key: int, started: float, task: asyncio.Task) -> None:
        if task.cancelled():
            return
        self.broker.request_times.observe(api_key, time.perf_counter() - started)
        exc = task.exception()
        if exc is not None:
            if isinstance(exc, MalformedRequest):
                self.close("malformed request: %s", exc)
            else:
                log.error("request from %s failed", self.peer, exc_info=exc)
                self.close("internal error while handling a request")
            return
        slot[0] = True
        slot[3] = result = task.result()
        if result.__class__ is EncodedResponse:
            self.broker.request_errors.add_counts(api_key, result.error_counts)
        queue = self.queue
        while queue and queue[0][0]:
            _, corr, flex_header, body = queue.popleft()
            if body is not None:
                self._reply(corr, flex_header, body)
        self._resume()

    def _reply(self, corr: int, flex_header: bool, body) -> None:
        if self.closed:
            return
        if isinstance(body, (bytes, bytearray, memoryview)):
            chunks = [body]
            size = len(body)
        else:
            chunks = body
            size = sum(len(c) for c in chunks)
        hdr_len = 5 if flex_header else 4
        head = I32.pack(size + hdr_len) + I32.pack(corr) + (b"\x00" if flex_header else b"")
        corked = self.corked
        if corked is not None:
            corked.append(head)
            corked.extend(chunks)
        else:
            self.transport.writelines([head, *chunks])
