"""WAL benchmark (KIP-1176): replication through the fast object store against classic replication, in one run.

A three-broker cluster of real `strata broker` processes (tests/cluster/conftest.py `Cluster`, racks a/b/c) with a
fast store on the local filesystem (`remote.wal.storage.url`, fsync on, as the broker runs it) and Strata's
defaults for everything WAL (upload at 8 MiB or 100 ms). Four cases, each into a fresh one-partition RF=3 topic,
rotating their order over --rounds, with confluent-kafka as in bench/cluster.py (linger.ms=5, batch.size=1 MiB;
--messages values of --size bytes; 500 untimed first):

    classic       acks=all, idempotent; followers fetch records from the leader
    wal           the same with remote.wal.enable=true: followers get pointers and read the fast store
    classic acks=1 / wal acks=1   acks=1 latency, which the WAL must leave unchanged

Around each case the brokers' Prometheus counters are read (after a 2 s pause for acks=1 followers to catch up):
WAL PUTs and GETs, bytes uploaded and downloaded, record bytes leaders sent to followers (all cross-zone here:
every broker is in its own rack). The cost table applies those per-GB ratios to a reference workload (100 MB/s in,
RF=3 over three zones, three consumers) at the list prices in replication/traffic_metrics.py; the PUT rate is the
combiner's (one object per broker per remote.wal.upload.interval.ms while data flows, more above 8 MiB per
interval) with leaders spread over three brokers.

    .venv/bin/python bench/wal.py --messages 5000 --rounds 1 --max-load 0     # smoke
    .venv/bin/python bench/wal.py --write       # full run, updates "WAL replication (issue 13)" in docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdoc import write_results  # noqa: E402
from cluster import (CLIENT_CONF, add_run_options, create, keep_or_remove, loadavg, produce, run_header,  # noqa: E402
                     stop_cluster)
from produce_fetch import percentile, wait_for_quiet  # noqa: E402
from replication.remote_wal import WAL_DEFAULTS  # noqa: E402
from replication.traffic_metrics import PRICE_DEFAULTS  # noqa: E402
from tests.cluster.conftest import Cluster  # noqa: E402
from tests.conftest import free_port  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- wal:results:begin -->", "<!-- wal:results:end -->"
ALL = {"acks": "all", "enable.idempotence": True}
WAL = {"remote.wal.enable": "true"}
CASES = {"classic": ((3, ALL), {}), "wal": ((3, ALL), WAL),
         "classic_acks1": ((3, {"acks": 1}), {}), "wal_acks1": ((3, {"acks": 1}), WAL)}
LABEL = {"classic": "classic, acks=all", "wal": "WAL, acks=all", "classic_acks1": "classic, acks=1",
         "wal_acks1": "WAL, acks=1"}
COUNTERS = {"puts": ("strata_wal_upload_objects_total", {}),
            "uploaded": ("strata_wal_upload_bytes_total", {}),
            "downloaded": ("strata_wal_download_bytes_total", {}),
            "gets": ("strata_wal_store_requests_total", {"operation": "get"}),
            "records_out": ("strata_replication_bytes_out_total", {}),
            "records_out_cross": ("strata_replication_bytes_out_total", {"zone": "cross"})}
GB = 1e9
MONTH_S = 30 * 86400


def scrape(ports: list[int]) -> dict[str, float]:
    out = dict.fromkeys(COUNTERS, 0.0)
    for port in ports:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            series, value = line.rsplit(" ", 1)
            for key, (name, labels) in COUNTERS.items():
                if (series == name or series.startswith(name + "{")) and \
                        all(f'{k}="{v}"' in series for k, v in labels.items()):
                    out[key] += float(value)
    return out


def run_case(cluster, ports, case, parts, rnd, args) -> dict:
    rf_conf, configs = CASES[case]
    before = scrape(ports)
    r = produce(cluster, case, f"{case}-p{parts}-r{rnd}", args.messages, args.size, args.phase_timeout,
                rf_conf=rf_conf, configs=configs, partitions=parts)
    time.sleep(2)                                       # acks=1: let the followers finish
    after = scrape(ports)
    produced = (args.messages + 500) * args.size        # the warm-up went through the same path
    r.update({k: (after[k] - before[k]) / produced for k in COUNTERS}, round=rnd, partitions=parts)
    return r


def paced_latency(cluster, case: str, rnd: int, rate_mb_s: float, seconds: float, size: int) -> dict:
    """acks=1 latency at a fixed rate well below what the machine can do, so that CPU contention between the three
    brokers and the client on one machine does not decide it: produce() -> delivery callback, p50/p99."""
    (rf, conf), configs = CASES[case]
    topic = f"{case}-paced-r{rnd}"
    create(cluster, topic, rf, configs)
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, **CLIENT_CONF, **conf})
    value = bytes(size)
    for _ in range(200):
        p.produce(topic, value)
    p.flush(30)
    lat: list[float] = []
    per_s = rate_mb_s * 1e6 / size
    start = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) - start < seconds:
        due = start + n / per_s
        if now < due:
            p.poll(min(due - now, 0.001))
            continue
        t0 = time.perf_counter()
        p.produce(topic, value, on_delivery=lambda err, _m, t0=t0: lat.append(time.perf_counter() - t0)
                  if err is None else None)
        n += 1
        p.poll(0)
    p.flush(30)
    lat.sort()
    return {"case": case, "round": rnd, "rate_mb_s": rate_mb_s, "messages": n,
            "p50_ms": 1000 * percentile(lat, 0.5), "p99_ms": 1000 * percentile(lat, 0.99)}


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def cost_table(m: dict, args) -> str:
    """Monthly dollars for 100 MB/s in, RF=3 over three zones, three consumers, from the measured per-GB ratios."""
    p = {k: float(v) for k, v in PRICE_DEFAULTS.items()}
    rate = 0.1                                           # GB/s produced
    gb = rate * MONTH_S
    interval = int(WAL_DEFAULTS["remote.wal.upload.interval.ms"]) / 1000
    max_bytes = int(WAL_DEFAULTS["remote.wal.upload.max.bytes"])
    per_broker = rate * GB / 3
    puts = 3 * max(1 / interval, per_broker / max_bytes) * MONTH_S
    retention_h = int(WAL_DEFAULTS["remote.wal.retention.ms"]) / 3_600_000
    zone = p["cost.cross.zone.dollars.per.gb"]
    rows = [("producers -> leaders (2 of 3 in another zone)", gb * 2 / 3 * zone, gb * 2 / 3 * zone),
            ("3 consumers <- leaders (2 of 3 in another zone)", 3 * gb * 2 / 3 * zone, 3 * gb * 2 / 3 * zone),
            ("leader -> followers, records across zones", gb * m["classic"]["records_out_cross"] * zone,
             gb * m["wal"]["records_out_cross"] * zone),
            ("fast store PUTs", 0.0, puts * p["cost.wal.put.dollars.per.1000"] / 1000),
            ("fast store GETs", 0.0, gb * GB * m["wal"]["gets"] * p["cost.wal.get.dollars.per.1000"] / 1000),
            ("fast store upload (per GB)", 0.0, gb * m["wal"]["uploaded"] * p["cost.wal.upload.dollars.per.gb"]),
            ("fast store retrieval (per GB)", 0.0,
             gb * m["wal"]["downloaded"] * p["cost.wal.retrieval.dollars.per.gb"]),
            ("fast store storage (retention)", 0.0,
             rate * 3600 * retention_h * m["wal"]["uploaded"] * 730 * p["cost.wal.storage.dollars.per.gb.hour"])]
    lines = ["| Reference workload, per month | Classic replication $ | WAL replication $ |", "| --- | --- | --- |"]
    for name, c, w in rows:
        lines.append(f"| {name} | {c:,.0f} | {w:,.0f} |")
    tc, tw = sum(r[1] for r in rows), sum(r[2] for r in rows)
    lines.append(f"| **total** | **{tc:,.0f}** | **{tw:,.0f}** ({100 * (1 - tw / tc):.0f}% less) |")
    repl_c, repl_w = sum(r[1] for r in rows[2:]), sum(r[2] for r in rows[2:])
    lines.append(f"| replication alone | {repl_c:,.0f} | {repl_w:,.0f} ({100 * (1 - repl_w / repl_c):.0f}% less) |")
    return "\n".join(lines) + (f"\n\n{gb:,.0f} GB produced per month; {puts / MONTH_S:.0f} PUT/s over three leaders "
                               f"(one object per broker per {interval * 1000:.0f} ms); objects kept "
                               f"{retention_h * 60:.0f} min (`remote.wal.retention.ms`).")


def report(rows: list[dict], args) -> tuple[str, dict]:
    lines = ["| Produce (3 brokers, RF=3) | MB/s | p50 ms | p99 ms | Brokers CPU | Record bytes leader -> followers "
             "per byte produced | WAL PUTs per GB | Bytes downloaded from the store per byte produced |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    by_parts = {}
    for parts in sorted({r["partitions"] for r in rows}):
        cases = [c for c in CASES if any(r["case"] == c and r["partitions"] == parts for r in rows)]
        m = by_parts[parts] = {c: {k: med([r for r in rows if r["case"] == c and r["partitions"] == parts], k)
                                   for k in ("mb_s", "p50_ms", "p99_ms", "broker_cpu", *COUNTERS)} for c in cases}
        label = f"{parts} partition{'s' if parts > 1 else ''}"
        for c in cases:
            x = m[c]
            lines.append(f"| {label}: {LABEL[c]} | {x['mb_s']:.1f} | {x['p50_ms']:.1f} | {x['p99_ms']:.1f} | "
                         f"{100 * x['broker_cpu']:.0f}% | {x['records_out']:.2f} | {x['puts'] * GB:.0f} | "
                         f"{x['downloaded']:.2f} |")
        for a, b, what, bold in (("wal", "classic", "acks=all", "mb_s"), ("wal_acks1", "classic_acks1", "acks=1",
                                                                          "p50_ms")):
            if a in m and b in m:
                v = {k: m[a][k] / m[b][k] for k in ("mb_s", "p50_ms", "p99_ms")}
                cell = {k: (f"**{v[k]:.2f}{'x' if k != 'mb_s' else ''}**" if k == bold or (bold == "p50_ms" and
                        k == "p99_ms") else f"{v[k]:.2f}{'x' if k != 'mb_s' else ''}") for k in v}
                lines.append(f"| **{label}: WAL / classic, {what}** | {cell['mb_s']} | {cell['p50_ms']} | "
                             f"{cell['p99_ms']} | | | | |")
    ref = by_parts[max(by_parts)]
    text = "\n".join(lines)
    if "wal" in ref and "classic" in ref:
        text += "\n\n" + cost_table(ref, args)
    return text, by_parts


def paced_table(paced: list[dict]) -> str:
    m = {c: {k: med([r for r in paced if r["case"] == c], k) for k in ("p50_ms", "p99_ms")}
         for c in ("classic_acks1", "wal_acks1")}
    rate = paced[0]["rate_mb_s"]
    lines = [f"| acks=1 latency at a steady {rate:g} MB/s (1 partition, RF=3) | p50 ms | p99 ms |", "| --- | --- | --- |"]
    for c in m:
        lines.append(f"| {LABEL[c]} | {m[c]['p50_ms']:.2f} | {m[c]['p99_ms']:.2f} |")
    lines.append(f"| **WAL / classic** | **{m['wal_acks1']['p50_ms'] / m['classic_acks1']['p50_ms']:.2f}x** | "
                 f"**{m['wal_acks1']['p99_ms'] / m['classic_acks1']['p99_ms']:.2f}x** |")
    return "\n".join(lines)


def details(rows: list[dict]) -> str:
    lines = ["| Round | Partitions | Case | MB/s | p50 / p99 ms | PUTs per GB | GETs per GB |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['partitions']} | {LABEL[r['case']]} | {r['mb_s']:.1f} | {r['p50_ms']:.1f} / "
                     f"{r['p99_ms']:.1f} | {r['puts'] * GB:.0f} | {r['gets'] * GB:.0f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000, help="messages per case and round (50000)")
    ap.add_argument("--size", type=int, default=1024, help="value size in bytes (1024)")
    ap.add_argument("--partitions", default="1,12", help="partition counts to run every case with, produced "
                    "round-robin (1,12)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, the cases' order rotating (3)")
    ap.add_argument("--paced-rate", type=float, default=10.0, help="MB/s of the paced acks=1 latency runs (10)")
    ap.add_argument("--paced-seconds", type=float, default=10.0, help="length of each paced run (10)")
    ap.add_argument("--override", action="append", default=[], metavar="K=V", help="a broker setting for all three")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    add_run_options(ap)
    args = ap.parse_args()
    load0 = loadavg(args.max_load, args.load_wait if args.max_load > 0 else 0)
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-wal-"))
    cluster = Cluster(tmp, 3, overrides={"remote.wal.storage.url": f"file://{tmp / 'fast'}",
                                         **dict(o.split("=", 1) for o in args.override)})
    ports = []
    for b in cluster.brokers.values():
        ports.append(free_port())
        b.overrides["metrics.port"] = str(ports[-1])
    cluster.start()
    rows: list[dict] = []
    paced: list[dict] = []
    order = args.cases.split(",")
    try:
        for rnd in range(args.rounds):
            for parts in (int(p) for p in args.partitions.split(",")):
                for case in order[rnd % len(order):] + order[:rnd % len(order)]:
                    if args.settle > 0:
                        wait_for_quiet(args.settle, threshold=0.3)
                    r = run_case(cluster, ports, case, parts, rnd, args)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
            for case in (("classic_acks1", "wal_acks1") if rnd % 2 == 0 else ("wal_acks1", "classic_acks1")):
                if args.paced_seconds > 0:
                    paced.append(paced_latency(cluster, case, rnd, args.paced_rate, args.paced_seconds, args.size))
                    print(json.dumps(paced[-1]), flush=True)
    finally:
        logs = stop_cluster(cluster, tmp)
    wall = time.monotonic() - t_start
    load1 = loadavg()
    text, _ = report(rows, args)
    if paced:
        text += "\n\n" + paced_table(paced)
    print(text)
    print(details(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    keep_or_remove(tmp, args.keep, logs)
    if args.write:
        block = (f"{BEGIN}\n{run_header('wal.py', wall, load0, load1)}\n**Workload:** {args.messages:,} x "
                 f"{args.size:,} B per case and round, over {args.partitions} partition(s) round-robin, median of "
                 f"{args.rounds} rounds; fast store on the local "
                 f"filesystem (fsync on).\n\n{text}\n\n"
                 f"<details><summary>Every round</summary>\n\n{details(rows)}\n\n</details>\n{END}")
        write_results(DOC, BEGIN, END, block, "## WAL replication (issue 13)\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
