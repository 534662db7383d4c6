"""Cluster benchmark: replication cost, failover time and metadata-log append latency, in one run.

A three-broker cluster of real `strata broker` processes (tests/cluster/conftest.py `Cluster`, with its
CLUSTER_OVERRIDES: broker.session.timeout.ms=3000, broker.heartbeat.interval.ms=500) sharing a metadata store on the
local filesystem, then:

1. produce   --messages values of --size bytes into a fresh one-partition topic per case and round, with
             confluent-kafka (linger.ms=5, batch.size=1 MiB, message.max.bytes=1048588, as produce_fetch.py):
             RF=3 with acks=all and enable.idempotence=true against RF=1 with acks=1, alternating over --rounds
             (RF=1 first in even rounds). Throughput = N * size / (first produce() -> last delivery callback);
             latency = produce() -> delivery callback of each message (p50, p99). 500 messages go first (not
             timed) so connections, metadata and the producer id are in place. Medians over the rounds.
2. failover  a topic with RF=3 and min.insync.replicas=2 and an idempotent acks=all producer, connected and warm.
             --failovers times: find the leader, kill -9 it, then produce one record at a time (produce + poll until
             its delivery callback; a failed record is produced again) and take the time from the kill to the first
             successful delivery callback (the new leader's "leader at epoch" log line gives the broker's share);
             then restart the killed broker and wait until the ISR is 3 again.
3. metadata  --appends appends of one TopicRecord each to metadata.object_store_log.ObjectStoreMetadataLog, on the
             local-filesystem store (fsync on, as the broker runs it) and on S3 served by a moto_server subprocess
             (tests/moto_server.py); p50/p99 per append (5 appends first, not timed).

Client, brokers and moto_server share the machine; before starting, the script waits (polling every 30 s, at most
--load-wait s) until the 1-minute load average is below --max-load and records it.

    .venv/bin/python bench/cluster.py --messages 5000 --rounds 3 --failovers 3 --appends 50 --max-load 0  # smoke
    .venv/bin/python bench/cluster.py --write          # full run, updates "Cluster (issue 12)" in docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from benchdoc import write_results  # noqa: E402
from produce_fetch import cpu_seconds, machine, machine_busy_seconds, percentile, wait_for_quiet  # noqa: E402
from metadata.image import MetadataImage  # noqa: E402
from metadata.object_store_log import ObjectStoreMetadataLog  # noqa: E402
from metadata.records import TopicRecord  # noqa: E402
from storage.objectstore.object_store import open_object_store  # noqa: E402
from tests.cluster.conftest import CLUSTER_OVERRIDES, Cluster  # noqa: E402
from tests.moto_server import S3_TEST_OPTIONS, MotoServer  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- cluster:results:begin -->", "<!-- cluster:results:end -->"
MB = 1_000_000
CLIENT_CONF = {"linger.ms": 5, "batch.size": 1_048_576, "message.max.bytes": 1_048_588}
CASES = {"rf1": (1, {"acks": 1}), "rf3": (3, {"acks": "all", "enable.idempotence": True})}
LABEL = {"rf1": "RF=1, acks=1", "rf3": "RF=3, acks=all, idempotent"}


def loadavg(below: float = 0.0, max_wait: float = 0.0) -> float:
    """The 1-minute load average, once it is below `below` (polled every 30 s, at most `max_wait` s)."""
    deadline = time.monotonic() + max_wait
    while (load := float(Path("/proc/loadavg").read_text().split()[0])) >= below and time.monotonic() < deadline:
        print(f"1-minute load {load:.2f} >= {below}; waiting", file=sys.stderr, flush=True)
        time.sleep(30)
    return load


def create(cluster: Cluster, topic: str, rf: int, configs: dict | None = None, partitions: int = 1) -> None:
    admin = cluster.admin()                  # kept alive: a collected AdminClient fails its pending futures
    admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})])[topic].result(timeout=30)
    for p in range(partitions):
        cluster.wait_for_isr(topic, rf, p)


# ---- 1. produce --------------------------------------------------------------------------------------------------
def produce(cluster: Cluster, case: str, topic: str, n: int, size: int, timeout: float, *,
            rf_conf: tuple | None = None, configs: dict | None = None, partitions: int = 1) -> dict:
    """`case` names the replication factor and producer settings (CASES, or `rf_conf`); `configs` are the topic's;
    with several `partitions` the producer spreads the messages round-robin over them."""
    rf, conf = rf_conf or CASES[case]
    create(cluster, topic, rf, configs, partitions)
    value = os.urandom(size)
    p = Producer({"bootstrap.servers": cluster.bootstrap, **CLIENT_CONF, **conf})
    for _ in range(500):                              # warm-up: connections, metadata, producer id
        p.produce(topic, value)
    if p.flush(30):
        raise TimeoutError(f"{topic}: warm-up undelivered")
    lat, errors, last, now = [], [], [0.0], time.perf_counter

    def make_cb(t0: float):
        def cb(err, _msg):
            t = last[0] = now()
            (errors.append(err) if err is not None else lat.append(t - t0))
        return cb

    pids = [b.proc.pid for b in cluster.brokers.values()]
    c0, m0, o0 = sum(cpu_seconds(pid) for pid in pids), machine_busy_seconds(), time.process_time()
    deadline = time.monotonic() + timeout
    start = now()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions, on_delivery=make_cb(now()))
                break
            except BufferError:
                p.poll(0.001)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic}: client queue full until the timeout")
        if not i & 511:
            p.poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    wall = now() - start
    brokers, own = sum(cpu_seconds(pid) for pid in pids) - c0, time.process_time() - o0
    if left or errors:
        raise RuntimeError(f"{topic}: {left} undelivered, {len(errors)} errors: {errors[:1]}")
    elapsed = last[0] - start
    lat.sort()
    return {"case": case, "mb_s": n * size / elapsed / MB, "msgs_s": n / elapsed,
            "p50_ms": 1000 * percentile(lat, 0.50), "p99_ms": 1000 * percentile(lat, 0.99),
            "broker_cpu": brokers / wall, "client_cpu": own / wall,
            "other_cpu": max(0.0, machine_busy_seconds() - m0 - brokers - own) / wall}


# ---- 2. failover -------------------------------------------------------------------------------------------------
def failover(cluster: Cluster, rounds: int, timeout: float) -> list[dict]:
    topic = "failover"
    create(cluster, topic, 3, {"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 60_000})
    results: list = []

    def send_one() -> tuple[object, float]:
        out: list = []
        p.produce(topic, b"x", on_delivery=lambda err, _m: out.append((err, time.perf_counter())))
        end = time.monotonic() + timeout
        while not out:
            p.poll(0.001)
            if time.monotonic() > end:
                raise TimeoutError("failover: no delivery callback within the timeout")
        return out[0]

    if send_one()[0] is not None:
        raise RuntimeError("failover: warm-up record failed")
    for r in range(rounds):
        md = cluster.admin().list_topics(topic, timeout=10)
        leader = md.topics[topic].partitions[0].leader
        t0, wall0 = time.perf_counter(), time.time()
        cluster.brokers[leader].kill9()
        failed: list[str] = []
        while True:
            err, t = send_one()
            if err is None:
                break
            if err.fatal():
                raise RuntimeError(f"failover: fatal producer error {err}")
            failed.append(err.name())
        res = {"round": r, "killed": leader, "was_controller": leader == md.controller_id,
               "seconds": t - t0, "failed": failed, "new_leader": cluster.leader(topic)}
        res["elected_s"] = leader_logged(cluster.brokers[res["new_leader"]].log_text(), topic, wall0) - wall0
        cluster.brokers[leader].start()
        t1 = time.perf_counter()
        cluster.wait_for_isr(topic, 3, timeout=120)
        res["rejoin_s"] = time.perf_counter() - t1
        results.append(res)
        print(json.dumps(res), flush=True)
    return results


def leader_logged(text: str, topic: str, after: float) -> float:
    """Wall time of the broker's last "<topic>-0: leader at epoch" line (ms resolution), NaN if before `after`."""
    for line in reversed(text.splitlines()):
        if f" {topic}-0: leader at epoch" in line:
            t = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return t if t >= after - 0.002 else float("nan")
    return float("nan")


# ---- 3. metadata log ---------------------------------------------------------------------------------------------
async def appends(url: str, n: int, options: dict, warmup: int = 5) -> dict:
    store = open_object_store(url, **options)
    try:
        mlog = ObjectStoreMetadataLog(store, "bench")
        image, lat = MetadataImage(), []
        for i in range(warmup + n):
            t0 = time.perf_counter()
            image = await mlog.append(image, 1, [TopicRecord(f"topic-{i}", uuid.uuid4().hex)])
            if i >= warmup:
                lat.append(time.perf_counter() - t0)
    finally:
        await store.close()
    lat.sort()
    return {"appends": n, "p50_ms": 1000 * percentile(lat, 0.5), "p99_ms": 1000 * percentile(lat, 0.99),
            "mean_ms": 1000 * statistics.fmean(lat)}


def metadata_bench(tmp: Path, n: int) -> dict:
    out = {"local": asyncio.run(appends(f"file://{tmp / 'metadata-store'}", n, {}))}
    with MotoServer(tmp / "moto.log") as server:
        out["s3"] = asyncio.run(appends(f"s3://{server.new_bucket()}/cluster", n,
                                        server.store_options(**S3_TEST_OPTIONS)))
    return out


# ---- running -----------------------------------------------------------------------------------------------------
def add_run_options(ap) -> None:
    """The options every cluster benchmark takes (bench/cluster.py, bench/wal.py)."""
    ap.add_argument("--max-load", type=float, default=1.0, help="wait for a 1-minute load below this (1.0; 0: no)")
    ap.add_argument("--load-wait", type=float, default=1200.0, help="... but at most this long, s (1200)")
    ap.add_argument("--settle", type=float, default=5.0, help="wait up to this long for an idle machine per case")
    ap.add_argument("--phase-timeout", type=float, default=300.0)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (broker logs)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--write", action="store_true", help=f"replace the results block of {DOC.relative_to(ROOT)}")


def stop_cluster(cluster: Cluster, tmp: Path) -> dict[int, str]:
    """Stop the brokers; their logs, with a warning for any traceback in them."""
    cluster.stop()
    logs = {i: b.log_text() for i, b in cluster.brokers.items()}
    for i, text in logs.items():
        if "Traceback" in text:
            print(f"WARNING: broker {i} logged a traceback (logs in {tmp}):\n{text[-3000:]}", file=sys.stderr)
    return logs


def keep_or_remove(tmp: Path, keep: bool, logs: dict[int, str]) -> None:
    if keep or any("Traceback" in t for t in logs.values()):
        print(f"broker logs kept in {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def run_header(script: str, wall: float, load0: float, load1: float) -> str:
    """The lines of a results block that say when, how, and on what it ran."""
    mi = machine()
    return (f"_Generated by `bench/{script} --write`; rerun it to replace this block._\n\n"
            f"**Run:** {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, `python bench/{script} "
            f"{' '.join(sys.argv[1:])}`, {wall:.0f} s wall time; 1-minute load average {load0:.2f} at the "
            f"start, {load1:.2f} at the end.\n**Machine:** {mi['cpus']} cores ({mi['cpu']}), {mi['memory']} "
            f"RAM, Linux {mi['kernel']}; Python {mi['python']}; confluent-kafka {mi['confluent_kafka']} / "
            f"librdkafka {mi['librdkafka']}; Strata at {mi['commit']}.")


# ---- report ------------------------------------------------------------------------------------------------------
def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def report(prod: list[dict], fail: list[dict], meta: dict) -> str:
    lines = ["| Produce (3 brokers, 1 partition) | MB/s | msgs/s | p50 ms | p99 ms | Brokers CPU (sum) |",
             "| --- | --- | --- | --- | --- | --- |"]
    m = {}
    for case in ("rf1", "rf3"):
        rows = [r for r in prod if r["case"] == case]
        m[case] = {k: med(rows, k) for k in ("mb_s", "msgs_s", "p50_ms", "p99_ms", "broker_cpu")}
        lines.append(f"| {LABEL[case]} | {m[case]['mb_s']:.1f} | {m[case]['msgs_s']:,.0f} | {m[case]['p50_ms']:.1f} | "
                     f"{m[case]['p99_ms']:.1f} | {100 * m[case]['broker_cpu']:.0f}% |")
    lines.append(f"| **RF3 / RF1** | **{m['rf3']['mb_s'] / m['rf1']['mb_s']:.2f}** | "
                 f"{m['rf3']['msgs_s'] / m['rf1']['msgs_s']:.2f} | {m['rf3']['p50_ms'] / m['rf1']['p50_ms']:.2f}x | "
                 f"{m['rf3']['p99_ms'] / m['rf1']['p99_ms']:.2f}x |  |")
    lines += ["", f"| Failover (kill -9 of the leader -> first acks=all delivery; the leader was also the "
              f"controller in {sum(r['was_controller'] for r in fail)} rounds) | Samples | Median s | p99 (= max) s | "
              "Min s |", "| --- | --- | --- | --- | --- |"]
    ctl = [r["seconds"] for r in fail if r["was_controller"]]
    split = 0 < len(ctl) < len(fail)                 # both kinds of round happened
    for name, vals in (("RF=3, min.insync.replicas=2, session timeout 3 s", [r["seconds"] for r in fail]),
                       ("... only rounds where the leader was also the controller", ctl if split else []),
                       ("... only rounds where it was not",
                        [r["seconds"] for r in fail if not r["was_controller"]] if split else []),
                       ("kill -> new leader's \"leader at epoch\" log line", [r["elected_s"] for r in fail])):
        vals = sorted(v for v in vals if v == v)
        if vals:
            lines.append(f"| {name} | {len(vals)} | {statistics.median(vals):.2f} | {percentile(vals, 0.99):.2f} | "
                         f"{vals[0]:.2f} |")
    lines += ["", "| Metadata-log append (1 TopicRecord) | Appends | p50 ms | p99 ms | Mean ms |",
              "| --- | --- | --- | --- | --- |"]
    for key, name in (("local", "local-filesystem store (fsync)"), ("s3", "S3 (moto_server, loopback)")):
        lines.append(f"| {name} | {meta[key]['appends']} | {meta[key]['p50_ms']:.2f} | {meta[key]['p99_ms']:.2f} | "
                     f"{meta[key]['mean_ms']:.2f} |")
    return "\n".join(lines)


def details(prod: list[dict], fail: list[dict]) -> str:
    lines = ["| Round | Case | MB/s | p50 / p99 ms | CPU: brokers / client / other |", "| --- | --- | --- | --- | --- |"]
    for r in prod:
        lines.append(f"| {r['round']} | {LABEL[r['case']]} | {r['mb_s']:.1f} | {r['p50_ms']:.1f} / "
                     f"{r['p99_ms']:.1f} | {100 * r['broker_cpu']:.0f}% / {100 * r['client_cpu']:.0f}% / "
                     f"{100 * r['other_cpu']:.0f}% |")
    lines += ["", "| Failover | Killed (controller?) | New leader | Leader logged s | First delivery s | Failed "
              "records | ISR 3 again after s |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in fail:
        lines.append(f"| {r['round']} | {r['killed']}{' (yes)' if r['was_controller'] else ''} | {r['new_leader']} | "
                     f"{r['elected_s']:.2f} | {r['seconds']:.2f} | {', '.join(r['failed']) or '-'} | "
                     f"{r['rejoin_s']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000, help="messages per produce case and round (50000)")
    ap.add_argument("--size", type=int, default=1024, help="value size in bytes (1024)")
    ap.add_argument("--rounds", type=int, default=3, help="produce rounds, the two cases alternating (3)")
    ap.add_argument("--failovers", type=int, default=20, help="kill -9 rounds (20)")
    ap.add_argument("--appends", type=int, default=200, help="metadata-log appends per store (200)")
    add_run_options(ap)
    args = ap.parse_args()
    load0 = loadavg(args.max_load, args.load_wait if args.max_load > 0 else 0)
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-cluster-"))
    cluster = Cluster(tmp, 3).start()
    prod: list[dict] = []
    try:
        for rnd in range(args.rounds):
            for case in (("rf1", "rf3") if rnd % 2 == 0 else ("rf3", "rf1")):
                if args.settle > 0:
                    wait_for_quiet(args.settle, threshold=0.3)
                r = produce(cluster, case, f"{case}-r{rnd}", args.messages, args.size, args.phase_timeout)
                r["round"] = rnd
                prod.append(r)
                print(json.dumps(r), flush=True)
        fail = failover(cluster, args.failovers, args.phase_timeout)
    finally:
        logs = stop_cluster(cluster, tmp)
    meta = metadata_bench(tmp, args.appends)
    wall = time.monotonic() - t_start
    load1 = loadavg()
    text = report(prod, fail, meta)
    print(text)
    print(details(prod, fail))
    if args.json:
        Path(args.json).write_text(json.dumps({"produce": prod, "failover": fail, "metadata": meta}, indent=1))
    keep_or_remove(tmp, args.keep, logs)
    if args.write:
        block = (f"{BEGIN}\n{run_header('cluster.py', wall, load0, load1)}\n**Workload:** {args.messages:,} x "
                 f"{args.size:,} B per produce case and round, median of {args.rounds} rounds; {args.failovers} "
                 f"failovers; {args.appends} metadata appends per store. Cluster overrides: "
                 f"{', '.join(f'`{k}={v}`' for k, v in CLUSTER_OVERRIDES.items())}.\n\n{text}\n\n"
                 f"<details><summary>Every round</summary>\n\n{details(prod, fail)}\n\n</details>\n{END}")
        write_results(DOC, BEGIN, END, block, "## Cluster (issue 12)\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
