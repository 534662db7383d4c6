"""Checks a recorded history (tests/faults/history.py) after the fact, so a run under faults is judged by one set of
definitions instead of inline assertions, and a saved history can be judged again: `python -m tests.faults.checker
history.jsonl`. Pure Python and deterministic: the same history always gives the same report.

What the history must hold: sends (invoke with value, partition, seq; then ok with offset, fail or info), reads by
consumers during the run and by the "final" process after it (a read of every partition from its low watermark up to
the high watermark, closed by one `final` op per partition). A partition's final read is *complete* when it reached
that high watermark; its records are then the partition's committed log, the reference everything is judged against.

The anomalies (each counted once per value, offset or pair, with examples):

- lost: a send acknowledged (ok) whose value is not in its partition's complete final read. Without a complete final
  read: acknowledged, never read by anyone, although some read of that partition reached a higher offset (readers
  start at the beginning and never skip: auto.offset.reset=earliest, no compaction, no transactions).
- duplicated: one value read at two or more (partition, offset)s. Indeterminate sends may be absent, not twice.
- reordered: within a partition, two of one producer's values whose order in the log (final read; else acks, then
  reads) is not their send order. An idempotent producer (one session, one partition) keeps send order = offset order.
- above_hw: a consumer read (partition, offset, value) that the committed log does not hold: the offset is at or above
  the final high watermark (it disappeared) or now holds another value. It was read before it was committed.
- inconsistent: a (partition, offset) seen with two different values, by reads or acknowledgements.
- unexpected: a value read that was never sent, read in a partition it was not sent to, or whose send definitely
  failed (fail: the producer refused it, so it was never sent)."""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field

try:
    from .history import History
except ImportError:                  # run as a script
    from history import History      # type: ignore

ANOMALIES = ("lost", "duplicated", "reordered", "above_hw", "inconsistent", "unexpected")
FINAL = "final"


@dataclass
class Report:
    counts: dict[str, int]
    examples: dict[str, list[dict]]
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def summary(self, examples: int = 3) -> str:
        lines = ["anomalies: " + ", ".join(f"{a}={self.counts[a]}" for a in ANOMALIES),
                 "stats: " + ", ".join(f"{k}={v}" for k, v in self.stats.items())]
        for a in ANOMALIES:
            for ex in self.examples[a][:examples]:
                lines.append(f"  {a}: {ex}")
        return "\n".join(lines)


def check(history, max_examples: int = 10) -> Report:
    """Judge `history` (a History or a list of op dicts); see the module docstring for the definitions."""
    ops = history.ops if isinstance(history, History) else list(history)
    sends: dict[str, dict] = {}               # value -> its invoke
    status: dict[str, dict] = {}              # value -> its first completion
    reads: list[dict] = []
    finals: dict[int, dict] = {}
    stats = defaultdict(int)
    for op in ops:
        f, t = op.get("f"), op.get("type")
        if f == "send":
            v = op.get("value")
            if t == "invoke":
                sends[v] = op
            elif v not in status:
                status[v] = op
            else:
                stats["extra_completions"] += 1
        elif f == "read" and t == "ok":
            reads.append(op)
        elif f == "final":
            finals[op["partition"]] = op
        elif f == "fatal":
            stats["producer_fatal"] += 1
        elif op.get("process") == "nemesis" and t == "ok" and f != "heal":
            stats["faults"] += 1
        elif op.get("process") in ("nemesis", "workload") and t == "info" and f != "seed":
            stats["problems"] += 1                # a fault not applied, a heal failed, a settle timed out

    stats["sends"] = len(sends)
    for t in ("ok", "fail", "info"):
        stats[f"sends_{t}"] = sum(1 for v in sends if status.get(v, {}).get("type") == t)
    stats["sends_pending"] = sum(1 for v in sends if v not in status)
    stats["reads"] = sum(1 for r in reads if r["process"] != FINAL)
    stats["final_reads"] = len(reads) - stats["reads"]

    # the committed log of each partition whose final read is complete: offset -> value
    complete = {p for p, op in finals.items() if op.get("type") == "ok" and op["reached"] >= op["hw"]}
    stats["partitions_complete"] = len(complete)
    stats["partitions_incomplete"] = len(finals) - len(complete)
    final_log: dict[int, dict[int, str]] = defaultdict(dict)
    for r in reads:
        if r["process"] == FINAL and r["partition"] in complete:
            final_log[r["partition"]].setdefault(r["offset"], r["value"])
    final_values = {p: set(log.values()) for p, log in final_log.items()}

    found: dict[str, list[dict]] = {a: [] for a in ANOMALIES}

    # inconsistent: every observation of an offset, acknowledgements included
    seen_at: dict[tuple[int, int], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in reads:
        seen_at[(r["partition"], r["offset"])][r["value"]].append(f"{r['process']}#{r['index']}")
    for v, op in status.items():
        if op["type"] == "ok" and op.get("offset", -1) >= 0:
            seen_at[(op["partition"], op["offset"])][v].append(f"ack:{op['process']}#{op['index']}")
    for (p, o), values in sorted(seen_at.items()):
        if len(values) > 1:
            found["inconsistent"].append({"partition": p, "offset": o,
                                          "values": {v: who[:3] for v, who in sorted(values.items(), key=str)}})

    # duplicated: a value at more than one place
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in reads:
        places[r["value"]].add((r["partition"], r["offset"]))
    for v, at in sorted(places.items(), key=lambda kv: str(kv[0])):
        if len(at) > 1:
            found["duplicated"].append({"value": v, "at": [list(x) for x in sorted(at)],
                                        "send": status.get(v, {}).get("type", "pending" if v in sends else None)})

    # unexpected: never sent, wrong partition, or definitely failed
    for v in sorted(places, key=str):
        send = sends.get(v)
        if send is None:
            why = "never sent"
        elif any(p != send["partition"] for p, _ in places[v]):
            why = f"sent to partition {send['partition']}"
        elif status.get(v, {}).get("type") == "fail":
            why = f"send failed: {status[v].get('error')}"
        else:
            continue
        found["unexpected"].append({"value": v, "at": [list(x) for x in sorted(places[v])], "why": why})

    # lost: acknowledged and absent from the committed log (or passed over by every reader)
    max_read: dict[int, int] = defaultdict(lambda: -1)
    for r in reads:
        max_read[r["partition"]] = max(max_read[r["partition"]], r["offset"])
    for v in sorted(status, key=lambda v: status[v]["index"]):
        op = status[v]
        if op["type"] != "ok" or v not in sends:
            continue
        p, o = op["partition"], op.get("offset", -1)
        if p in complete:
            if v not in final_values.get(p, ()):
                found["lost"].append({"value": v, "partition": p, "offset": o, "read_earlier_at":
                                      [list(at) for at in sorted(places.get(v, ())) if at[0] == p]})
        elif v in places:
            continue
        elif max_read[p] > o:
            found["lost"].append({"value": v, "partition": p, "offset": o, "read_up_to": max_read[p]})
        else:
            stats["acked_unchecked"] += 1

    # above_hw: consumers' reads the committed log does not hold
    dirty = set()
    for r in reads:
        p, o, v = r["partition"], r["offset"], r["value"]
        if r["process"] == FINAL or (p, o, v) in dirty:
            continue
        if p in complete:
            now = final_log[p].get(o)
            bad = now != v
        elif p in finals:
            now, bad = None, o >= finals[p]["hw"]
        else:
            continue
        if bad:
            dirty.add((p, o, v))
            found["above_hw"].append({"partition": p, "offset": o, "value": v, "by": r["process"],
                                      "hw_seen": r.get("hw"), "final_hw": finals[p]["hw"], "final_value": now})
    stats["reads_at_or_above_seen_hw"] = sum(1 for r in reads if r["process"] != FINAL and
                                             r.get("hw", -1) >= 0 and r["offset"] >= r["hw"])

    # reordered: one producer's values in one partition, in log order vs send order
    final_pos: dict[str, int] = {}
    for log in final_log.values():
        for o in sorted(log, reverse=True):       # the lowest offset of a duplicated value
            final_pos[log[o]] = o
    first_read: dict[str, int] = {}
    for r in reads:
        first_read.setdefault(r["value"], r["offset"])

    def log_position(v: str, p: int) -> int | None:
        if p in complete:
            return final_pos.get(v)
        if status.get(v, {}).get("type") == "ok" and status[v].get("offset", -1) >= 0:
            return status[v]["offset"]
        return first_read.get(v)
    streams: dict[tuple[int, str], list[tuple[int, int, str]]] = defaultdict(list)
    for v, send in sends.items():
        o = log_position(v, send["partition"])
        if o is not None:
            streams[(send["partition"], send["process"])].append((send["seq"], o, v))
    for (p, proc), stream in sorted(streams.items()):
        stream.sort()
        for (s1, o1, v1), (s2, o2, v2) in zip(stream, stream[1:]):
            if o2 < o1:                           # equal offsets are `inconsistent`'s
                found["reordered"].append({"partition": p, "producer": proc, "sent_first": [v1, o1],
                                           "sent_next": [v2, o2]})

    return Report(counts={a: len(found[a]) for a in ANOMALIES},
                  examples={a: found[a][:max_examples] for a in ANOMALIES}, stats=dict(stats))


if __name__ == "__main__":
    report = check(History.load(sys.argv[1]))
    print(report.summary(examples=10))
    sys.exit(0 if report.ok else 1)
