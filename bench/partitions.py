"""Many partitions: throughput with 1, 100 and 1,000 busy partitions while 10,000 idle ones are present, Strata
against the null broker in one run; broker CPU per MB, resident memory per idle partition, start-up after a clean
shutdown and after kill -9.

For each broker (Strata and the null broker, alternating by round), a fresh process with an empty log dir:

1. idle     create a topic of --idle partitions and write one 100-byte record to each (so each has a segment,
            indexes, producer and epoch state), then read the broker's resident memory (VmRSS) before and after:
            (after - before) / --idle is the memory an idle partition costs.
2. busy     for each count in --counts, a topic of that many partitions: produce --messages records of --size bytes
            round-robin over its partitions with confluent-kafka (linger.ms=5, batch.size=1 MiB, acks=1; the
            produce phase of bench/produce_fetch.py), then fetch them all back (its fetch phase); throughput and the
            broker's CPU time per MB.
3. restart  (Strata only) SIGTERM, then start again over the same log dir: seconds until the broker listens and
            until a Metadata request lists every partition; then the same after kill -9 (unclean: the broker's
            own "loaded N partitions in X s" line says how long opening the logs took).

    .venv/bin/python bench/partitions.py --messages 50000 --idle 1000       # smoke test
    .venv/bin/python bench/partitions.py --write                            # full run, updates docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from benchdoc import write_results
from confluent_kafka.admin import NewTopic
from produce_fetch import (BrokerProc, cpu_seconds, fetch_phase, free_port, machine, machine_busy_seconds,
                           produce_phase, wait_for_quiet)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- partitions:results:begin -->", "<!-- partitions:results:end -->"
KINDS = ("strata", "null")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """CreateTopics answers once every partition's log exists: 10,000 of them take seconds, so wait long."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=120,
                        request_timeout=180)[topic].result(timeout=200)


def wait_partitions(bootstrap: str, topic: str, count: int, timeout: float = 120) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=10)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == count:
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{topic} did not show {count} partitions")


def fill_idle(bootstrap: str, topic: str, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1, "log_level": 4})
    value = b"i" * 100
    for i in range(partitions):
        while True:
            try:
                p.produce(topic, value, partition=i)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise TimeoutError("idle records undelivered")


def produce_requests(b: BrokerProc) -> float:
    """Produce requests the broker has answered, from its request-time histogram's _count."""
    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('kafka_network_requestmetrics_total_time_seconds_count{request="Produce"}'):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def measure_busy(b: BrokerProc, count: int, args) -> dict:
    topic = f"busy-{count}"
    create_topic(b.bootstrap, topic, count)
    wait_partitions(b.bootstrap, topic, count)
    out = {}
    mb = args.messages * args.size / 1e6
    for phase, fn in (("produce", produce_phase), ("fetch", fetch_phase)):
        n0 = produce_requests(b)
        c0, m0, t0 = cpu_seconds(b.pid), machine_busy_seconds(), time.perf_counter()
        r = fn(b.bootstrap, topic, args.messages, args.size, count, args.phase_timeout)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(b.pid) - c0
        other = max(0.0, machine_busy_seconds() - m0 - cpu)
        r["broker_cpu"] = cpu / wall
        r["cpu_ms_per_mb"] = 1000 * cpu / mb
        r["other_cpu"] = other / wall
        r["client_cpu_ms_per_mb"] = 1000 * other / mb     # the client, and anything else running meanwhile
        if phase == "produce":
            r["kb_per_request"] = mb * 1000 / max(1.0, produce_requests(b) - n0)
        out[phase] = r
    for shape, per_request, records, requests in SHAPES:
        per_request = min(per_request or count, count)
        records = records or max(1, 1024 // per_request)
        c0 = cpu_seconds(b.pid)
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "produce_load.py"), "--bootstrap", b.bootstrap,
                               "--topic", topic, "--partitions", str(count), "--per-request", str(per_request),
                               "--records", str(records), "--size", str(args.size), "--requests", str(requests)],
                              capture_output=True, text=True, timeout=args.phase_timeout, check=True)
        r = json.loads(proc.stdout)
        r["cpu_ms_per_mb"] = 1000 * (cpu_seconds(b.pid) - c0) / (r["bytes"] / 1e6)
        out[shape] = r
    return out


# Broker-bound produce with the request shape held fixed (bench/produce_load.py): (name, partitions per request or
# None for all, records per batch or None for 1 MiB over the request's partitions, requests)
SHAPES = (("per_partition", 1, 32, 3200),      # librdkafka's: one partition per request, 32 KiB batches
          ("java_default", 64, 16, 200),        # the Java producer's defaults: 16 KiB batches, up to 1 MiB requests
          ("all_partitions", None, None, 100))  # one 1 MiB request spread over every partition (1 KiB each at 1,000)


def timed_start(b: BrokerProc, topics: dict[str, int]) -> tuple[float, float]:
    """(seconds until the port listens, seconds until Metadata lists every partition of `topics`)."""
    t0 = time.perf_counter()
    b.start(timeout=300)
    listening = time.perf_counter() - t0
    for topic, n in topics.items():
        wait_partitions(b.bootstrap, topic, n, timeout=300)
    return listening, time.perf_counter() - t0


def loaded_line(log_text: str) -> str:
    found = re.findall(r"loaded (\d+) partitions in ([\d.]+)s \((clean|unclean) shutdown\)", log_text)
    return f"{found[-1][0]} partitions in {found[-1][1]} s ({found[-1][2]})" if found else "?"


def run_one(kind: str, rnd: int, args) -> dict:
    if args.settle > 0:
        wait_for_quiet(args.settle)
    metrics_port = free_port()
    # the bench hosts --idle partitions and more on one broker on purpose: above the default max.broker.partitions
    # where the open-file limit is 20,000
    b = BrokerProc(kind, overrides={"metrics.port": str(metrics_port),
                                    "max.broker.partitions": "100000"}).start(timeout=120)
    b.metrics_port = metrics_port
    res: dict = {"broker": kind, "round": rnd, "busy": {}}
    try:
        rss0 = rss_bytes(b.pid)
        create_topic(b.bootstrap, "idle", args.idle)
        wait_partitions(b.bootstrap, "idle", args.idle, timeout=300)
        fill_idle(b.bootstrap, "idle", args.idle)
        time.sleep(1)
        res["rss_per_idle"] = (rss_bytes(b.pid) - rss0) / args.idle
        res["rss_base"] = rss0
        for count in args.counts:
            res["busy"][count] = measure_busy(b, count, args)
        if kind == "strata" and args.restarts:
            topics = {"idle": args.idle, **{f"busy-{c}": c for c in args.counts}}
            b.proc.send_signal(signal.SIGTERM)
            b.proc.wait(120)
            b._log.close()
            res["clean_start"] = timed_start(b, topics)
            res["clean_loaded"] = loaded_line(b.log_path.read_text(errors="replace"))
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait()
            b._log.close()
            res["unclean_start"] = timed_start(b, topics)
            res["unclean_loaded"] = loaded_line(b.log_path.read_text(errors="replace"))
            res["rss_after_restart_per_partition"] = rss_bytes(b.pid) / (args.idle + sum(args.counts))
    finally:
        log_text = b.stop()
    if "Traceback" in log_text:
        print(f"WARNING: {kind} broker logged a traceback:\n{log_text[-3000:]}", file=sys.stderr)
    return res


def med(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def summarise(results: list[dict], counts: list[int]) -> dict:
    out: dict = {}
    for kind in KINDS:
        rs = [r for r in results if r["broker"] == kind]
        if not rs:
            continue
        k = out[kind] = {"rss_per_idle": med(r["rss_per_idle"] for r in rs), "busy": {}}
        for c in counts:
            k["busy"][c] = {f"{ph}_{key}": med(r["busy"][c][ph].get(key, float("nan")) for r in rs)
                            for ph in ("produce", "fetch", *(sh[0] for sh in SHAPES))
                            for key in ("mb_s", "cpu_ms_per_mb", "broker_cpu", "client_cpu_ms_per_mb",
                                        "kb_per_request")}
        for key in ("clean_start", "unclean_start"):
            vals = [r[key] for r in rs if key in r]
            if vals:
                k[key] = (med(v[0] for v in vals), med(v[1] for v in vals))
        for key in ("clean_loaded", "unclean_loaded"):
            vals = [r[key] for r in rs if key in r]
            if vals:
                k[key] = vals[-1]
    return out


def rows(summary: dict, counts: list[int], cells) -> list[str]:
    """A table row per broker and partition count; `cells(medians, medians at the first count)` fills the rest."""
    out = []
    for kind in KINDS:
        if kind in summary:
            busy = summary[kind]["busy"]
            out += [f"| {'Strata' if kind == 'strata' else 'null broker'} | {c:,} | {cells(busy[c], busy[counts[0]])} |"
                    for c in counts]
    return out


def report(summary: dict, args, wall: float) -> str:
    lines = []
    lines.append("**confluent-kafka** (round-robin, linger.ms=5, batch.size=1 MiB): broker and client share the 2 cores.")
    lines.append("")
    lines.append("| Broker | Partitions | Produce MB/s | of 1 partition | KB per Produce request | CPU ms/MB produce: "
                 "broker / client | Fetch MB/s | of 1 partition | CPU ms/MB fetch: broker / client |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lines += rows(summary, args.counts, lambda m, b0: (
        f"{m['produce_mb_s']:.1f} | {m['produce_mb_s'] / b0['produce_mb_s']:.2f} | {m['produce_kb_per_request']:.0f} | "
        f"{m['produce_cpu_ms_per_mb']:.2f} / {m['produce_client_cpu_ms_per_mb']:.2f} | {m['fetch_mb_s']:.1f} | "
        f"{m['fetch_mb_s'] / b0['fetch_mb_s']:.2f} | {m['fetch_cpu_ms_per_mb']:.2f} / "
        f"{m['fetch_client_cpu_ms_per_mb']:.2f}"))
    lines.append("")
    lines.append("**Fixed request shapes** (`bench/produce_load.py`, broker-bound: the generator uses a few % of a "
                 "core), MB/s (of 1 partition) and broker CPU ms/MB: *librdkafka*, one partition per request, 32 x 1 KiB "
                 "batches; *Java defaults*, 16 KiB batches (batch.size), up to 64 partitions per 1 MiB request "
                 "(max.request.size), as the Java producer drains a broker's ready partitions into one request; "
                 "*1 MiB over all*, one 1 MiB request spread over every partition (1 KiB batches at 1,000).")
    lines.append("")
    lines.append("| Broker | Partitions | librdkafka | CPU ms/MB | Java defaults | CPU ms/MB | 1 MiB over all | "
                 "CPU ms/MB |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    lines += rows(summary, args.counts, lambda m, b0: " | ".join(
        f"{m[sh + '_mb_s']:.1f} ({m[sh + '_mb_s'] / b0[sh + '_mb_s']:.2f}) | {m[sh + '_cpu_ms_per_mb']:.2f}"
        for sh, *_ in SHAPES))
    lines.append("")
    if "strata" in summary and "null" in summary:
        s, z = summary["strata"]["busy"], summary["null"]["busy"]
        ratios = ", ".join(f"{c:,}: produce {s[c]['produce_mb_s'] / z[c]['produce_mb_s']:.2f}, fetch "
                           f"{s[c]['fetch_mb_s'] / z[c]['fetch_mb_s']:.2f}" for c in args.counts)
        cpu = ", ".join(f"{c:,}: {s[c]['produce_cpu_ms_per_mb'] / z[c]['produce_cpu_ms_per_mb']:.2f}x"
                        for c in args.counts)
        lines.append(f"Strata / null throughput by partition count: {ratios}.")
        lines.append(f"Strata's broker CPU per produced MB over the null broker's: {cpu}.")
    for kind in KINDS:
        if kind in summary:
            lines.append(f"Resident memory per idle partition ({kind}): "
                         f"{summary[kind]['rss_per_idle'] / 1024:.1f} KiB.")
    st = summary.get("strata", {})
    if "clean_start" in st:
        n = args.idle + sum(args.counts)
        lines.append(f"Start-up with {n:,} partitions after a clean shutdown: listening after "
                     f"{st['clean_start'][0]:.1f} s, every partition in Metadata after {st['clean_start'][1]:.1f} s "
                     f"(broker: {st['clean_loaded']}). After kill -9: {st['unclean_start'][0]:.1f} s / "
                     f"{st['unclean_start'][1]:.1f} s (broker: {st['unclean_loaded']}).")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,100,1000", help="busy partition counts (1,100,1000)")
    ap.add_argument("--idle", type=int, default=10_000, help="idle partitions present meanwhile (10000)")
    ap.add_argument("--messages", type=int, default=200_000, help="messages per busy phase (200000)")
    ap.add_argument("--size", type=int, default=1024, help="value size in bytes (1024)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds per broker; medians are reported (1)")
    ap.add_argument("--only", choices=KINDS, help="one broker only")
    ap.add_argument("--no-restarts", dest="restarts", action="store_false", help="skip the start-up timings")
    ap.add_argument("--phase-timeout", type=float, default=600.0)
    ap.add_argument("--settle", type=float, default=20.0, help="wait up to this long for an idle machine (20)")
    ap.add_argument("--write", action="store_true", help=f"replace the results block of {DOC.relative_to(ROOT)}")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    args.counts = [int(c) for c in args.counts.split(",")]
    kinds = (args.only,) if args.only else KINDS
    t0 = time.monotonic()
    results = []
    for rnd in range(args.rounds):
        for kind in (kinds if rnd % 2 == 0 else kinds[::-1]):
            r = run_one(kind, rnd, args)
            results.append(r)
            print(json.dumps(r, default=str), flush=True)
    summary = summarise(results, args.counts)
    wall = time.monotonic() - t0
    text = report(summary, args, wall)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "summary": summary}, indent=1, default=str))
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        m = machine()
        block = (f"{BEGIN}\n_Generated by `bench/partitions.py --write`; rerun it to replace this block._\n\n"
                 f"**Run:** {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, `python bench/partitions.py "
                 f"{' '.join(sys.argv[1:])}`, {wall:.0f} s; Strata at {commit}; {args.messages:,} x {args.size} B "
                 f"messages per phase, {args.idle:,} idle partitions present.\n**Machine:** {m['cpus']} cores "
                 f"({m['cpu']}), {m['memory']} RAM, Linux {m['kernel']}; Python {m['python']}.\n\n{text}\n{END}")
        write_results(DOC, BEGIN, END, block, "## Many partitions\n\n", before="## Log cleaner")
    return 0


if __name__ == "__main__":
    sys.exit(main())
