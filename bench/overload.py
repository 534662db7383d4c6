"""Overload benchmark (issue 26): a well-behaved producer's latency on a broker that abusive clients share, and the
broker's memory meanwhile, in one run on one `strata broker` process.

The well-behaved client: confluent-kafka, acks=all, one 1 KiB record every 10 ms, each awaited before the next (so
its latency is a round trip, not a queue); p50 and p99 from produce() to the delivery report.

Phases, each measured with the same client:

    unloaded          nothing else runs: the baseline
    abusers           2,000 idle connections (each sent one ApiVersions, then silent); a slow reader that pipelines
                      Fetch requests for 1 MiB each and never reads an answer; a client that announces a frame above
                      socket.request.max.bytes again and again (closed each time); a client that announces a 50 MiB
                      frame, sends 1 MiB of it and stalls; and a flooding producer (its own process, confluent-kafka,
                      10 KiB records as fast as it goes)
    abusers, quota    the same, with producer_byte_rate=5 MB/s for the flooder's client id (`strata configs`)

The broker's resident memory (VmRSS) is sampled every 50 ms; the peak of each phase is reported.

    .venv/bin/python bench/overload.py --seconds 5         # smoke
    .venv/bin/python bench/overload.py --write             # updates "Overload (issue 26)" in docs/benchmarks.md
"""
from __future__ import annotations

import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdoc import seconds_main  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- overload:results:begin -->", "<!-- overload:results:end -->"
I32 = struct.Struct(">i")
IDLE_CONNECTIONS = 2000
FLOOD_QUOTA = 5_000_000

FLOODER = r"""
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "client.id": "flood", "linger.ms": 5, "acks": 1,
              "queue.buffering.max.kbytes": 65536})
end = time.monotonic() + float(sys.argv[3])
value = b"f" * 10240
while time.monotonic() < end:
    try:
        p.produce(sys.argv[2], value)
    except BufferError:
        p.poll(0.01)
    p.poll(0)
p.purge()
p.flush(5)
"""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0.0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.05)


def latencies(bootstrap: str, topic: str, seconds: float, acks: str = "all") -> list[float]:
    """One 1 KiB record every 10 ms, each awaited: the produce() to delivery-report times of those acknowledged."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "polite", "acks": acks, "linger.ms": 0,
                  "enable.idempotence": acks == "all"})
    out: list[float] = []
    end = time.monotonic() + seconds
    value = b"p" * 1024
    while time.monotonic() < end:
        done = []
        t0 = time.perf_counter()
        p.produce(topic, value, on_delivery=lambda err, msg: done.append(err))
        while not done:
            p.poll(0.001)
        if done[0] is None:
            out.append(time.perf_counter() - t0)
        time.sleep(0.01)
    p.flush(10)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def api_versions_frame() -> bytes:
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"
    return I32.pack(len(body)) + body


def fetch_frame(topic: str, corr: int) -> bytes:
    """Fetch v4 (non-flexible), one partition from offset 0, 1 MiB, max_wait 0."""
    t = topic.encode()
    body = struct.pack(">hhih", 1, 4, corr, 4) + b"slow"
    body += struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0)
    body += struct.pack(">ih", 1, len(t)) + t + struct.pack(">iiqi", 1, 0, 0, 1 << 20)
    return I32.pack(len(body)) + body


class Abusers:
    def __init__(self, b: BrokerProcess, topic: str, seconds: float):
        self.b, self.topic, self.seconds = b, topic, seconds
        self.socks: list[socket.socket] = []
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.flooder: subprocess.Popen | None = None
        self.counts = {"oversized": 0, "slow_fetches": 0}

    def start(self) -> None:
        frame = api_versions_frame()
        for _ in range(IDLE_CONNECTIONS):
            s = socket.create_connection(("127.0.0.1", self.b.port))
            s.sendall(frame)
            self.socks.append(s)
        for target in (self._slow_reader, self._oversized, self._stalled):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self.threads.append(t)
        self.flooder = subprocess.Popen([sys.executable, "-c", FLOODER, self.b.bootstrap, self.topic + "-flood",
                                         str(self.seconds + 5)])

    def _slow_reader(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", self.b.port))
        s.settimeout(1)
        corr = 0
        while not self.stop.is_set():
            try:
                s.sendall(fetch_frame(self.topic + "-big", corr))
                corr += 1
                self.counts["slow_fetches"] = corr
            except (socket.timeout, OSError):
                time.sleep(0.1)              # the broker stopped reading us: fine, keep the connection
        s.close()

    def _oversized(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.b.port), timeout=2) as s:
                    s.sendall(I32.pack(200 << 20) + b"x" * 1024)
                    s.recv(1)                # the broker closes it
                self.counts["oversized"] += 1
            except OSError:
                pass
            time.sleep(0.01)

    def _stalled(self) -> None:
        s = socket.create_connection(("127.0.0.1", self.b.port))
        try:
            s.sendall(I32.pack(50 << 20) + struct.pack(">hhih", 0, 9, 1, 5) + b"stall" + b"\0" * (1 << 20))
        except OSError:
            pass
        self.stop.wait()
        s.close()

    def close(self) -> None:
        self.stop.set()
        for s in self.socks:
            s.close()
        if self.flooder is not None:
            self.flooder.kill()
            self.flooder.wait()
        for t in self.threads:
            t.join(5)


def fill_big_topic(bootstrap: str, topic: str, mib: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"b" * 65536
    for _ in range(mib * 16):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def set_flood_quota(b: BrokerProcess) -> None:
    from tools.cli import main
    code = main(["configs", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "clients",
                 "--entity-name", "flood", "--add-config", f"producer_byte_rate={FLOOD_QUOTA}"])
    assert code == 0


def run(seconds: float) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-overload-") as d:
        b = BrokerProcess(Path(d), {"num.partitions": "1", "log.segment.bytes": str(64 << 20)}).start()
        try:
            topic = f"overload-{uuid.uuid4().hex[:6]}"
            fill_big_topic(b.bootstrap, topic + "-big", 64)
            latencies(b.bootstrap, topic, 2)                            # warm up (topic creation, connections)
            for phase in ("unloaded", "abusers", "abusers, quota"):
                if phase == "abusers, quota":
                    set_flood_quota(b)
                sampler = Sampler(b.proc.pid)
                sampler.peak = rss_mb(b.proc.pid)
                sampler.start()
                abusers = Abusers(b, topic, seconds) if phase != "unloaded" else None
                if abusers:
                    abusers.start()
                    time.sleep(2)                                      # the flooder gets going
                try:
                    lat = latencies(b.bootstrap, topic, seconds)
                finally:
                    counts = dict(abusers.counts) if abusers else {}
                    if abusers:
                        abusers.close()
                    sampler.running = False
                    sampler.join()
                assert b.alive(), b.log_text()[-3000:]
                rows.append({"phase": phase, "n": len(lat), "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
                             "rss": sampler.peak, **counts})
                print(rows[-1], flush=True)
                time.sleep(3)
        finally:
            b.stop()
    return rows


def table(rows: list[dict]) -> str:
    base = rows[0]["p99"]
    out = ["| phase | records | p50 ms | p99 ms | p99 ratio | broker peak RSS |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['phase']} | {r['n']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['p99'] / base:.2f} | "
                   f"{r['rss']:.0f} MB |")
    return "\n".join(out)


if __name__ == "__main__":
    seconds_main("overload.py", run, table, DOC, BEGIN, END, "## Overload (issue 26)\n\n")
