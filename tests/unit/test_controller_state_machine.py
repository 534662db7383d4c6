"""A randomized, stateful test of the controller (hypothesis): two controller-capable nodes over one metadata log,
four brokers and one topic of three partitions, driven by random interleavings of registrations, heartbeats (caught
up or not, controlled shutdowns), session expiries, AlterPartition from each leader's view, preferred elections,
reassignments and their cancellation, producer-id allocations, lease loss (the other node takes the lease over;
the old one either notices by its clock or is paused and only learns it when its append is refused), and brokers'
reports of an unreachable controller (metadata/reachability.py), which may make a controller resign at a session
expiry instead of fencing.

Every request is started as a task and the event loop is run only when the test says so, a few steps at a time, over
an in-memory store that yields before and after every write: requests overlap the way they do on a busy controller.
After every step the invariants of issue 22 are checked on every node's image and on the log as written:

- partition epochs increase by one per change; leader epochs never go back, and grow when the leader changes;
- the leader is an unfenced ISR member whenever one exists (a fenced broker stays in an ISR only as its last member,
  and then nobody leads);
- the ISR is a subset of the replicas and gains a member only through an AlterPartition its leader sent, at the
  partition epoch the change was made at;
- producer-id blocks handed out are disjoint and committed;
- a deposed or resigned controller writes nothing: batch epochs never go back in the log, no batch of a resigned
  epoch follows the resignation, and every answer a controller gave
  (a broker epoch, an ISR) is in the log.

The slow suite runs the same machine for many more steps."""
from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from metadata.cluster_control import ClusterControl, elect_preferred_operation, reassign_operation
from metadata.controller import PRODUCER_ID_BLOCK
from metadata.image import MetadataImage
from metadata.object_store_controller import NotControllerError, ObjectStoreController
from metadata.object_store_log import ObjectStoreMetadataLog
from metadata.reachability import ReachabilityReports
from metadata.records import MetadataBatch, PartitionRecord, ProducerIdsRecord, RegisterBrokerRecord, TopicRecord
from fakes import Clock, MemoryStore

BROKERS = (1, 2, 3, 4)
NODES = (1, 2)
LEASE_TIMEOUT = 2.0
TOPIC_ID = uuid.UUID(int=0x5EED).hex
ASSIGNMENT = ((1, 2, 3), (2, 3, 4), (3, 4, 1))
_decode_batch = msgspec.msgpack.Decoder(MetadataBatch).decode


def _endpoints(b: int) -> list:
    return [("PLAINTEXT", "localhost", 9090 + b)]


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = MemoryStore()
        self.mlog = ObjectStoreMetadataLog(self.store)
        self.clocks = {n: Clock() for n in NODES}
        self.nodes: dict[int, tuple[ObjectStoreController, ClusterControl]] = {}
        for n in NODES:
            c = ObjectStoreController(self.store, n, lease_timeout=LEASE_TIMEOUT)
            c.lease.clock = self.clocks[n]
            self.nodes[n] = (c, ClusterControl(c, session_timeout_ms=9000, clock=self.clocks[n],
                                               reports=ReachabilityReports(self.store, "metadata", n)))
        self.reports = {b: ReachabilityReports(self.store, "metadata", b) for b in BROKERS}
        self.resigned: dict[int, int] = {}       # epoch -> the log end when its controller resigned
        self.current = 1
        self.tasks: list[tuple[asyncio.Task, object]] = []
        self.incarnation = {b: 0 for b in BROKERS}
        self.broker_epoch: dict[int, int] = {}
        # what controllers answered, to be found in the log
        self.blocks: list[int] = []
        self.registrations: list[tuple[int, int]] = []
        self.isr_answers: list[tuple[int, int, tuple]] = []
        self.proposals: set[tuple] = set()        # (partition, leader epoch, partition epoch, frozenset(new ISR))
        self.loop.run_until_complete(self._set_up())

    async def _set_up(self) -> None:
        for c, _ in self.nodes.values():
            await c.load()
        c, control = self.nodes[1]
        assert await c.campaign()
        for b in BROKERS:
            self.broker_epoch[b] = await control.register(b, f"inc-{b}-0", None, _endpoints(b))
            await control.heartbeat(b, self.broker_epoch[b], c.image.offset, False)
        records = [TopicRecord("t", TOPIC_ID)]
        records += [PartitionRecord(TOPIC_ID, i, list(r), list(r), r[0]) for i, r in enumerate(ASSIGNMENT)]
        await c.run(lambda image: (records, None))

    # ---- driving ---------------------------------------------------------------------------------------------------
    def _node(self, other: bool) -> tuple[ObjectStoreController, ClusterControl]:
        return self.nodes[3 - self.current if other else self.current]

    def _spawn(self, coro, done=None) -> None:
        self.tasks.append((self.loop.create_task(coro), done))

    def _collect(self) -> None:
        for c, _ in self.nodes.values():
            if c.resigned_at is not None:
                self.resigned.setdefault(*c.resigned_at)
        pending = []
        for task, done in self.tasks:
            if not task.done():
                pending.append((task, done))
                continue
            exc = task.exception()
            if exc is None:
                if done is not None:
                    done(task.result())
            elif not isinstance(exc, NotControllerError):    # the only refusal a request may meet here
                raise exc
        self.tasks = pending

    def _advance(self, steps: int) -> None:
        for _ in range(steps):
            self.loop.run_until_complete(asyncio.sleep(0))
        self._collect()

    # ---- the rules -------------------------------------------------------------------------------------------------
    @rule(b=st.sampled_from(BROKERS), new=st.booleans(), other=st.booleans())
    def register(self, b, new, other):
        if new:
            self.incarnation[b] += 1
        _, control = self._node(other)

        def done(epoch):
            self.registrations.append((b, epoch))
            self.broker_epoch[b] = max(self.broker_epoch[b], epoch)
        self._spawn(control.register(b, f"inc-{b}-{self.incarnation[b]}", None, _endpoints(b)), done)

    @rule(b=st.sampled_from(BROKERS), caught_up=st.booleans(), shut_down=st.booleans(), other=st.booleans())
    def heartbeat(self, b, caught_up, shut_down, other):
        c, control = self._node(other)
        self._spawn(control.heartbeat(b, self.broker_epoch[b], c.image.offset if caught_up else -1, shut_down))

    @rule(b=st.sampled_from(BROKERS), other=st.booleans())
    def session_expires(self, b, other):
        c, control = self._node(other)
        control._check_active()
        control.last_heartbeat[b] = control.clock() - 60.0
        self._spawn(control.check_sessions())

    @rule(b=st.sampled_from(BROKERS), withdraw=st.booleans(), other=st.booleans())
    def report_unreachable(self, b, withdraw, other):
        """Broker `b` reports the controller its image (this node's) names as unreachable, or withdraws that."""
        c, _ = self._node(other)
        r = self.reports[b]
        self._spawn(r.withdraw() if withdraw else r.report(c.image.controller_id, c.image.controller_epoch))

    @rule(cut=st.sets(st.sampled_from(BROKERS), min_size=1), other=st.booleans())
    def controller_cut_off(self, cut, other):
        """The brokers in `cut` lose their link to this node's controller: they report it and their sessions run
        out together; the session check then fences them or resigns, whichever the reports say."""
        c, control = self._node(other)
        control._check_active()
        for n, b in enumerate(sorted(cut)):     # out of phase: one expired, the others silent for half a session
            control.last_heartbeat[b] = control.clock() - (60.0 if n == 0 else 5.0)

        async def cut_off():
            for b in cut:
                await self.reports[b].report(c.image.controller_id, c.image.controller_epoch)
            await control.check_sessions()
        self._spawn(cut_off())

    @rule(index=st.integers(0, 2), expand=st.booleans(), pick=st.integers(0, 3), other=st.booleans())
    def alter_partition(self, index, expand, pick, other):
        """The partition's leader, as this node's image names it, proposes an ISR change from that view."""
        c, control = self._node(other)
        image = c.image
        t = image.topics_by_id.get(TOPIC_ID)
        p = t.partition(index) if t is not None else None
        leader = image.brokers.get(p.leader) if p is not None else None
        if leader is None:
            return
        if expand:
            outside = [r for r in p.replicas if r not in p.isr]
            if not outside:
                return
            new_isr = list(p.isr) + [outside[pick % len(outside)]]
        else:
            followers = [r for r in p.isr if r != p.leader]
            if not followers:
                return
            new_isr = [r for r in p.isr if r != followers[pick % len(followers)]]
        self.proposals.add((index, p.leader_epoch, p.partition_epoch, frozenset(new_isr)))

        def done(results):
            for r in results:
                if r.error_code == 0 and r.partition is not None:
                    self.isr_answers.append((index, r.partition.partition_epoch, r.partition.isr))
        self._spawn(control.alter_partition(p.leader, leader.epoch,
                                            [(TOPIC_ID, index, p.leader_epoch, p.partition_epoch, new_isr)]), done)

    @rule(index=st.integers(0, 2), other=st.booleans())
    def elect_preferred(self, index, other):
        c, _ = self._node(other)
        self._spawn(c.run(elect_preferred_operation([("t", index)])))

    @rule(index=st.integers(0, 2), replicas=st.none() | st.permutations(BROKERS).map(lambda bs: list(bs[:3])),
          other=st.booleans())
    def reassign(self, index, replicas, other):
        """Move the partition to `replicas` (None: cancel a move in progress)."""
        c, _ = self._node(other)
        self._spawn(c.run(reassign_operation("t", index, replicas)))

    @rule(b=st.sampled_from(BROKERS), other=st.booleans())
    def allocate_producer_ids(self, b, other):
        _, control = self._node(other)
        self._spawn(control.allocate_producer_ids(b, self.broker_epoch[b]),
                    lambda start: start >= 0 and self.blocks.append(start))

    @rule(node=st.sampled_from(NODES))
    def poll_the_log(self, node):
        """A node reads the log to its end, as its loop does every poll interval."""
        self._spawn(self.nodes[node][0].refresh())

    @rule(steps=st.integers(1, 30))
    def run_the_loop(self, steps):
        self._advance(steps)

    @rule(paused=st.booleans())
    def lease_loss(self, paused):
        """The other node takes the lease over once it has not changed for the lease timeout. The old holder's clock
        moves on too (it sees its lease lapse and stops answering), or it is paused and believes in its lease until
        its next append is refused."""
        old, new = self.current, 3 - self.current
        candidate, _ = self.nodes[new]
        if self.clocks[new]() < candidate._campaign_after:
            return                                     # it resigned a moment ago and holds off (as its loop would)

        async def take_over() -> bool:
            if not await candidate.lease.campaign():      # first sight of the lease starts the candidate's timer
                self.clocks[new].now += LEASE_TIMEOUT + 0.1
                if not paused:
                    self.clocks[old].now += LEASE_TIMEOUT + 0.1
            return await candidate.campaign()

        if self.loop.run_until_complete(take_over()):
            self.current = new
        self._collect()

    # ---- the invariants --------------------------------------------------------------------------------------------
    @invariant()
    def every_image_is_consistent(self):
        for c, _ in self.nodes.values():
            check_image(c.image)

    @invariant()
    def the_log_keeps_the_rules_and_every_answer(self):
        self.check_log()

    def check_log(self) -> MetadataImage:
        image, offset, epoch = MetadataImage(), 0, 0
        history: dict[int, list[PartitionRecord]] = {}
        registered: set[tuple[int, int]] = set()
        block_ends: list[int] = []
        while True:
            entry = self.store.objects.get(self.mlog.batch_key(offset))
            if entry is None:
                break
            batch = _decode_batch(entry[0])
            assert batch.controller_epoch >= epoch, f"a batch of epoch {batch.controller_epoch} after epoch {epoch}"
            assert offset <= self.resigned.get(batch.controller_epoch, offset), \
                f"a batch of epoch {batch.controller_epoch} at offset {offset}, after its controller resigned"
            epoch = batch.controller_epoch
            for n, r in enumerate(batch.records):
                if isinstance(r, PartitionRecord):
                    states = history.setdefault(r.partition, [])
                    if states:
                        prev = states[-1]
                        assert r.partition_epoch == prev.partition_epoch + 1
                        assert r.leader_epoch >= prev.leader_epoch
                        assert r.leader == prev.leader or r.leader_epoch > prev.leader_epoch
                        if set(r.isr) - set(prev.isr):       # only the leader's AlterPartition adds a member
                            assert r.leader == prev.leader and r.leader_epoch == prev.leader_epoch
                            assert (r.partition, prev.leader_epoch, prev.partition_epoch, frozenset(r.isr)) in \
                                self.proposals, f"ISR {prev.isr} -> {r.isr} without an AlterPartition for it"
                    states.append(r)
                elif isinstance(r, RegisterBrokerRecord):
                    registered.add((r.broker_id, offset + n))
                elif isinstance(r, ProducerIdsRecord):
                    block_ends.append(r.next_producer_id)
            image = image.apply(batch.records)
            offset += len(batch.records)
        for b, e in self.registrations:
            assert (b, e) in registered, f"broker {b} was answered epoch {e}, which is not in the log"
        for index, partition_epoch, isr in self.isr_answers:
            assert any(r.partition_epoch == partition_epoch and tuple(r.isr) == tuple(isr)
                       for r in history[index]), f"AlterPartition answered an uncommitted state of partition {index}"
        starts = sorted(self.blocks)
        assert len(set(starts)) == len(starts) and all(b - a >= PRODUCER_ID_BLOCK for a, b in zip(starts, starts[1:]))
        assert all(s + PRODUCER_ID_BLOCK in block_ends for s in starts), "a block answered that is not committed"
        return image

    def teardown(self):
        try:
            if self.tasks:
                # nothing here waits on a timer: whatever is not done after a couple of seconds never will be
                self.loop.run_until_complete(asyncio.wait([t for t, _ in self.tasks], timeout=2))
            self._collect()
            assert not self.tasks, "a controller request never completed"
            image = self.check_log()
            active = [c for c, _ in self.nodes.values() if c.active]
            for c in active:                    # the log replayed is what the active controller holds
                if c.image.controller_epoch == image.controller_epoch:
                    assert c.image.offset == image.offset and c.image.topics_by_id == image.topics_by_id
            for c, _ in self.nodes.values():
                self.loop.run_until_complete(c.stop())
        finally:
            self.loop.close()


def check_image(image: MetadataImage) -> None:
    fenced = {b for b, reg in image.brokers.items() if reg.fenced}
    hosted: dict[int, int] = {}
    for t in image.topics():
        for p in t.partition_states:
            for b in p.replicas:
                hosted[b] = hosted.get(b, 0) + 1
    assert dict(image.replica_counts) == hosted, "the image's replica counts (max.broker.partitions) drifted"
    assert MetadataImage().apply(image.to_records(), strict=False).replica_counts == image.replica_counts
    for t in image.topics():
        for i, p in enumerate(t.partition_states):
            where = f"{t.name}-{i} {p}"
            assert p.isr and set(p.isr) <= set(p.replicas), where
            assert set(p.adding) <= set(p.replicas) and set(p.removing) <= set(p.replicas), where
            live = [r for r in p.isr if r not in fenced]
            if p.leader != -1:
                assert p.leader in p.isr and p.leader not in fenced, f"leader not an unfenced ISR member: {where}"
            assert not live or p.leader != -1, f"offline with an unfenced ISR member: {where}"
            if set(p.isr) & fenced:
                assert len(p.isr) == 1 and p.leader == -1, f"a fenced broker in a larger ISR: {where}"


def _settings(examples: int, steps: int) -> settings:
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


ControllerMachine.TestCase.settings = _settings(100, 60)          # about 6,000 steps, a few seconds
test_controller_state_machine = ControllerMachine.TestCase


@pytest.mark.slow
def test_controller_state_machine_long_run():
    """The same machine, longer: about 80,000 steps."""
    run_state_machine_as_test(ControllerMachine, settings=_settings(800, 100))
