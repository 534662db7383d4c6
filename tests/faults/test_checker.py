"""The checker against hand-made histories: a clean one passes, and each anomaly is found (and only it), so a
checker that misses one fails here rather than silently passing a broken broker under faults."""
from __future__ import annotations

import threading

import pytest

from tests.faults.checker import ANOMALIES, check
from tests.faults.history import History


class Run:
    """Writes histories the way the workload does, in a few words."""

    def __init__(self):
        self.h = History()
        self.seq: dict[str, int] = {}

    def send(self, proc: str, p: int, offset: int | None = None, outcome: str = "ok") -> str:
        seq = self.seq.get(proc, 0)
        self.seq[proc] = seq + 1
        v = f"{proc}/{seq}"
        self.h.invoke(proc, "send", value=v, key=proc, partition=p, seq=seq)
        if outcome == "ok":
            self.h.ok(proc, "send", value=v, partition=p, offset=offset)
        elif outcome in ("fail", "info"):
            self.h.append(proc, outcome, "send", value=v, partition=p,
                          error="_PURGE_QUEUE" if outcome == "fail" else "_MSG_TIMED_OUT")
        return v                                   # outcome "pending": never completed

    def read(self, proc: str, p: int, offset: int, value: str, hw: int = -1) -> None:
        self.h.ok(proc, "read", partition=p, offset=offset, value=value, hw=hw)

    def final(self, p: int, values: list[str], low: int = 0, complete: bool = True) -> None:
        for i, v in enumerate(values):
            self.read("final", p, low + i, v, low + len(values))
        hw = low + len(values) + (0 if complete else 1)
        self.h.ok("final", "final", partition=p, low=low, hw=hw, reached=low + len(values))

    def report(self):
        return check(self.h)


def only(report, **expected) -> None:
    counts = {a: n for a, n in report.counts.items() if n}
    assert counts == expected, report.summary()


def clean_run() -> tuple[Run, list[str], list[str]]:
    """Two producers, one partition each, two consumers that read everything, a complete final read."""
    r = Run()
    a = [r.send("p0", 0, i) for i in range(5)]
    b = [r.send("p1", 1, i) for i in range(4)]
    for c in ("c0", "c1"):
        for i, v in enumerate(a):
            r.read(c, 0, i, v, hw=5)
        for i, v in enumerate(b[:2]):
            r.read(c, 1, i, v, hw=2)
    r.final(0, a)
    r.final(1, b)
    return r, a, b


def test_a_clean_history_has_no_anomaly():
    r, a, b = clean_run()
    rep = r.report()
    assert rep.ok, rep.summary()
    assert rep.counts == {x: 0 for x in ANOMALIES}
    assert rep.stats["sends_ok"] == 9 and rep.stats["partitions_complete"] == 2


def test_indeterminate_sends_may_be_absent_or_present_once():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, outcome="info"), r.send("p0", 0, outcome="pending"),
         r.send("p0", 0, outcome="info"), r.send("p0", 0, 2)]
    r.read("c0", 0, 0, a[0])
    r.final(0, [a[0], a[1], a[4]])                 # a[1] made it, a[2] and a[3] did not
    rep = r.report()
    assert rep.ok, rep.summary()
    assert rep.stats["sends_info"] == 2 and rep.stats["sends_pending"] == 1


def test_lost_an_acknowledged_record_missing_from_the_final_read():
    r = Run()
    a = [r.send("p0", 0, i) for i in range(4)]
    r.final(0, a[:3])                  # complete up to a high watermark of 3: a[3] acknowledged at 3, gone
    rep = r.report()
    only(rep, lost=1)
    assert rep.examples["lost"][0]["value"] == a[3] and rep.examples["lost"][0]["read_earlier_at"] == []


def test_lost_after_consumers_read_it_when_the_log_forgot_it():
    r = Run()
    a = [r.send("p0", 0, i) for i in range(3)]
    for i, v in enumerate(a):
        r.read("c0", 0, i, v)
    r.final(0, a[:2])                 # truncated below an acknowledged record: lost, and c0's read was dirty
    rep = r.report()
    only(rep, lost=1, above_hw=1)
    assert rep.examples["lost"][0]["read_earlier_at"] == [[0, 2]]


def test_lost_without_a_final_read_when_a_reader_passed_its_offset():
    r = Run()
    a = [r.send("p0", 0, i) for i in range(4)]
    for i in (0, 2, 3):
        r.read("c0", 0, i, a[i])        # offset 1 was read with nothing, i.e. never: the reader went past it
    only(r.report(), lost=1)
    r2 = Run()
    a = [r2.send("p0", 0, i) for i in range(4)]
    r2.read("c0", 0, 0, a[0])           # nobody got past offset 0: the others are unchecked, not lost
    rep = r2.report()
    only(rep)
    assert rep.stats["acked_unchecked"] == 3


def test_an_incomplete_final_read_does_not_count_as_the_log():
    r = Run()
    a = [r.send("p0", 0, i) for i in range(3)]
    r.final(0, a[:1], complete=False)   # reached 1 of hw 2: a[1] and a[2] unchecked
    rep = r.report()
    only(rep)
    assert rep.stats["partitions_incomplete"] == 1 and rep.stats["acked_unchecked"] == 2


def test_duplicated_a_value_at_two_offsets():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, 1)]
    r.final(0, [a[0], a[1], a[1]])     # a retried batch appended again
    rep = r.report()
    only(rep, duplicated=1)
    assert rep.examples["duplicated"][0]["at"] == [[0, 1], [0, 2]]


def test_duplicated_an_indeterminate_send_twice():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, outcome="info"), r.send("p0", 0, 3)]
    r.final(0, [a[0], a[1], a[1], a[2]])
    only(r.report(), duplicated=1)


def test_reordered_values_of_one_producer_in_one_partition():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, 2), r.send("p0", 0, 1)]     # acknowledged out of send order
    r.final(0, [a[0], a[2], a[1]])
    rep = r.report()
    only(rep, reordered=1)
    assert rep.examples["reordered"][0]["sent_first"] == [a[1], 2]


def test_reordered_found_from_acknowledgements_without_a_final_read():
    r = Run()
    a = [r.send("p0", 0, 1), r.send("p0", 0, 0)]
    only(r.report(), reordered=1)


def test_two_producers_interleaving_in_one_partition_is_not_reordering():
    r = Run()
    a0, b0, a1, b1 = r.send("p0", 0, 0), r.send("p1", 0, 1), r.send("p0", 0, 2), r.send("p1", 0, 3)
    r.final(0, [a0, b0, a1, b1])
    only(r.report())


def test_above_hw_a_read_of_an_offset_that_disappeared():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, 1, outcome="info")]
    r.read("c0", 0, 0, a[0], hw=1)
    r.read("c0", 0, 1, a[1], hw=1)     # read at the high watermark the consumer saw; later truncated away
    r.final(0, a[:1])
    rep = r.report()
    only(rep, above_hw=1)
    ex = rep.examples["above_hw"][0]
    assert (ex["offset"], ex["final_hw"], ex["final_value"]) == (1, 1, None)
    assert rep.stats["reads_at_or_above_seen_hw"] == 1


def test_above_hw_a_read_of_an_offset_that_later_holds_another_value():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, outcome="info"), r.send("p0", 0, 1)]
    r.read("c0", 0, 0, a[0])
    r.read("c0", 0, 1, a[1])           # uncommitted a[1] at offset 1, replaced by a[2] after a failover
    r.final(0, [a[0], a[2]])
    rep = r.report()
    only(rep, above_hw=1, inconsistent=1)
    assert rep.examples["above_hw"][0]["final_value"] == a[2]


def test_above_hw_without_a_complete_final_read_uses_the_final_high_watermark():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, outcome="info")]
    r.read("c0", 0, 0, a[0])
    r.read("c0", 0, 1, a[1])
    r.h.info("final", "final", partition=0, low=0, hw=1, reached=0)
    only(r.report(), above_hw=1)


def test_inconsistent_two_consumers_saw_different_values_at_one_offset():
    r = Run()
    a = [r.send("p0", 0, outcome="info"), r.send("p0", 0, outcome="info")]
    r.read("c0", 0, 0, a[0])
    r.read("c1", 0, 0, a[1])
    rep = r.report()
    only(rep, inconsistent=1)
    assert set(rep.examples["inconsistent"][0]["values"]) == set(a)


def test_inconsistent_an_acknowledged_offset_holding_another_value():
    r = Run()
    a = [r.send("p0", 0, 0), r.send("p0", 0, 0)]     # both acknowledged at offset 0
    r.final(0, [a[0], a[1]])
    rep = r.report()
    only(rep, inconsistent=1)
    assert rep.examples["inconsistent"][0]["offset"] == 0


@pytest.mark.parametrize("case", ["never sent", "wrong partition", "failed"])
def test_unexpected_values(case):
    r = Run()
    a = [r.send("p0", 0, 0)]
    if case == "never sent":
        r.final(0, [a[0], "ghost/0"])
    elif case == "wrong partition":
        b = r.send("p1", 1, outcome="info")
        r.final(0, [a[0], b])
    else:
        f = r.send("p0", 0, outcome="fail")
        r.final(0, [a[0], f])
    rep = r.report()
    only(rep, unexpected=1)
    why = {"never sent": "never sent", "wrong partition": "sent to partition 1", "failed": "send failed"}[case]
    assert rep.examples["unexpected"][0]["why"].startswith(why)


def test_every_anomaly_at_once_and_the_report_survives_json(tmp_path):
    r = Run()
    a = [r.send("p0", 0, i) for i in range(4)]
    r.send("p0", 0, 4)                                      # lost
    r.read("c0", 0, 5, "p0/4")                              # above the final hw
    r.read("c1", 0, 0, "ghost")                             # unexpected, inconsistent
    r.final(0, [a[0], a[2], a[1], a[3], a[3]])             # reordered, duplicated
    rep = r.report()
    assert all(rep.counts[x] >= 1 for x in ANOMALIES), rep.summary()
    again = check(History.load(r.h.dump(tmp_path / "h.jsonl")))      # a saved history is judged the same
    assert (again.counts, again.examples, again.stats) == (rep.counts, rep.examples, rep.stats)


def test_history_appends_from_many_threads_in_one_order():
    h = History()

    def writer(n):
        for i in range(500):
            h.ok(f"t{n}", "read", partition=0, offset=i, value=f"{n}/{i}")
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ops = h.ops
    assert [op["index"] for op in ops] == list(range(2000))
    assert all(a["time"] <= b["time"] for a, b in zip(ops, ops[1:]))
