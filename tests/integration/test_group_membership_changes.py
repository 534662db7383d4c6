"""Group membership changes while records flow, against a real Strata broker with real clients: a member JOINS a
running group mid-stream and partitions move without overlap or gap, then a member CRASHES (a separate Python process
killed with SIGKILL, so it sends no LeaveGroup) and the survivors take over its partitions once its session expires.

Delivery is checked as Kafka's at-least-once contract: every produced offset is consumed by the group, the new owner
of a crashed member's partition resumes exactly at that partition's committed offset, so the only records consumed
twice are the crashed member's uncommitted ones, and the offsets committed at the end cover everything produced.
Members commit what they consumed when partitions are revoked (the usual on_revoke pattern), so a clean rebalance
(the join) duplicates nothing. The crashing member commits once, after its first records, and then keeps consuming
without committing, so it always dies holding uncommitted records.

Covered: confluent-kafka with group.protocol=classic (client-side range assignor, eager rebalances) and with
group.protocol=consumer (KIP-848, server-side assignor, incremental reconciliation), and kafka-python.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

try:
    from .helpers import admin_client, consumer, create_topic, producer, records
    from .test_groups import FAST, assert_exact_partition_split, balanced
except ImportError:  # tests/integration is not a package
    from helpers import admin_client, consumer, create_topic, producer, records
    from test_groups import FAST, assert_exact_partition_split, balanced

from broker.handlers import load_handlers
from conftest import BrokerProcess

pytestmark = pytest.mark.integration

# Classic clients ask for this session timeout (the broker's group.min.session.timeout.ms is 6000); KIP-848 sessions
# are set broker-side by group.consumer.session.timeout.ms.
SESSION_TIMEOUT_MS = 6000
KAFKA_PYTHON_CONF = {"enable_auto_commit": False, "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100,
                     "heartbeat_interval_ms": 300, "session_timeout_ms": SESSION_TIMEOUT_MS}


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("membership-broker"),
                      {"group.initial.rebalance.delay.ms": "300",
                       "group.consumer.heartbeat.interval.ms": "300",
                       "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                       "offsets.topic.num.partitions": "10"})
    b.start()
    yield b
    rc = b.stop()
    assert rc == 0, f"broker exited with {rc}:\n{b.log_text()[-3000:]}"
    assert "Traceback" not in b.log_text(), b.log_text()[-5000:]


# ---- the stream of records ---------------------------------------------------------------------------------------
class Stream:
    """Produces `per_tick` records round-robin over all partitions on every tick() while active; remembers the
    offset of every delivered record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, per_tick: int):
        self.p = producer(bootstrap)
        self.topic, self.partitions, self.per_tick = topic, partitions, per_tick
        self.offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.errors: list = []
        self.active = True
        self.sent = 0

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.offsets[msg.partition()].append(msg.offset())

    def tick(self) -> None:
        if self.active:
            for _ in range(self.per_tick):
                part = self.sent % self.partitions
                self.p.produce(self.topic, value=f"{part}-{self.sent}".encode(), partition=part,
                               on_delivery=self._delivered)
                self.sent += 1
        self.p.poll(0)

    def stop(self) -> dict[int, int]:
        """Stop producing; return {partition: end offset}. The topic is fresh, so offsets are 0..end-1."""
        self.active = False
        assert self.p.flush(30) == 0, "records still queued after 30s"
        assert not self.errors, f"delivery failed: {self.errors[:5]}"
        for p, offs in self.offsets.items():
            assert sorted(offs) == list(range(len(offs))), f"partition {p}: delivered offsets are not 0..n-1"
        return {p: len(offs) for p, offs in self.offsets.items()}


# ---- in-process members ------------------------------------------------------------------------------------------
class ConfluentMember:
    """confluent-kafka group member that commits its consumed offsets when partitions are revoked."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str):
        conf = {"group.id": group, "group.protocol": protocol, "enable.auto.offset.store": True}
        if protocol == "classic":
            conf.update(FAST)
        self.c = consumer(bootstrap, **conf)
        self.records: list[tuple[int, int]] = []
        self.lost: list = []
        self.c.subscribe([topic], on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _on_revoke(self, c, parts) -> None:
        if parts:
            self.commit()

    def _on_lost(self, c, parts) -> None:
        self.lost.append(sorted(tp.partition for tp in parts))

    def commit(self) -> None:
        try:
            self.c.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:   # nothing consumed since the last commit
                raise

    def poll(self) -> None:
        for m in records(self.c.consume(num_messages=500, timeout=0.02)):
            self.records.append((m.partition(), m.offset()))

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}

    def close(self) -> None:
        self.c.close()


class KafkaPythonMember:
    """kafka-python group member; commits on revoke. kafka-python 3 runs rebalance listeners on its IO loop, where a
    blocking commit() is refused, so the listener is the async kind and awaits commit_async()."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        from kafka import AsyncConsumerRebalanceListener, KafkaConsumer

        member = self

        class CommitOnRevoke(AsyncConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                if revoked:
                    await member.c.commit_async()

            async def on_partitions_assigned(self, assigned):
                pass

            async def on_partitions_lost(self, lost):
                member.lost.append(sorted(tp.partition for tp in lost))

        self.c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **KAFKA_PYTHON_CONF)
        self.records: list[tuple[int, int]] = []
        self.lost: list = []
        self.c.subscribe([topic], listener=CommitOnRevoke())

    def commit(self) -> None:
        self.c.commit()

    def poll(self) -> None:
        for recs in self.c.poll(timeout_ms=20).values():
            self.records.extend((r.partition, r.offset) for r in recs)

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.c.assignment()}

    def close(self) -> None:
        self.c.close()


# ---- the member that crashes: a child process --------------------------------------------------------------------
# Prints "ASSIGNMENT [partitions]" whenever its assignment changes, "MSG partition offset" per record, commits once
# (synchronously) after `commit_after` records and prints "COMMITTED", then keeps consuming without committing.
CONFLUENT_CHILD = r"""
import json, sys, time
from confluent_kafka import Consumer, KafkaError
conf, topic, commit_after = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = Consumer(conf)
c.subscribe([topic])
last, seen, committed, deadline = None, 0, False, time.monotonic() + 120
while time.monotonic() < deadline:
    for m in c.consume(num_messages=500, timeout=0.05):
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                print("ERROR", m.error(), flush=True)
            continue
        print("MSG", m.partition(), m.offset(), flush=True)
        seen += 1
    now = sorted(tp.partition for tp in c.assignment())
    if now != last:
        last = now
        print("ASSIGNMENT", json.dumps(now), flush=True)
    if not committed and seen >= commit_after:
        c.commit(asynchronous=False)
        committed = True
        print("COMMITTED", flush=True)
"""

KAFKA_PYTHON_CHILD = r"""
import json, sys, time
from kafka import KafkaConsumer
conf, topic, commit_after = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = KafkaConsumer(**conf)
c.subscribe([topic])
last, seen, committed, deadline = None, 0, False, time.monotonic() + 120
while time.monotonic() < deadline:
    for recs in c.poll(timeout_ms=50).values():
        for r in recs:
            print("MSG", r.partition, r.offset, flush=True)
            seen += 1
    now = sorted(tp.partition for tp in c.assignment())
    if now != last:
        last = now
        print("ASSIGNMENT", json.dumps(now), flush=True)
    if not committed and seen >= commit_after:
        c.commit()
        committed = True
        print("COMMITTED", flush=True)
"""


class ChildMember:
    """Runs a *_CHILD script in its own Python process and follows its stdout from a reader thread."""

    def __init__(self, script: str, conf: dict, topic: str, commit_after: int):
        self.topic = topic
        self.records: list[tuple[int, int]] = []
        self.assignments: list[list[int]] = []
        self.committed_at: int | None = None    # len(records) when it printed COMMITTED
        self.other: list[str] = []               # anything else it printed (client logs, errors)
        self.proc = subprocess.Popen([sys.executable, "-c", script, json.dumps(conf), topic, str(commit_after)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            parts = line.split()
            try:
                if parts[0] == "MSG" and len(parts) == 3:
                    self.records.append((int(parts[1]), int(parts[2])))
                    continue
                if parts[0] == "ASSIGNMENT":
                    self.assignments.append(json.loads(line.split(None, 1)[1]))
                    continue
                if parts == ["COMMITTED"]:
                    self.committed_at = len(self.records)
                    continue
            except (IndexError, ValueError):   # a line cut short by the kill
                pass
            self.other.append(line.rstrip())

    def poll(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"child consumer exited with {self.proc.returncode}: {self.other[-20:]}")
        time.sleep(0.01)

    def assignment(self) -> set[tuple[str, int]]:
        return {(self.topic, p) for p in (self.assignments[-1] if self.assignments else [])}

    def uncommitted_records(self) -> int:
        return 0 if self.committed_at is None else len(self.records) - self.committed_at

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(10)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.join(10)


# ---- driving and checking ----------------------------------------------------------------------------------------
def drive(stream: Stream, members: list, predicate, timeout: float = 40, what: str = "condition") -> None:
    """Produce and poll every member until `predicate()` holds (bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stream.tick()
        for m in members:
            m.poll()
        if predicate():
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; assignments "
                         f"{[sorted(p for _, p in m.assignment()) for m in members]}")


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets through the admin API (OffsetFetch without a member): -1001 when none."""
    admin = admin_client(bootstrap)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=10)
    for tp in res.topic_partitions:
        assert tp.error is None, f"OffsetFetch error for partition {tp.partition}: {tp.error}"
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def crash_and_check(stream: Stream, survivors: list, child: ChildMember, bootstrap: str, group: str, topic: str,
                    partitions: int, expected_sizes: list[int], sticky: bool) -> None:
    """kill -9 the child, wait for the survivors to own everything, drain, and check at-least-once delivery."""
    drive(stream, survivors + [child], lambda: child.committed_at is not None and child.uncommitted_records() >= 20,
          what="the child to commit and then consume 20 more records")
    child_parts = {p for _, p in child.assignment()}
    before = [m.assignment() for m in survivors]
    marks = [len(m.records) for m in survivors]
    child.kill9()
    # What the child committed for each partition (consumed before COMMITTED: its last offset + 1) is what the
    # group has committed now; only the child owned these partitions, and it is gone.
    crash_committed = committed_offsets(bootstrap, group, topic, partitions)
    last_before_commit: dict[int, int] = {}
    for p, o in child.records[:child.committed_at]:
        last_before_commit[p] = max(o, last_before_commit.get(p, -1))
    for p, o in last_before_commit.items():
        assert crash_committed[p] == o + 1, \
            f"partition {p}: child committed after offset {o}, group has {crash_committed[p]}"

    drive(stream, survivors, lambda: balanced(survivors, topic, partitions) and
          sorted(len(m.assignment()) for m in survivors) == expected_sizes,
          what="the survivors to take over the crashed member's partitions")
    assert_exact_partition_split(survivors, topic, partitions)
    if sticky:   # server-side uniform assignor: survivors keep what they had and only gain the child's partitions
        for m, had in zip(survivors, before):
            assert had <= m.assignment(), f"a survivor lost {sorted(had - m.assignment())} when a member crashed"

    # Keep producing a little after the takeover, then drain everything.
    for _ in range(10):
        stream.tick()
        for m in survivors:
            m.poll()
    ends = stream.stop()

    drive(stream, survivors, lambda: all(m.assignment() for m in survivors) and
          (set().union(*[{(p, o) for p, o in m.records} for m in survivors + [child]])
           >= {(p, o) for p in range(partitions) for o in range(ends[p])}),
          what="every produced record to be consumed")
    for m in survivors:
        m.commit()
    for m in survivors:
        assert not m.lost, f"a survivor lost partitions {m.lost}"

    # No gap: every produced offset was consumed by someone, nothing beyond the end.
    everyone = [m.records for m in survivors] + [child.records]
    seen: dict[tuple[int, int], int] = {}
    for recs in everyone:
        for r in recs:
            seen[r] = seen.get(r, 0) + 1
    produced = {(p, o) for p in range(partitions) for o in range(ends[p])}
    assert set(seen) == produced, \
        f"missing {sorted(produced - set(seen))[:10]}, extra {sorted(set(seen) - produced)[:10]}"

    # The new owner of each of the child's partitions resumed exactly at the committed offset.
    after: dict[int, list[int]] = {}
    for m, mark in zip(survivors, marks):
        for p, o in m.records[mark:]:
            if p in child_parts:
                after.setdefault(p, []).append(o)
    for p in child_parts:
        start = crash_committed[p] if crash_committed[p] >= 0 else 0
        assert after.get(p), f"nobody consumed partition {p} after the crash"
        assert min(after[p]) == start, f"partition {p} resumed at {min(after[p])}, committed offset is {start}"

    # Duplicates are exactly the crashed member's uncommitted records (at-least-once, nothing else re-read).
    dups = {r for r, n in seen.items() if n > 1}
    uncommitted = {(p, o) for p, o in child.records if p in child_parts and o >= crash_committed[p]}
    assert all(n <= 2 for n in seen.values()), "a record was consumed more than twice"
    assert dups == uncommitted, (f"unexpected duplicates {sorted(dups - uncommitted)[:10]}; "
                                 f"uncommitted records not re-read {sorted(uncommitted - dups)[:10]}")
    assert uncommitted, "the child died with nothing uncommitted (the test lost its point)"

    # Offsets committed at the end cover everything produced.
    final = committed_offsets(bootstrap, group, topic, partitions)
    assert final == ends, f"committed {final}, produced up to {ends}"


# ---- the tests ---------------------------------------------------------------------------------------------------
def join_then_crash(broker: BrokerProcess, protocol: str) -> None:
    topic, group = f"t-members-{protocol}-{uuid.uuid4().hex[:8]}", f"g-members-{protocol}-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=12)
    stream = Stream(broker.bootstrap, topic, 12, per_tick=12)
    survivors = [ConfluentMember(broker.bootstrap, group, topic, protocol) for _ in range(2)]
    child = None
    try:
        drive(stream, survivors, lambda: balanced(survivors, topic, 12) and all(m.records for m in survivors),
              what="two members sharing 12 partitions and consuming")
        before = [m.assignment() for m in survivors]

        # A third member joins while records flow.
        child_conf = {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "group.id": group,
                      "group.protocol": protocol, "enable.auto.commit": False, "enable.auto.offset.store": True,
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
        if protocol == "classic":
            child_conf.update(FAST)
        child = ChildMember(CONFLUENT_CHILD, child_conf, topic, commit_after=30)
        three = survivors + [child]
        drive(stream, three, lambda: balanced(three, topic, 12) and
              sorted(len(m.assignment()) for m in three) == [4, 4, 4] and len(child.records) > 0,
              what="a 4/4/4 split of 12 partitions after the join")
        assert_exact_partition_split(three, topic, 12)
        if protocol == "consumer":   # incremental, sticky: the old members only gave partitions away
            for m, had in zip(survivors, before):
                assert m.assignment() <= had

        crash_and_check(stream, survivors, child, broker.bootstrap, group, topic, 12, [6, 6],
                        sticky=protocol == "consumer")
    finally:
        if child is not None:
            child.cleanup()
        for m in survivors:
            m.close()


def test_confluent_classic_member_joins_mid_stream_then_one_crashes(mbroker):
    join_then_crash(mbroker, "classic")


@pytest.mark.skipif(68 not in load_handlers(), reason="ConsumerGroupHeartbeat is not in broker/handlers _MODULES")
def test_confluent_consumer_protocol_member_joins_mid_stream_then_one_crashes(mbroker):
    join_then_crash(mbroker, "consumer")


def test_kafka_python_crashed_member_partitions_move_to_survivor(mbroker):
    topic, group = f"t-members-kp-{uuid.uuid4().hex[:8]}", f"g-members-kp-{uuid.uuid4().hex[:8]}"
    create_topic(mbroker.bootstrap, topic, partitions=6)
    stream = Stream(mbroker.bootstrap, topic, 6, per_tick=6)
    survivor = KafkaPythonMember(mbroker.bootstrap, group, topic)
    child = ChildMember(KAFKA_PYTHON_CHILD, {"bootstrap_servers": mbroker.bootstrap, "group_id": group,
                                             **KAFKA_PYTHON_CONF}, topic, commit_after=20)
    try:
        both = [survivor, child]
        drive(stream, both, lambda: balanced(both, topic, 6) and
              sorted(len(m.assignment()) for m in both) == [3, 3] and len(child.records) > 0,
              what="a 3/3 split of 6 partitions")
        crash_and_check(stream, [survivor], child, mbroker.bootstrap, group, topic, 6, [6], sticky=False)
    finally:
        child.cleanup()
        survivor.close()
