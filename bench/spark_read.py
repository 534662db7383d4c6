"""Spark connector read benchmark: a topic whose every segment is in the remote tier (local-filesystem object store),
read by a local[2] SparkSession with the `strata` data source, directly from the object store (the default) vs
through the broker's Fetch (strata.directRead=false), in one run.

A fresh broker (remote.log.storage.system.enable=true, file:// store in a temp dir) gets one topic of --size-mib of
--size-byte random values (uncompressed unless --codec) in --partitions partitions, written untiered and then tiered
completely (remote.storage.enable=true with local.retention.bytes=1 and local.retention.ms=1, which also rolls the
active segment); the script waits until no local segment holds data. Each round then runs, alternating the order,

    df.agg(count(*), sum(length(value)), max(offset))

over the whole topic in each mode; the count and byte sum are checked. Reported per mode (median over --rounds):
wall time of the action (planning included), rows/s, MB/s of values (10^6 B), and the broker's CPU during the action
(with direct reads the broker only answers the driver's planning requests). A warm-up query in each mode precedes
the rounds (Python workers, JVM code paths).

    .venv/bin/python bench/spark_read.py --size-mib 64 --rounds 1       # smoke test
    .venv/bin/python bench/spark_read.py                                # 1 GiB, 3 rounds
    .venv/bin/python bench/spark_read.py --write                        # and update docs/benchmarks.md
    .venv/bin/python bench/spark_read.py --latency --write              # both paths at 30 ms + 80 MB/s per GET

With --latency the store behaves like S3 from EC2 (issue 27; the fault wrapper's `latency_ms=30,get_bandwidth_mb_s=80`:
30 ms to each request's first byte, 80 MB/s per GET) for the broker's remote reads and the executors' direct reads
alike, and the results go to a block of their own.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import produce_fetch as pf  # noqa: E402
from benchdoc import write_results  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,  # noqa: E402
                                   NewTopic, ResourceType)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- spark_read:results:begin -->", "<!-- spark_read:results:end -->"
SLOW_BEGIN, SLOW_END = "<!-- spark_read_latency:results:begin -->", "<!-- spark_read_latency:results:end -->"
SLOW = "latency_ms=30,get_bandwidth_mb_s=80,seed=1"
MiB = 1 << 20
MB = 1_000_000
TOPIC = "spark-bench"


class Broker(pf.BrokerProc):
    def __init__(self, overrides: dict[str, str]):
        super().__init__("strata")
        for k, v in {**overrides, "log.cleaner.enable": "false"}.items():
            self.args += ["--override", f"{k}={v}"]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})


def local_log_bytes(b: Broker, partitions: int) -> int:
    return sum(p.stat().st_size for i in range(partitions)
               for p in (b.dir / "logs" / f"{TOPIC}-{i}").glob("*.log"))


def produce(b: Broker, args, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": b.bootstrap, **pf.PRODUCER_CONF, "compression.type": args.codec})
    # distinct, incompressible values: slices of a random pool at a stride that keeps a batch's slices apart
    pool = memoryview(os.urandom(64 * MiB + args.size))
    stride = (args.size + 7919) | 1
    for i in range(n):
        at = (i * stride) % (64 * MiB)
        while True:
            try:
                p.produce(TOPIC, value=bytes(pool[at:at + args.size]), partition=i % args.partitions)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(args.phase_timeout):
        raise TimeoutError("produce did not finish")


def tiered_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.glob(f"{TOPIC}-*/*/*.log"))


def tier_everything(b: Broker, args, seg: str, store: Path, n: int) -> float:
    t0 = time.monotonic()
    res = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in {
            "segment.bytes": seg, "remote.storage.enable": "true", "local.retention.bytes": "1",
            "local.retention.ms": "1"}.items()])
    a = admin(b.bootstrap)
    a.incremental_alter_configs([res])[res].result(timeout=20)
    deadline = time.monotonic() + args.phase_timeout
    while local_log_bytes(b, args.partitions) > 0:    # tiered logs delete local segments only once copied
        if time.monotonic() > deadline:
            raise TimeoutError(f"offload incomplete: {local_log_bytes(b, args.partitions)} bytes still local")
        time.sleep(0.2)
    took = time.monotonic() - t0
    if tiered_bytes(store) < n * args.size:
        raise RuntimeError(f"only {tiered_bytes(store)} bytes of segments in the store, expected > {n * args.size}")
    return took


def spark_session(args):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark_connector import register
    spark = (SparkSession.builder.master("local[2]").appName("strata-spark-read-bench")
             .config("spark.driver.memory", args.driver_memory).config("spark.ui.enabled", "false")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def read_once(spark, b: Broker, direct: bool, args, ending: str | None = None) -> dict:
    from pyspark.sql import functions as F
    reader = (spark.read.format("strata").option("kafka.bootstrap.servers", b.bootstrap).option("subscribe", TOPIC)
              .option("strata.directRead", str(direct).lower()))
    if args.latency:
        reader = reader.option("strata.store.faults", SLOW)
    if args.min_partitions:
        reader = reader.option("minPartitions", str(args.min_partitions))
    if ending:
        reader = reader.option("endingOffsets", ending)
    df = reader.load().agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"),
                           F.max("offset").alias("max_offset"))
    cpu0, t0 = pf.cpu_seconds(b.pid), time.monotonic()
    row = df.collect()[0]
    wall = time.monotonic() - t0
    return {"wall": wall, "rows": row.n, "bytes": row.bytes or 0, "broker_cpu": (pf.cpu_seconds(b.pid) - cpu0) / wall}


def run(args) -> dict:
    n = args.size_mib * MiB // args.size
    store = Path(tempfile.mkdtemp(prefix="strata-bench-spark-objects-"))
    overrides = {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.store.url": f"file://{store}",
                 "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
                 "remote.log.metadata.topic.num.partitions": "5"}
    if args.latency:
        overrides["remote.log.storage.manager.store.faults"] = SLOW
    b = Broker(overrides).start()
    out: dict = {"messages": n, "size": args.size, "mib": n * args.size / MiB, "partitions": args.partitions,
                 "codec": args.codec, "segment_mib": args.segment_mib, "rounds": []}
    spark = None
    try:
        seg = str(args.segment_mib * MiB)
        a = admin(b.bootstrap)                        # keep a reference: futures fail if the client is collected
        a.create_topics([NewTopic(TOPIC, args.partitions, 1, config={"segment.bytes": seg})],
                        operation_timeout=10)[TOPIC].result(timeout=20)
        t0 = time.monotonic()
        produce(b, args, n)
        print(f"produced {n} x {args.size} B ({out['mib']:.0f} MiB, {args.codec}) into {args.partitions} "
              f"partition(s) in {time.monotonic() - t0:.1f}s", flush=True)
        out["offload_s"] = tier_everything(b, args, seg, store, n)
        out["store_mib"] = tiered_bytes(store) / MiB
        print(f"tiered everything in {out['offload_s']:.1f}s: {out['store_mib']:.0f} MiB of segments in the store",
              flush=True)
        spark = spark_session(args)
        warm = '{"%s":{%s}}' % (TOPIC, ",".join(f'"{p}":1000' for p in range(args.partitions)))
        for direct in (True, False):
            read_once(spark, b, direct, args, ending=warm)
        for rnd in range(args.rounds):
            res = {}
            for direct in ((True, False) if rnd % 2 == 0 else (False, True)):
                pf.wait_for_quiet(args.settle)
                r = read_once(spark, b, direct, args)
                if r["rows"] != n or r["bytes"] != n * args.size:
                    raise RuntimeError(f"read {r['rows']} rows / {r['bytes']} bytes, expected {n} / {n * args.size}")
                mode = "direct" if direct else "fetch"
                res[mode] = r
                print(f"round {rnd} {mode}: {r['wall']:.2f}s, {n / r['wall']:,.0f} rows/s, "
                      f"{n * args.size / r['wall'] / MB:.0f} MB/s, broker CPU {r['broker_cpu']:.0%}", flush=True)
            out["rounds"].append(res)
        for mode in ("direct", "fetch"):
            wall = statistics.median(r[mode]["wall"] for r in out["rounds"])
            out[mode] = {"wall": wall, "rows_s": n / wall, "mb_s": n * args.size / wall / MB,
                         "broker_cpu": statistics.median(r[mode]["broker_cpu"] for r in out["rounds"])}
        out["ratio"] = out["direct"]["mb_s"] / out["fetch"]["mb_s"]
    finally:
        if spark is not None:
            spark.stop()
        log = b.stop()
        shutil.rmtree(store, ignore_errors=True)
        if "Traceback" in log:
            print("broker logged a traceback:\n" + log[log.index("Traceback") - 500:][:4000], file=sys.stderr)
    return out


def results_block(r: dict, args, wall: float) -> str:
    m = pf.machine()
    when = dt.datetime.now().strftime("%Y-%m-%d")
    cmd = f"bench/spark_read.py --size-mib {args.size_mib} --size {args.size} --partitions {args.partitions} " \
          f"--rounds {args.rounds}" + (f" --codec {args.codec}" if args.codec != "none" else "") + \
          (f" --min-partitions {args.min_partitions}" if args.min_partitions else "") + \
          (" --latency" if args.latency else "")
    lines = [SLOW_BEGIN if args.latency else BEGIN, "",
             f"Measured {when} with `{cmd}` ({wall:.0f} s wall): {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, "
             f"Python {m.get('python', '?')}, librdkafka {m.get('librdkafka', '?')}, Spark local[2].", "",
             f"Topic: {r['mib']:.0f} MiB = {r['messages']:,} x {r['size']} B values ({r['codec']}), "
             f"{r['partitions']} partitions, {r['segment_mib']} MiB segments, all in the remote tier "
             f"({r['store_mib']:.0f} MiB of segment objects)" +
             (", read at 30 ms to each GET's first byte and 80 MB/s per GET on both paths." if args.latency else "."),
             "",
             "| Read path | Wall s | Rows/s | MB/s | Broker CPU during the read |", "| --- | --- | --- | --- | --- |"]
    for mode, name in (("direct", "direct from the object store"),
                       ("fetch", "broker Fetch (`strata.directRead=false`)")):
        x = r[mode]
        lines.append(f"| {name} | {x['wall']:.1f} | {x['rows_s']:,.0f} | {x['mb_s']:.0f} | {x['broker_cpu']:.0%} |")
    lines += ["", f"Direct / Fetch throughput: {r['ratio']:.2f}.", "",
              "<details><summary>Every round</summary>", "",
              "| Round | Path | Wall s | MB/s | Broker CPU |", "| --- | --- | --- | --- | --- |"]
    for i, rnd in enumerate(r["rounds"]):
        for mode, x in rnd.items():
            lines.append(f"| {i} | {mode} | {x['wall']:.2f} | {r['messages'] * r['size'] / x['wall'] / MB:.0f} | "
                         f"{x['broker_cpu']:.0%} |")
    lines += ["", "</details>", SLOW_END if args.latency else END]
    return "\n".join(lines)


SECTION = """## Spark connector

`bench/spark_read.py` (see its docstring and [spark.md](spark.md)) reads a topic whose every segment is in the remote
tier (local-filesystem store) with the `strata` data source in a local[2] SparkSession, once with direct reads from the
object store (the default) and once through the broker's Fetch (`strata.directRead=false`), alternating the order per
round, in one run on one broker. The query is `df.agg(count(*), sum(length(value)), max(offset))`, so every value
reaches the JVM; its count and byte sum are checked. Wall time is the whole action (planning included); MB = 10^6 B of
values. Broker, Spark's JVM and its two Python workers share the machine's 2 CPUs.

"""


def write_doc(block: str, latency: bool = False) -> None:
    if latency:
        write_results(DOC, SLOW_BEGIN, SLOW_END, block, "\nThe same at object-store latency (`--latency`):\n\n",
                      before="## Cluster (issue 12)")
    else:
        write_results(DOC, BEGIN, END, block, SECTION)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="topic size")
    ap.add_argument("--size", type=int, default=1024, help="message value bytes")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--min-partitions", type=int, default=0, help="the connector's minPartitions (0: one task per "
                                                                    "topic partition)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--driver-memory", default="1g")
    ap.add_argument("--settle", type=float, default=10, help="wait up to this long for an idle machine per read")
    ap.add_argument("--phase-timeout", type=float, default=600)
    ap.add_argument("--latency", action="store_true", help="30 ms + 80 MB/s per GET on both read paths")
    ap.add_argument("--write", action="store_true", help=f"update the Spark connector section of {DOC}")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    r = run(args)
    block = results_block(r, args, time.monotonic() - t0)
    print(block)
    if args.write:
        write_doc(block, args.latency)
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
