"""The controller lease's clock rules (metadata/controller_lease.py), checked against skewed timers.

Nodes never compare clocks: a candidate takes the lease once its ETag has not changed for `timeout` on the
candidate's own clock, and the holder stops acting `timeout * 3/4` after it *sent* its last successful renewal, on
the holder's clock. So the holder always stops first as long as no candidate's clock runs more than 4/3 as fast as
the holder's (0.75 * timeout of the holder's time passes before timeout of the candidate's). Here three nodes share a
store in simulated time; each node's clock has its own offset and rate, each store request takes a random delay
(between the clock read and the write landing), nodes act in a random order and may stay silent for long stretches
(a pause, a cut link); some writes land but their answer is lost (the writer sees an error, as with a timeout or
a 5xx after S3 applied the write). After every step: at most one node may act as controller (`valid()`), and a node that may
act still holds the epoch the store's lease names. With rates within 4:3 the invariant holds for every schedule;
with a wider skew the same search finds schedules that break it, which shows the test can fail and the bound
matters.
"""
from __future__ import annotations

import asyncio
import os
import random
from datetime import datetime, timezone

import pytest

from metadata.controller_lease import ControllerLease, _decode
from storage.objectstore.object_store import ObjectInfo, ObjectStoreError, PreconditionFailed

TIMEOUT = 2.0
SEED = int(os.environ.get("STRATA_LEASE_SEED", "20261127"))
KEY = "controller-lease"


class SimulatedStore:
    """The conditional writes of an object store in simulated time: each request advances real time by its delay
    before it lands (so a writer's clock reading precedes the write by that much)."""

    def __init__(self, world: "World"):
        self.world = world
        self.data: bytes | None = None
        self.etag = 0

    async def head(self, key: str) -> ObjectInfo | None:
        self.world.elapse_request()
        return None if self.data is None else ObjectInfo(key, len(self.data), str(self.etag),
                                                         datetime.now(timezone.utc))

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self.world.elapse_request()
        assert self.data is not None
        return self.data

    async def put_if_absent(self, key: str, data: bytes) -> str:
        self.world.elapse_request()
        if self.data is not None:
            raise PreconditionFailed(key)
        return self._put(data)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self.world.elapse_request()
        if self.data is None or str(self.etag) != etag:
            raise PreconditionFailed(key)
        return self._put(data)

    def _put(self, data: bytes) -> str:
        self.data, self.etag = bytes(data), self.etag + 1
        if self.world.rng.random() < self.world.lost_answers:
            raise ObjectStoreError("the write landed but its answer was lost")
        return str(self.etag)


class World:
    def __init__(self, rates: list[float], offsets: list[float], delays: list[float], lost_answers: float = 0.0,
                 seed: int = 0):
        self.real = 0.0
        self.lost_answers, self.rng = lost_answers, random.Random(seed)
        self.delays, self.next_delay = delays, 0
        self.store = SimulatedStore(self)
        self.nodes = [ControllerLease(self.store, KEY, i + 1, TIMEOUT,
                                      clock=lambda r=rate, o=offset: o + r * self.real)
                      for i, (rate, offset) in enumerate(zip(rates, offsets))]

    def elapse_request(self) -> None:
        self.real += self.delays[self.next_delay % len(self.delays)]
        self.next_delay += 1

    def check(self) -> None:
        acting = [n for n in self.nodes if n.valid()]
        assert len(acting) <= 1, f"two controllers at real time {self.real:.3f}: " \
                                 f"{[(n.node_id, n.epoch) for n in acting]}"
        if acting:
            current = _decode(self.store.data)
            assert (current.holder, current.epoch) == (acting[0].node_id, acting[0].epoch), \
                f"node {acting[0].node_id} acts at epoch {acting[0].epoch} but the store's lease is {current}"


async def play(world: World, steps) -> None:
    for node, wait in steps:
        world.real += wait
        lease = world.nodes[node]
        try:
            if lease.holding:
                if lease.valid():
                    await lease.renew()
                else:
                    lease.abandon()          # what the controller does once valid() turns False
            else:
                await lease.campaign()
        except ObjectStoreError:
            pass                             # the controller's loop logs it and tries again at its next turn
        world.check()


def search(max_rate_ratio: float, schedules: int, seed: int) -> list[str]:
    """Seeded random schedules (hypothesis's generation, biased to small values, almost never reaches the narrow
    windows where a wide skew breaks the rule; uniform sampling does): the violations found."""
    rng = random.Random(seed)
    found = []
    for _ in range(schedules):
        rates = [rng.choice([1.0, max_rate_ratio, rng.uniform(1.0, max_rate_ratio)]) for _ in range(3)]
        offsets = [rng.uniform(0, 1000) for _ in range(3)]
        # and now and then a request that lasts longer than the lease (a node paused in the middle of it; the
        # holder does not act during another node's request here: see the paused-HEAD test for that)
        delays = [rng.choice([0.0, 0.001, 0.05, 0.2, 0.0, 0.001, 0.05, 0.2, 2.5]) for _ in range(rng.randint(1, 3))]
        # waits mostly short (a peek right after a renewal) or near the lease's timeouts (a silence that ends
        # just before or after one), where the rule is decided
        steps = [(rng.randrange(3), rng.choice([rng.uniform(0, 0.3), rng.uniform(1.0, 2.1), rng.uniform(0, 3)]))
                 for _ in range(rng.randint(5, 60))]
        lost = rng.choice([0.0, 0.0, 0.3])
        try:
            asyncio.run(play(World(rates, offsets, delays, lost, rng.randrange(1 << 30)), steps))
        except AssertionError as e:
            found.append(f"rates {rates}: {e}")
    return found


def test_one_controller_at_a_time_when_clock_rates_differ_by_less_than_four_to_three():
    found = search(max_rate_ratio=1.3, schedules=3000, seed=SEED)
    assert not found, f"{len(found)} violations (seed {SEED}):\n" + "\n".join(found[:5])


def test_a_wider_skew_breaks_the_rule_so_the_search_can_fail():
    """The same search with clocks up to 1.6 times as fast as another's finds a schedule with two controllers."""
    assert search(max_rate_ratio=1.6, schedules=3000, seed=SEED)


def test_a_wider_skew_breaks_the_rule_in_a_known_schedule():
    """A candidate whose clock runs 1.6 times as fast as the holder's: the holder renews, then goes silent; the
    candidate's 2 s pass after 1.25 s of real time, the holder's 1.5 s after 1.5 s: both act for a quarter second."""
    world = World([1.0, 1.6, 1.0], [0.0, 0.0, 0.0], [0.0])
    steps = [(0, 0.0), (1, 0.0), (0, 0.4), (1, 0.0), (1, 1.3)]
    with pytest.raises(AssertionError, match="two controllers|store's lease"):
        asyncio.run(play(world, steps))


def test_a_candidate_paused_in_its_head_counts_from_the_answer():
    """A candidate that is paused (SIGSTOP) in the middle of its HEAD while the holder renews sees the new ETag when
    it wakes: it must count the lease's age from then. Counted from when it sent the HEAD, the renewal looked as old
    as the pause and its next look took the lease over from a holder still acting on it (found in CI: the woken
    broker became the controller)."""
    async def run():
        world = World([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0])
        holder, candidate = world.nodes[0], world.nodes[1]
        assert await holder.campaign()
        assert not await candidate.campaign()          # sees the lease's first ETag
        head = world.store.head

        async def paused_head(key):
            for _ in range(6):                          # 3 s paused; the holder renews every half second
                world.real += TIMEOUT / 4
                assert await holder.renew() and holder.valid()
            return await head(key)
        world.store.head = paused_head
        assert not await candidate.campaign()
        world.store.head = head
        assert not await candidate.campaign()          # right after waking: the holder renewed moments ago
        world.check()
        assert holder.valid() and not candidate.holding
    asyncio.run(run())
