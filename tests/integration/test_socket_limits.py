"""Kafka's connection and request-memory limits on a real broker, driven with raw sockets: max.connections.per.ip
(and its overrides) closes the extra connection at once and logs it; max.connections holds a new connection
unserved until another closes, and lets the inter-broker listener in by closing the least recently used client
connection; queued.max.request.bytes stops reading under load without failing a request; a flood of malformed
frames writes a bounded number of warnings (issue 26)."""
from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import BrokerProcess, free_port
from tests.integration.helpers import wait_until
from protocol.record_batch import build_batch
from tests.integration.rawclient import PRODUCE, ConnectionClosed, RawClient, encode_body, encode_header, frame

pytestmark = pytest.mark.integration


@pytest.fixture
def start_broker(tmp_path):
    made: list[BrokerProcess] = []

    def start(overrides: dict[str, str], listeners=None) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"b{len(made)}", overrides)
        if listeners is not None:
            b.overrides["listeners"] = listeners(b.port)
        made.append(b.start())
        return b

    yield start
    for b in made:
        rc = b.stop()
        log = b.log_text()
        assert rc == 0, log[-3000:]
        assert "Traceback" not in log, log[-5000:]


def client_from(port: int, source: str = "127.0.0.1", host: str = "127.0.0.1") -> RawClient:
    """A RawClient whose connection comes from `source` (any 127.0.0.0/8 address is this host on Linux)."""
    c = RawClient.__new__(RawClient)
    c.sock = socket.create_connection((host, port), timeout=10, source_address=(source, 0))
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.timeout, c._corr, c._buf = 10.0, 0, bytearray()
    return c


def served(c: RawClient, timeout: float = 10) -> bool:
    """The connection answers ApiVersions (False when the broker closed it instead)."""
    try:
        corr = c.send(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        return c.recv(18, 3, corr, timeout=timeout).error_code == 0
    except (ConnectionClosed, ConnectionResetError, BrokenPipeError):
        return False


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {s: float(v) for s, v in (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")}


# ---- max.connections.per.ip ------------------------------------------------------------------------------------------

def test_per_ip_limit_closes_the_extra_connection_and_logs_it(start_broker):
    b = start_broker({"max.connections.per.ip": "2"})
    first, second = RawClient(b.bootstrap), RawClient(b.bootstrap)
    assert served(first) and served(second)
    third = RawClient(b.bootstrap)
    assert third.wait_closed(5), "a third connection from 127.0.0.1 was not closed"
    assert served(first), "the connections within the limit keep working"
    wait_until(lambda: "Rejected connection from 127.0.0.1, address already has the configured maximum of 2 "
                       "connections." in b.log_text(), timeout=5, what="the rejection logged")
    first.close()
    # the closed connection's slot comes back
    wait_until(lambda: served(RawClient(b.bootstrap)), timeout=10, what="a new connection served again")
    second.close()
    third.close()


def test_per_ip_overrides_allow_more_for_one_address(start_broker):
    b = start_broker({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:3"},
                     listeners=lambda port: f"PLAINTEXT://0.0.0.0:{port}")
    local = [client_from(b.port, "127.0.0.1") for _ in range(3)]
    assert all(served(c) for c in local), "127.0.0.1 may open 3 connections"
    fourth = client_from(b.port, "127.0.0.1")
    assert fourth.wait_closed(5), "a fourth connection from 127.0.0.1 was not closed"
    other = client_from(b.port, "127.0.0.2")
    assert served(other), "127.0.0.2 gets the default limit, 1"
    second_other = client_from(b.port, "127.0.0.2")
    assert second_other.wait_closed(5), "a second connection from 127.0.0.2 was not closed"
    for c in (*local, fourth, other, second_other):
        c.close()


def test_tls_listener_counts_only_connections_it_keeps(start_broker, tmp_path):
    """With a limit set the broker accepts through its own loop and does TLS itself: failed handshakes and closed
    TLS connections give their slot back, and an address over its limit is refused before any handshake."""
    import ssl
    from tests.security_certs import CertificateAuthority
    ca = CertificateAuthority(tmp_path / "pki")
    pem = ca.issue("broker", CN="localhost")
    ssl_port = free_port()
    b = start_broker({"max.connections.per.ip": "2", "max.connections": "3",
                      "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem.keystore),
                      "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file)},
                     listeners=lambda port: f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}")
    ctx = ssl.create_default_context(cafile=str(ca.ca_file))

    def tls_client() -> RawClient:
        c = RawClient.__new__(RawClient)
        c.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", ssl_port), timeout=10),
                                 server_hostname="localhost")
        c.timeout, c._corr, c._buf = 10.0, 0, bytearray()
        return c

    for _ in range(20):                                   # not TLS: the handshake fails, the slot comes back
        with socket.create_connection(("127.0.0.1", ssl_port), timeout=5) as s:
            s.sendall(b"\x00\x00\x00\x0agarbage!!!")
            s.settimeout(5)
            try:
                s.recv(100)
            except OSError:
                pass
    for _ in range(5):                                    # served and closed: counted out again
        c = tls_client()
        assert served(c)
        c.close()
    def served_tls_client():
        try:
            c = tls_client()
        except OSError:                                   # refused: the last close not yet seen by the broker
            return None
        if served(c):
            return c
        c.close()
        return None

    first = wait_until(served_tls_client, timeout=10, what="a TLS connection")
    second = wait_until(served_tls_client, timeout=10, what="a second TLS connection")
    third = RawClient.__new__(RawClient)
    third.sock = socket.create_connection(("127.0.0.1", ssl_port), timeout=5)
    third._buf = bytearray()
    assert third.wait_closed(5), "a third connection from 127.0.0.1 was not closed before its handshake"
    first.close()
    second.close()
    third.close()


# ---- max.connections -------------------------------------------------------------------------------------------------

def test_max_connections_holds_new_connections_until_one_closes(start_broker):
    b = start_broker({"max.connections": "3"})
    held = [RawClient(b.bootstrap) for _ in range(3)]
    assert all(served(c) for c in held)
    waiting = RawClient(b.bootstrap)          # TCP connects (the listen backlog), but the broker does not serve it
    corr = waiting.send(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    with pytest.raises(TimeoutError):
        waiting.recv(18, 3, corr, timeout=1.5)
    assert served(held[0]), "the connections within the limit keep working"
    held.pop().close()
    t0 = time.monotonic()
    assert waiting.recv(18, 3, corr, timeout=10).error_code == 0
    assert time.monotonic() - t0 < 5
    for c in (*held, waiting):
        c.close()


def test_inter_broker_listener_is_exempt_and_closes_the_least_recently_used(start_broker):
    internal = free_port()
    b = start_broker({"max.connections": "2", "inter.broker.listener.name": "INTERNAL",
                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"},
                     listeners=lambda port: f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}")
    old, recent = RawClient(b.bootstrap), RawClient(b.bootstrap)
    assert served(old)
    time.sleep(0.05)
    assert served(recent)
    broker_conn = RawClient(f"127.0.0.1:{internal}")
    assert served(broker_conn), "the inter-broker listener is not held back by max.connections"
    assert old.wait_closed(5), "the least recently used client connection was not closed"
    assert served(recent)
    for c in (old, recent, broker_conn):
        c.close()


def test_the_controller_listener_is_outside_the_connection_limits(start_broker):
    """Kafka serves controller.listener.names from the controller's own SocketServer: clients filling
    max.connections (or an address at max.connections.per.ip) never hold back a broker's heartbeat there."""
    internal, controller = free_port(), free_port()
    b = start_broker({"max.connections": "1", "max.connections.per.ip": "1", "inter.broker.listener.name": "INTERNAL",
                      "controller.listener.names": "CONTROLLER",
                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"},
                     listeners=lambda port: f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal},"
                                            f"CONTROLLER://127.0.0.1:{controller}")
    client = RawClient(b.bootstrap)
    assert served(client)
    heartbeats = [RawClient(f"127.0.0.1:{controller}") for _ in range(3)]
    assert all(served(c, timeout=5) for c in heartbeats), "the controller listener waited for a connection slot"
    assert served(client), "and it took no slot from the clients"
    for c in (client, *heartbeats):
        c.close()


def test_listener_max_connections_override(start_broker):
    other = free_port()
    b = start_broker({"listener.name.other.max.connections": "1",
                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"},
                     listeners=lambda port: f"PLAINTEXT://127.0.0.1:{port},OTHER://127.0.0.1:{other}")
    first = RawClient(f"127.0.0.1:{other}")
    assert served(first)
    second = RawClient(f"127.0.0.1:{other}")
    corr = second.send(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    with pytest.raises(TimeoutError):
        second.recv(18, 3, corr, timeout=1.5)
    assert all(served(RawClient(b.bootstrap)) for _ in range(3)), "the other listener has no limit"
    first.close()
    assert second.recv(18, 3, corr, timeout=10).error_code == 0
    second.close()


# ---- queued.max.request.bytes ----------------------------------------------------------------------------------------

def test_small_request_memory_pool_slows_reading_but_acknowledges_every_produce(start_broker):
    """1 MiB of pool, 12 clients each sending 2.2 MB Produce requests (three 730 KB batches: each request alone is
    larger than the pool): every one is acknowledged, the pool ran dry meanwhile, and it is whole again after. The
    clients start their first request together (its first 100 KB, then a barrier), so the frames overlap."""
    mport = free_port()
    pool = 1 << 20
    b = start_broker({"queued.max.request.bytes": str(pool), "metrics.port": str(mport)})
    topic = "pool-pressure"
    with RawClient(b.bootstrap) as c:
        assert c.create_topic(topic, 3).error_code == 0
    batch = build_batch([(b"k%d" % i, bytes([i % 251]) * 7300) for i in range(100)])   # ~730 KB each
    payload = encode_body(PRODUCE, 9, {
        "acks": -1, "timeout": 30000, "transactional_id": None,
        "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": batch} for p in range(3)]}]})
    clients = 12
    together = threading.Barrier(clients)

    def request(corr: int) -> bytes:
        return frame(encode_header(PRODUCE, 9, corr) + payload)

    def client(_) -> list[int]:
        with RawClient(b.bootstrap, timeout=60) as c:
            first = request(1)
            c.send_bytes(first[:100_000])
            together.wait(timeout=30)
            c.send_bytes(first[100_000:] + request(2))              # two in flight on this connection
            responses = [c.recv(PRODUCE, 9, 1, timeout=60), c.recv(PRODUCE, 9, 2, timeout=60)]
            c.send_bytes(request(3))
            responses.append(c.recv(PRODUCE, 9, 3, timeout=60))
            return [p.error_code for r in responses for t in r.responses for p in t.partition_responses]

    with ThreadPoolExecutor(clients) as ex:
        results = list(ex.map(client, range(clients)))
    assert [code for codes in results for code in codes] == [0] * (clients * 3 * 3), results
    with RawClient(b.bootstrap) as c:
        ends = [c.fetch_partition(topic, p, 0, max_bytes=1) for p in range(3)]
    assert [e.high_watermark for e in ends] == [clients * 3 * 100] * 3
    m = metrics(mport)
    assert m["kafka_server_socket_server_metrics_memory_pool_depleted_time_seconds_total"] > 0, \
        "the pool never ran dry: no back-pressure was exercised"
    assert m["kafka_network_socketserver_memory_pool_used"] == 0
    assert m["kafka_network_socketserver_memory_pool_available"] == pool


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_stalled_frame_is_closed_when_the_pool_is_empty_and_a_slow_one_is_not(start_broker):
    """A 3 MiB pool. A sends a 0.9 MB Produce: 600 KB at once, the rest in small pieces over 4 s. B announces a
    5 MiB frame, sends 100 bytes and stops: the pool is now empty, so C's 100 KB Produce waits, while D's
    ApiVersions (a small frame) is answered at once. With queued.max.request.stall.ms=1000 B is closed about a
    second later (with a log line), its charge goes back to the pool and C is answered; A, slow but never silent
    for a second, is not closed and its produce is acknowledged. The pool is whole afterwards."""
    mport = free_port()
    b = start_broker({"queued.max.request.bytes": str(3 << 20), "queued.max.request.stall.ms": "1000",
                      "metrics.port": str(mport)})
    topic = "stalled-frame"
    with RawClient(b.bootstrap) as c:
        assert c.create_topic(topic, 1).error_code == 0
        request = frame(encode_header(PRODUCE, 9, 7) + encode_body(PRODUCE, 9, c.produce_body(
            topic, 0, build_batch([(b"k", bytes(range(256)) * 3500)]))))             # about 0.9 MB
        medium = encode_body(PRODUCE, 9, c.produce_body(topic, 0, build_batch([(b"m", b"m" * 100_000)])))
    with RawClient(b.bootstrap, timeout=30) as slow, RawClient(b.bootstrap) as stalled, \
            RawClient(b.bootstrap) as waiting, RawClient(b.bootstrap) as small:
        slow.send_bytes(request[:600_000])
        time.sleep(0.2)
        stalled.send_bytes((5 << 20).to_bytes(4, "big") + b"\x00" * 100)
        time.sleep(0.2)
        corr = waiting.send(PRODUCE, 9, medium)
        time.sleep(0.2)
        assert served(small, timeout=5), "a small frame waited for the pool"
        with pytest.raises(TimeoutError):
            waiting.recv(PRODUCE, 9, corr, timeout=0.1)     # still waiting for the pool
        rest = request[600_000:]
        for i in range(0, len(rest), len(rest) // 20 + 1):       # 21 pieces, 0.2 s apart: 4 s in all
            time.sleep(0.2)
            slow.send_bytes(rest[i:i + len(rest) // 20 + 1])
        [t] = waiting.recv(PRODUCE, 9, corr, timeout=15).responses
        assert t.partition_responses[0].error_code == 0
        [t] = slow.recv(PRODUCE, 9, 7, timeout=15).responses
        assert t.partition_responses[0].error_code == 0
        with pytest.raises((ConnectionClosed, ConnectionResetError)):
            stalled.recv_frame(timeout=5)
    log = b.log_text()
    assert len(re.findall(r"stalled for more than queued.max.request.stall.ms=1000 in a 5242880-byte frame", log)) \
        == 1, log[-3000:]
    wait_until(lambda: metrics(mport)["kafka_network_socketserver_memory_pool_available"] == 3 << 20, timeout=10,
               what="the pool whole again")


def test_announced_frames_cost_only_the_bytes_sent(start_broker):
    """Twenty connections each announce a 90 MiB frame and send 64 KiB of it, with the pool unbounded: the
    broker's memory grows by about what was sent, not by the 1.8 GB announced (a buffer of the declared size
    made every announcement cost its size)."""
    b = start_broker({"queued.max.request.bytes": "-1"})
    with RawClient(b.bootstrap) as c:
        assert served(c)
    before = _rss_bytes(b.proc.pid)
    socks = []
    try:
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            s.sendall((90 << 20).to_bytes(4, "big") + b"\x01" * 65536)
            socks.append(s)
        with RawClient(b.bootstrap) as c:
            assert served(c)                             # every announcement has been read by now
        time.sleep(0.5)
        grown = _rss_bytes(b.proc.pid) - before
    finally:
        for s in socks:
            s.close()
    print(f"RSS grew by {grown / 2**20:.1f} MiB for 20 stalled 90 MiB announcements")
    assert grown < 64 << 20, f"RSS grew by {grown >> 20} MiB for 20 stalled 90 MiB announcements"


# ---- rate-limited warnings -------------------------------------------------------------------------------------------

def test_flood_of_malformed_frames_writes_few_warnings(start_broker):
    b = start_broker({})
    n = 5000
    bad = frame(b"\x00\x12\x00")                  # shorter than a request header: closed with a warning
    t0 = time.monotonic()
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", b.port), timeout=5) as s:
            s.sendall(bad)
    flood = time.monotonic() - t0
    with RawClient(b.bootstrap) as c:
        assert served(c), "the broker answers ApiVersions after the flood"

    def accounted() -> int:
        text = b.log_text()
        return len(re.findall(r"WARNING .*closing connection from .*malformed request", text)) + \
            sum(int(k) for k in re.findall(r"suppressed (\d+) similar messages \(connections closed", text))

    # every bad frame is a line or counted in a summary line (the last one written when the next line is due: the
    # defaults allow 20 at once, then 10 a minute)
    wait_until(lambda: accounted() == n, timeout=15, what=f"{n} closes accounted for")
    lines = b.log_text().count("closing connection from")
    assert lines < 50, f"{lines} warning lines for {n} malformed frames (flood of {flood:.1f} s)"


def test_request_larger_than_the_pool_is_served_alone(start_broker):
    b = start_broker({"queued.max.request.bytes": "1000"})
    topic = "big-alone"
    with RawClient(b.bootstrap) as c:
        assert c.create_topic(topic, 1).error_code == 0
        p = c.produce(topic, 0, build_batch([(b"k", b"v" * 500_000)]))
        assert p.error_code == 0
        # pipelined: the second frame waits for the first to be handled, and is served too
        body = c.produce_body(topic, 0, build_batch([(b"k", b"w" * 200_000)]))
        corrs = [c.send(PRODUCE, 9, body) for _ in range(3)]
        for corr in corrs:
            [t] = c.recv(PRODUCE, 9, corr).responses
            assert t.partition_responses[0].error_code == 0


def test_acks_all_in_a_cluster_under_a_small_pool(tmp_path):
    """Followers' fetches come in through the same pool as the produces waiting for them: a produce parked for
    acks=all must not hold pool memory (Kafka releases a request's buffer once its handler returns), or a full
    pool would stop the fetches that complete it. Three brokers, 1 MiB pools, 8 clients sending 2 MB batches."""
    from tests.cluster.conftest import Cluster
    from tests.cluster.helpers import create
    c = Cluster(tmp_path, 3, overrides={"queued.max.request.bytes": str(1 << 20), "max.connections": "200"}).start()
    try:
        topic = "pool-acks-all"
        create(c, topic, 1, 3, configs={"max.message.bytes": "3000000"})
        leader = c.brokers[c.leader(topic)]
        batch = build_batch([(b"k%d" % i, bytes([i]) * 20_000) for i in range(100)])          # 2 MB
        body = {"acks": -1, "timeout": 30000, "transactional_id": None,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}

        def client(_) -> list[tuple[int, float]]:
            out = []
            with RawClient(leader.bootstrap, timeout=60) as rc:
                for _ in range(3):
                    t0 = time.monotonic()
                    [t] = rc.request(PRODUCE, 9, body, timeout=60).responses
                    out.append((t.partition_responses[0].error_code, time.monotonic() - t0))
            return out

        with ThreadPoolExecutor(8) as ex:
            results = [r for rs in ex.map(client, range(8)) for r in rs]
        assert [code for code, _ in results] == [0] * 24, results
        assert max(took for _, took in results) < 20, results
    finally:
        c.stop()
