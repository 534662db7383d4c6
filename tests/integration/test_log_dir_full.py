"""A log directory that fills up (issue 26): a real broker with log.dirs on a small tmpfs.

Kafka fails the log dir on the I/O error (LogDirFailureChannel): its partitions answer KAFKA_STORAGE_ERROR and, the
dir being the broker's only one, the broker halts. Strata does the same (docs/operations.md, "A full log
directory"): the failed write is never acknowledged, nothing acknowledged is lost, and after the space is freed the
restarted broker recovers its log with no corrupt segment.
"""
from __future__ import annotations

import subprocess
import time

import pytest

from protocol.record_batch import build_batch
from rawclient import RawClient
from tests.conftest import BrokerProcess, small_tmpfs_at

pytestmark = [pytest.mark.integration]

KAFKA_STORAGE_ERROR = 56


@pytest.fixture
def small_tmpfs(tmp_path):
    """data_dir/logs on a 4 MiB tmpfs (broker.log stays outside it)."""
    with small_tmpfs_at(tmp_path / "b" / "logs") as logs:
        yield logs


def _fill(b: BrokerProcess, topic: str, acks: int) -> tuple[dict[int, bytes], list[int]]:
    """Produce 20 KB batches until the broker refuses one; -> ({offset: value} acknowledged, error codes seen)."""
    acked: dict[int, bytes] = {}
    errors: list[int] = []
    with RawClient(b.bootstrap, timeout=15) as c:
        for i in range(2000):
            value = (b"%06d" % i) * 3400
            try:
                p = c.produce(topic, 0, build_batch([(None, value)]), acks=acks)
            except (OSError, ConnectionError, AssertionError):
                break
            if p.error_code:
                errors.append(p.error_code)
                break
            acked[p.base_offset] = value
    return acked, errors


def _wait_exit(b: BrokerProcess, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = b.proc.poll()
        if rc is not None:
            return rc
        time.sleep(0.1)
    return None


def test_full_log_dir_fails_the_write_and_halts_the_broker(small_tmpfs, topic_name):
    b = BrokerProcess(small_tmpfs.parent, {"log.segment.bytes": "1048576"}).start()
    try:
        with RawClient(b.bootstrap) as c:
            assert c.create_topic(topic_name, 1).error_code == 0
        acked, errors = _fill(b, topic_name, acks=1)
        assert len(acked) > 20, "the tmpfs filled before anything was written"
        assert errors == [KAFKA_STORAGE_ERROR], errors
        rc = _wait_exit(b, 30)
        text = b.log_text()
        assert rc is not None, "the broker kept running on a failed log dir:\n" + text[-3000:]
        assert rc != 0
        assert "Traceback" not in text, text[text.index("Traceback") - 500:][:5000]
        assert "offline" in text
        b.proc = None
        b._log.close()
        assert not (small_tmpfs / ".kafka_cleanshutdown").exists(), "a failed log dir was marked clean"
        # Space freed: the restarted broker recovers the log; every acknowledged record is there, in place.
        subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)
        b.start()
        with RawClient(b.bootstrap, timeout=30) as c:
            recs = c.read_all(topic_name)
            assert [r.offset for r in recs] == list(range(len(recs)))
            got = {r.offset: r.value for r in recs}
            for offset, value in acked.items():
                assert got.get(offset) == value, f"acknowledged offset {offset} lost or changed"
            p = c.produce(topic_name, 0, build_batch([(None, b"after")]), acks=-1)
            assert p.error_code == 0 and p.base_offset == len(recs)
        text = b.log_text()
        assert "Traceback" not in text, text[text.index("Traceback") - 500:][:5000]
    finally:
        b.stop()
