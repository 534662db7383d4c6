"""Transactions benchmark: transactional produce against idempotent produce, and read_committed fetch against
read_uncommitted, in one run on one broker (a real `strata broker` process, defaults; confluent-kafka, linger.ms=5,
batch.size=1 MiB).

Produce cases, each into a fresh one-partition topic, their order rotated over --rounds:

    idempotent        enable.idempotence=true, acks=all: the baseline
    txn-100           a transaction every 100 records (begin, produce, commit_transaction)
    txn-10000         a transaction every 10,000 records

A transaction costs the client a round trip to the coordinator to add the partition, the commit (EndTxn, answered
once PrepareCommit is in __transaction_state) and the wait for its records; the broker writes a COMMIT marker and
two __transaction_state records. Fetch cases read the txn-100 topic (every 10th transaction aborted there, so
read_committed drops 10% of the records through the aborted-transaction index) from the start with a consumer:

    read_uncommitted  every record
    read_committed    up to the last stable offset, aborted records dropped by the client

    .venv/bin/python bench/transactions.py --messages 20000 --rounds 1     # smoke
    .venv/bin/python bench/transactions.py --write     # full run, updates "Transactions (issue 24)" in docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdoc import write_results  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- transactions:results:begin -->", "<!-- transactions:results:end -->"
CLIENT = {"linger.ms": 5, "batch.size": 1 << 20, "broker.address.family": "v4"}


def create(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic not in admin.list_topics(topic, timeout=10).topics or \
            admin.list_topics(topic, timeout=10).topics[topic].error is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, n: int, size: int, per_txn: int | None, abort_every: int = 0) -> float:
    """Seconds to produce (and, in transactions, commit) n records of `size` bytes."""
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, **CLIENT, "enable.idempotence": True, "acks": "all"}
    if per_txn:
        conf["transactional.id"] = f"bench-{uuid.uuid4()}"
    p = Producer(conf)
    value = os.urandom(size)
    if per_txn:
        p.init_transactions(30)
    for i in range(1000):                         # untimed: connections, metadata, the coordinator
        if per_txn and i == 0:
            p.begin_transaction()
        p.produce(topic, value, partition=0)
    if per_txn:
        p.commit_transaction(60)
    assert p.flush(60) == 0
    t0 = time.perf_counter()
    txn = 0
    for i in range(n):
        if per_txn and i % per_txn == 0:
            p.begin_transaction()
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if per_txn and (i + 1) % per_txn == 0 or per_txn and i == n - 1:
            txn += 1
            if abort_every and txn % abort_every == 0:
                p.flush(60)                    # written, then aborted (librdkafka purges what it has not sent)
                p.abort_transaction(60)
            else:
                p.commit_transaction(60)
    if not per_txn:
        assert p.flush(60) == 0
    return time.perf_counter() - t0


def fetch(bootstrap: str, topic: str, isolation: str, expect: int) -> tuple[float, int]:
    """(seconds, records) for a consumer to read the topic from the start."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"b-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.max.bytes": 50 << 20, "broker.address.family": "v4"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    while got < expect:
        got += sum(1 for m in c.consume(500, 0.05) if m.error() is None)
        assert time.perf_counter() - t0 < 300, f"{isolation}: stuck at {got} of {expect}"
    dt = time.perf_counter() - t0
    c.close()
    return dt, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-txn-"))
    b = BrokerProcess(tmp / "broker").start()
    cases = {"idempotent": None, "txn-100": 100, "txn-10000": 10_000}
    times: dict[str, list[float]] = {k: [] for k in cases}
    reads: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
    try:
        for r in range(args.rounds):
            order = list(cases)[r % 3:] + list(cases)[:r % 3]
            for name in order:
                topic = f"{name}-{r}"
                create(b.bootstrap, topic)
                times[name].append(produce(b.bootstrap, topic, args.messages, args.size, cases[name],
                                           abort_every=10 if name == "txn-100" else 0))
                print(f"round {r} {name}: {args.messages / times[name][-1]:,.0f} records/s", flush=True)
            topic = f"txn-100-{r}"
            committed = 1000 + args.messages - args.messages // 1000 * 100
            for iso in (["read_committed", "read_uncommitted"] if r % 2 else ["read_uncommitted", "read_committed"]):
                dt, got = fetch(b.bootstrap, topic, iso, committed if iso == "read_committed" else args.messages + 1000)
                reads[iso].append(dt)
                print(f"round {r} {iso}: {got / dt:,.0f} records/s", flush=True)
    finally:
        b.stop()
    mb = args.messages * args.size / 1e6
    base = statistics.median(times["idempotent"])
    rows = []
    for name in cases:
        t = statistics.median(times[name])
        rows.append(f"| {name} | {args.messages / t:,.0f} | {mb / t:.1f} | {base / t:.2f} |")
    ru, rc = statistics.median(reads["read_uncommitted"]), statistics.median(reads["read_committed"])
    committed = 1000 + args.messages - args.messages // 1000 * 100
    fetch_rows = [f"| read_uncommitted | {(args.messages + 1000) / ru:,.0f} | 1.00 |",
                  f"| read_committed (10% aborted, dropped) | {committed / rc:,.0f} | "
                  f"{committed / rc / ((args.messages + 1000) / ru):.2f} |"]
    load = os.getloadavg()[0]
    block = "\n".join([
        BEGIN,
        f"One broker, {args.messages:,} records of {args.size} bytes per case, median of {args.rounds} rounds "
        f"(order rotated), load average {load:.1f} at the end; `bench/transactions.py`.",
        "",
        "| produce | records/s | MB/s | ratio to idempotent |", "|---|---|---|---|", *rows,
        "",
        "| fetch from the start (the txn-100 topic) | records delivered/s | ratio to read_uncommitted |",
        "|---|---|---|",
        *fetch_rows,
        END])
    print(block)
    if args.write:
        write_results(DOC, BEGIN, END, block, "## Transactions (issue 24)\n\n")


if __name__ == "__main__":
    main()
