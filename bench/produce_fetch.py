"""Produce/fetch benchmark: Strata against a null broker (same protocol code, no storage), in one run.

For each broker and round a fresh broker process is started on a free loopback port with an empty log dir, then:

1. produce  N messages of --size bytes with confluent-kafka (linger.ms=5, batch.size=1 MiB, acks=1) as fast as the
   client can, into a topic created with CreateTopics; throughput = N * size / (first produce() -> last delivery
   callback); latency = produce() call -> delivery callback of each message (p50, p99).
2. fetch    the N messages back with a Consumer: assign() from offset 0 (group.id set but never used, nothing
   committed), until all N have arrived; throughput = N * size / (assign() -> last message). Offsets and sizes are
   checked, so a broker serving wrong data does not count.
3. paced    (unless --latency-rate 0) produce at a fixed rate for --latency-seconds into a second topic: produce
   latency when the client is not flooding its own queue.

Before the measured phases 500 messages go through produce and fetch on another topic (warm-up), and before each
broker run the script waits up to --settle seconds for the machine to be idle. Strata and the null broker alternate
(round r runs Strata first when r is even); the median of the rounds is reported with the Strata/null ratios, plus
the broker's CPU time per MB moved (the client is often the limit on 2 cores; CPU per MB shows what the storage
costs even then) and, per round, how much CPU other processes used meanwhile (the noise indicator). Only loopback is
used, and every phase is bounded by --phase-timeout.

    .venv/bin/python bench/produce_fetch.py --messages 20000 --rounds 1        # smoke test
    .venv/bin/python bench/produce_fetch.py --write                            # full run, updates docs/benchmarks.md
    .venv/bin/python bench/produce_fetch.py --only strata --profile py-spy     # where Strata spends its time
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition, libversion
from confluent_kafka import version as ck_version
from confluent_kafka.admin import AdminClient, NewTopic

from benchdoc import write_results

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- produce_fetch:results:begin -->", "<!-- produce_fetch:results:end -->"
TARGET_RATIO = 0.6
BROKERS = ("strata", "null")
MB = 1_000_000  # MB/s means 10^6 bytes of message values per second

PRODUCER_CONF = {"linger.ms": 5, "batch.size": 1_048_576, "acks": 1,
                 # librdkafka caps a batch at min(batch.size, message.max.bytes); its default message.max.bytes
                 # (1000000) would silently undercut batch.size=1 MiB. 1048588 is Kafka's/Strata's max.message.bytes.
                 "message.max.bytes": 1_048_588}


# ---- brokers ---------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """CPU time of a process, all its threads: schedstat (nanoseconds), else utime + stime (clock ticks)."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except FileNotFoundError:
                pass                               # a thread that just exited
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def machine_busy_seconds() -> float:
    """CPU seconds all processes on the machine have used so far (everything but idle and iowait)."""
    try:
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")   # guest time is already in user
    except (OSError, ValueError, IndexError):
        return float("nan")


def wait_for_quiet(max_wait: float, threshold: float = 0.15) -> float:
    """Wait (at most max_wait s) until the machine used < `threshold` cores over half a second; returns the load
    seen last (cores). Other processes on a 2-core machine are the largest source of noise."""
    deadline = time.monotonic() + max_wait
    while True:
        b0, t0 = machine_busy_seconds(), time.monotonic()
        time.sleep(0.5)
        load = (machine_busy_seconds() - b0) / (time.monotonic() - t0)
        if load < threshold or time.monotonic() >= deadline:
            return load
        time.sleep(0.5)


def own_cpu_seconds() -> float:
    return time.process_time()   # all threads of this process, librdkafka's included


class BrokerProc:
    """One broker subprocess with its own temporary log dir; `kind` is "strata" or "null"."""

    def __init__(self, kind: str, cprofile_out: Path | None = None, overrides: dict[str, str] | None = None):
        self.kind = kind
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"strata-bench-{kind}-"))
        self.log_path = self.dir / "broker.log"
        overrides = {"node.id": "1", "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                     "log.dirs": str(self.dir / "logs"), "num.partitions": "1", **(overrides or {})}
        if kind == "strata":
            entry = ["-m", "broker.cli"]
        else:
            entry = [str(ROOT / "bench" / "null_broker.py")]
        if cprofile_out is not None:
            entry = ["-m", "cProfile", "-o", str(cprofile_out), *entry]
        self.args = [sys.executable, *entry, "broker"]
        for k, v in overrides.items():
            self.args += ["--override", f"{k}={v}"]
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, timeout: float = 30) -> "BrokerProc":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.kind} broker did not listen within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    def stop(self, keep: bool = False) -> str:
        """Stop (SIGTERM, then SIGKILL after 20 s), return the broker log, remove the log dir unless `keep`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._log.close()
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        return text


class Sampler:
    """py-spy attached to the broker for one phase; summarised into hot spots afterwards."""

    def __init__(self, pid: int, out: Path, native: bool = False, rate: int = 250):
        exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
        if exe is None:
            raise SystemExit("--profile py-spy needs py-spy: .venv/bin/pip install py-spy")
        self.out = out
        args = [exe, "record", "--pid", str(pid), "--format", "raw", "--output", str(out), "--rate", str(rate),
                "--nolineno"]
        if native:
            args.append("--native")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)  # let it attach before the phase starts

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def summarise_pyspy(path: Path, top: int = 25) -> str:
    """Self and inclusive share of the sampled (non-idle) time per function, from py-spy's raw collapsed stacks."""
    own: Counter = Counter()
    incl: Counter = Counter()
    total = 0
    if not path.exists():
        return f"(no profile written to {path})"
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.strip() for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return "(no samples)"
    lines = [f"{total} samples (active, non-idle)", "  self%   incl%  function (file)"]
    for f, n in own.most_common(top):
        lines.append(f"{100 * n / total:7.1f} {100 * incl[f] / total:7.1f}  {f}")
    lines.append("  -- largest inclusive shares --")
    for f, n in incl.most_common(top):
        lines.append(f"{100 * own[f] / total:7.1f} {100 * n / total:7.1f}  {f}")
    return "\n".join(lines)


# ---- phases ----------------------------------------------------------------------------------------------------
def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})  # no info line when it is destroyed
    fut = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic]
    fut.result(timeout=20)


def produce_phase(bootstrap: str, topic: str, n: int, size: int, partitions: int, timeout: float) -> dict:
    value = os.urandom(size)
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    p.list_topics(topic, timeout=10)  # connection, ApiVersions and metadata before the clock starts
    lat: list[float] = []
    errors: list = []
    last = [0.0]
    now = time.perf_counter
    lat_append = lat.append

    def make_cb(t0: float):
        def cb(err, _msg):
            t = now()
            if err is not None:
                errors.append(err)
            else:
                lat_append(t - t0)
            last[0] = t
        return cb

    produce, poll = p.produce, p.poll
    deadline = time.monotonic() + timeout
    start = now()
    for i in range(n):
        while True:
            try:
                produce(topic, value, partition=i % partitions, on_delivery=make_cb(now()))
                break
            except BufferError:
                poll(0.001)
                if time.monotonic() > deadline:
                    raise TimeoutError("produce: client queue stayed full until --phase-timeout")
        if not i & 511:
            poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    elapsed = last[0] - start
    if left or len(lat) + len(errors) < n:
        raise TimeoutError(f"produce: {left} messages undelivered after --phase-timeout")
    if errors:
        raise RuntimeError(f"produce: {len(errors)} delivery errors, first: {errors[0]}")
    lat.sort()
    return {"seconds": elapsed, "mb_s": n * size / elapsed / MB, "msgs_s": n / elapsed,
            "p50_ms": 1000 * percentile(lat, 0.50), "p99_ms": 1000 * percentile(lat, 0.99)}


def fetch_phase(bootstrap: str, topic: str, n: int, size: int, partitions: int, timeout: float) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "strata-bench-unused", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "auto.offset.reset": "error",
                  # librdkafka postpones a partition's next fetch by fetch.queue.backoff.ms (default 1000) once its
                  # local queue holds queued.min.messages; a broker that outruns the Python loop then looks slow
                  # through up to 1 s stalls that have nothing to do with it.
                  "fetch.queue.backoff.ms": 10})
    try:
        c.list_topics(topic, timeout=10)
        per_part = -(-n // partitions)
        expected = [0] * partitions
        want = [len(range(p, n, partitions)) for p in range(partitions)]
        got = bad = 0
        deadline = time.monotonic() + timeout
        now = time.perf_counter
        start = last = now()
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fetch: {got}/{n} messages after --phase-timeout")
            # never more than are left: consume() waits out its timeout for a batch it cannot fill
            msgs = c.consume(num_messages=min(10_000, n - got), timeout=0.5)
            if not msgs:
                continue
            last = now()
            for m in msgs:
                err = m.error()
                if err is not None:
                    raise KafkaException(err)
                part, off = m.partition(), m.offset()
                if off != expected[part] or len(m.value()) != size:
                    bad += 1
                expected[part] = off + 1
                got += 1
        if bad or any(e != w for e, w in zip(expected, want)):
            raise RuntimeError(f"fetch: {bad} messages out of order or of the wrong size; next offsets {expected}, "
                               f"expected {want} (per partition <= {per_part})")
    finally:
        c.close()
    elapsed = last - start
    return {"seconds": elapsed, "mb_s": n * size / elapsed / MB, "msgs_s": n / elapsed}


def paced_phase(bootstrap: str, topic: str, rate: int, seconds: float, size: int, timeout: float) -> dict:
    value = os.urandom(size)
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    p.list_topics(topic, timeout=10)
    lat: list[float] = []
    errors: list = []
    now = time.perf_counter

    def make_cb(t0: float):
        def cb(err, _msg):
            (errors.append(err) if err is not None else lat.append(now() - t0))
        return cb

    n = int(rate * seconds)
    start = now()
    sent = 0
    while sent < n:
        due = min(n, int((now() - start) * rate) + 1)
        while sent < due:
            p.produce(topic, value, on_delivery=make_cb(now()))
            sent += 1
        p.poll(0)
        nxt = start + sent / rate
        delay = nxt - now()
        if delay > 0:
            p.poll(min(delay, 0.001))  # serves callbacks while waiting for the next send time
    left = p.flush(timeout)
    if left or errors:
        raise RuntimeError(f"paced produce: {left} undelivered, {len(errors)} errors")
    lat.sort()
    return {"rate": rate, "messages": n, "p50_ms": 1000 * percentile(lat, 0.50),
            "p99_ms": 1000 * percentile(lat, 0.99)}


def warm_up(bootstrap: str, topic: str, size: int) -> None:
    """A few hundred messages through produce and fetch first, so one-time costs (kio loading a request schema on
    first use, first segment files) stay out of the measured phases."""
    create_topic(bootstrap, topic, 1)
    produce_phase(bootstrap, topic, 500, size, 1, 60)
    fetch_phase(bootstrap, topic, 500, size, 1, 60)


def run_one(kind: str, rnd: int, args, profile_dir: Path | None) -> dict:
    cprof = None
    if args.profile == "cprofile" and profile_dir is not None:
        cprof = profile_dir / f"{kind}-r{rnd}.cprofile"
    if args.settle > 0:
        load = wait_for_quiet(args.settle)
        if load >= 0.15:
            print(f"note: machine still busy ({100 * load:.0f}% of a core) after waiting {args.settle:.0f} s",
                  file=sys.stderr)
    b = BrokerProc(kind, cprof).start()
    topic = f"bench-{kind}-r{rnd}"
    res: dict = {"broker": kind, "round": rnd}
    try:
        warm_up(b.bootstrap, topic + "-warmup", args.size)
        create_topic(b.bootstrap, topic, args.partitions)
        for phase in ("produce", "fetch"):
            sampler = None
            if args.profile == "py-spy" and profile_dir is not None:
                sampler = Sampler(b.pid, profile_dir / f"{kind}-r{rnd}-{phase}.txt", native=args.profile_native)
            c0, m0, o0, t0 = cpu_seconds(b.pid), machine_busy_seconds(), own_cpu_seconds(), time.perf_counter()
            try:
                if phase == "produce":
                    r = produce_phase(b.bootstrap, topic, args.messages, args.size, args.partitions,
                                      args.phase_timeout)
                else:
                    r = fetch_phase(b.bootstrap, topic, args.messages, args.size, args.partitions,
                                    args.phase_timeout)
            finally:
                if sampler is not None:
                    sampler.stop()
            wall = time.perf_counter() - t0
            broker_cpu, own_cpu = cpu_seconds(b.pid) - c0, own_cpu_seconds() - o0
            r["broker_cpu"] = broker_cpu / wall
            r["client_cpu"] = own_cpu / wall
            # CPU used by anything else on the machine meanwhile (other processes, py-spy): the noise indicator.
            r["other_cpu"] = max(0.0, machine_busy_seconds() - m0 - broker_cpu - own_cpu) / wall
            res[phase] = r
        if args.latency_rate > 0:
            create_topic(b.bootstrap, topic + "-paced", 1)
            res["paced"] = paced_phase(b.bootstrap, topic + "-paced", args.latency_rate, args.latency_seconds,
                                       args.size, args.phase_timeout)
    finally:
        log_text = b.stop(keep=args.keep_logs)
    if "Traceback" in log_text:
        print(f"WARNING: {kind} broker logged a traceback:\n{log_text[-3000:]}", file=sys.stderr)
    return res


# ---- reporting -------------------------------------------------------------------------------------------------
def med(results: list[dict], phase: str, key: str) -> float:
    vals = [r[phase][key] for r in results if phase in r]
    return statistics.median(vals) if vals else float("nan")


def cpu_per_mb(results: list[dict], phase: str) -> float:
    """Median broker CPU milliseconds per MB moved: what the broker would need if it, not the client, were the
    limit."""
    vals = [1000 * r[phase]["broker_cpu"] / r[phase]["mb_s"] for r in results if phase in r]
    return statistics.median(vals) if vals else float("nan")


def summarise(all_results: list[dict]) -> dict:
    out = {}
    for kind in BROKERS:
        rs = [r for r in all_results if r["broker"] == kind]
        if not rs:
            continue
        out[kind] = {
            "produce_mb_s": med(rs, "produce", "mb_s"), "produce_msgs_s": med(rs, "produce", "msgs_s"),
            "p50_ms": med(rs, "produce", "p50_ms"), "p99_ms": med(rs, "produce", "p99_ms"),
            "fetch_mb_s": med(rs, "fetch", "mb_s"), "fetch_msgs_s": med(rs, "fetch", "msgs_s"),
            "produce_cpu": med(rs, "produce", "broker_cpu"), "fetch_cpu": med(rs, "fetch", "broker_cpu"),
            "produce_cpu_ms_mb": cpu_per_mb(rs, "produce"), "fetch_cpu_ms_mb": cpu_per_mb(rs, "fetch"),
            "paced_p50_ms": med(rs, "paced", "p50_ms"), "paced_p99_ms": med(rs, "paced", "p99_ms"),
        }
    if "strata" in out and "null" in out:
        s, z = out["strata"], out["null"]
        out["ratio"] = {k: s[k] / z[k] if z[k] else float("nan")
                        for k in ("produce_mb_s", "produce_msgs_s", "fetch_mb_s", "fetch_msgs_s")}
        # CPU efficiency as a throughput-like ratio: null's CPU per MB over Strata's (1.0 = storage is free).
        for k in ("produce_cpu_ms_mb", "fetch_cpu_ms_mb"):
            out["ratio"][k] = z[k] / s[k] if s[k] else float("nan")
    return out


def fmt(v: float, digits: int = 1) -> str:
    return "n/a" if v != v else f"{v:,.{digits}f}"


def table(summary: dict, args) -> str:
    paced = args.latency_rate > 0
    head = ["Broker", "Produce MB/s", "Produce msgs/s", "Produce p50 ms", "Produce p99 ms", "Fetch MB/s",
            "Fetch msgs/s"]
    if paced:
        head += ["Paced p50 ms", "Paced p99 ms"]
    head += ["Broker CPU produce / fetch", "Broker CPU ms per MB produce / fetch"]
    rows = [head, ["---"] * len(head)]
    for kind in BROKERS:
        if kind not in summary:
            continue
        s = summary[kind]
        row = [{"strata": "Strata", "null": "null broker"}[kind], fmt(s["produce_mb_s"]), fmt(s["produce_msgs_s"], 0),
               fmt(s["p50_ms"]), fmt(s["p99_ms"]), fmt(s["fetch_mb_s"]), fmt(s["fetch_msgs_s"], 0)]
        if paced:
            row += [fmt(s["paced_p50_ms"], 2), fmt(s["paced_p99_ms"], 2)]
        row += [f"{100 * s['produce_cpu']:.0f}% / {100 * s['fetch_cpu']:.0f}%",
                f"{fmt(s['produce_cpu_ms_mb'], 2)} / {fmt(s['fetch_cpu_ms_mb'], 2)}"]
        rows.append(row)
    if "ratio" in summary:
        r = summary["ratio"]
        row = ["**Strata / null**", f"**{r['produce_mb_s']:.2f}**", f"{r['produce_msgs_s']:.2f}", "", "",
               f"**{r['fetch_mb_s']:.2f}**", f"{r['fetch_msgs_s']:.2f}"]
        row += ["", ""] if paced else []
        row += ["", f"{r['produce_cpu_ms_mb']:.2f} / {r['fetch_cpu_ms_mb']:.2f} (null / Strata)"]
        rows.append(row)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def rounds_table(results: list[dict]) -> str:
    rows = ["| Round | Broker | Produce MB/s | p50 ms | p99 ms | Fetch MB/s | Paced p50 / p99 ms "
            "| CPU produce: broker / client / other | CPU fetch: broker / client / other |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cpu(ph: dict) -> str:
        return " / ".join(f"{100 * ph.get(k, float('nan')):.0f}%" for k in ("broker_cpu", "client_cpu", "other_cpu"))

    for r in results:
        pc = r.get("paced")
        rows.append(f"| {r['round']} | {r['broker']} | {fmt(r['produce']['mb_s'])} | {fmt(r['produce']['p50_ms'])} "
                    f"| {fmt(r['produce']['p99_ms'])} | {fmt(r['fetch']['mb_s'])} | "
                    + (f"{fmt(pc['p50_ms'], 2)} / {fmt(pc['p99_ms'], 2)}" if pc else "-")
                    + f" | {cpu(r['produce'])} | {cpu(r['fetch'])} |")
    return "\n".join(rows)


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, AttributeError):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        untracked = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                                   text=True).stdout.strip()
        if dirty or untracked != dirty:
            commit += " + uncommitted changes"
    except OSError:
        commit = "?"
    return {"cpus": os.cpu_count(), "cpu": model, "memory": mem, "kernel": platform.release(),
            "python": platform.python_version(), "confluent_kafka": ck_version() if isinstance(ck_version(), str) else ck_version()[0], "librdkafka": libversion()[0],
            "commit": commit}


def _eff(summary: dict) -> str:
    if "ratio" not in summary:
        return "n/a"
    r = summary["ratio"]
    return f"produce {r['produce_cpu_ms_mb']:.2f}, fetch {r['fetch_cpu_ms_mb']:.2f}"


def results_block(summary: dict, results: list[dict], args, m: dict, when: str, wall: float) -> str:
    verdict = []
    if "ratio" in summary:
        for key, name in (("produce_mb_s", "produce"), ("fetch_mb_s", "fetch")):
            r = summary["ratio"][key]
            verdict.append(f"{name} {r:.3f} ({'meets' if r >= TARGET_RATIO else 'below'} the {TARGET_RATIO} target)")
    cmd = "python bench/produce_fetch.py " + " ".join(a for a in sys.argv[1:] if a != "--write")
    return f"""{BEGIN}
_Generated by `bench/produce_fetch.py --write`; rerun it to replace this block._

**Run:** {when} UTC, `{cmd.strip()}`, {wall:.0f} s wall time.
**Machine:** {m['cpus']} cores ({m['cpu']}), {m['memory']} RAM, Linux {m['kernel']}; Python {m['python']};
confluent-kafka {m['confluent_kafka']} / librdkafka {m['librdkafka']}; Strata at {m['commit']}.
**Workload:** {args.messages:,} messages x {args.size:,} B ({args.messages * args.size / MB:,.0f} MB) per phase,
{args.partitions} partition(s); median of {args.rounds} round(s) per broker, brokers alternating.

{table(summary, args)}

Strata / null throughput ratio: {"; ".join(verdict) or "n/a"}.
Broker CPU per MB, null / Strata: {_eff(summary)}.

<details><summary>Every round</summary>

{rounds_table(results)}

</details>
{END}"""


DOC_TEMPLATE = """# Benchmarks

{block}
"""


def write_doc(block: str) -> None:
    if DOC.exists():
        write_results(DOC, BEGIN, END, block)
        return
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(DOC_TEMPLATE.format(block=block))


# ---- main ------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000, help="messages per produce/fetch phase (200000)")
    ap.add_argument("--size", type=int, default=1024, help="value size in bytes (1024)")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the benchmark topic (1)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per broker; the median is reported (5)")
    ap.add_argument("--only", choices=BROKERS, help="run one broker only (no ratios)")
    ap.add_argument("--latency-rate", type=int, default=10_000,
                    help="paced-latency phase: messages/s (10000; 0 skips the phase)")
    ap.add_argument("--latency-seconds", type=float, default=3.0, help="paced-latency phase duration (3)")
    ap.add_argument("--phase-timeout", type=float, default=300.0, help="limit per phase in seconds (300)")
    ap.add_argument("--settle", type=float, default=30.0,
                    help="before each broker run wait up to this many seconds for the machine to go idle (30; 0 = no)")
    ap.add_argument("--write", action="store_true", help=f"replace the results block of {DOC.relative_to(ROOT)}")
    ap.add_argument("--json", metavar="PATH", help="also write every round and the summary as JSON")
    ap.add_argument("--profile", choices=("py-spy", "cprofile"),
                    help="profile the broker(s): py-spy per phase (summary printed) or cProfile for the broker's life")
    ap.add_argument("--profile-native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument("--profile-dir", default=None, help="where profiles go (a new temp dir)")
    ap.add_argument("--keep-logs", action="store_true", help="keep broker log dirs (paths printed)")
    args = ap.parse_args(argv)
    if not 1 <= args.messages <= 10_000_000 or not 1 <= args.size <= 1_000_000 or not 1 <= args.rounds <= 20:
        ap.error("--messages 1..10M, --size 1..1M, --rounds 1..20")
    if not 1 <= args.partitions <= 10_000:
        ap.error("--partitions 1..10000")
    if args.write and (args.profile or args.only):
        ap.error("--write wants an unprofiled run of both brokers")

    profile_dir = None
    if args.profile:
        profile_dir = Path(args.profile_dir or tempfile.mkdtemp(prefix="strata-bench-profile-"))
        profile_dir.mkdir(parents=True, exist_ok=True)
    kinds = [args.only] if args.only else list(BROKERS)
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    t_start = time.monotonic()
    results = []
    for rnd in range(args.rounds):
        order = kinds if rnd % 2 == 0 else kinds[::-1]
        for kind in order:
            r = run_one(kind, rnd, args, profile_dir)
            results.append(r)
            pr, fe, pc = r["produce"], r["fetch"], r.get("paced")
            print(f"round {rnd} {kind:6s}: produce {pr['mb_s']:7.1f} MB/s {pr['msgs_s']:9,.0f} msg/s "
                  f"p50 {pr['p50_ms']:7.1f} ms p99 {pr['p99_ms']:7.1f} ms (broker CPU {100 * pr['broker_cpu']:3.0f}%)"
                  f" | fetch {fe['mb_s']:7.1f} MB/s {fe['msgs_s']:9,.0f} msg/s (broker CPU "
                  f"{100 * fe['broker_cpu']:3.0f}%) | other load {100 * pr['other_cpu']:3.0f}%/{100 * fe['other_cpu']:3.0f}%"
                  + (f" | paced {pc['rate']}/s p50 {pc['p50_ms']:.2f} ms p99 {pc['p99_ms']:.2f} ms" if pc else ""),
                  flush=True)
    wall = time.monotonic() - t_start
    summary = summarise(results)
    print()
    print(f"median of {args.rounds} round(s), {args.messages:,} x {args.size} B messages, "
          f"{args.partitions} partition(s), {wall:.0f} s")
    print(table(summary, args))
    if "ratio" in summary:
        r = summary["ratio"]
        ok = r["produce_mb_s"] >= TARGET_RATIO and r["fetch_mb_s"] >= TARGET_RATIO
        print(f"\nStrata/null: produce {r['produce_mb_s']:.3f}, fetch {r['fetch_mb_s']:.3f} "
              f"(target >= {TARGET_RATIO}: {'met' if ok else 'NOT met'}); broker CPU per MB, null/Strata: "
              f"produce {r['produce_cpu_ms_mb']:.2f}, fetch {r['fetch_cpu_ms_mb']:.2f}")
    if args.profile == "py-spy":
        for f in sorted(profile_dir.glob("*.txt")):
            print(f"\n== py-spy {f.name} ==\n{summarise_pyspy(f)}")
    if profile_dir is not None:
        print(f"\nprofiles in {profile_dir}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "args": vars(args), "summary": summary,
                                               "rounds": results}, indent=2))
    if args.write:
        write_doc(results_block(summary, results, args, machine(), when, wall))
        print(f"updated {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
