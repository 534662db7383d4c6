"""An I/O error (ENOSPC, EIO) anywhere in a log write takes the log offline (issue 26; Kafka's
LocalLog.maybeHandleIOException and LogDirFailureChannel): the failed write is never acknowledged, every later call
answers KAFKA_STORAGE_ERROR (no append builds on a half-done one, no read serves it), the failure is reported once,
and reopening the log (after space is freed) recovers exactly what was written, with no torn batch."""
from __future__ import annotations

import errno
import gc
import os

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import build_batch, split_and_validate
from protocol.records import iter_all_records
from storage.log import leader_epoch, log_segment, offset_index, producer_state
from storage.log.io_errors import KafkaStorageError
from storage.log.log import Log
from storage.log.log_config import LogConfig

CFG = LogConfig(segment_bytes=3000, index_interval_bytes=100)


def batch(i: int) -> bytearray:
    return bytearray(build_batch([(b"k", b"value-%04d" % i + b"x" * 200)], timestamp_ms=1000 + i))


def values(log: Log) -> list[bytes]:
    return [r.value for v in log.read(log.log_start_offset, 1 << 30) for r in iter_all_records(v)]


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _partial_pwrite(real):
    """pwrite that writes half of what it is given, then fails with ENOSPC (a disk filling mid-write)."""
    state = {"done": False}

    def pwrite(fd, data, pos):
        if not state["done"]:
            state["done"] = True
            return real(fd, memoryview(data)[:len(data) // 2], pos)
        _enospc()
    return pwrite


# Each fault arms one write of the log's append/roll path; `rolls`: whether it only fires when a segment rolls.
FAULTS = {
    "fallocate": lambda mp: mp.setattr(log_segment.os, "posix_fallocate", _enospc),
    "partial-pwrite": lambda mp: mp.setattr(log_segment.os, "pwrite", _partial_pwrite(os.pwrite)),
    "fdatasync": lambda mp: mp.setattr(log_segment.os, "fdatasync",
                                       lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error"))),
    "index-at-roll": lambda mp: mp.setattr(offset_index.os, "write", _enospc),
    "producer-snapshot-at-roll": lambda mp: mp.setattr(producer_state, "write_atomically", _enospc),
    "epoch-checkpoint-at-roll": lambda mp: mp.setattr(leader_epoch, "write_atomically", _enospc),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_io_error_takes_the_log_offline_and_recovery_keeps_what_was_acknowledged(tmp_path, monkeypatch, fault):
    d = tmp_path / "t-0"
    reports = []
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=100, flush_messages=1) if fault == "fdatasync" else CFG
    log = Log(d, cfg, on_io_error=lambda path, e: reports.append((path, e.errno)))
    acked: list[bytes] = []
    for i in range(5):                    # a first segment's worth is written before the fault is armed
        buf = batch(i)
        log.append_as_leader(buf, split_and_validate(buf, 10**8), 3)
        acked.append(b"value-%04d" % i + b"x" * 200)
    # arm the fault when the next append needs it: fallocate/pwrite at once, the roll ones at the next roll
    assert log.active_segment.size
    FAULTS[fault](monkeypatch)
    failed = None
    for i in range(5, 40):
        buf = batch(i)
        try:
            log.append_as_leader(buf, split_and_validate(buf, 10**8), 3)
        except OSError as e:
            failed = e
            break
        acked.append(b"value-%04d" % i + b"x" * 200)
    monkeypatch.undo()
    assert isinstance(failed, KafkaStorageError), failed
    assert failed.error_code == ErrorCode.kafka_storage_error
    assert reports == [(d, errno.EIO if fault == "fdatasync" else errno.ENOSPC)]
    assert log.failed is not None
    # Offline from now on, even with the disk writable again: nothing builds on, or serves, a half-done write.
    buf = batch(99)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(buf, split_and_validate(buf, 10**8), 3)
    with pytest.raises(KafkaStorageError):
        log.read(0, 1 << 20)
    with pytest.raises(KafkaStorageError):
        log.roll()
    assert len(reports) == 1
    log.release()
    del log
    gc.collect()
    # Restart after an unclean stop: everything acknowledged is there; the failed batch is there whole or not at all.
    log = Log(d, cfg, clean_shutdown=False)
    got = values(log)
    assert got[:len(acked)] == acked
    assert len(got) - len(acked) in (0, 1), got[len(acked):]
    assert log.log_end_offset == len(got)
    buf = batch(100)
    assert log.append_as_leader(buf, split_and_validate(buf, 10**8), 4).base_offset == len(got)
    log.close()
    assert values(Log(d, cfg, clean_shutdown=True))[-1].startswith(b"value-0100")


# ---- the replica manager: the whole (one) log dir goes offline ------------------------------------------------------

def _replica_manager(tmp_path):
    import uuid
    from broker.config import BrokerConfig
    from metadata.image import MetadataImage
    from metadata.metadata_cache import MetadataCache
    from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
    from replication.replica_manager import ReplicaManager
    tid = uuid.UUID(int=0xD15C).hex
    records = [RegisterBrokerRecord(1, "inc-1", None, [("PLAINTEXT", "localhost", 9091)]), TopicRecord("t", tid),
               PartitionRecord(tid, 0, [1], [1], 1, 0, 0), PartitionRecord(tid, 1, [1], [1], 1, 0, 0)]
    rm = ReplicaManager(BrokerConfig({"log.dirs": str(tmp_path / "logs"), "node.id": "1"}),
                        MetadataCache(MetadataImage().apply(records)))
    rm.startup()
    offline = []
    rm.on_log_dir_offline = lambda: offline.append(rm.offline_error)
    return rm, offline


async def test_a_failed_append_takes_every_partition_of_the_dir_offline(tmp_path, monkeypatch):
    from replication.replica_manager import CLEAN_SHUTDOWN_FILE
    rm, offline = _replica_manager(tmp_path)
    p0, p1 = rm.get("t", 0), rm.get("t", 1)
    parked = p1.wait_for_high_watermark(5)                 # an acks=all produce waiting on the other partition
    monkeypatch.setattr(log_segment.os, "posix_fallocate", _enospc)
    buf = batch(0)
    with pytest.raises(KafkaStorageError):
        p0.append_records_to_leader(buf, split_and_validate(buf, 10**8), required_acks=1)
    monkeypatch.undo()
    assert len(offline) == 1 and offline[0].errno == errno.ENOSPC
    assert parked.done() and parked.result() == ErrorCode.kafka_storage_error
    buf = batch(1)
    with pytest.raises(KafkaStorageError):                 # the other partition of the dir is offline too
        p1.append_records_to_leader(buf, split_and_validate(buf, 10**8), required_acks=1)
    with pytest.raises(KafkaStorageError):
        p1.read(0, 1 << 20, min_one_message=True)
    rm.shutdown()                                          # writes nothing to the failed dir, no clean marker
    assert not (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()


def test_a_failed_high_watermark_checkpoint_takes_the_dir_offline(tmp_path, monkeypatch):
    from replication import replica_manager
    rm, offline = _replica_manager(tmp_path)
    p0 = rm.get("t", 0)
    buf = batch(0)
    p0.append_records_to_leader(buf, split_and_validate(buf, 10**8), required_acks=1)
    monkeypatch.setattr(replica_manager, "write_offsets", _enospc)
    rm.checkpoint_high_watermarks()                        # the periodic task: no exception, the dir goes offline
    assert len(offline) == 1
    with pytest.raises(KafkaStorageError):
        p0.read(0, 1 << 20, min_one_message=True)
    rm.shutdown()


# ---- shutdown and the shutdown window after a failure ----------------------------------------------------------------

def _topic_image(name: str, n: int = 1):
    """A topic assigned to broker 1 (what a metadata delta hands apply_topic)."""
    import uuid
    from metadata.image import MetadataImage
    from metadata.metadata_cache import MetadataCache
    from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
    tid = uuid.UUID(int=0xBEEF).hex
    records = [RegisterBrokerRecord(1, "inc-1", None, [("PLAINTEXT", "localhost", 9091)]), TopicRecord(name, tid)]
    records += [PartitionRecord(tid, p, [1], [1], 1, 0, 0) for p in range(n)]
    return MetadataCache(MetadataImage().apply(records)).get(name)


def _fail_nth_call(n: int):
    """A write_atomically that fails with ENOSPC on its n-th call (0-based) only."""
    from storage.log import files
    calls = {"n": 0}

    def write_atomically(*a, **k):
        i = calls["n"]
        calls["n"] += 1
        if i == n:
            _enospc()
        return files.write_atomically(*a, **k)
    return write_atomically


@pytest.mark.parametrize("failing", [0, 1])
def test_an_io_error_closing_a_log_does_not_abort_the_shutdown(tmp_path, monkeypatch, failing):
    """Log.close() (producer snapshot) fails with ENOSPC for one log: shutdown() goes on releasing the others,
    raises nothing, and writes no clean-shutdown marker; the next start recovers everything acknowledged."""
    from replication.replica_manager import CLEAN_SHUTDOWN_FILE
    rm, offline = _replica_manager(tmp_path)
    parts = [rm.get("t", 0), rm.get("t", 1)]
    for i, part in enumerate(parts):
        buf = batch(i)
        part.append_records_to_leader(buf, split_and_validate(buf, 10**8), required_acks=1)
    monkeypatch.setattr(producer_state, "write_atomically", _fail_nth_call(failing))
    rm.shutdown()                                          # before: KafkaStorageError escaped, t-1 never closed
    monkeypatch.undo()
    assert len(offline) == 1 and offline[0].errno == errno.ENOSPC
    assert not (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()
    for part in parts:
        assert part.closed and part.log._closed
        assert all(seg._fd is None and seg._mm is None for seg in part.log.segments())
    del parts, part
    gc.collect()
    for i in range(2):
        assert values(Log(tmp_path / "logs" / f"t-{i}", CFG, clean_shutdown=False)) == [b"value-%04d" % i + b"x" * 200]


def test_a_failed_final_high_watermark_checkpoint_writes_no_clean_marker(tmp_path, monkeypatch):
    from replication import replica_manager
    from replication.replica_manager import CLEAN_SHUTDOWN_FILE
    rm, offline = _replica_manager(tmp_path)
    buf = batch(0)
    rm.get("t", 0).append_records_to_leader(buf, split_and_validate(buf, 10**8), required_acks=1)
    monkeypatch.setattr(replica_manager, "write_offsets", _enospc)
    rm.shutdown()                                          # the logs close, then the checkpoint fails
    assert len(offline) == 1
    assert not (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()


def _take_the_dir_offline(rm, monkeypatch):
    monkeypatch.setattr(log_segment.os, "posix_fallocate", _enospc)
    buf = batch(0)
    with pytest.raises(KafkaStorageError):
        rm.get("t", 0).append_records_to_leader(buf, split_and_validate(buf, 10**8), required_acks=1)
    monkeypatch.undo()


def test_a_partition_assigned_after_the_dir_failed_is_offline_and_nothing_is_created(tmp_path, monkeypatch):
    """Between the failure and the exit a metadata delta assigns a new partition here: Kafka picks only live log
    dirs, so with none left the partition is offline (KAFKA_STORAGE_ERROR) and nothing is written to the dir."""
    from replication.replica_manager import CLEAN_SHUTDOWN_FILE
    rm, offline = _replica_manager(tmp_path)
    _take_the_dir_offline(rm, monkeypatch)
    before = sorted(p.name for p in (tmp_path / "logs").iterdir())
    u = _topic_image("u", 2)
    rm.apply_topic(u, None)
    rm.apply_topic(u, None)                                # a later delta: still offline, still nothing created
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == before
    assert rm.get("u", 0) is None and rm.get("u", 1) is None
    assert rm.missing_error("u", 0) == rm.missing_error("u", 1) == ErrorCode.kafka_storage_error
    assert len(offline) == 1
    rm.shutdown()
    assert not (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()


def test_an_io_error_creating_a_log_takes_the_dir_offline(tmp_path, monkeypatch):
    """Creating a new partition's log fails (ENOSPC on its first segment): the dir goes offline, as for any other
    log write, instead of the error escaping the metadata delta."""
    from storage.log import log as log_module
    rm, offline = _replica_manager(tmp_path)
    monkeypatch.setattr(log_module.LogSegment, "create", _enospc)
    rm.apply_topic(_topic_image("u"), None)                # before: OSError out of apply_topic, dir still online
    monkeypatch.undo()
    assert len(offline) == 1 and offline[0].errno == errno.ENOSPC
    assert rm.get("u", 0) is None
    assert rm.missing_error("u", 0) == ErrorCode.kafka_storage_error
    with pytest.raises(KafkaStorageError):                 # the other partitions of the dir are offline too
        rm.get("t", 0).read(0, 1 << 20, min_one_message=True)
    rm.shutdown()


def test_an_io_error_closing_a_partitions_wal_writes_no_clean_marker(tmp_path):
    """An OSError while closing that the log does not report (the partition's WAL state): that log was not closed,
    so the next start must recover it: no clean-shutdown marker."""
    from replication.replica_manager import CLEAN_SHUTDOWN_FILE

    class FailingWal:
        def close(self):
            raise OSError(5, "Input/output error")

    rm, _ = _replica_manager(tmp_path)
    rm.get("t", 0).wal = FailingWal()
    rm.shutdown()
    assert not (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()
