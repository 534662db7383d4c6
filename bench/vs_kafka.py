"""Strata beside Apache Kafka on one machine, in one run: the same clients against both, rounds alternating.

Apache Kafka is the pinned release of deploy/apache-kafka/pom.xml (resolved by resolve.sh), run as KRaft processes
(broker and controller in one JVM, -Xmx1g) by tests/apache_kafka.py; Strata runs as `python -m broker.cli broker`
processes (tests/conftest.py, tests/cluster/conftest.py). Both get the same settings where a setting exists in both;
the three-broker clusters both take Strata's test-cluster timeouts (broker.session.timeout.ms=3000,
broker.heartbeat.interval.ms=500, replica.lag.time.max.ms=5000, controller.quorum.fetch.timeout.ms=2000).

Measured, each as Strata / Kafka:
1. one partition, one broker: produce and fetch MB/s and the broker's CPU ms per MB moved, with librdkafka
   (confluent-kafka, bench/produce_fetch.py's phases: values checked on fetch) and with the Java clients (Kafka's
   ProducerPerformance and ConsumerPerformance, as kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh run);
2. three brokers, RF=3, acks=all, min.insync.replicas=2: Java producer MB/s, then p50/p99 latency at a steady
   10 MB/s (ProducerPerformance --throughput);
3. 1,000 partitions, one broker, the Java producer with RoundRobinPartitioner (every request carries many
   partitions): MB/s as a fraction of the same producer into one partition;
4. kill -9 of the partition leader (three brokers) to the next acknowledged write (confluent-kafka, acks=all,
   idempotent), three rounds;
5. start-up of one broker holding 10,000 partitions (10 topics x 1,000) after a clean shutdown: until the port
   listens, and until Metadata lists every partition with a leader.
MB means 10^6 bytes of record values. Rounds alternate which broker goes first; medians are reported.

    .venv/bin/python bench/vs_kafka.py --quick              # smoke run, nothing written
    .venv/bin/python bench/vs_kafka.py --write              # full run, updates docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchdoc import write_results  # noqa: E402
from produce_fetch import cpu_seconds, fetch_phase, machine, produce_phase, wait_for_quiet  # noqa: E402
from tests import apache_kafka as ak  # noqa: E402
from tests.cluster.conftest import Cluster  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- vs_kafka:results:begin -->", "<!-- vs_kafka:results:end -->"
MB = 1_000_000
SIDES = ("strata", "kafka")
# Settings both brokers take on three brokers (Strata's test-cluster values; Kafka's names are the same).
CLUSTER_SETTINGS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
                    "replica.lag.time.max.ms": "5000", "controller.quorum.fetch.timeout.ms": "2000"}
JAVA_PRODUCER = ["acks=1", "linger.ms=5", "batch.size=524288"]
PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"


# ---- the two brokers, behind one shape -----------------------------------------------------------------------------
class Side:
    """`size` brokers of one kind: `.bootstrap`, `.nodes` {id: process with kill9/start/alive}, `.pids()`."""

    def __init__(self, kind: str, size: int, tmp: Path):
        self.kind, self.size, self.tmp = kind, size, tmp
        if kind == "kafka":
            self.impl = ak.KafkaCluster(tmp, size, CLUSTER_SETTINGS if size > 1 else None)
        elif size == 1:
            self.impl = BrokerProcess(tmp, {"num.partitions": "1"})
        else:
            self.impl = Cluster(tmp, size, overrides=CLUSTER_SETTINGS)

    @property
    def nodes(self) -> dict:
        return {1: self.impl} if isinstance(self.impl, BrokerProcess) else self.impl.brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.alive())

    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes.values() if n.alive()]

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids())

    def start(self) -> "Side":
        self.impl.start()
        return self

    def stop(self) -> None:
        self.impl.stop()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})

    def create(self, topic: str, partitions: int = 1, rf: int = 1, configs: dict | None = None) -> None:
        admin = self.admin()            # referenced until the answer: a collected AdminClient fails its futures
        fut = admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})], operation_timeout=60)
        fut[topic].result(timeout=120)
        self.wait_leaders({topic: partitions})

    def wait_leaders(self, topics: dict[str, int], timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                md = self.admin().list_topics(timeout=20)
                if all(t in md.topics and len(md.topics[t].partitions) == n and
                       all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t, n in topics.items()):
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.kind}: not every partition of {list(topics)} has a leader")

    def leader(self, topic: str) -> int:
        return self.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].leader


# ---- measurements --------------------------------------------------------------------------------------------------
def with_cpu(side: Side, fn):
    c0 = side.cpu()
    out = fn()
    out["cpu_s"] = side.cpu() - c0
    return out


def warm_up(side: Side, args) -> None:
    """Both clients through both paths before anything is measured: the JVM's JIT (Kafka) and the page cache and
    allocator (both) start warm, as in a broker that has been running."""
    side.create("warm")
    n = max(args.java_messages // 2, 10_000)
    java_produce(side, "warm", n, args.size, JAVA_PRODUCER)
    java_consume(side, "warm", n, args.size)
    produce_phase(side.bootstrap, "warm", args.messages // 4, args.size, 1, args.phase_timeout)


def librdkafka_one_partition(side: Side, args) -> dict:
    side.create("rd")
    n, size = args.messages, args.size
    prod = with_cpu(side, lambda: produce_phase(side.bootstrap, "rd", n, size, 1, args.phase_timeout))
    fetch = with_cpu(side, lambda: fetch_phase(side.bootstrap, "rd", n, size, 1, args.phase_timeout))
    mb = n * size / MB
    return {"rd_produce_mb_s": prod["mb_s"], "rd_produce_cpu_ms_mb": 1000 * prod["cpu_s"] / mb,
            "rd_fetch_mb_s": fetch["mb_s"], "rd_fetch_cpu_ms_mb": 1000 * fetch["cpu_s"] / mb}


PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                       r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")


def java_produce(side: Side, topic: str, n: int, size: int, props: list[str], throughput: int = -1,
                 timeout: float = 600) -> dict:
    """ProducerPerformance's own summary line: records/s and latency percentiles (ms, as it prints them)."""
    p = ak.run(PERF, "--topic", topic, "--num-records", str(n), "--record-size", str(size), "--throughput",
               str(throughput), "--producer-props", f"bootstrap.servers={side.bootstrap}", *props,
               timeout=timeout, jvm=["-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"])
    m = [PERF_LINE.search(line) for line in p.stdout.splitlines()]
    m = [x for x in m if x and int(x.group(1)) == n]
    if not m:
        raise RuntimeError(f"ProducerPerformance printed no summary:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    last = m[-1]
    return {"mb_s": float(last.group(2)) * size / MB, "p50_ms": int(last.group(6)), "p99_ms": int(last.group(8))}


def java_consume(side: Side, topic: str, n: int, size: int, timeout: float = 600) -> dict:
    """ConsumerPerformance (a group, subscribed): MB/s over its fetch time (without the join)."""
    p = ak.run(CONSUMER_PERF, "--bootstrap-server", side.bootstrap, "--topic", topic, "--messages", str(n),
               "--timeout", "60000", "--group", f"perf-{time.monotonic_ns()}", timeout=timeout,
               jvm=["-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"])
    lines = [line for line in p.stdout.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    row = dict(zip(header, (v.strip() for v in lines[-1].split(","))))
    got = int(row["data.consumed.in.nMsg"])
    if got < n:
        raise RuntimeError(f"ConsumerPerformance read {got} of {n} records:\n{p.stdout[-2000:]}")
    return {"mb_s": float(row["fetch.nMsg.sec"]) * size / MB}


def java_one_partition(side: Side, args) -> dict:
    side.create("java")
    n, size = args.java_messages, args.size
    prod = with_cpu(side, lambda: java_produce(side, "java", n, size, JAVA_PRODUCER))
    fetch = with_cpu(side, lambda: java_consume(side, "java", n, size))
    mb = n * size / MB
    return {"java_produce_mb_s": prod["mb_s"], "java_produce_cpu_ms_mb": 1000 * prod["cpu_s"] / mb,
            "java_fetch_mb_s": fetch["mb_s"], "java_fetch_cpu_ms_mb": 1000 * fetch["cpu_s"] / mb}


def many_partitions(side: Side, args) -> dict:
    """The Java producer spreading records round-robin: 1 partition, then `args.partitions`."""
    # The producer's default batch.size (16 KiB): with 1,000 partitions, 512 KiB batches would need 512 MB of the
    # 32 MB buffer.memory, and the client, not the broker, would set the pace.
    rr = ["acks=1", "linger.ms=5", "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"]
    out = {}
    for count in (1, args.partitions):
        topic = f"rr{count}"
        side.create(topic, count)
        out[count] = with_cpu(side, lambda: java_produce(side, topic, args.rr_messages, args.size, rr))
    return {"p1_mb_s": out[1]["mb_s"], "pN_mb_s": out[args.partitions]["mb_s"],
            "pN_fraction": out[args.partitions]["mb_s"] / out[1]["mb_s"],
            "pN_cpu_ms_mb": 1000 * out[args.partitions]["cpu_s"] / (args.rr_messages * args.size / MB)}


def rf3(side: Side, args) -> dict:
    side.create("rf3", 1, 3, {"min.insync.replicas": "2"})
    props = ["acks=all", "linger.ms=5", "batch.size=524288"]
    full = with_cpu(side, lambda: java_produce(side, "rf3", args.java_messages, args.size, props))
    rate = int(10 * MB / args.size)
    side.create("rf3paced", 1, 3, {"min.insync.replicas": "2"})
    paced = java_produce(side, "rf3paced", rate * args.paced_seconds, args.size, props, throughput=rate)
    return {"rf3_mb_s": full["mb_s"], "rf3_cpu_ms_mb": 1000 * full["cpu_s"] / (args.java_messages * args.size / MB),
            "rf3_p50_ms": paced["p50_ms"], "rf3_p99_ms": paced["p99_ms"]}


def failover(side: Side, args) -> list[float]:
    """Seconds from kill -9 of the leader to the next acknowledged write, per round."""
    side.create("failover", 1, 3, {"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": side.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 120_000, "log_level": 3})

    def send_one(timeout: float = 180):
        out: list = []
        p.produce("failover", b"x", on_delivery=lambda err, _m: out.append((err, time.perf_counter())))
        end = time.monotonic() + timeout
        while not out:
            p.poll(0.001)
            if time.monotonic() > end:
                raise TimeoutError(f"{side.kind}: no acknowledgement within {timeout}s")
        return out[0]

    assert send_one()[0] is None
    seconds = []
    for _ in range(args.failover_rounds):
        leader = side.leader("failover")
        t0 = time.perf_counter()
        side.nodes[leader].kill9()
        while True:
            err, t = send_one()
            if err is None:
                break
            if err.fatal():
                raise RuntimeError(f"{side.kind}: fatal producer error {err}")
        seconds.append(t - t0)
        side.nodes[leader].start()
        wait_isr(side, "failover", 3)
    p.flush(10)
    return seconds


def wait_isr(side: Side, topic: str, size: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            part = side.admin().list_topics(topic, timeout=10).topics[topic].partitions[0]
            if len(part.isrs) == size and part.leader >= 0:
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{side.kind}: {topic} did not get back an ISR of {size}")


def startup(side: Side, args) -> dict:
    """Create args.startup_partitions partitions (topics of 1,000), stop cleanly, time the next start."""
    topics = {f"s{i}": 1000 for i in range(args.startup_partitions // 1000)}
    admin = side.admin()
    for t, n in topics.items():     # one topic per request: Kafka's controller refuses >10,000 records in one
        admin.create_topics([NewTopic(t, n, 1)], operation_timeout=300)[t].result(timeout=600)
    side.wait_leaders(topics, timeout=900)
    node = side.nodes[1]
    node.stop()
    t0 = time.perf_counter()
    node.start(timeout=900)                        # returns once the port listens
    listening = time.perf_counter() - t0
    side.wait_leaders(topics, timeout=900)
    return {"listen_s": listening, "serving_s": time.perf_counter() - t0}


# ---- the run -------------------------------------------------------------------------------------------------------
def fresh(kind: str, size: int, tmp: Path, name: str, settle: float) -> Side:
    if settle:
        wait_for_quiet(settle)
    d = tmp / f"{name}-{kind}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return Side(kind, size, d).start()


def resumed(log: Path | None) -> dict:
    """The results a previous run printed (its stdout, `--resume`): phases found there are not run again."""
    res: dict = {k: {"one": [], "rf3": [], "failover": [], "startup": []} for k in SIDES}
    for line in (log.read_text().splitlines() if log else []):
        m = re.match(r"(strata|kafka) (one broker, round \d+|three brokers|start-up) (\{.*?\})(?: (\[.*\]))?$", line)
        if not m:
            continue
        kind, phase, row = m.group(1), m.group(2), json.loads(m.group(3))
        if phase.startswith("one"):
            res[kind]["one"].append(row)
        elif phase == "three brokers":
            res[kind]["rf3"].append(row)
            res[kind]["failover"] = json.loads(m.group(4))
        else:
            res[kind]["startup"].append(row)
    return res


def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="strata-vs-kafka-"))
    res = resumed(args.resume)
    try:
        for r in range(len(res["kafka"]["one"]), args.rounds):
            for kind in (SIDES if r % 2 == 0 else SIDES[::-1]):
                side = fresh(kind, 1, tmp, f"one{r}", args.settle)
                try:
                    warm_up(side, args)
                    row = {**librdkafka_one_partition(side, args), **java_one_partition(side, args),
                           **many_partitions(side, args)}
                finally:
                    side.stop()
                res[kind]["one"].append(row)
                print(kind, "one broker, round", r, json.dumps(row), flush=True)
        for kind in (SIDES if args.rounds % 2 == 0 else SIDES[::-1]):
            if res[kind]["rf3"]:
                continue
            side = fresh(kind, 3, tmp, "three", args.settle)
            try:
                warm_up(side, args)
                res[kind]["rf3"].append(rf3(side, args))
                res[kind]["failover"] = failover(side, args)
            finally:
                side.stop()
            print(kind, "three brokers", json.dumps(res[kind]["rf3"][-1]), res[kind]["failover"], flush=True)
        if args.startup_partitions:
            for kind in SIDES:
                if res[kind]["startup"]:
                    continue
                side = fresh(kind, 1, tmp, "startup", args.settle)
                try:
                    res[kind]["startup"].append(startup(side, args))
                finally:
                    side.stop()
                print(kind, "start-up", json.dumps(res[kind]["startup"][-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return res


def med(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


ROWS = [  # (label, group, key, higher is better)
    ("librdkafka produce, 1 partition (MB/s)", "one", "rd_produce_mb_s", True),
    ("librdkafka produce, broker CPU (ms/MB)", "one", "rd_produce_cpu_ms_mb", False),
    ("librdkafka fetch, 1 partition (MB/s)", "one", "rd_fetch_mb_s", True),
    ("librdkafka fetch, broker CPU (ms/MB)", "one", "rd_fetch_cpu_ms_mb", False),
    ("Java produce, 1 partition (MB/s)", "one", "java_produce_mb_s", True),
    ("Java produce, broker CPU (ms/MB)", "one", "java_produce_cpu_ms_mb", False),
    ("Java fetch, 1 partition (MB/s)", "one", "java_fetch_mb_s", True),
    ("Java fetch, broker CPU (ms/MB)", "one", "java_fetch_cpu_ms_mb", False),
    ("Java produce, round-robin over 1 partition (MB/s)", "one", "p1_mb_s", True),
    ("Java produce, round-robin over {P} partitions (MB/s)", "one", "pN_mb_s", True),
    ("{P} partitions as a fraction of 1", "one", "pN_fraction", True),
    ("{P} partitions, broker CPU (ms/MB)", "one", "pN_cpu_ms_mb", False),
    ("RF=3 acks=all Java produce, 3 brokers (MB/s)", "rf3", "rf3_mb_s", True),
    ("RF=3 acks=all, brokers' CPU (ms/MB)", "rf3", "rf3_cpu_ms_mb", False),
    ("RF=3 acks=all at 10 MB/s: p50 latency (ms)", "rf3", "rf3_p50_ms", False),
    ("RF=3 acks=all at 10 MB/s: p99 latency (ms)", "rf3", "rf3_p99_ms", False),
]


def table(res: dict, args) -> str:
    lines = ["| measure | Strata | Apache Kafka | Strata / Kafka |", "|---|---:|---:|---:|"]
    for label, group, key, _ in ROWS:
        s, k = med(res["strata"][group], key), med(res["kafka"][group], key)
        lines.append(f"| {label.format(P=args.partitions)} | {s:.3g} | {k:.3g} | {s / k:.2f} |")
    fs, fk = res["strata"]["failover"], res["kafka"]["failover"]
    if fs and fk:
        lines.append(f"| kill -9 of the leader to the next ack (s, median of {len(fs)}) | "
                     f"{statistics.median(fs):.2f} | {statistics.median(fk):.2f} | "
                     f"{statistics.median(fs) / statistics.median(fk):.2f} |")
    for key, label in (("listen_s", "listening"), ("serving_s", "every partition led")):
        s, k = med(res["strata"]["startup"], key), med(res["kafka"]["startup"], key)
        if s == s and k == k:
            lines.append(f"| start-up with {args.startup_partitions:,} partitions, until {label} (s) | {s:.1f} | "
                         f"{k:.1f} | {s / k:.2f} |")
    return "\n".join(lines)


def block(res: dict, args, wall: float) -> str:
    m = machine()
    env = ak.environment_note()
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        BEGIN,
        f"Run {when}, {wall / 60:.0f} min: `bench/vs_kafka.py --rounds {args.rounds} --messages {args.messages} "
        f"--java-messages {args.java_messages} --rr-messages {args.rr_messages} --size {args.size}`"
        f"{' (resumed from a run that stopped after ' + args.resumed_what + ')' if args.resume else ''}; Strata at {m['commit']}, Apache Kafka "
        f"{env['apache_kafka']} ({env['java']}), librdkafka {m['librdkafka']}; {m['cpus']} cores ({m['cpu']}), "
        f"{m['memory']}. Medians of {args.rounds} alternating rounds for one broker; one run of each cluster.",
        "",
        table(res, args),
        "",
        "<details><summary>every round</summary>",
        "",
        "```",
        json.dumps(res, indent=1, default=float),
        "```",
        "</details>",
        END])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--messages", type=int, default=200_000, help="librdkafka records per phase")
    ap.add_argument("--java-messages", type=int, default=300_000, help="Java producer records per phase")
    ap.add_argument("--size", type=int, default=1000, help="record value bytes")
    ap.add_argument("--rr-messages", type=int, default=150_000, help="records per round-robin phase")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--paced-seconds", type=int, default=20)
    ap.add_argument("--failover-rounds", type=int, default=3)
    ap.add_argument("--startup-partitions", type=int, default=10_000)
    ap.add_argument("--phase-timeout", type=float, default=300)
    ap.add_argument("--settle", type=float, default=20, help="wait up to this long for an idle machine")
    ap.add_argument("--quick", action="store_true", help="small sizes, one round, nothing written")
    ap.add_argument("--write", action="store_true", help="write the results into docs/benchmarks.md")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    ap.add_argument("--resume", type=Path, help="a previous run's stdout: its finished phases are kept, not rerun")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.messages, args.java_messages, args.partitions = 1, 20_000, 30_000, 100
        args.rr_messages = 30_000
        args.paced_seconds, args.failover_rounds, args.startup_partitions, args.settle = 3, 1, 1000, 0
        args.write = False
    reason = ak.skip_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    t0 = time.monotonic()
    if args.resume:
        done = resumed(args.resume)
        args.resumed_what = ", ".join(f"{k}: {len(v['one'])} one-broker rounds, {len(v['rf3'])} three-broker runs, "
                                      f"{len(v['startup'])} start-ups" for k, v in done.items())
    res = run(args)
    text = block(res, args, time.monotonic() - t0)
    print(table(res, args))
    if args.write:
        write_results(DOC, BEGIN, END, text, section="## Strata beside Apache Kafka (issue 23)\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
