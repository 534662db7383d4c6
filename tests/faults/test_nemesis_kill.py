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
from tests.faults.nemesis import broker_faults

PARTITIONS = 4


def run_under_nemesis(tmp_path, topic: str, duration: float, seed: int | None, quiet: tuple[float, float],
                      length: tuple[float, float], rate: float, settle_timeout: float):
    c = Cluster(tmp_path, 3).start()
    try:
        create(c, topic, partitions=PARTITIONS, configs={"min.insync.replicas": "2"})
        return workload.run_and_judge(c, topic, PARTITIONS, broker_faults(c), tmp_path, duration=duration, seed=seed,
                                      quiet=quiet, length=length, rate=rate, settle_timeout=settle_timeout)
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
