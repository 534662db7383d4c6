"""Runs the atheris fuzzers of tests/fuzz/fuzz_parsers.py for a bounded number of inputs (slow suite): any exception
other than the parser's own refusal, or a native crash, fails the test with libFuzzer's report and the crashing input.
`make fuzz` runs them longer; STRATA_FUZZ_SEED and STRATA_FUZZ_RUNS choose another seed or length."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("atheris")
pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = int(os.environ.get("STRATA_FUZZ_SEED", "20261127"))
RUNS = int(os.environ.get("STRATA_FUZZ_RUNS", "400000"))


@pytest.mark.parametrize("target", ["requests", "batches"])
def test_parsers_survive_coverage_guided_fuzzing(target, tmp_path):
    env = dict(os.environ, STRATA_FUZZ_CORPUS=str(tmp_path / "corpus"))
    p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_parsers.py"), target, f"-runs={RUNS}",
                        f"-seed={SEED}", "-rss_limit_mb=2048", "-timeout=10", f"-artifact_prefix={tmp_path}/"],
                       env=env, capture_output=True, text=True, timeout=600)
    report = p.stderr[-6000:]
    assert p.returncode == 0, f"{target} fuzzer (seed {SEED}) found a crash:\n{report}"
    assert f"Done {RUNS} runs" in p.stderr, report
