"""Durability: kill -9 mid-stream, torn writes in the active segment, clean and unclean restarts.

Each test runs a private broker (make_broker) over its own data directory. kill -9 keeps the page cache, so every
record the broker acknowledged must survive it; what it must also survive is whatever half-written tail the kill (or
a torn write) leaves in the active segment.
"""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from protocol.record_batch import build_batch
from rawclient import RawClient

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47


def create_topic(b, name: str, partitions: int = 1, **configs) -> None:
    with RawClient(b.bootstrap) as c:
        res = c.create_topic(name, partitions, {k.replace("_", "."): str(v) for k, v in configs.items()})
        assert res.error_code == NONE, res


def read_values(b, topic: str, partition: int = 0):
    with RawClient(b.bootstrap, timeout=30) as c:
        recs = c.read_all(topic, partition)
    assert [r.offset for r in recs] == list(range(len(recs))), "offsets are not contiguous from 0"
    return [r.value for r in recs]


def assert_clean_log(b) -> None:
    log = b.log_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 500:][:5000]


def produce_raw(b, topic: str, batches, partition: int = 0, acks: int = 1) -> list[int]:
    out = []
    with RawClient(b.bootstrap) as c:
        for recs in batches:
            p = c.produce(topic, partition, build_batch(recs), acks=acks)
            assert p.error_code == NONE, p
            out.append(p.base_offset)
    return out


def segment_files(b, topic: str, partition: int = 0) -> list[Path]:
    d = b.data_dir / "logs" / f"{topic}-{partition}"
    return sorted(d.glob("*.log"))


# ---- kill -9 while real clients produce ----------------------------------------------------------------------------

class NumberedProducer(threading.Thread):
    """Produces `<name>-<seq>` values in order; records which sequence numbers were acknowledged."""

    def __init__(self, bootstrap: str, topic: str, name: str, count: int, conf: dict):
        super().__init__(daemon=True, name=f"producer-{name}")
        self.topic, self.name, self.count = topic, name, count
        self.acked: list[int] = []
        self.failed: list[tuple[int, str]] = []
        self.lock = threading.Lock()
        self.producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "none",
                                  "linger.ms": 2, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
                                  "retry.backoff.max.ms": 500, "reconnect.backoff.ms": 50,
                                  "reconnect.backoff.max.ms": 500, "socket.timeout.ms": 10_000, **conf})
        self.done = threading.Event()

    def _cb(self, seq):
        def cb(err, msg):
            with self.lock:
                if err is None:
                    self.acked.append(seq)
                else:
                    self.failed.append((seq, str(err)))
        return cb

    def n_acked(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self):
        try:
            for seq in range(self.count):
                value = b"%s-%06d" % (self.name.encode(), seq)
                while True:
                    try:
                        self.producer.produce(self.topic, key=self.name.encode(), value=value, partition=0,
                                              on_delivery=self._cb(seq))
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                self.producer.poll(0)
                if seq % 20 == 19:
                    time.sleep(0.02)   # spread the stream over a few seconds so the kill lands mid-stream
            remaining = self.producer.flush(150)
            assert remaining == 0, f"{self.name}: {remaining} messages still undelivered"
        finally:
            self.done.set()


def _seqs(values: list[bytes], name: str) -> list[int]:
    prefix = name.encode() + b"-"
    return [int(v[len(prefix):]) for v in values if v.startswith(prefix)]


def test_kill9_while_producers_run(make_broker):
    b = make_broker()
    topic = "kill9-stream"
    create_topic(b, topic)
    n = 3000
    plain = NumberedProducer(b.bootstrap, topic, "acks1", n, {
        "acks": "1", "enable.idempotence": False, "max.in.flight.requests.per.connection": 1})
    idem = NumberedProducer(b.bootstrap, topic, "idem", n, {"acks": "all", "enable.idempotence": True})
    plain.start()
    idem.start()

    deadline = time.monotonic() + 60
    while (plain.n_acked() < 400 or idem.n_acked() < 400) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert plain.n_acked() >= 400 and idem.n_acked() >= 400, "producers made no progress before the kill"
    acked_at_kill = (plain.n_acked(), idem.n_acked())
    b.kill9()
    time.sleep(1.0)
    b.start()

    for p in (plain, idem):
        assert p.done.wait(200), f"{p.name} did not finish"
    plain.join(5)
    idem.join(5)

    values = read_values(b, topic)
    got_plain, got_idem = _seqs(values, "acks1"), _seqs(values, "idem")
    acked_plain, acked_idem = set(plain.acked), set(idem.acked)

    assert acked_at_kill[0] < n and acked_at_kill[1] < n, f"the kill did not land mid-stream: {acked_at_kill}"
    # Every acknowledged record survived.
    missing_plain = sorted(acked_plain - set(got_plain))
    missing_idem = sorted(acked_idem - set(got_idem))
    assert not missing_plain, f"acks=1: {len(missing_plain)} acknowledged records lost, e.g. {missing_plain[:10]}"
    assert not missing_idem, f"idempotent: {len(missing_idem)} acknowledged records lost, e.g. {missing_idem[:10]}"
    # Per-producer order: first occurrences in sequence order (acks=1 retries may duplicate, never reorder).
    first_plain = list(dict.fromkeys(got_plain))
    assert first_plain == sorted(first_plain), "acks=1 producer's records are out of order"
    # The idempotent producer: exactly once, in order.
    assert got_idem == sorted(set(got_idem)), (
        f"idempotent producer: duplicates or reordering "
        f"({len(got_idem)} records, {len(set(got_idem))} distinct)")
    # With retries over the restart, everything was delivered in the end.
    assert not idem.failed, f"idempotent producer delivery failures: {idem.failed[:5]}"
    assert not plain.failed, f"acks=1 producer delivery failures: {plain.failed[:5]}"
    assert got_idem == list(range(n))
    assert set(got_plain) == set(range(n))
    assert b.alive()
    assert_clean_log(b)


# ---- kill -9 then restart: next offset -----------------------------------------------------------------------------

@pytest.mark.parametrize("segment_bytes", [None, 4096], ids=["one-segment", "many-segments"])
def test_kill9_restart_serves_next_offset(make_broker, segment_bytes):
    b = make_broker()
    topic = "kill9-next"
    create_topic(b, topic, **({"segment_bytes": segment_bytes} if segment_bytes else {}))
    batches = [[(b"k", b"v-%d-%d" % (i, j) + b"x" * 100) for j in range(3)] for i in range(60)]
    bases = produce_raw(b, topic, batches)
    assert bases == [3 * i for i in range(60)]
    if segment_bytes:
        assert len(segment_files(b, topic)) > 3
    b.kill9()
    b.start()
    expected = [v for batch in batches for _, v in batch]
    assert read_values(b, topic) == expected
    [base] = produce_raw(b, topic, [[(b"k", b"after-restart")]])
    assert base == 180
    assert read_values(b, topic) == expected + [b"after-restart"]
    # A second crash right after recovery changes nothing.
    b.kill9()
    b.start()
    assert read_values(b, topic) == expected + [b"after-restart"]
    assert_clean_log(b)


# ---- torn writes ---------------------------------------------------------------------------------------------------

def _torn_random(next_offset: int) -> bytes:
    return random.Random(1234).randbytes(777)


def _torn_partial_batch(next_offset: int) -> bytes:
    full = build_batch([(b"k", b"z" * 1000)], base_offset=next_offset)
    return full[:100]


def _torn_bad_crc(next_offset: int) -> bytes:
    full = bytearray(build_batch([(b"k", b"torn" * 50)], base_offset=next_offset))
    full[-5] ^= 0x55
    return bytes(full)


def _torn_zeros(next_offset: int) -> bytes:
    return b"\x00" * 4096


def _torn_header_only(next_offset: int) -> bytes:
    return build_batch([(b"k", b"z")], base_offset=next_offset)[:30]


TORN = {"random-bytes": _torn_random, "partial-batch": _torn_partial_batch, "bad-crc-batch": _torn_bad_crc,
        "zeros": _torn_zeros, "partial-header": _torn_header_only}


@pytest.mark.parametrize("kind", sorted(TORN))
def test_torn_write_in_active_segment_is_truncated(make_broker, kind):
    b = make_broker()
    topic = "torn"
    create_topic(b, topic)
    batches = [[(b"k", b"rec-%d-%d" % (i, j)) for j in range(2)] for i in range(20)]
    produce_raw(b, topic, batches)
    expected = [v for batch in batches for _, v in batch]
    b.kill9()

    active = segment_files(b, topic)[-1]
    with open(active, "ab") as f:
        f.write(TORN[kind](len(expected)))

    b.start()
    assert read_values(b, topic) == expected
    [base] = produce_raw(b, topic, [[(b"k", b"after-torn-1")], [(b"k", b"after-torn-2")]])[:1]
    assert base == len(expected)
    assert read_values(b, topic) == expected + [b"after-torn-1", b"after-torn-2"]
    # The torn tail is gone from disk, not just hidden: a clean restart reads the same thing.
    b.restart()
    assert read_values(b, topic) == expected + [b"after-torn-1", b"after-torn-2"]
    [base] = produce_raw(b, topic, [[(b"k", b"after-restart")]])
    assert base == len(expected) + 2
    assert_clean_log(b)


# ---- restarts keep data and idempotent producer state --------------------------------------------------------------

def _idem(pid, epoch, seq, n, tag=b"i"):
    return build_batch([(b"k", b"%s-%d" % (tag, seq + i)) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


@pytest.mark.parametrize("how", ["clean", "kill9"])
def test_restart_keeps_data_and_producer_state(make_broker, how):
    b = make_broker()
    topic = "restart-state"
    create_topic(b, topic, partitions=2, retention_ms=86_400_000)
    with RawClient(b.bootstrap) as c:
        pid, epoch = c.init_producer_id(4)
        old_pid, old_epoch = c.init_producer_id(4)
        assert c.produce(topic, 0, _idem(pid, epoch, 0, 3)).base_offset == 0
        assert c.produce(topic, 0, _idem(pid, epoch, 3, 2)).base_offset == 3
        assert c.produce(topic, 1, _idem(pid, epoch, 0, 1, b"p1")).base_offset == 0
        # A producer that bumped its epoch before the restart: the old epoch must stay fenced.
        assert c.produce(topic, 1, _idem(old_pid, old_epoch, 0, 1, b"old")).base_offset == 1
        # (an idempotent producer bumps its epoch itself, KIP-360: epoch + 1 from sequence 0)
        assert c.produce(topic, 1, _idem(old_pid, old_epoch + 1, 0, 1, b"new")).base_offset == 2

    if how == "clean":
        b.restart()
    else:
        b.kill9()
        b.start()

    with RawClient(b.bootstrap) as c:
        # Retries of batches written before the restart are still recognised.
        p = c.produce(topic, 0, _idem(pid, epoch, 3, 2))
        assert p.error_code == NONE and p.base_offset == 3, p
        p = c.produce(topic, 0, _idem(pid, epoch, 0, 3))
        assert p.error_code == NONE and p.base_offset == 0, p
        p = c.produce(topic, 1, _idem(pid, epoch, 0, 1, b"p1"))
        assert p.error_code == NONE and p.base_offset == 0, p
        # The sequence continues where it left off; gaps are still detected.
        p = c.produce(topic, 0, _idem(pid, epoch, 8, 1))
        assert p.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, p
        p = c.produce(topic, 0, _idem(pid, epoch, 5, 1))
        assert p.error_code == NONE and p.base_offset == 5, p
        p = c.produce(topic, 1, _idem(old_pid, old_epoch, 1, 1, b"old"))
        assert p.error_code == INVALID_PRODUCER_EPOCH, p
        # Producer ids are never handed out twice.
        new_pid, new_epoch = c.init_producer_id(4)
        assert new_pid not in (pid, old_pid) and new_epoch == 0

    assert read_values(b, topic, 0) == [b"i-%d" % i for i in range(6)]
    assert read_values(b, topic, 1) == [b"p1-0", b"old-0", b"new-0"]
    assert_clean_log(b)


def test_clean_restart_with_kafka_python_idempotent_producer(make_broker):
    """A real idempotent client across a clean restart: nothing lost, nothing duplicated."""
    from kafka import KafkaProducer

    b = make_broker()
    topic = "restart-kafka-python"
    create_topic(b, topic)
    prod = KafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
                         retries=1000, retry_backoff_ms=100, reconnect_backoff_ms=50, request_timeout_ms=10_000,
                         max_in_flight_requests_per_connection=5)
    try:
        futures = [prod.send(topic, value=b"kp-%d" % i, partition=0) for i in range(200)]
        prod.flush(30)
        assert all(f.succeeded() for f in futures)
        b.restart()
        futures = [prod.send(topic, value=b"kp-%d" % i, partition=0) for i in range(200, 400)]
        prod.flush(60)
        errs = [f.exception for f in futures if not f.succeeded()]
        assert not errs, errs[:3]
    finally:
        prod.close(5)
    assert read_values(b, topic) == [b"kp-%d" % i for i in range(400)]
    assert_clean_log(b)
