"""librdkafka's own transaction tests (issue 24) against a three-broker Strata cluster.

librdkafka 2.8.0's test-runner (tests/librdkafka_suite.py downloads Debian's pinned copy of the release and builds it
once under .cache/librdkafka/) runs each test with TESTS=<number>; the runner's exit status must be 0 and every
test it names must be in its closing table as PASSED (a skip inside the runner fails here: nothing passes silently).
The whole suite skips only when the source cannot be downloaded, and 0098 when Apache Kafka's jars cannot be
resolved (it runs Kafka's Java producer, tests/java/TransactionProducerCli, as librdkafka's own CI does).

What each exercises (none of them uses librdkafka's in-process mock cluster; 0103_transactions_local, which TESTS=0103
also selects, talks to no broker at all):
- 0098 consumer_txn: read_committed/read_uncommitted consumers over transactions from the Java producer and from
  librdkafka's, interleaved with non-transactional producers, across partitions, split over message sets, one left
  open (LSO three below the high watermark in the consumer's statistics); topics of replication factor 3.
- 0103 transactions: misuse (INVALID_TRANSACTION_TIMEOUT, repeated init_transactions), commit/abort with and
  without lz4, a consume-transform-produce loop with send_offsets_to_transaction and committed() after recreating
  the consumer, fencing (a second producer's InitProducerId), UNKNOWN_PRODUCER_ID after DeleteRecords and its KIP-360
  recovery, empty transactions with and without offsets, watermarks per isolation level, the committed offset after
  an aborted transaction's control record; replication factor 3.
- 0129 fetch_aborted_msgs: an aborted transaction across small segments (segment.bytes=20000) read to EOF.
- 0137 barrier_batch_consume: batch consume with seek/pause/resume/store_offset, and control records skipped with the
  committed offset past them.
- 0061 consumer_lag: consumer_lag in the statistics with and without aborted transactions at the end of the log.
"""
from __future__ import annotations

import pytest

from tests import librdkafka_suite as suite

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1200)]

# TESTS=<number> runs every test whose name starts with it; these must all be in the runner's table as PASSED.
EXPECTED = {
    "0098": ["0098_consumer_txn"],
    "0103": ["0103_transactions_local", "0103_transactions"],
    "0129": ["0129_fetch_aborted_msgs"],
    "0137": ["0137_barrier_batch_consume"],
    "0061": ["0061_consumer_lag"],
}


@pytest.fixture(scope="module")
def test_runner():
    try:
        return suite.build()
    except suite.DownloadError as e:
        pytest.skip(f"librdkafka's source could not be downloaded: {e}")


@pytest.fixture(scope="module")
def java_helpers(test_runner, kafka_jars):
    """tests/java compiled against Kafka's jars, and the KAFKA_PATH stand-in that runs them (0098)."""
    suite.build_java_helpers()


def _run_and_check(number: str, strata_cluster, tmp_path) -> None:
    res = suite.run(number, strata_cluster.bootstrap, tmp_path, timeout=1080)
    print(res.plain)                           # shown by pytest when the test fails
    status = res.summary()
    wrong = {name: status.get(name, "missing") for name in EXPECTED[number] if status.get(name) != "PASSED"}
    assert res.returncode == 0 and not wrong, (
        f"librdkafka test {number}: test-runner exit {res.returncode} after {res.seconds:.0f}s, "
        f"not passed: {wrong or '-'}\n{res.failures()[-6000:]}\n--- last lines\n"
        + "\n".join([line for line in res.plain.splitlines() if "test(s) running" not in line][-40:]))


@pytest.mark.parametrize("number", ["0103", "0129", "0137", "0061"])
def test_librdkafka(number, test_runner, strata_cluster, tmp_path):
    _run_and_check(number, strata_cluster, tmp_path)


def test_librdkafka_0098_consumer_txn(test_runner, java_helpers, strata_cluster, tmp_path):
    _run_and_check("0098", strata_cluster, tmp_path)
