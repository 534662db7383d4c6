"""Tiered-storage fetch benchmark: consume a topic entirely from the remote tier vs the same data from local segments,
in one run, on the local-filesystem object store, on the same store behind real object-store latency (issue 27: the
fault wrapper's `latency_ms=30,get_bandwidth_mb_s=80`, each GET 30 ms to its first byte and 80 MB/s after it), with
one partition and with --wide-partitions, and (smaller) on S3 via a moto_server. A last scenario measures consumers at
the tail while catch-up consumers read every remote partition (--tail-seconds).

Per store a fresh Strata broker (remote.log.storage.system.enable=true) gets two topics written with the same messages:

  local   remote.storage.enable=false: every segment stays on local disk
  remote  written untiered, then remote.storage.enable=true, local.retention.bytes=1 and local.retention.ms=1: every
          segment (the active one is rolled) is copied to the store and deleted locally; the time this takes gives
          the offload rate

Then --rounds rounds alternate (local first in even rounds) a full fetch of each topic with confluent-kafka from offset
0 (bench/produce_fetch.py's fetch phase: offsets and sizes checked). Reported: MB/s (10^6 bytes of values per second)
median over the rounds, the remote/local ratio (target >= 0.5 for the local-filesystem store), broker CPU per MB, and
the offload rate (bytes tiered per second of copy task time). The broker's remote-fetch byte counter (Prometheus) must
show every byte of the remote topic read from the store, so the remote phase cannot silently read local data.

    .venv/bin/python bench/tiered_fetch.py --size-mib 64 --moto-size-mib 16 --rounds 1   # smoke test
    .venv/bin/python bench/tiered_fetch.py                                               # 1 GiB / 256 MiB on moto
    .venv/bin/python bench/tiered_fetch.py --write                                       # and update the doc

With latency, the remote reads' own figures come from the broker's metrics: GETs per GB read (what the store bills),
bytes read ahead and never used, and the largest broker RSS seen against remote.fetch.max.memory.bytes.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import produce_fetch as pf  # noqa: E402
from benchdoc import write_results  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,  # noqa: E402
                                   NewTopic, ResourceType)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- tiered_fetch:results:begin -->", "<!-- tiered_fetch:results:end -->"
SLOW_TARGET = 0.9       # remote / local at 30 ms + 80 MB/s per GET (issue 27)
TAIL_TARGET = 1.2       # tail p99 with catch-up readers / without
MiB = 1 << 20
MB = 1_000_000


class Broker(pf.BrokerProc):
    def __init__(self, overrides: dict[str, str]):
        super().__init__("strata")
        self.metrics_port = pf.free_port()
        for k, v in {**overrides, "metrics.port": str(self.metrics_port), "log.cleaner.enable": "false"}.items():
            self.args += ["--override", f"{k}={v}"]

    def metric(self, name: str, topic: str | None = None) -> float:
        """The sum of a metric's samples (those of `topic` when given)."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        return sum(float(m.group(2)) for m in re.finditer(rf'^{name}(?:\{{([^}}]*)\}})? (\S+)$', text, re.M)
                   if topic is None or f'topic="{topic}"' in (m.group(1) or ""))

    def rss_mib(self) -> float:
        """Anonymous resident memory (RssAnon): the broker's own, without the mapped log and object files."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
        return 0.0


READER = ("strata_remote_log_reader_get_time_seconds_count", "strata_remote_log_reader_read_ahead_bytes_total",
          "strata_remote_log_reader_read_ahead_wasted_bytes_total", "strata_remote_log_reader_memory_peak_bytes")


def reader_figures(b: Broker) -> dict:
    """The remote reader's counters; `chunk_peak` is the most its chunks took since the broker started (the remote
    phases are the only ones that use it)."""
    return dict(zip(("gets", "ahead", "wasted", "chunk_peak"), (b.metric(m) for m in READER)))


def print_reader_metrics(b: Broker) -> None:
    """The remote reader's metrics and the Fetch time histogram as the broker shows them after a phase (--verbose:
    what limited a run; the counters are the broker's totals so far)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        reader = line.startswith(("strata_remote_log_reader", "kafka_storage_remotestoragethreadpool",
                                  "kafka_server_delayedremotefetchmetrics", "kafka_log_remote_remote_log_reader"))
        fetch_time = line.startswith("kafka_network_requestmetrics_total_time_seconds_bucket") and \
            'request="Fetch"' in line
        if (reader and "_created" not in line) or fetch_time:
            print("   ", line)


class RssPeak:
    """The broker's largest RSS, sampled every 0.1 s from a thread while a phase runs."""

    def __init__(self, b: Broker):
        import threading
        self.b, self.peak, self._stop = b, 0.0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self.b.rss_mib())

    def stop(self) -> float:
        self._stop.set()
        self._t.join()
        return self.peak


def create(bootstrap: str, topic: str, config: dict[str, str], partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)],
                        operation_timeout=10)[topic].result(timeout=20)


def alter(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
    admin.incremental_alter_configs([res])[res].result(timeout=20)


def local_log_bytes(b: Broker, topic: str) -> int:
    """Bytes of the topic's local segment files (a file the broker deletes meanwhile counts nothing)."""
    def size(p: Path) -> int:
        try:
            return p.stat().st_size
        except FileNotFoundError:
            return 0
    return sum(size(p) for d in (b.dir / "logs").glob(f"{topic}-*") for p in d.glob("*.log"))


SLOW = "latency_ms=30,get_bandwidth_mb_s=80,seed=1"     # every request 30 ms to its first byte; GETs at 80 MB/s


def start_broker(kind: str, moto=None, extra: dict[str, str] | None = None) -> tuple[Broker, Path | None]:
    """A broker on a fresh store: "file" (the local filesystem store, read through its mapping), "slow" (the same
    behind SLOW, read by GETs), "s3" (moto) or "s3slow" (moto behind SLOW)."""
    overrides = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
                 "log.retention.check.interval.ms": "500", "remote.log.metadata.topic.num.partitions": "5",
                 **(extra or {})}
    store_dir = None
    if kind in ("file", "slow"):
        store_dir = Path(tempfile.mkdtemp(prefix="strata-bench-objects-"))
        overrides["remote.log.storage.manager.store.url"] = f"file://{store_dir}"
        if kind == "slow":
            overrides["remote.log.storage.manager.store.faults"] = SLOW
    else:
        bucket = moto.new_bucket()
        overrides["remote.log.storage.manager.store.url"] = f"s3://{bucket}/bench"
        for k, v in moto.store_options().items():
            overrides["remote.log.storage.manager.store." + k.replace("_", ".")] = v
        if kind == "s3slow":
            overrides["remote.log.storage.manager.store.faults"] = SLOW
    return Broker(overrides).start(), store_dir


def check_log(log: str) -> None:
    if "Traceback" in log:
        raise RuntimeError("broker logged a traceback:\n" + log[log.index("Traceback") - 500:][:4000])


def stop_broker(b: Broker, store_dir: Path | None) -> None:
    b.stop()
    if store_dir is not None:
        shutil.rmtree(store_dir, ignore_errors=True)


def tier_all(b: Broker, topic: str, seg: str, total: int, timeout: float) -> tuple[float, float]:
    """Enable tiering on a full topic (EnableRemoteLogOnTopic): everything is copied from here on, and
    local.retention.ms=1 also rolls the active segments, so the whole topic ends up in the store. (seconds, bytes)."""
    t0 = time.monotonic()
    alter(b.bootstrap, topic, {"segment.bytes": seg, "remote.storage.enable": "true",
                               "local.retention.bytes": "1", "local.retention.ms": "1"})
    deadline = time.monotonic() + timeout
    while local_log_bytes(b, topic) > 0 or \
            b.metric("kafka_server_brokertopicmetrics_remote_copy_bytes_total", topic) < total * 0.99:
        if time.monotonic() > deadline:
            raise TimeoutError(f"offload incomplete: {local_log_bytes(b, topic)} bytes still local")
        time.sleep(0.1)
    return time.monotonic() - t0, b.metric("kafka_server_brokertopicmetrics_remote_copy_bytes_total", topic)


def run_store(kind: str, args, moto=None, partitions: int = 1) -> dict:
    size_mib = args.moto_size_mib if kind.startswith("s3") else args.size_mib
    seg_mib = args.moto_segment_mib if kind.startswith("s3") else args.segment_mib
    n = size_mib * MiB // args.size
    b, store_dir = start_broker(kind, moto, args.broker_config)
    label = f"{kind}/{partitions}"
    print(f"[{label}] broker on {b.bootstrap}, {n} x {args.size} B = {n * args.size / MiB:.0f} MiB per topic, "
          f"{seg_mib} MiB segments, {partitions} partition(s)", flush=True)
    out: dict = {"kind": kind, "partitions": partitions, "messages": n, "size": args.size,
                 "mib": n * args.size / MiB, "segment_mib": seg_mib}
    try:
        seg = str(seg_mib * MiB)
        create(b.bootstrap, "local", {"segment.bytes": seg}, partitions)
        create(b.bootstrap, "remote", {"segment.bytes": seg}, partitions)
        for topic in ("local", "remote"):
            r = pf.produce_phase(b.bootstrap, topic, n, args.size, partitions, args.phase_timeout)
            print(f"[{label}] produced {topic}: {r['mb_s']:.0f} MB/s", flush=True)
        out["offload_s"], copied = tier_all(b, "remote", seg, n * (args.size + 70), args.phase_timeout)
        out["offload_mb_s"] = copied / out["offload_s"] / MB
        print(f"[{label}] offloaded {copied / MiB:.0f} MiB in {out['offload_s']:.1f}s", flush=True)
        rounds = []
        for rnd in range(args.rounds):
            order = ("local", "remote") if rnd % 2 == 0 else ("remote", "local")
            res = {}
            for topic in order:
                pf.wait_for_quiet(args.settle)
                before = b.metric("kafka_server_brokertopicmetrics_remote_fetch_bytes_total", "remote")
                reader0 = reader_figures(b)
                rss = RssPeak(b)
                cpu0, own0, busy0 = pf.cpu_seconds(b.pid), own_cpu_seconds(), machine_cpu_seconds()
                r = pf.fetch_phase(b.bootstrap, topic, n, args.size, partitions, args.phase_timeout)
                mb = n * args.size / MB
                r["broker_cpu_ms_per_mb"] = (pf.cpu_seconds(b.pid) - cpu0) * 1000 / mb
                r["consumer_cpu_ms_per_mb"] = (own_cpu_seconds() - own0) * 1000 / mb
                r["machine_cpu_ms_per_mb"] = (machine_cpu_seconds() - busy0) * 1000 / mb
                r["rss_mib"] = rss.stop()
                if topic == "remote":
                    fetched = b.metric("kafka_server_brokertopicmetrics_remote_fetch_bytes_total", "remote") - before
                    if fetched < n * args.size:
                        raise RuntimeError(f"only {fetched} bytes came from the remote tier")
                    r["remote_bytes"] = fetched
                    reader1 = reader_figures(b)
                    r["gets_per_gb"] = (reader1["gets"] - reader0["gets"]) / (fetched / 1e9)
                    r["wasted_mib"] = (reader1["wasted"] - reader0["wasted"]) / MiB
                    r["ahead_mib"] = (reader1["ahead"] - reader0["ahead"]) / MiB
                    r["chunk_peak_mib"] = reader1["chunk_peak"] / MiB
                if args.verbose:
                    print_reader_metrics(b)
                res[topic] = r
                print(f"[{label}] round {rnd} {topic}: {r['mb_s']:.0f} MB/s, CPU ms/MB: broker "
                      f"{r['broker_cpu_ms_per_mb']:.2f}, consumer {r['consumer_cpu_ms_per_mb']:.2f}, all CPUs "
                      f"{r['machine_cpu_ms_per_mb']:.2f}; RssAnon {r['rss_mib']:.0f} MiB", flush=True)
            rounds.append(res)
        out["rounds"] = rounds
        for topic in ("local", "remote"):
            out[f"{topic}_mb_s"] = statistics.median(r[topic]["mb_s"] for r in rounds)
            out[f"{topic}_cpu"] = statistics.median(r[topic]["broker_cpu_ms_per_mb"] for r in rounds)
        for key in ("gets_per_gb", "wasted_mib", "ahead_mib", "chunk_peak_mib"):
            out[key] = statistics.median(r["remote"][key] for r in rounds)
        out["rss_mib"] = max(r[t]["rss_mib"] for r in rounds for t in ("local", "remote"))
        out["ratio"] = out["remote_mb_s"] / out["local_mb_s"]
        check_log(b.stop())
    finally:
        stop_broker(b, store_dir)
    return out


def own_cpu_seconds() -> float:
    """CPU time of this process (the consumer: librdkafka's threads and the Python loop), ended threads included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def machine_cpu_seconds() -> float:
    """CPU time all CPUs of the machine spent busy (not idle, not waiting for I/O), from /proc/stat: with the
    broker's and the consumer's, it tells whether a phase was bound by the 2 CPUs or by latency."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def catch_up(bootstrap: str, topic: str, partitions: list[int], seconds: float, out) -> None:
    """A catch-up consumer (its own process): reads `partitions` from offset 0, again from 0 at each end, for
    `seconds`; puts the bytes it read on `out`."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "strata-bench-unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.queue.backoff.ms": 10, "log_level": 3})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    got, stop = 0, time.monotonic() + seconds
    try:
        while time.monotonic() < stop:
            for m in c.consume(num_messages=10_000, timeout=0.2):
                err = m.error()
                if err is None:
                    got += len(m.value())
                elif err.code() == KafkaError._PARTITION_EOF:
                    c.seek(TopicPartition(topic, m.partition(), 0))
                else:
                    raise RuntimeError(f"catch-up consumer: {err}")
    finally:
        c.close()
    out.put(got)


def tail_phase(b: Broker, args, catch_up_consumers: int) -> dict:
    """Records produced to `tail` at --tail-rate per second for --tail-seconds, each carrying its send time; one
    consumer at the tail measures produce-to-consume latency, while `catch_up_consumers` processes read the 32
    remote partitions of `remote32` from the start."""
    import multiprocessing
    import struct
    import threading
    from confluent_kafka import Consumer, Producer, TopicPartition
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    parts = list(range(args.wide_partitions))
    workers = [ctx.Process(target=catch_up, args=(b.bootstrap, "remote32", parts[i::catch_up_consumers],
                                                  args.tail_seconds + 5, results))
               for i in range(catch_up_consumers)]
    for w in workers:
        w.start()
    lat: list[float] = []
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "strata-bench-unused",
                         "enable.auto.commit": False, "auto.offset.reset": "latest", "fetch.wait.max.ms": 100})
    end = consumer.get_watermark_offsets(TopicPartition("tail", 0), timeout=10)[1]
    consumer.assign([TopicPartition("tail", 0, end)])
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            for m in consumer.consume(num_messages=1000, timeout=0.1):
                if m.error() is None:
                    lat.append(time.time() - struct.unpack_from(">d", m.value())[0])
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(5 if catch_up_consumers else 1)                # the catch-up readers get going first
    rss = RssPeak(b)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "log_level": 3})
    pad = bytes(args.tail_size - 8)
    n = int(args.tail_rate * args.tail_seconds)
    start = time.monotonic()
    for i in range(n):
        delay = start + i / args.tail_rate - time.monotonic()
        if delay > 0:
            p.poll(delay)
        p.produce("tail", struct.pack(">d", time.time()) + pad, partition=0)
    p.flush(30)
    deadline = time.monotonic() + 30
    while len(lat) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    done.set()
    reader.join()
    consumer.close()
    peak = rss.stop()
    chunk_peak = reader_figures(b)["chunk_peak"] / MiB
    caught_up = sum(results.get(timeout=60) for _ in workers)
    for w in workers:
        w.join(60)
    if len(lat) < n:
        raise RuntimeError(f"tail consumer got {len(lat)} of {n} records")
    lat.sort()
    return {"consumers": catch_up_consumers, "p50_ms": 1000 * pf.percentile(lat, 0.5),
            "p99_ms": 1000 * pf.percentile(lat, 0.99), "catch_up_mb_s": caught_up / (args.tail_seconds + 5) / MB,
            "rss_mib": peak, "chunk_peak_mib": chunk_peak}


def run_tail(args) -> dict:
    """Tail consumers beside catch-up readers of the remote tier, on the slow store (SLOW)."""
    b, store_dir = start_broker("slow", None, args.broker_config)
    n = args.tail_mib * MiB // args.size
    try:
        seg = str(args.segment_mib * MiB)
        create(b.bootstrap, "remote32", {"segment.bytes": seg}, args.wide_partitions)
        create(b.bootstrap, "tail", {})
        pf.produce_phase(b.bootstrap, "remote32", n, args.size, args.wide_partitions, args.phase_timeout)
        tier_all(b, "remote32", seg, n * (args.size + 70), args.phase_timeout)
        print(f"[tail] {n * args.size / MiB:.0f} MiB in {args.wide_partitions} remote partitions", flush=True)
        phases = []
        for consumers in (0, args.catch_up_consumers):
            pf.wait_for_quiet(args.settle)
            r = tail_phase(b, args, consumers)
            print(f"[tail] {consumers} catch-up consumers: tail p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                  f"catch-up {r['catch_up_mb_s']:.0f} MB/s, broker RSS {r['rss_mib']:.0f} MiB, chunks at most "
                  f"{r['chunk_peak_mib']:.0f} MiB", flush=True)
            phases.append(r)
        check_log(b.stop())
    finally:
        stop_broker(b, store_dir)
    return {"phases": phases, "mib": n * args.size / MiB}


STORES = {"file": "local filesystem (mapped)", "slow": "local filesystem behind 30 ms + 80 MB/s per GET",
          "s3": "S3 (moto_server)", "s3slow": "S3 (moto_server) behind 30 ms + 80 MB/s per GET"}


def results_block(results: list[dict], tail: dict | None, args, wall: float) -> str:
    m = pf.machine()
    when = dt.datetime.now().strftime("%Y-%m-%d")
    lines = [BEGIN, "",
             f"Measured {when} with `bench/tiered_fetch.py --rounds {args.rounds} --size {args.size}"
             f"{' --moto-size-mib 0' if not args.moto_size_mib else ''}"
             f"{' --tail-seconds 0' if not args.tail_seconds else ''}"
             f"{''.join(f' --broker-config {k}={v}' for k, v in args.broker_config.items())}` "
             f"({wall:.0f} s wall): {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}, "
             f"librdkafka {m.get('librdkafka', '?')}. remote.fetch.max.memory.bytes = "
             f"{args.broker_config.get('remote.fetch.max.memory.bytes', '256 MiB (the default)')}.", "",
             "| Store | Partitions | Data | Offload MB/s | Local fetch MB/s | Remote fetch MB/s | Remote / local | "
             "Broker CPU ms/MB local / remote | GETs per GB | Read ahead / never read MiB | Peak chunk memory MiB | "
             "Peak broker RssAnon MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {STORES[r['kind']]} | {r['partitions']} | {r['mib']:.0f} MiB ({r['messages']} x {r['size']} B) "
                     f"| {r['offload_mb_s']:.0f} | {r['local_mb_s']:.0f} | {r['remote_mb_s']:.0f} | "
                     f"{r['ratio']:.2f} | {r['local_cpu']:.2f} / {r['remote_cpu']:.2f} | {r['gets_per_gb']:.0f} | "
                     f"{r['ahead_mib']:.0f} / {r['wasted_mib']:.0f} | {r['chunk_peak_mib']:.0f} | "
                     f"{r['rss_mib']:.0f} |")
    lines.append("")
    for r in results:
        if r["kind"] in ("slow", "s3slow"):
            ok = "meets" if r["ratio"] >= SLOW_TARGET else "misses"
            lines.append(f"- {STORES[r['kind']]}, {r['partitions']} partition(s): remote/local {r['ratio']:.2f} "
                         f"({ok} the {SLOW_TARGET} target).")
    if tail is not None:
        base, busy = tail["phases"]
        ratio = busy["p99_ms"] / base["p99_ms"]
        lines += ["", f"Tail consumers while catch-up consumers read {args.wide_partitions} remote partitions "
                      f"({tail['mib']:.0f} MiB, 30 ms + 80 MB/s per GET): one consumer at the tail of a local topic "
                      f"receiving {args.tail_rate} records/s of {args.tail_size} B for {args.tail_seconds} s, "
                      f"produce-to-consume latency.", "",
                  "| Catch-up consumers | Tail p50 ms | Tail p99 ms | Catch-up MB/s | Peak chunk memory MiB | "
                  "Peak broker RssAnon MiB |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for ph in tail["phases"]:
            lines.append(f"| {ph['consumers']} | {ph['p50_ms']:.1f} | {ph['p99_ms']:.1f} | {ph['catch_up_mb_s']:.0f} | "
                         f"{ph['chunk_peak_mib']:.0f} | {ph['rss_mib']:.0f} |")
        ok = "meets" if ratio <= TAIL_TARGET else "misses"
        lines += ["", f"Tail p99 with catch-up / without: {ratio:.2f} ({ok} the {TAIL_TARGET} target)."]
    lines += ["", "<details><summary>Every round</summary>", "",
              "| Store | Partitions | Round | Topic | MB/s | CPU ms/MB: broker | consumer | all CPUs |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        for i, rnd in enumerate(r["rounds"]):
            for topic in ("local", "remote"):
                t = rnd[topic]
                lines.append(f"| {r['kind']} | {r['partitions']} | {i} | {topic} | {t['mb_s']:.0f} | "
                             f"{t['broker_cpu_ms_per_mb']:.2f} | {t['consumer_cpu_ms_per_mb']:.2f} | "
                             f"{t['machine_cpu_ms_per_mb']:.2f} |")
    lines += ["", "</details>", END]
    return "\n".join(lines)


SECTION = """## Tiered storage

`bench/tiered_fetch.py` (see its docstring and [tiered-storage.md](tiered-storage.md)) consumes a topic whose every
segment is in the remote tier and, in the same run and on the same broker, a topic with the same messages kept on local
disk. Both are read from offset 0 by one confluent-kafka consumer (default fetch sizes: 1 MiB per partition per fetch),
alternating which topic goes first. The remote reads go through the reader pool and the parallel ranged reads
(remote_chunks.py: chunks sized from the store's latency and bandwidth, a read-ahead window that grows while the
reader waits, within remote.fetch.max.memory.bytes). The local-filesystem store keeps its objects on the same disk
(page cache) and is read through its mapping; behind the fault wrapper's latency (30 ms to each request's first byte,
80 MB/s per GET, as S3 from EC2) it is read by GETs like a real store. The S3 numbers are against moto_server on the
same machine, i.e. they measure Strata's S3 path plus moto, not AWS.

"""


def write_doc(block: str) -> None:
    write_results(DOC, BEGIN, END, block, SECTION)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="topic size on the local-filesystem store")
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--moto-size-mib", type=int, default=256, help="topic size on moto (0 = skip S3)")
    ap.add_argument("--moto-segment-mib", type=int, default=15, help="below the 16 MiB multipart threshold")
    ap.add_argument("--size", type=int, default=16384, help="message value bytes")
    ap.add_argument("--wide-partitions", type=int, default=32, help="partitions of the wide runs (0 = skip them)")
    ap.add_argument("--tail-seconds", type=float, default=30, help="0 = skip the tail scenario")
    ap.add_argument("--tail-rate", type=int, default=200, help="records/s to the tail topic")
    ap.add_argument("--tail-size", type=int, default=1024)
    ap.add_argument("--tail-mib", type=int, default=1024, help="data in the remote partitions the catch-up read")
    ap.add_argument("--catch-up-consumers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--phase-timeout", type=float, default=300)
    ap.add_argument("--only", choices=("file", "slow", "wide", "s3", "tail"), help="run one case only (diagnosis; s3: "
                    "moto with and without latency)")
    ap.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for every broker of the run (repeatable)")
    ap.add_argument("--verbose", action="store_true", help="print the remote reader's metrics after each remote phase")
    ap.add_argument("--write", action="store_true", help=f"update the Tiered storage section of {DOC}")
    args = ap.parse_args(argv)
    args.broker_config = dict(kv.split("=", 1) for kv in args.broker_config)
    t0 = time.monotonic()
    only = args.only
    if only and args.write:
        ap.error("--write needs every case")
    results = [run_store(k, args) for k in ("file", "slow") if only in (None, k)]
    if args.wide_partitions and only in (None, "wide"):
        results.append(run_store("slow", args, partitions=args.wide_partitions))
    if args.moto_size_mib > 0 and only in (None, "s3"):
        from moto_server import MotoServer
        with MotoServer(Path(tempfile.gettempdir()) / "strata-bench-moto.log") as moto:
            results.append(run_store("s3", args, moto))
            results.append(run_store("s3slow", args, moto))
    tail = run_tail(args) if args.tail_seconds > 0 and args.wide_partitions and only in (None, "tail") else None
    block = results_block(results, tail, args, time.monotonic() - t0)
    print(block)
    if args.write:
        write_doc(block)
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
