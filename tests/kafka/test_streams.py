"""A Kafka Streams application (tests/kafka/java/WordCount.java: split lines into words, group by word through a
repartition topic, count() in a RocksDB store backed by a changelog topic, counts to an output topic; at_least_once,
internal topics with three replicas) on three brokers, one of them (the app's group coordinator, when it leads a
changelog or repartition partition) killed with SIGKILL while the app processes, and restarted. Each word's latest
count on the output topic (what compaction keeps) ends exactly at the number of times it occurs in the text
produced (acks=all, idempotent).

at_least_once allows a record to be counted twice when a task is re-processed from its last commit (a task migrated
or corrupted: a fenced group member, a failed commit). A broker failover alone causes neither on Apache Kafka (its
clients retry; the idempotent producer keeps the repartition and changelog writes single): the same scenario runs on
three Apache Kafka brokers and gives the exact counts, which is what makes the exact assertion fair on Strata."""
from __future__ import annotations

import random
import re
import struct
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource

from tests.kafka.failover import Lines, admin, create_topics, leader, partitions, three_brokers, wait_for_isr

VOCABULARY = ("kafka strata broker replica leader follower partition offset record batch topic stream table "
              "count word state store commit fetch produce consume group member epoch fence").split()
LINES_PER_PART = 400


def text(seed: int, lines: int) -> list[str]:
    """Lines of words in mixed case with punctuation between them (the app lower-cases, splits on non-word chars)."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(VOCABULARY) for _ in range(rng.randint(1, 12))]
        words = [w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.1 else w for w in words]
        out.append("".join(w + rng.choice([" ", ", ", "; ", " - ", "  "]) for w in words).strip() +
                   rng.choice(["", ".", "!"]))
    return out


def word_counts(lines: list[str]) -> Counter:
    return Counter(w for line in lines for w in re.split(r"\W+", line.lower()) if w)


class TextProducer:
    """Lines to the source topic with acks=all and idempotence; `send` returns once all are acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.errors: list = []
        self.acked = 0
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": 120000})
        self._n = 0

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.errors.append(err)

    def send(self, lines: list[str], pause_every: int = 0, pause: float = 0.0) -> None:
        for i, line in enumerate(lines, start=1):
            self._p.produce(self.topic, line.encode(), str(self._n).encode(), on_delivery=self._done)
            self._n += 1
            self._p.poll(0)
            if pause_every and i % pause_every == 0:
                time.sleep(pause)                       # (poll(timeout) returns at the first acknowledgement)
        assert self._p.flush(180) == 0, "lines still unacknowledged after 180 s"
        assert self.errors == [], self.errors[:5]
        assert self.acked == self._n


class OutputCounts:
    """Reads the output topic from the start (all its partitions assigned) into each word's latest count."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted"):
        self.latest: dict[str, int] = {}
        self.regressed: list = []                       # a word's count going down: never, even at-least-once
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                            "enable.auto.commit": False, "isolation.level": isolation})
        self._c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(500, 0.5):
                if m.error():
                    continue
                word, count = m.key().decode(), struct.unpack(">q", m.value())[0]
                if count < self.latest.get(word, 0):
                    self.regressed.append((word, self.latest[word], count))
                self.latest[word] = count
        self._c.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def wait_for(self, expected: Counter, final: Counter, app: Lines, timeout: float = 180) -> None:
        """Until the latest counts are `expected`; a count past `final` (a word counted twice) fails at once."""
        deadline = time.monotonic() + timeout
        while True:
            latest = dict(self.latest)
            if latest == dict(expected):
                return
            over = {w: (n, final[w]) for w, n in latest.items() if n > final[w]}
            assert not over, f"counted twice: (count, final count) {over}\n{app.tail()}"
            if time.monotonic() > deadline or app.proc.poll() is not None:
                diff = {w: (latest.get(w), n) for w, n in expected.items() if latest.get(w) != n}
                raise AssertionError(f"counts not reached in {timeout}s: (latest, expected) {diff}\n{app.tail()}")
            time.sleep(0.2)


def topic_config(cluster, topic: str) -> dict[str, str]:
    client = admin(cluster)
    (f,) = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {k: v.value for k, v in f.result(timeout=30).items()}


def app_states(app: Lines) -> list[str]:
    return [e for e in list(app.events) if isinstance(e, str) and e.startswith("STATE")]


def group_coordinator(cluster, group: str) -> int:
    client = admin(cluster)
    return client.describe_consumer_groups([group])[group].result(timeout=30).coordinator.id


def _catch(failed: list, fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as e:                  # an assertion in a thread: reported by the test
        failed.append(e)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("guarantee", ["at_least_once", pytest.param("exactly_once_v2", marks=pytest.mark.slow)])
@pytest.mark.parametrize("system", ["strata", pytest.param("kafka", marks=pytest.mark.slow)])
def test_word_count_exact_after_broker_kill9(kafka_jars, system, guarantee, tmp_path, topic_name):
    """With exactly_once_v2 the app reads, writes and commits in transactions (its producer's transactional id per
    thread, offsets committed with sendOffsetsToTransaction) and the output is read with read_committed."""
    source, output, app_id = f"{topic_name}-text", f"{topic_name}-counts", f"{topic_name}-app"
    changelog, repartition = f"{app_id}-counts-changelog", f"{app_id}-words-repartition"
    parts = [text(seed, LINES_PER_PART) for seed in (1, 2, 3)]
    expected = [word_counts(sum(parts[:i + 1], [])) for i in range(3)]
    victim = coordinator = led = None
    before_kill = 0
    with three_brokers(system, tmp_path) as cluster:
        create_topics(cluster, {source: 3, output: 3}, {"min.insync.replicas": "2"})
        producer = TextProducer(cluster.bootstrap, source)
        producer.send(parts[0])
        app = Lines(tmp_path / "wordcount.stderr", "WordCount.java", cluster.bootstrap, app_id, source, output,
                    str(tmp_path / "state"), guarantee)
        counts = OutputCounts(cluster.bootstrap, output, 3,
                              "read_committed" if guarantee == "exactly_once_v2" else "read_uncommitted")
        try:
            # Up: internal topics created (three replicas, as the app asked), the first part counted.
            counts.wait_for(expected[0], expected[2], app)
            wait_for_isr(cluster, [changelog, repartition])
            for t in (changelog, repartition):
                assert [len(p.replicas) for p in partitions(cluster, t).values()] == [3, 3, 3], t
            config = topic_config(cluster, changelog)
            assert (config["cleanup.policy"], config["min.insync.replicas"]) == ("compact", "2")

            # Killed while the app is busy with the second part: the app's group coordinator if it leads a changelog
            # or repartition partition (commits and the store's writes both fail over), else changelog-0's leader.
            coordinator = group_coordinator(cluster, app_id)
            led = {t: [i for i in range(3) if leader(cluster, t, i) == coordinator] for t in (changelog, repartition)}
            victim = coordinator if any(led.values()) else leader(cluster, changelog, 0)
            failed = []
            sender = threading.Thread(target=lambda: _catch(failed, producer.send, parts[1], 10, 0.1))
            sender.start()                                          # about 4 s of lines
            time.sleep(1)
            before_kill = len(app_states(app))
            cluster.brokers[victim].kill9()
            sender.join()
            assert failed == [], failed
            counts.wait_for(expected[1], expected[2], app)          # processing goes on on two brokers
            cluster.brokers[victim].start()
            wait_for_isr(cluster, [source, output, changelog, repartition])
            producer.send(parts[2])
            counts.wait_for(expected[2], expected[2], app)
            assert counts.regressed == []
        finally:
            rc = app.stop()
            counts.close()
        states = app_states(app)
        print(f"{system}: killed broker {victim} (group coordinator {coordinator}, it led {led}); app states "
              f"before the kill {states[:before_kill]}, after {states[before_kill:]}")
        assert "CLOSED" in app.events and not any("ERROR" in s for s in states), (rc, app.tail())
