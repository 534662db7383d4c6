"""The socket server: an accept loop per listener (connection limits), asyncio (uvloop) connections, 4-byte framing
(request memory limit), request headers, dispatch to the handler of each API key, in-order pipelined replies. It
knows nothing of partitions or groups: handlers get the broker object. The limits' bookkeeping is
broker/socket_limits.py."""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import socket
import time
from collections import deque

from broker.controller_channel import forward
from broker.log_limits import RateLimitedLog
from broker.quotas import TimedCoroutine, charge_request_time, charged_to_request_quota
from broker.socket_limits import normal_ip
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
ACCEPT_RETRY_DELAY = 1.0   # after accept(2) fails (EMFILE: out of file descriptors), as asyncio's own servers wait

# Lines a peer can make us write as often as it likes: the first ones, then a few per interval and a count
_CLOSE_LOG = RateLimitedLog(log, logging.WARNING, what="similar messages (connections closed for bad input)")
_REJECT_LOG = RateLimitedLog(log, logging.INFO, what="similar messages (connections over max.connections.per.ip)")
_THROTTLE_LOG = RateLimitedLog(log, logging.INFO, what="similar messages (connections over connection_creation_rate)")
_ACCEPT_ERROR_LOG = RateLimitedLog(log, logging.ERROR, burst=5, per_interval=1, what="accept errors")


@functools.cache
def _flexible(api_key: int, version: int) -> bool:
    try:
        return kio_codec.is_flexible(api_key, version)
    except Exception:
        return False  # versions kio has no schema for (e.g. Produce v0-2) predate flexible encoding


class KafkaConnection(asyncio.Protocol):
    __slots__ = ("broker", "transport", "size_buf", "frame", "frame_size", "queue", "peer", "client_host", "paused", "closed",
                 "corked", "listener", "auth", "principal", "last_active", "quota_ip", "frame_charge", "held", "pool",
                 "throttle_timer", "write_paused", "reading_since")

    def __init__(self, broker, listener=None, quota_ip: str | None = None):
        self.broker = broker
        self.listener = listener            # broker.security.listeners.Listener (None: the broker's first)
        self.quota_ip = quota_ip            # the address ConnectionQuotas counted this connection under, until lost
        self.pool = broker.memory_pool      # queued.max.request.bytes (broker/socket_limits.py)
        self.frame_charge = 0               # pool bytes taken for self.frame
        self.held: bytes | None = None      # bytes read while waiting for pool memory (from a frame's size on)
        self.auth: SaslAuthenticator | None = None      # SASL listeners: the connection's authenticator
        self.principal = "User:ANONYMOUS"
        self.last_active = time.monotonic()
        self.reading_since = 0.0            # monotonic time reading last resumed after a pause of ours
        self.size_buf = bytearray()         # a frame's 4-byte size when it is split across reads
        self.frame: bytearray | None = None  # the frame being filled, when it spans reads: its bytes so far
        self.frame_size = 0                 # ... and its declared size
        self.queue: deque[list] = deque()   # [done, header, body] in request order
        self.paused = False
        self.closed = False
        self.peer = None
        self.corked: list | None = None     # replies made while a read is being handled, written once at its end
        self.throttle_timer: asyncio.TimerHandle | None = None   # muted over a client quota until it fires
        self.write_paused = False           # the transport's write buffer is above its high-water mark

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
        quotas = self.broker.topics.image.client_quotas
        if quotas and self._rate_throttled(quotas):
            return
        if listener is None:
            return
        if self.quota_ip is None and listener.name not in self.broker.quotas.exempt:
            # accepted by the loop's own server (no limit set, or the controller's own listener): only counted
            self.quota_ip = _ip_of(self.peer)
            self.broker.quotas.inc(listener.name, self.quota_ip)
        if listener.ssl and not listener.sasl:      # on SASL_SSL the principal comes from SASL, as in Kafka
            try:
                self.principal = self.broker.security.ssl_principal(listener.name,
                                                                    transport.get_extra_info("ssl_object"))
            except Exception as e:                 # a certificate the mapping rules do not fit
                self.close("no principal for the client certificate: %s", e)
                return
        if listener.sasl:
            self.auth = SaslAuthenticator(self.broker, listener.name)

    def _rate_throttled(self, quotas) -> bool:
        """connection_creation_rate (broker/quotas.py ConnectionRateQuotas): over its address's quota, the
        connection is neither counted nor read, and is closed after the throttle time, as Kafka's acceptor does."""
        ip = _ip_of(self.peer)
        delay = self.broker.client_quotas.connections.record(quotas, ip)
        if delay <= 0:
            return False
        self.closed = True
        self.release_quota()
        self.transport.pause_reading()
        _THROTTLE_LOG.log("Delaying closing of connection from %s for %d ms (connection_creation_rate)", ip, delay)
        asyncio.get_running_loop().call_later(delay / 1000, self.transport.close)
        return True

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.throttle_timer is not None:
            self.throttle_timer.cancel()
            self.throttle_timer = None
        self.broker.connections.discard(self)
        self.release_quota()
        self._drop_frame()

    def _drop_frame(self) -> None:
        """A frame cut short by a close gives its pool memory back at once: the transport may wait to flush
        replies before connection_lost, and a client that does not read them would hold the charge for ever."""
        charge, self.frame_charge, self.frame, self.held = self.frame_charge, 0, None, None
        if charge:
            self.pool.release(charge)

    def release_quota(self) -> None:
        ip, self.quota_ip = self.quota_ip, None
        if ip is not None:
            self.broker.quotas.dec(self.listener.name, ip)

    def pause_writing(self) -> None:
        self.write_paused = True
        self._pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._resume()

    def _pause(self) -> None:
        if not self.paused and not self.closed:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and not self.closed and len(self.queue) < MAX_IN_FLIGHT and self.held is None and \
                self.throttle_timer is None and not self.write_paused:
            self.paused = False
            self.reading_since = time.monotonic()
            self.transport.resume_reading()

    def _throttle(self, ms: int) -> None:
        """KIP-219, as Kafka's SocketServer mutes a throttled channel: the response has gone out with
        throttle_time_ms; read nothing more from this client for that long (requests it had already sent, in the
        same read or in flight, are still answered). A longer throttle replaces a shorter one."""
        loop = asyncio.get_running_loop()
        end = loop.time() + ms / 1000
        timer = self.throttle_timer
        if self.closed or (timer is not None and timer.when() >= end):
            return
        if timer is not None:
            timer.cancel()
        self.throttle_timer = loop.call_at(end, self._end_throttle)
        self._pause()

    def _end_throttle(self) -> None:
        self.throttle_timer = None
        self._resume()

    def close_quietly(self, reason: str) -> None:
        """A routine close (an idle connection): logged at debug, as Kafka's Selector does."""
        if not self.closed:
            self._uncork()
            log.debug("closing connection from %s: %s", self.peer, reason)
            self.closed = True
            self._drop_frame()
            self.transport.close()

    def close(self, reason: str, *args) -> None:
        """Close for bad input (or an internal error): a warning, rate-limited since a peer can repeat it at will."""
        if not self.closed:
            self._uncork()
            _CLOSE_LOG.log("closing connection from %s: " + reason, self.peer, *args)
            self.closed = True
            self._drop_frame()
            self.transport.close()

    # ---- framing ---------------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        """Cut frames out of the stream: a frame that arrives whole is copied out of `data`; a frame that spans
        reads grows as its bytes come (realloc moves large buffers by remapping, not copying), so a client that
        announces a large frame and stalls holds only what it sent, not its declared size.
        The replies to every request of one read go out in one write: librdkafka sends one Produce request per
        partition, so with many partitions a read holds many small requests, and a send(2) per reply cost more than
        handling the request."""
        self.last_active = time.monotonic()
        if self.held is not None:           # read before pause_reading took effect (TLS buffers): keep it in order
            self.held += data
            return
        self.corked = []
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
                take = min(n - i, self.frame_size - len(frame))
                frame += mv[i:i + take]
                i += take
                if len(frame) < self.frame_size:
                    return
                self.frame = None
                charge, self.frame_charge = self.frame_charge, 0
                self._handle(frame, charge)
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
            # queued.max.request.bytes, for authenticated connections only (Kafka reads SASL frames outside its pool)
            charge = size if self.auth is None or self.auth.authenticated else 0
            if charge and not self.pool.try_allocate(charge):
                self._wait_for_memory(I32.pack(size) + mv[i:].tobytes())
                return
            if n - i >= size:
                frame = bytearray(mv[i:i + size])
                i += size
                self._handle(frame, charge)
            else:                                      # grown as bytes come: a stalled announcement costs little
                self.frame = bytearray(mv[i:])
                self.frame_size = size
                self.frame_charge = charge
                return

    def _wait_for_memory(self, held: bytes) -> None:
        """The pool is empty: keep what was read (from the frame's size on), stop reading, and queue for memory
        (Kafka mutes the channel). No request is refused for it."""
        self.held = held
        if not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self.pool.wait(self)

    def memory_available(self) -> None:
        """Called by the pool when memory came back: frame what was held, then read again."""
        held, self.held = self.held, None
        if held is None or self.closed:
            return
        self.corked = []
        try:
            self._frames(held)
        finally:
            self._uncork()
        self._resume()

    def _handle(self, frame: bytearray, charge: int) -> None:
        try:
            self._dispatch(frame)
        except MalformedRequest as e:
            self.close("malformed request: %s", e)
        except AuthenticationEnded as e:
            self._end_authentication(e)
        except Exception:
            log.exception("request from %s failed", self.peer)
            self.close("internal error while handling a request")
        finally:
            if charge:                      # the handler has returned: Kafka's releaseBuffer after KafkaApis.handle
                self.pool.release(charge)

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
        started = time.perf_counter()
        req = Request(api_key, version, corr, client_id, frame, pos, flexible, self.client_host, self.principal,
                      self.listener.name if self.listener is not None else "", 0, started)
        if handler.__dict__.get("FORWARDED_TO_CONTROLLER") and not self.broker.controller.active:
            result = forward(self.broker, req)      # admin requests go to the active controller as they came
        else:
            result = handler.handle(self.broker, req)
        quotas = self.broker.topics.image.client_quotas
        charged = quotas and charged_to_request_quota(self.broker, req, quotas)
        # ApiVersions always answers with response header v0 so any client can read it.
        flex_header = flexible and api_key != api_versions.API_KEY
        if result.__class__ not in _IMMEDIATE and inspect.isawaitable(result):
            slot = [False, corr, flex_header, None]
            self.queue.append(slot)
            charge = None
            if charged:                                   # request_percentage: time the handling, not the waits
                if inspect.iscoroutine(result):
                    result = TimedCoroutine(result)
                charge = (time.perf_counter() - started, result)
            task = asyncio.ensure_future(result)
            task.add_done_callback(functools.partial(self._completed, slot, api_key, started, req, charge))
            if len(self.queue) >= MAX_IN_FLIGHT:
                self._pause()
            return
        if charged:
            result = charge_request_time(self.broker, req, time.perf_counter() - started, result)
        self.broker.request_times.observe(api_key, time.perf_counter() - started)
        if result.__class__ is EncodedResponse:
            self.broker.request_errors.add_counts(api_key, result.error_counts)
        if self.queue:
            self.queue.append([True, corr, flex_header, result])
        elif result is not None:
            self._reply(corr, flex_header, result)
        if req.throttle_ms > 0:
            self._throttle(req.throttle_ms)

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

    def _completed(self, slot: list, api_key: int, started: float, req: Request, charge, task: asyncio.Task) -> None:
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
        result = task.result()
        if charge is not None:
            sync, timed = charge
            result = charge_request_time(self.broker, req, sync + getattr(timed, "busy", 0.0), result)
        slot[0] = True
        slot[3] = result
        if result.__class__ is EncodedResponse:
            self.broker.request_errors.add_counts(api_key, result.error_counts)
        queue = self.queue
        while queue and queue[0][0]:
            _, corr, flex_header, body = queue.popleft()
            if body is not None:
                self._reply(corr, flex_header, body)
        if req.throttle_ms > 0:
            self._throttle(req.throttle_ms)
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


async def listen(broker, listener, ssl_context=None, backlog: int = 1024):
    """Start accepting on a listener; returns what stop() closes. With a connection limit set, an Acceptor; without,
    the event loop's own server (uvloop's accept loop in C: a connection costs ~60 us less CPU than through
    sock_accept and connect_accepted_socket), whose connections KafkaConnection counts for the metrics."""
    if broker.quotas.limited and listener.name not in broker.quotas.exempt:
        acceptor = Acceptor(broker, listener, ssl_context, backlog)
        acceptor.start()
        return acceptor
    return await asyncio.get_running_loop().create_server(
        functools.partial(KafkaConnection, broker, listener), listener.host or None, listener.port,
        reuse_address=True, backlog=backlog, ssl=ssl_context)


class Acceptor:
    """One listener's accept loop (Kafka's Acceptor), in place of loop.create_server, which cannot stop accepting:
    accept, wait for a connection slot (max.connections; meanwhile later clients wait in the listen backlog, as
    behind Kafka's blocked acceptor thread), refuse an address over max.connections.per.ip by closing at once, and
    hand the socket to a KafkaConnection (after the TLS handshake, in its own task, on SSL listeners). A connection
    on the protected inter-broker listener may close least recently active ones elsewhere (ConnectionQuotas)."""

    def __init__(self, broker, listener, ssl_context=None, backlog: int = 1024):
        self.broker, self.listener, self.ssl = broker, listener, ssl_context
        self.socks = _bind(listener.host, listener.port, backlog)
        self.tasks: list[asyncio.Task] = []
        self.handshakes: set[asyncio.Task] = set()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._run(sock)) for sock in self.socks]

    def close(self) -> None:
        """Stop accepting; each listening socket is closed by its own loop once the cancellation reaches it (not
        here, while the event loop still polls it for sock_accept)."""
        for task in (*self.tasks, *self.handshakes):
            task.cancel()

    async def _run(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        name = self.listener.name
        try:
            while True:
                try:
                    conn, addr = await loop.sock_accept(sock)
                except OSError as e:
                    _ACCEPT_ERROR_LOG.log("accepting a connection on listener %s failed: %s", name, e)
                    await asyncio.sleep(ACCEPT_RETRY_DELAY)
                    continue
                try:
                    await self._admit(loop, conn, addr)
                except Exception:               # as Kafka's acceptor: one connection's trouble never ends the loop
                    log.exception("error while accepting a connection on listener %s", name)
                    conn.close()
        finally:
            sock.close()

    async def _admit(self, loop, conn: socket.socket, addr) -> None:
        quotas, name = self.broker.quotas, self.listener.name
        await quotas.wait_for_slot(name)
        ip = _ip_of(addr)
        if not quotas.inc(name, ip):
            _REJECT_LOG.log("Rejected connection from %s, address already has the configured maximum of %d "
                            "connections.", ip, quotas.max_for(ip))
            conn.close()
            return
        if name == quotas.protected and quotas.exceeded() > 0:
            quotas.close_excess(self.broker.connections)
        if self.ssl is None:
            await self._serve(loop, conn, ip)
        else:
            task = loop.create_task(self._serve(loop, conn, ip))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _serve(self, loop, conn: socket.socket, ip: str) -> None:
        made: list[KafkaConnection] = []

        def protocol() -> KafkaConnection:
            made.append(KafkaConnection(self.broker, self.listener, quota_ip=ip))
            return made[0]

        try:
            conn.setblocking(False)
            await loop.connect_accepted_socket(protocol, conn, ssl=self.ssl)
        except BaseException as e:          # a failed TLS handshake, a peer gone, shutdown: uncount it
            if made:                        # the transport owns the socket (and closes it) from here on
                made[0].release_quota()
            else:
                self.broker.quotas.dec(self.listener.name, ip)
                conn.close()
            if not isinstance(e, Exception):
                raise
            log.debug("connection from %s on listener %s not started: %s", ip, self.listener.name, e)


def _ip_of(addr) -> str:
    try:
        return normal_ip(addr[0])
    except (ValueError, IndexError, TypeError):
        return str(addr)


def _bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets as loop.create_server makes them: an empty host binds every interface (IPv4 and IPv6)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, type_, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, type_, proto)
            except OSError:                 # a family the kernel lacks (ipv6.disable=1): skipped, as asyncio does
                continue
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
        if not socks:
            raise OSError(f"no address family of {host or '*'}:{port} can be listened on")
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks
