"""Slow object store benchmark (issue 26): produce latency on a three-broker cluster whose fast store (KIP-1176 WAL)
and remote tier (KIP-405) answer every request after 0, 200 ms or 2 s, in one run.

Each phase starts its own cluster (`tests/cluster/conftest.py`'s Cluster, file:// stores wrapped in
FaultyObjectStore with `latency_ms`; the metadata store stays fast) and a topic with RF=3, min.insync.replicas=2,
`remote.wal.enable` and `remote.storage.enable` (segments roll every second). A confluent-kafka producer sends one
1 KiB record every 10 ms and awaits each, first with acks=1, then with acks=all; p50 and p99 from produce() to the
delivery report. Also reported: how far tiering got (LATEST_TIERED against the log end) and whether the leader kept
shipping WAL objects (strata_wal_mode at the end).

    .venv/bin/python bench/slow_store.py --seconds 5       # smoke
    .venv/bin/python bench/slow_store.py --write           # updates "Slow object store (issue 26)" in docs/benchmarks.md
"""
from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))                 # tests/cluster/test_wal.py imports its fixtures so

from benchdoc import seconds_main  # noqa: E402
from overload import latencies, pct  # noqa: E402
from tests.cluster.conftest import Cluster  # noqa: E402
from tests.cluster.helpers import create  # noqa: E402
from tests.cluster.test_tiered_cluster import tiered_end  # noqa: E402
from tests.cluster.test_wal import metric  # noqa: E402
from tests.conftest import free_port  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- slow-store:results:begin -->", "<!-- slow-store:results:end -->"
LATENCIES_MS = (0, 200, 2000)


def log_end(cluster: Cluster, topic: str) -> int:
    from tests.integration.rawclient import RawClient
    with RawClient(cluster.brokers[cluster.leader(topic)].bootstrap, timeout=40) as c:
        return c.fetch_partition(topic, 0, 0, max_bytes=1).high_watermark


def phase(latency_ms: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-slow-store-") as d:
        root = Path(d)
        c = Cluster(root, 3, overrides={
            "remote.wal.storage.url": f"file://{root / 'fast'}",
            "remote.log.storage.system.enable": "true", "remote.log.storage.manager.store.url": f"file://{root}/remote",
            "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
            "remote.log.metadata.topic.num.partitions": "3"})
        for i, b in c.brokers.items():
            b.overrides["metrics.port"] = str(free_port())
            if latency_ms:
                spec = f"latency_ms={latency_ms},seed={i}"
                b.overrides["remote.wal.storage.faults"] = spec
                b.overrides["remote.log.storage.manager.store.faults"] = spec
        c.start()
        try:
            topic = f"slow-store-{uuid.uuid4().hex[:6]}"
            create(c, topic, configs={"remote.wal.enable": "true", "remote.storage.enable": "true",
                                      "segment.ms": "1000", "local.retention.bytes": "1", "min.insync.replicas": "2"})
            latencies(c.bootstrap, topic, 2, acks="1")                  # warm up (metadata, connections)
            one = latencies(c.bootstrap, topic, seconds, acks="1")
            every = latencies(c.bootstrap, topic, seconds, acks="all")
            leader = c.brokers[c.leader(topic)]
            row = {"latency": latency_ms, "n1": len(one), "p50_1": pct(one, 0.5), "p99_1": pct(one, 0.99),
                   "nall": len(every), "p50_all": pct(every, 0.5), "p99_all": pct(every, 0.99),
                   "tiered": tiered_end(c, topic), "end": log_end(c, topic),
                   "wal_mode": metric(leader, "strata_wal_mode"),
                   "upload_errors": metric(leader, "strata_wal_upload_errors_total")}
            print(row, flush=True)
            return row
        finally:
            c.stop()


def table(rows: list[dict]) -> str:
    base1, base_all = rows[0]["p99_1"], rows[0]["p99_all"]
    out = ["| store latency per request | acks=1 p50 ms | acks=1 p99 ms | acks=1 p99 ratio | acks=all p50 ms | "
           "acks=all p99 ms | acks=all p99 ratio | tiered / log end | WAL objects at the end | WAL upload failures |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['latency']} ms | {r['p50_1']:.1f} | {r['p99_1']:.1f} | {r['p99_1'] / base1:.2f} | "
                   f"{r['p50_all']:.1f} | {r['p99_all']:.1f} | {r['p99_all'] / base_all:.2f} | "
                   f"{max(r['tiered'] + 1, 0)} / {r['end']} | {'yes' if r['wal_mode'] == 1 else 'no (fetch)'} | "
                   f"{r['upload_errors']:.0f} |")
    return "\n".join(out)


def run(seconds: float) -> list[dict]:
    return [phase(ms, seconds) for ms in LATENCIES_MS]


if __name__ == "__main__":
    seconds_main("slow_store.py", run, table, DOC, BEGIN, END, "## Slow object store (issue 26)\n\n")
