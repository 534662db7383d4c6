"""Requests recorded from real clients, replayed with random corruption: the broker never logs an internal error.

A recording proxy sits between the clients and a broker that advertises the proxy's port, so every request of a
confluent-kafka admin/producer/consumer-group workload and a kafka-python one passes through it and is kept. Each
recorded request is then sent straight to the broker many times with seeded corruption (bit flips, -1 and huge
lengths, zeroed bytes, truncation, trailing garbage). Whatever the broker makes of a mutated request (a Kafka error,
a clean close, or a valid but different request), its log must not show a Traceback or an internal error, and it
must still serve real clients afterwards. The seed is fixed, so a failure reproduces; set STRATA_MUTATION_SEED to
explore others.
"""
from __future__ import annotations

import contextlib
import os
import random
import re
import socket
import socketserver
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

from tests.conftest import free_port
from tests.integration.helpers import admin_client, producer, produce_all, records, wait_until

pytestmark = pytest.mark.integration

I32 = struct.Struct(">i")
SEED = int(os.environ.get("STRATA_MUTATION_SEED", "20261125"))
EXAMPLES_PER_API = 3          # distinct recorded requests kept per (api key, version)
MUTATIONS_PER_REQUEST = 300


class RecordingProxy(socketserver.ThreadingTCPServer):
    """Forwards 127.0.0.1:<port> to the broker and keeps every client->broker request frame."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target: tuple[str, int], port: int):
        self.target = target
        self.frames: list[bytes] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Pipe)


class _Pipe(socketserver.BaseRequestHandler):
    def handle(self):
        upstream = socket.create_connection(self.server.target)
        client = self.request

        def back():
            try:
                while data := upstream.recv(65536):
                    client.sendall(data)
            except OSError:
                pass
            finally:
                client.close()
        threading.Thread(target=back, daemon=True).start()
        buf = bytearray()
        try:
            while data := client.recv(65536):
                upstream.sendall(data)
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + I32.unpack_from(buf)[0]:
                    n = I32.unpack_from(buf)[0]
                    with self.server.lock:
                        self.server.frames.append(bytes(buf[4:4 + n]))
                    del buf[:4 + n]
        except OSError:
            pass
        finally:
            upstream.close()


def _workload(bootstrap: str, topic: str) -> None:
    """What real clients send: admin, idempotent produce, a consumer group committing, with both libraries."""
    admin = admin_client(bootstrap)
    for f in admin.create_topics([NewTopic(topic, 2, 1), NewTopic(topic + "-c", 1, 1,
                                                                    config={"cleanup.policy": "compact"})]).values():
        f.result(15)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)
    admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])[
        ConfigResource(ConfigResource.Type.TOPIC, topic)].result(15)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(15)
    p = producer(bootstrap, enable_idempotence=True)
    produce_all(p, topic, [(f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")]) for i in range(20)])
    produce_all(p, topic + "-c", [(b"key", b"value")])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "broker.address.family": "v4"})
    c.subscribe([topic])
    got = []
    wait_until(lambda: got.extend(records(c.consume(50, 1))) or len(got) >= 20, what="20 records")
    c.commit(asynchronous=False)
    c.committed([TopicPartition(topic, 0)], timeout=10)
    c.close()
    admin.list_consumer_groups(request_timeout=10).result(15)
    admin.describe_consumer_groups([f"{topic}-g"])[f"{topic}-g"].result(15)

    from kafka import KafkaConsumer, KafkaProducer
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(5):
        kp.send(topic, key=b"kp", value=f"kp{i}".encode())
    kp.flush(15)
    kp.close()
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-kp", auto_offset_reset="earliest",
                       consumer_timeout_ms=5000, enable_auto_commit=False)
    n = 0
    for _ in kc:
        n += 1
        if n >= 25:
            break
    kc.commit()
    kc.close()
    admin.delete_topics([topic + "-c"])[topic + "-c"].result(15)


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    b = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        # mostly the body: the 8-byte api key/version/correlation prefix has its own tests (test_bad_input.py)
        lo = 8 if len(b) > 8 and rng.random() < 0.9 else 0
        if not b:
            b += bytes([rng.randrange(256)])
            continue
        i = rng.randrange(lo, len(b)) if lo < len(b) else rng.randrange(len(b))
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:                                  # a -1 length: null where it may not be
            w = rng.choice((1, 2, 4))
            b[i:i + w] = b"\xff" * w
        elif kind == 2:                                  # a huge length or count
            w = rng.choice((2, 4))
            b[i:i + w] = b"\x7f" + b"\xff" * (w - 1)
        elif kind == 3:
            b[i] = 0
        elif kind == 4:
            del b[i:]
        else:
            b += rng.randbytes(rng.randint(1, 16))
    return bytes(b)


@contextlib.contextmanager
def recorded(make_broker, topic_name: str):
    """A broker that advertises a recording proxy's port, after the real clients' workload went through it:
    yields (broker, recorded frames, the proxy's port); the proxy stays up for clients that go on using it."""
    proxy_port = free_port()
    b = make_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}",
                     "group.initial.rebalance.delay.ms": "0"})
    proxy = RecordingProxy(("127.0.0.1", b.port), proxy_port)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        _workload(f"127.0.0.1:{proxy_port}", topic_name)
        with proxy.lock:
            frames = list(proxy.frames)
        yield b, frames, proxy_port
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_mutated_client_requests_never_cause_internal_errors(make_broker, topic_name):
    with recorded(make_broker, topic_name) as (b, frames, proxy_port):
        _replay_mutated(b, frames, topic_name, proxy_port)


def _replay_mutated(b, frames: list[bytes], topic_name: str, proxy_port: int) -> None:
    by_api: dict[tuple[int, int], list[bytes]] = {}
    for f in frames:
        if len(f) >= 4:
            key = struct.unpack_from(">hh", f)
            if len(by_api.setdefault(key, [])) < EXAMPLES_PER_API and f not in by_api[key]:
                by_api[key].append(f)
    apis = {k for k, _ in by_api}
    assert {0, 1, 2, 3, 8, 9, 10, 11, 14, 12, 13, 18, 19, 20, 22, 32, 37, 44} <= apis, sorted(apis)

    rng = random.Random(SEED)
    sent = 0
    t0 = time.monotonic()
    for examples in by_api.values():
        for frame in examples:
            for _ in range(MUTATIONS_PER_REQUEST):
                data = _mutate(rng, frame)
                with socket.create_connection(("127.0.0.1", b.port), timeout=5) as s:
                    s.sendall(I32.pack(len(data)) + data)
                    s.settimeout(0.02)
                    try:
                        s.recv(65536)       # an answer, a close, or nothing yet: all fine
                    except (socket.timeout, ConnectionResetError):
                        pass
                sent += 1
    assert b.alive(), b.log_text()[-3000:]
    log = b.log_text()
    bad = _internal_errors(log)
    assert not bad, f"after {sent} mutated requests (seed {SEED}):\n" + "\n".join(bad[:20]) + "\n" + \
        "\n".join(line for line in log.splitlines() if "Error" in line)[-4000:]
    # and real clients are still served (through the proxy: the broker advertises its port)
    p = producer(f"127.0.0.1:{proxy_port}")
    [m] = produce_all(p, topic_name, [(b"after", b"mutations")], partition=0)
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{proxy_port}", "group.id": "after",
                  "broker.address.family": "v4"})
    c.assign([TopicPartition(topic_name, 0, m.offset())])
    got = []
    wait_until(lambda: got.extend(records(c.consume(10, 1))) or got, what="the record produced after mutations")
    c.close()
    assert got[0].value() == b"mutations"
    print(f"{sent} mutated requests from {len(frames)} recorded in {time.monotonic() - t0:.1f}s")


# ---- the slow suite's run: a million mutated frames against one live broker --------------------------------------
FLOOD_FRAMES = int(os.environ.get("STRATA_MUTATION_FRAMES", "1000000"))
FLOOD_CONNECTIONS = 24
HEALTH_EVERY = 50_000


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_million_mutated_frames_on_a_live_broker(make_broker, topic_name, tmp_path):
    """Issue 26's fuzzer: frames recorded from real clients, mutated with a seed, sent 1,000,000 times over
    FLOOD_CONNECTIONS connections (each frame waits for its answer, a close, or 50 ms), with a health check every
    HEALTH_EVERY frames (ApiVersions and Metadata on a new connection, an acks=all produce, the log free of internal
    errors). At the end: no internal error logged, no failed health check, and the broker's log bounded by the
    rate-limited warnings. A failure saves each connection's last frames to tmp_path for replay."""
    with recorded(make_broker, topic_name) as (b, frames, proxy_port):
        frames = [f for f in frames if len(f) >= 10]
        health = producer(f"127.0.0.1:{proxy_port}", acks="all")
        checks = []

        def check(n_sent: int) -> None:
            t0 = time.monotonic()
            from tests.integration.rawclient import RawClient
            with RawClient(b.bootstrap) as rc:
                rc.request(18, 3, {"client_software_name": "health", "client_software_version": "1"})
                rc.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
            produce_all(health, topic_name, [(b"health", str(n_sent).encode())], partition=0)
            bad = _internal_errors(b.log_text())
            assert b.alive() and not bad, f"after {n_sent} frames (seed {SEED}):\n" + "\n".join(bad[:20])
            checks.append(time.monotonic() - t0)

        t0 = time.monotonic()
        import uvloop
        sent, closed, timed_out = uvloop.run(_flood(b.port, frames, FLOOD_FRAMES, check, tmp_path))
        elapsed = time.monotonic() - t0
        check(sent)
        lines = b.log_text().count("\n")
        print(f"{sent} mutated frames from {len(frames)} recorded (seed {SEED}) in {elapsed:.0f}s "
              f"({sent / elapsed:.0f}/s): {closed} closed by the broker, {timed_out} unanswered within 50 ms; "
              f"{len(checks)} health checks passed, slowest {max(checks):.2f}s; broker log {lines} lines")
        assert sent >= FLOOD_FRAMES
        # the warnings of closed connections are rate-limited (20, then 10 a minute): a flood cannot fill the disk
        assert lines < 20_000 + elapsed / 60 * 2_000, f"the broker logged {lines} lines for {sent} frames"


def _internal_errors(log: str) -> list[str]:
    return [line for line in log.splitlines()
            if "Traceback" in line or "internal error" in line or re.search(r"request from .* failed", line)]


async def _flood(port: int, frames: list[bytes], total: int, check, save_dir) -> tuple[int, int, int]:
    """Send `total` mutated frames; each connection waits for a frame's answer (or the close, or 50 ms) before the
    next, so every frame counted was read by the broker. Returns (sent, closed by the broker, unanswered)."""
    import asyncio
    import collections
    counts = {"sent": 0, "closed": 0, "timed_out": 0}
    next_check = [HEALTH_EVERY]
    recent: dict[int, collections.deque] = {}

    async def worker(wid: int) -> None:
        rng = random.Random(SEED * 1000 + wid)
        last = recent[wid] = collections.deque(maxlen=200)
        reader = writer = None
        while counts["sent"] < total:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            data = _mutate(rng, frames[rng.randrange(len(frames))])
            last.append(data)
            writer.write(I32.pack(len(data)) + data)
            counts["sent"] += 1
            try:
                size = await asyncio.wait_for(reader.readexactly(4), 0.05)
                await asyncio.wait_for(reader.readexactly(I32.unpack(size)[0]), 5)
                continue
            except asyncio.IncompleteReadError:
                counts["closed"] += 1
            except (asyncio.TimeoutError, ConnectionError):
                counts["timed_out"] += 1
            writer.close()
            writer = None
        if writer is not None:
            writer.close()

    async def checker() -> None:
        while counts["sent"] < total:
            await asyncio.sleep(0.2)
            if counts["sent"] >= next_check[0]:
                next_check[0] += HEALTH_EVERY
                await asyncio.to_thread(check, counts["sent"])

    try:
        await asyncio.gather(checker(), *(worker(i) for i in range(FLOOD_CONNECTIONS)))
    except BaseException:
        for wid, last in recent.items():
            (save_dir / f"frames-{wid}.bin").write_bytes(b"".join(I32.pack(len(d)) + d for d in last))
        raise
    return counts["sent"], counts["closed"], counts["timed_out"]
