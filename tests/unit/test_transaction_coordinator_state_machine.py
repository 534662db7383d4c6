"""A randomized, stateful test of the transaction coordinator (hypothesis): three transactional ids on one
`__transaction_state` partition, driven by random interleavings of InitProducerId (new, KIP-360 recovery, zombie),
AddPartitionsToTxn (client, or a leader's implicit add for transaction version 2), EndTxn v4 and v5 with the
producer's epoch, a stale one or a future one, timed-out aborts, the replication of the coordinator's log writes
(succeeding or failing) and the markers' delivery.

Every request is started as a task and the event loop runs only when the test says so, over a log whose appends wait
for a replicate step: requests overlap as on a busy coordinator. A write that fails replication is removed from the
log (a new leader would truncate it). After every step:

- each id's (producer id, epoch) never goes back, in memory and in the log;
- an id with no write in flight is exactly what its last record in the log says (what a new coordinator loads);
- a prepared commit or abort has its markers on the way with the id's producer id, epoch and partitions, and the
  markers of one id carry non-decreasing epochs;
- an EndTxn v5 that succeeded answered an epoch above the one it was sent with (or a new producer id), and that is
  what the id has once its markers are written.

The slow suite runs the same machine for many more steps."""
from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from broker.transactions import state as S
from broker.transactions.coordinator import TXN_TOPIC, TransactionCoordinator
from protocol.errors import ErrorCode
from protocol.records import iter_all_records

IDS = ("a", "b", "c")
TOPICS = (("t", 0), ("t", 1), ("u", 0))
TIMEOUT_MS = 10_000


class _Result:
    def __init__(self, err: int, last_offset: int):
        self.error_code, self.last_offset = err, last_offset


class _Config:
    max_message_bytes = 1 << 20


class FakeTxnPartition:
    """__transaction_state-0 led here: appends wait for `replicate`."""

    def __init__(self):
        self.is_leader = True
        self.leader_epoch = 3
        self.config = _Config()
        self.log: list[tuple[int, str, bytes | None]] = []      # (offset, transactional id, value)
        self.waiting: list[tuple[int, asyncio.Future]] = []
        self.next_offset = 0
        self.replicated: set[int] = set()

    def append_records_to_leader(self, batch, headers, required_acks=-1):
        first = self.next_offset
        for r in iter_all_records(bytes(batch)):
            self.log.append((self.next_offset, S.decode_key(bytes(r.key)),
                             None if r.value is None else bytes(r.value)))
            self.next_offset += 1
        return _Result(0, self.next_offset - 1 if self.next_offset > first else first)

    def wait_for_high_watermark(self, offset: int):
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append((offset, fut))
        return fut

    def forget_waiter(self, fut) -> None:
        self.waiting = [w for w in self.waiting if w[1] is not fut]

    def acks_all_error(self) -> int:
        return 0

    def replicate(self, ok: bool) -> None:
        """Every append waiting: replicated, or lost (removed, as a new leader truncates it)."""
        waiting, self.waiting = self.waiting, []
        for offset, fut in waiting:         # `offset` is the high watermark awaited: one past the record
            if ok:
                self.replicated.add(offset - 1)
            else:
                self.log = [e for e in self.log if e[0] != offset - 1]
            if not fut.done():
                fut.set_result(0 if ok else ErrorCode.not_enough_replicas)


class _Info:
    partitions = 1


class FakeReplicas:
    def __init__(self, part: FakeTxnPartition):
        self.part = part
        self.topics = {TXN_TOPIC: _Info()}

    def get(self, topic, p):
        return self.part if (topic, p) == (TXN_TOPIC, 0) else None


class FakeProducerIds:
    def __init__(self):
        self.next = 1000

    async def next_producer_id(self) -> int:
        await asyncio.sleep(0)
        self.next += 1
        return self.next


class FakeMarkers:
    """Records what the coordinator hands over; the test delivers."""

    def __init__(self):
        self.sent: dict[str, list[tuple[int, int, int, bool, frozenset]]] = {}

    def send(self, tid, coordinator_epoch, meta) -> None:
        self.sent.setdefault(tid, []).append((coordinator_epoch, meta.producer_id, meta.producer_epoch,
                                              meta.state == S.PREPARE_COMMIT, frozenset(meta.partitions)))

    def forget_partition(self, p) -> None:
        pass

    def stop(self) -> None:
        pass


class _Groups:
    store = None


class Clock:
    now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.part = FakeTxnPartition()
        self.clock = Clock()
        self.coordinator = TransactionCoordinator({"transaction.state.log.num.partitions": "1"},
                                                  FakeReplicas(self.part), FakeProducerIds(), _Groups(),
                                                  clock=self.clock)
        self.coordinator.markers = FakeMarkers()
        self.coordinator._active = True
        self.coordinator.epochs[0] = self.part.leader_epoch
        self.client: dict[str, tuple[int, int]] = {}          # the producer's view: (producer id, epoch)
        self.seen: dict[str, tuple[int, int]] = {}            # highest (producer id, epoch) in memory or the log
        self.tasks: list[asyncio.Task] = []
        self.v2_answers: list[tuple[str, int, int, int, int]] = []   # (id, sent pid, sent epoch, pid, epoch)

    def teardown(self):
        for t in self.tasks:
            t.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    # ---- helpers -------------------------------------------------------------------------------------------------
    def _start(self, coro, then: str = "wait") -> None:
        """Start a request; `then` replicates what it wrote at once (most often), fails it, or leaves it waiting
        (to overlap with the next requests)."""
        self.tasks.append(self.loop.create_task(coro))
        self._run(3)
        if then != "wait":
            self.part.replicate(then == "replicate")
            self._run(3)

    def _run(self, n: int) -> None:
        for _ in range(n):
            self.loop.run_until_complete(asyncio.sleep(0))
        for t in [t for t in self.tasks if t.done()]:
            self.tasks.remove(t)
            t.result()                       # an exception in the coordinator fails the test here

    # ---- rules ---------------------------------------------------------------------------------------------------
    @rule(tid=st.sampled_from(IDS), recover=st.sampled_from(["no", "current", "zombie"]), then=st.sampled_from(["replicate", "replicate", "replicate", "wait", "fail"]))
    def init_producer_id(self, tid, recover, then):
        async def go():
            view = self.client.get(tid)
            expected = None
            if view is not None and recover == "current":
                expected = view
            elif view is not None and recover == "zombie":
                expected = (view[0], max(view[1] - 1, 0))
            err, pid, epoch = await self.coordinator.init_producer_id(tid, TIMEOUT_MS, expected)
            if not err:
                self.client[tid] = (pid, epoch)
        self._start(go(), then)

    @rule(tid=st.sampled_from(IDS), parts=st.sets(st.sampled_from(TOPICS), min_size=1, max_size=2),
          implicit=st.booleans(), then=st.sampled_from(["replicate", "replicate", "replicate", "wait", "fail"]))
    def add_partitions(self, tid, parts, implicit, then):
        view = self.client.get(tid)
        if view is None:
            return
        self._start(self.coordinator.add_partitions(tid, view[0], view[1], set(parts),
                                                    client_version=2 if implicit else 0), then)

    @rule(tid=st.sampled_from(IDS), commit=st.booleans(), v2=st.booleans(), shift=st.sampled_from([0, 0, 0, -1, 1]),
          then=st.sampled_from(["replicate", "replicate", "replicate", "wait", "fail"]))
    def end_txn(self, tid, commit, v2, shift, then):
        view = self.client.get(tid)
        if view is None:
            return
        pid, epoch = view[0], view[1] + shift

        async def go():
            err, new_pid, new_epoch = await self.coordinator.end_txn(tid, pid, epoch, commit,
                                                                      client_version=2 if v2 else 1)
            if not err and v2:
                assert (new_pid, new_epoch) > (pid, epoch) or new_pid != pid, (pid, epoch, new_pid, new_epoch)
                self.v2_answers.append((tid, pid, epoch, new_pid, new_epoch))
                if shift == 0:
                    self.client[tid] = (new_pid, new_epoch)
        self._start(go(), then)

    @rule(ok=st.sampled_from([True, True, True, False]))
    def replicate(self, ok):
        self.part.replicate(ok)
        self._run(3)

    @rule(tid=st.sampled_from(IDS), then=st.sampled_from(["replicate", "replicate", "replicate", "wait", "fail"]))
    def deliver_markers(self, tid, then):
        sent = self.coordinator.markers.sent.get(tid)
        if sent:
            self._start(self.coordinator.complete_after_markers(tid, sent[-1][0]), then)

    @rule(then=st.sampled_from(["replicate", "replicate", "replicate", "wait", "fail"]))
    def time_passes(self, then):
        self.clock.now += TIMEOUT_MS + 1
        self._start(self.coordinator.abort_timed_out(), then)

    @rule(n=st.integers(1, 5))
    def run_loop(self, n):
        self._run(n)

    # ---- invariants ----------------------------------------------------------------------------------------------
    def _last_records(self) -> dict[str, S.TransactionMetadata]:
        """Each id's last replicated record: what a new coordinator would load."""
        last: dict[str, S.TransactionMetadata] = {}
        for offset, tid, value in self.part.log:
            if offset in self.part.replicated:
                last[tid] = S.decode_value(tid, value)
        return last

    @invariant()
    def epochs_never_go_back(self):
        logged = self._last_records()
        for tid, meta in self.coordinator.txns.items():
            for where, m in (("memory", meta), ("log", logged.get(tid))):
                if m is None or m.producer_epoch < 0:
                    continue
                before = self.seen.get((where, tid), (0, -1))
                now = (m.producer_id, m.producer_epoch)
                assert now >= before, (where, tid, before, now)
                self.seen[(where, tid)] = now

    @invariant()
    def memory_is_what_the_log_says(self):
        logged = self._last_records()
        for tid, meta in self.coordinator.txns.items():
            if meta.pending or tid not in logged:
                continue
            m = logged[tid]
            if meta.has_failed_epoch_fence and meta.producer_epoch == m.producer_epoch + 1:
                # Kafka's too: a fence whose write failed leaves the bumped epoch in memory only, never answered to
                # a client; the next fence reuses it
                continue
            assert (m.producer_id, m.producer_epoch, m.state, m.txn_timeout_ms, m.client_txn_version,
                    m.prev_producer_id, m.next_producer_id, m.txn_start_ms) == \
                (meta.producer_id, meta.producer_epoch, meta.state, meta.txn_timeout_ms, meta.client_txn_version,
                 meta.prev_producer_id, meta.next_producer_id, meta.txn_start_ms), (tid, m, meta)
            assert m.partitions == (meta.partitions if meta.state != S.EMPTY else set()), (tid, m, meta)

    @invariant()
    def prepared_transactions_have_their_markers(self):
        for tid, meta in self.coordinator.txns.items():
            sent = self.coordinator.markers.sent.get(tid, [])
            epochs = [s[2] for s in sent if s[1] == meta.producer_id]
            assert epochs == sorted(epochs), (tid, sent)
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and not meta.pending:
                assert sent, (tid, meta)
                _, pid, epoch, commit, parts = sent[-1]
                assert (pid, epoch, commit, parts) == (meta.producer_id, meta.producer_epoch,
                                                       meta.state == S.PREPARE_COMMIT, frozenset(meta.partitions))

    @invariant()
    def version_2_answers_are_what_the_id_becomes(self):
        for tid, _, _, pid, epoch in self.v2_answers:
            meta = self.coordinator.txns.get(tid)
            if meta is not None and meta.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and not meta.pending and \
                    (pid, epoch) == max(a[3:] for a in self.v2_answers if a[0] == tid):
                # the latest answer, and nothing after it changed the id: it is the id's state now
                if self.client.get(tid) == (pid, epoch) and meta.last_producer_epoch != S.NO_PRODUCER_EPOCH:
                    assert (meta.producer_id, meta.producer_epoch) >= (pid, epoch), (tid, meta, pid, epoch)


def _run(max_examples: int, steps: int) -> None:
    run_state_machine_as_test(CoordinatorMachine, settings=settings(
        max_examples=max_examples, stateful_step_count=steps, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_transaction_coordinator_state_machine():
    _run(80, 80)


@pytest.mark.slow
def test_transaction_coordinator_state_machine_long():
    _run(600, 120)


def test_end_txn_while_the_markers_are_written_is_concurrent_transactions():
    """Kafka 4.1: while a commit's markers are written, an EndTxn with a valid epoch is CONCURRENT_TRANSACTIONS
    (the Java producer retries it), also a version 2 abort with the epoch the commit answered; once the markers are
    in, that abort bumps the epoch again. It used to be PRODUCER_FENCED (v5) or INVALID_TXN_STATE (v4)."""
    m = CoordinatorMachine()
    try:
        c = m.coordinator

        def call(coro):
            task = m.loop.create_task(coro)
            for _ in range(5):
                m.loop.run_until_complete(asyncio.sleep(0))
                m.part.replicate(True)
            return task.result()
        err, pid, epoch = call(c.init_producer_id("a", TIMEOUT_MS, None))
        assert (err, epoch) == (0, 0)
        assert call(c.add_partitions("a", pid, 0, {("t", 0)}, client_version=2)) == 0
        assert call(c.end_txn("a", pid, 0, True, client_version=2)) == (0, pid, 1)
        assert c.txns["a"].state == S.PREPARE_COMMIT                     # markers not delivered yet
        assert call(c.end_txn("a", pid, 1, False, client_version=2))[0] == ErrorCode.concurrent_transactions
        assert call(c.end_txn("a", pid, 0, True, client_version=2))[0] == ErrorCode.concurrent_transactions
        assert call(c.end_txn("a", pid, 1, False, client_version=1))[0] == ErrorCode.concurrent_transactions
        assert call(c.end_txn("a", pid, 2, False, client_version=2))[0] == ErrorCode.producer_fenced
        call(c.complete_after_markers("a", m.coordinator.markers.sent["a"][-1][0]))
        assert c.txns["a"].state == S.COMPLETE_COMMIT
        assert call(c.end_txn("a", pid, 1, False, client_version=2)) == (0, pid, 2)
    finally:
        m.teardown()


class _Leader:
    leader = 0


class _TxnTopicInfo:
    partitions = 1

    def partition(self, p):
        return _Leader()


class _Broker:
    node_id = 0

    def __init__(self, coordinator):
        self.transactions = coordinator
        self.topics = {TXN_TOPIC: _TxnTopicInfo()}


def test_version_2_add_is_retried_while_the_markers_are_written_and_recovers_with_kip_360():
    """A leader adding a partition for the next version 2 transaction while the previous one's markers are written
    retries CONCURRENT_TRANSACTIONS itself (add.partitions.to.txn.retry.backoff.ms), and passes it on to a version 2
    client only after add.partitions.to.txn.retry.backoff.max.ms. A producer that never saw EndTxn v5's answer
    recovers with InitProducerId naming the epoch before the bump (KIP-360: the last epoch stays after Complete)."""
    from broker.transactions.verification import add_or_verify, client_error
    m = CoordinatorMachine()
    try:
        c = m.coordinator
        broker = _Broker(c)
        guard = object()

        def run(coro, deliver_after: float | None = None):
            async def go():
                task = asyncio.get_running_loop().create_task(coro)
                t0 = asyncio.get_running_loop().time()
                delivering = None
                while not task.done():
                    m.part.replicate(True)
                    if deliver_after is not None and asyncio.get_running_loop().time() - t0 >= deliver_after and \
                            delivering is None:
                        delivering = asyncio.get_running_loop().create_task(
                            c.complete_after_markers("a", c.markers.sent["a"][-1][0]))
                    await asyncio.sleep(0.005)
                return task.result()
            return m.loop.run_until_complete(go())
        err, pid, _ = run(c.init_producer_id("a", TIMEOUT_MS, None))
        assert run(c.add_partitions("a", pid, 0, {("t", 0)}, client_version=2)) == 0
        assert run(c.end_txn("a", pid, 0, True, client_version=2)) == (0, pid, 1)
        # markers never written: CONCURRENT_TRANSACTIONS after the retries, as it is for a version 2 client
        answers = run(add_or_verify(broker, "a", pid, 1, lambda: {("t", 1): guard}, add=True))
        assert answers == {("t", 1): (ErrorCode.concurrent_transactions, guard)}
        assert client_error(ErrorCode.concurrent_transactions, True, epoch_bump=True) == \
            ErrorCode.concurrent_transactions
        assert client_error(ErrorCode.concurrent_transactions, True) == ErrorCode.not_enough_replicas
        # the markers are written 40 ms in: a retry adds the partition
        answers = run(add_or_verify(broker, "a", pid, 1, lambda: {("t", 1): guard}, add=True), deliver_after=0.04)
        assert answers == {("t", 1): (0, guard)}
        assert c.txns["a"].partitions == {("t", 1)}
        assert run(c.end_txn("a", pid, 1, False, client_version=2)) == (0, pid, 2)
        run(c.complete_after_markers("a", c.markers.sent["a"][-1][0]))
        # the producer missed that answer: it recovers naming epoch 1, and gets epoch 2 (not fenced)
        assert run(c.init_producer_id("a", TIMEOUT_MS, (pid, 1))) == (0, pid, 2)
    finally:
        m.teardown()
