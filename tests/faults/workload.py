"""A workload that only records: idempotent acks=all producers and read_uncommitted consumers (confluent-kafka) write
every send, acknowledgement and read into a History, and tests/faults/checker.py judges it afterwards.

Why this shape: each producer owns its partitions (one idempotent session per partition, so send order must be
offset order) and sends sequential unique values, paced and with a bounded number in flight so a 10-minute run stays
a history of manageable size. Consumers assign every partition from the beginning with auto.offset.reset=earliest,
so they never skip an offset (the checker's `lost` without a final read relies on it). After the faults are healed a
final reader reads each partition from its low to its high watermark: that is the committed log."""
from __future__ import annotations

import random
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .history import History


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "backslashreplace")


class _Worker(threading.Thread):
    """A daemon thread that keeps the exception that ended it, so run() can raise it in the test's thread."""

    def __init__(self, name: str):
        super().__init__(name=name, daemon=True)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:          # noqa: BLE001 - reported by run()
            self.error = e

    def work(self) -> None:
        raise NotImplementedError


class ProducerWorker(_Worker):
    """Sends `proc/seq` values round-robin to its partitions at `rate` per second, at most `max_in_flight` unanswered.
    A fatal producer error (the idempotent session is over) is recorded and a new producer, a new process with its
    own sequence, takes over: ordering is only promised within one session."""

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: list[int], history: History, rate: float,
                 max_in_flight: int, conf: dict, seed):
        super().__init__(f"p{index}")
        self.index, self.bootstrap, self.topic, self.partitions = index, bootstrap, topic, partitions
        self.history, self.rate, self.max_in_flight, self.conf = history, rate, max_in_flight, conf
        self.rng = random.Random(f"{seed}/p{index}")
        self.generation = 0
        self.in_flight: dict[str, int] = {}           # value -> partition
        self._fatal: KafkaError | None = None
        self._new_producer()

    def _new_producer(self) -> None:
        self.proc = f"p{self.index}" if self.generation == 0 else f"p{self.index}.{self.generation}"
        self.seq = 0
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 30000, "request.timeout.ms": 10000,
                                  "error_cb": self._error, **self.conf})

    def _error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err

    def _delivered(self, err: KafkaError | None, msg) -> None:
        v = _text(msg.value())
        p = self.in_flight.pop(v, msg.partition())
        proc = v.rsplit("/", 1)[0]
        if err is None:
            self.history.ok(proc, "send", value=v, partition=p, offset=msg.offset())
        else:                 # timed out, purged or fatal: librdkafka may have written it (possibly persisted)
            self.history.info(proc, "send", value=v, partition=p, error=err.name())

    def _send(self) -> None:
        p = self.partitions[self.seq % len(self.partitions)]
        v = f"{self.proc}/{self.seq}"
        self.history.invoke(self.proc, "send", value=v, key=self.proc, partition=p, seq=self.seq)
        self.seq += 1
        try:
            self.producer.produce(self.topic, value=v.encode(), key=self.proc.encode(), partition=p,
                                  on_delivery=self._delivered)
            self.in_flight[v] = p
        except (BufferError, KafkaException) as e:      # never enqueued: definitely not written
            self.history.fail(self.proc, "send", value=v, partition=p, error=repr(e))

    def work(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic() + self.rng.uniform(0, interval)
        while not self.stop_event.is_set():
            if self._fatal is not None:
                self._replace()
                continue
            now = time.monotonic()
            if len(self.in_flight) >= self.max_in_flight or now < next_at:
                self.producer.poll(min(0.05, max(0.0, next_at - now)))
                continue
            self._send()
            next_at = max(next_at + interval, now - 1.0)     # catch up after a stall, but not in a burst
            self.producer.poll(0)

    def _replace(self) -> None:
        err, self._fatal = self._fatal, None
        self.history.info(self.proc, "fatal", error=f"{err.name()}: {err.str()}")
        self._finish(5)
        self.generation += 1
        self._new_producer()

    def _finish(self, timeout: float) -> None:
        """Flush what is in flight; what is still unanswered after `timeout` is purged (and reported as info)."""
        self.producer.flush(timeout)
        self.producer.purge()
        self.producer.flush(5)
        for v, p in list(self.in_flight.items()):            # no delivery report at all: indeterminate
            self.history.info(v.rsplit("/", 1)[0], "send", value=v, partition=p, error="no delivery report")
        self.in_flight.clear()

    def close(self, timeout: float) -> None:
        self.stop_event.set()
        self.join()
        self._finish(timeout)
        self.producer = None             # librdkafka's handle goes now, not when the test's brokers are stopping


class ConsumerWorker(_Worker):
    """Reads every partition from the beginning, recording each record with the high watermark it had cached."""

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int, history: History,
                 process: str | None = None):
        super().__init__(process or f"c{index}")
        self.topic, self.history, self.process = topic, history, process or f"c{index}"
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"faults-{self.process}-{time.time_ns()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_uncommitted", "enable.partition.eof": False})
        self.tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        self.consumer.assign(self.tps)
        self.next_offset: dict[int, int] = {}
        self.last_read = time.monotonic()
        self.errors = 0

    def poll_once(self, timeout: float = 0.2) -> int:
        msgs = self.consumer.consume(500, timeout)
        hws: dict[int, int] = {}
        for m in msgs:
            if m.error() is not None:
                self.errors += 1
                if self.errors <= 100:               # a fault makes many; the first ones say what happened
                    self.history.info(self.process, "consumer-error", error=m.error().name())
                continue
            p = m.partition()
            if p not in hws:
                hws[p] = self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)[1]
            self.history.ok(self.process, "read", partition=p, offset=m.offset(), value=_text(m.value()),
                            hw=hws[p] if hws[p] is not None and hws[p] >= 0 else -1)
            self.next_offset[p] = m.offset() + 1
            self.last_read = time.monotonic()
        return len(msgs)

    def work(self) -> None:
        while not self.stop_event.is_set():
            self.poll_once()

    def close(self) -> None:
        self.stop_event.set()
        self.join()
        self.consumer.close()


def final_read(bootstrap: str, topic: str, partitions: int, history: History, timeout: float = 60) -> None:
    """Read every partition from its low to its high watermark as process "final", then one `final` op per
    partition: ok when it reached the high watermark (complete), info when it did not."""
    reader = ConsumerWorker(0, bootstrap, topic, partitions, history, process="final")
    deadline = time.monotonic() + timeout
    marks: dict[int, tuple[int, int]] = {}
    try:
        for p in range(partitions):
            while p not in marks:
                try:
                    marks[p] = reader.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

        def behind() -> list[int]:
            return [p for p, (low, hw) in marks.items() if reader.next_offset.get(p, low) < hw]
        while behind() and time.monotonic() < deadline:
            reader.poll_once(0.5)
    finally:
        reader.consumer.close()
    for p, (low, hw) in sorted(marks.items()):
        reached = reader.next_offset.get(p, low)
        history.append("final", "ok" if reached >= hw else "info", "final", partition=p, low=low, hw=hw,
                       reached=reached)


def partition_count(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-metadata"})
    try:
        return len(c.list_topics(topic, timeout=30).topics[topic].partitions)
    finally:
        c.close()


def run(bootstrap: str, topic: str, duration: float, seed, *, producers: int = 2, consumers: int = 2,
        rate: float = 100.0, max_in_flight: int = 200, nemesis=None, settle=None, history: History | None = None,
        producer_conf: dict | None = None, drain_timeout: float = 60) -> History:
    """Run the workload on `topic` (existing) for `duration` seconds and return its history.

    `nemesis` (tests/faults/nemesis.py) runs meanwhile and is stopped, every fault healed, before the producers are
    flushed; then `settle()` (e.g. wait for a full ISR), the consumers read until quiet, and the final read."""
    history = history if history is not None else History()
    n = partition_count(bootstrap, topic)
    owners = [[p for p in range(n) if p % producers == i] for i in range(min(producers, n))]
    prods = [ProducerWorker(i, bootstrap, topic, parts, history, rate, max_in_flight, producer_conf or {}, seed)
             for i, parts in enumerate(owners)]
    cons = [ConsumerWorker(i, bootstrap, topic, n, history) for i in range(consumers)]
    workers = prods + cons
    try:
        for w in workers:
            w.start()
        if nemesis is not None:
            nemesis.start(history)
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline and all(w.is_alive() for w in workers):
            time.sleep(0.2)
    finally:
        if nemesis is not None:
            nemesis.stop()                      # heals every fault, even when a worker failed
    if settle is not None:
        try:
            settle()
        except Exception as e:        # noqa: BLE001 - the history is still worth checking; the final read says more
            history.info("workload", "settle", error=repr(e)[:500])
    for w in prods:
        w.close(drain_timeout)
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 20 and time.monotonic() - max((c.last_read for c in cons), default=0) < 2:
        time.sleep(0.2)
    for w in cons:
        w.close()
    for w in workers:
        if w.error is not None:
            raise RuntimeError(f"workload thread {w.name} failed") from w.error
    final_read(bootstrap, topic, n, history, timeout=drain_timeout)
    if nemesis is not None:
        nemesis.raise_errors()
    return history


def run_and_judge(cluster, topic: str, partitions: int, faults: dict, tmp_path, *, duration: float, seed,
                  quiet: tuple[float, float], length: tuple[float, float], rate: float, settle_timeout: float):
    """The workload on `cluster`'s `topic` under a Nemesis of `faults`, each fault followed by a full ISR again;
    the history saved as tmp_path/history.jsonl and judged by the checker, which must find no anomaly."""
    from .checker import check
    from .nemesis import Nemesis

    def settle() -> None:           # every replica back in the ISR before the next fault
        for p in range(partitions):
            cluster.wait_for_isr(topic, 3, p, timeout=settle_timeout)
    nemesis = Nemesis(faults, sorted(cluster.brokers), seed, quiet=quiet, length=length, settle=settle)
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())      # all of them, alive or not
    history = run(bootstrap, topic, duration, nemesis.seed, nemesis=nemesis, settle=settle, rate=rate)
    path = history.dump(tmp_path / "history.jsonl")
    report = check(history)
    print(report.summary(examples=5))
    print(f"seed {nemesis.seed}; faults {[(s.kind, s.target, s.length) for s in nemesis.done]}; history {path}")
    assert report.stats.get("faults", 0) >= 1, "the nemesis applied no fault"
    assert report.stats.get("sends_ok", 0) > 0, "nothing was acknowledged"
    assert report.stats["partitions_complete"] == partitions, "a final read did not reach the high watermark"
    assert report.ok, f"seed {nemesis.seed}: {report.summary(examples=10)}\nhistory saved in {path}"
    return report
