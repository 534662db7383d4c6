"""The workload under a seeded nemesis of kill -9 and SIGSTOP on a three-broker cluster (RF=3, min.insync.replicas=2),
judged by the checker: nothing acknowledged lost, nothing twice, nothing out of order, no offset with two contents,
nothing read that was not committed. The seed is printed; STRATA_NEMESIS_SEED replays a schedule, and the history is
saved as history.jsonl in the test's tmp dir (`python -m tests.faults.checker PATH` judges it again)."""
from __future__ import annotations

import os

import pytest

from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import create
from tests.faults import workload
from tests.faults.checker import check
from tests.faults.nemesis import Nemesis, broker_faults

PARTITIONS = 4


def run_under_nemesis(tmp_path, topic: str, duration: float, seed: int | None, quiet: tuple[float, float],
                      length: tuple[float, float], rate: float, settle_timeout: float):
    c = Cluster(tmp_path, 3).start()
    try:
        create(c, topic, partitions=PARTITIONS, configs={"min.insync.replicas": "2"})

        def settle() -> None:           # every replica back in the ISR before the next fault
            for p in range(PARTITIONS):
                c.wait_for_isr(topic, 3, p, timeout=settle_timeout)
        nemesis = Nemesis(broker_faults(c), sorted(c.brokers), seed, quiet=quiet, length=length, settle=settle)
        bootstrap = ",".join(b.bootstrap for b in c.brokers.values())      # all three, alive or not
        history = workload.run(bootstrap, topic, duration, nemesis.seed, nemesis=nemesis, settle=settle, rate=rate)
        path = history.dump(tmp_path / "history.jsonl")
        report = check(history)
        print(report.summary(examples=5))
        print(f"seed {nemesis.seed}; faults {[(s.kind, s.target, s.length) for s in nemesis.done]}; history {path}")
        assert report.stats.get("faults", 0) >= 1, "the nemesis applied no fault"
        assert report.stats.get("sends_ok", 0) > 0, "nothing was acknowledged"
        assert report.stats["partitions_complete"] == PARTITIONS, "a final read did not reach the high watermark"
        assert report.ok, f"seed {nemesis.seed}: {report.summary(examples=10)}\nhistory saved in {path}"
        return report
    finally:
        stop_and_check(c)


@pytest.mark.timeout(240)
def test_kill_and_pause_lose_nothing_acknowledged(tmp_path, topic_name):
    """About 25 s of faults (a fixed seed unless STRATA_NEMESIS_SEED is set), under 90 s in all."""
    seed = int(os.environ.get("STRATA_NEMESIS_SEED", "26"))
    run_under_nemesis(tmp_path, topic_name, duration=25, seed=seed, quiet=(1.0, 3.0), length=(1.0, 6.0), rate=100,
                      settle_timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(int(os.environ.get("STRATA_NEMESIS_SECONDS", "600")) + 900)
def test_ten_minutes_of_mixed_faults(tmp_path, topic_name):
    """STRATA_NEMESIS_SECONDS of faults (600 by default), a random seed unless STRATA_NEMESIS_SEED is set; the seed
    is printed first so any failure can be replayed."""
    seed = os.environ.get("STRATA_NEMESIS_SEED")
    run_under_nemesis(tmp_path, topic_name, duration=float(os.environ.get("STRATA_NEMESIS_SECONDS", "600")),
                      seed=int(seed) if seed else None, quiet=(2.0, 8.0), length=(0.5, 10.0), rate=50,
                      settle_timeout=90)
