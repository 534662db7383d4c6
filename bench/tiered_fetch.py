"""Tiered-storage fetch benchmark: consume a topic entirely from the remote tier vs the same data from local segments,
in one run, on the local-filesystem object store and (smaller) on S3 via a moto_server.

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
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
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
TARGET = 0.5
MiB = 1 << 20
MB = 1_000_000


class Broker(pf.BrokerProc):
    def __init__(self, overrides: dict[str, str]):
        super().__init__("strata")
        self.metrics_port = pf.free_port()
        for k, v in {**overrides, "metrics.port": str(self.metrics_port), "log.cleaner.enable": "false"}.items():
            self.args += ["--override", f"{k}={v}"]

    def metric(self, name: str, topic: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        return sum(float(m.group(2)) for m in re.finditer(rf'^{name}\{{([^}}]*)\}} (\S+)$', text, re.M)
                   if f'topic="{topic}"' in m.group(1))


def create(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=10)[topic].result(timeout=20)


def alter(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
    admin.incremental_alter_configs([res])[res].result(timeout=20)


def local_log_bytes(b: Broker, topic: str) -> int:
    return sum(p.stat().st_size for p in (b.dir / "logs" / f"{topic}-0").glob("*.log"))


def run_store(kind: str, args, moto=None) -> dict:
    size_mib = args.size_mib if kind == "file" else args.moto_size_mib
    seg_mib = args.segment_mib if kind == "file" else args.moto_segment_mib
    n = size_mib * MiB // args.size
    overrides = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
                 "log.retention.check.interval.ms": "500", "remote.log.metadata.topic.num.partitions": "5"}
    store_dir = None
    if kind == "file":
        store_dir = Path(tempfile.mkdtemp(prefix="strata-bench-objects-"))
        overrides["remote.log.storage.manager.store.url"] = f"file://{store_dir}"
    else:
        bucket = moto.new_bucket()
        overrides["remote.log.storage.manager.store.url"] = f"s3://{bucket}/bench"
        for k, v in moto.store_options().items():
            overrides["remote.log.storage.manager.store." + k.replace("_", ".")] = v
    b = Broker(overrides).start()
    print(f"[{kind}] broker on {b.bootstrap}, {n} x {args.size} B = {n * args.size / MiB:.0f} MiB per topic, "
          f"{seg_mib} MiB segments", flush=True)
    out: dict = {"kind": kind, "messages": n, "size": args.size, "mib": n * args.size / MiB, "segment_mib": seg_mib}
    try:
        seg = str(seg_mib * MiB)
        create(b.bootstrap, "local", {"segment.bytes": seg})
        create(b.bootstrap, "remote", {"segment.bytes": seg})
        for topic in ("local", "remote"):
            r = pf.produce_phase(b.bootstrap, topic, n, args.size, 1, args.phase_timeout)
            print(f"[{kind}] produced {topic}: {r['mb_s']:.0f} MB/s", flush=True)
        # enable tiering on the full topic (EnableRemoteLogOnTopic): everything is copied from here on, and
        # local.retention.ms=1 also rolls the active segment so that the whole topic ends up in the store
        t0 = time.monotonic()
        alter(b.bootstrap, "remote", {"segment.bytes": seg, "remote.storage.enable": "true",
                                      "local.retention.bytes": "1", "local.retention.ms": "1"})
        deadline = time.monotonic() + args.phase_timeout
        total = n * (args.size + 70)
        while local_log_bytes(b, "remote") > 0 or \
                b.metric("kafka_server_brokertopicmetrics_remote_copy_bytes_total", "remote") < total * 0.99:
            if time.monotonic() > deadline:
                raise TimeoutError(f"offload incomplete: {local_log_bytes(b, 'remote')} bytes still local")
            time.sleep(0.1)
        copied = b.metric("kafka_server_brokertopicmetrics_remote_copy_bytes_total", "remote")
        out["offload_s"] = time.monotonic() - t0
        out["offload_mb_s"] = copied / out["offload_s"] / MB
        print(f"[{kind}] offloaded {copied / MiB:.0f} MiB in {out['offload_s']:.1f}s", flush=True)
        rounds = []
        for rnd in range(args.rounds):
            order = ("local", "remote") if rnd % 2 == 0 else ("remote", "local")
            res = {}
            for topic in order:
                pf.wait_for_quiet(args.settle)
                before = b.metric("kafka_server_brokertopicmetrics_remote_fetch_bytes_total", "remote")
                cpu0 = pf.cpu_seconds(b.pid)
                r = pf.fetch_phase(b.bootstrap, topic, n, args.size, 1, args.phase_timeout)
                r["broker_cpu_ms_per_mb"] = (pf.cpu_seconds(b.pid) - cpu0) * 1000 / (n * args.size / MB)
                if topic == "remote":
                    fetched = b.metric("kafka_server_brokertopicmetrics_remote_fetch_bytes_total", "remote") - before
                    if fetched < n * args.size:
                        raise RuntimeError(f"only {fetched} bytes came from the remote tier")
                    r["remote_bytes"] = fetched
                res[topic] = r
                print(f"[{kind}] round {rnd} {topic}: {r['mb_s']:.0f} MB/s, broker CPU "
                      f"{r['broker_cpu_ms_per_mb']:.2f} ms/MB", flush=True)
            rounds.append(res)
        out["rounds"] = rounds
        for topic in ("local", "remote"):
            out[f"{topic}_mb_s"] = statistics.median(r[topic]["mb_s"] for r in rounds)
            out[f"{topic}_cpu"] = statistics.median(r[topic]["broker_cpu_ms_per_mb"] for r in rounds)
        out["ratio"] = out["remote_mb_s"] / out["local_mb_s"]
        log = b.stop()
        if "Traceback" in log:
            raise RuntimeError("broker logged a traceback:\n" + log[log.index("Traceback") - 500:][:4000])
    finally:
        b.stop()
        if store_dir is not None:
            shutil.rmtree(store_dir, ignore_errors=True)
    return out


def results_block(results: list[dict], args, wall: float) -> str:
    m = pf.machine()
    when = dt.datetime.now().strftime("%Y-%m-%d")
    lines = [BEGIN, "",
             f"Measured {when} with `bench/tiered_fetch.py --rounds {args.rounds} --size {args.size}` "
             f"({wall:.0f} s wall): {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}, "
             f"librdkafka {m.get('librdkafka', '?')}.", "",
             "| Store | Data | Segments | Offload MB/s | Local fetch MB/s | Remote fetch MB/s | Remote / local | "
             "Broker CPU ms/MB local / remote |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        name = "local filesystem" if r["kind"] == "file" else "S3 (moto_server)"
        lines.append(f"| {name} | {r['mib']:.0f} MiB ({r['messages']} x {r['size']} B) | {r['segment_mib']} MiB | "
                     f"{r['offload_mb_s']:.0f} | {r['local_mb_s']:.0f} | {r['remote_mb_s']:.0f} | "
                     f"{r['ratio']:.2f} | {r['local_cpu']:.2f} / {r['remote_cpu']:.2f} |")
    lines.append("")
    file_r = [r for r in results if r["kind"] == "file"]
    if file_r:
        ok = "meets" if file_r[0]["ratio"] >= TARGET else "misses"
        lines.append(f"Local-filesystem store: remote/local fetch ratio {file_r[0]['ratio']:.2f} ({ok} the "
                     f"{TARGET} target).")
    lines += ["", "<details><summary>Every round</summary>", "",
              "| Store | Round | Topic | MB/s | Broker CPU ms/MB |", "| --- | --- | --- | --- | --- |"]
    for r in results:
        for i, rnd in enumerate(r["rounds"]):
            for topic in ("local", "remote"):
                lines.append(f"| {r['kind']} | {i} | {topic} | {rnd[topic]['mb_s']:.0f} | "
                             f"{rnd[topic]['broker_cpu_ms_per_mb']:.2f} |")
    lines += ["", "</details>", END]
    return "\n".join(lines)


SECTION = """## Tiered storage

`bench/tiered_fetch.py` (see its docstring and [tiered-storage.md](tiered-storage.md)) consumes a topic whose every
segment is in the remote tier and, in the same run and on the same broker, a topic with the same messages kept on local
disk. Both are read from offset 0 by one confluent-kafka consumer (default fetch sizes: 1 MiB per partition per fetch),
alternating which topic goes first. The remote reads go through the reader pool, the 4 MiB chunk cache (128 MiB, so a
1 GiB topic is read from the store again in every round) and sequential prefetch of 2 chunks. The local-filesystem store
keeps its objects on the same disk (page cache); the S3 numbers are against moto_server on the same machine, i.e. they
measure Strata's S3 path plus moto, not AWS.

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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--phase-timeout", type=float, default=300)
    ap.add_argument("--write", action="store_true", help=f"update the Tiered storage section of {DOC}")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    results = [run_store("file", args)]
    if args.moto_size_mib > 0:
        from moto_server import MotoServer
        with MotoServer(Path(tempfile.gettempdir()) / "strata-bench-moto.log") as moto:
            results.append(run_store("s3", args, moto))
    block = results_block(results, args, time.monotonic() - t0)
    print(block)
    if args.write:
        write_doc(block)
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
