"""A controller cut off from the brokers but not from the store (metadata/reachability.py): brokers report it in the
store, and at session expiry it resigns instead of fencing the brokers that cannot reach it, unless it hears from
as many as report it. Real ObjectStoreControllers over a local store; the broker side with a channel that fails."""
from __future__ import annotations

import asyncio
import types
import uuid

import pytest

from broker.broker_lifecycle import BrokerLifecycle
from broker.controller_channel import ControllerUnavailable
from metadata.cluster_control import ClusterControl
from metadata.image import MetadataImage
from metadata.object_store_controller import ObjectStoreController
from metadata.object_store_log import ObjectStoreMetadataLog
from metadata.reachability import ReachabilityReports, controller_is_cut_off
from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
from storage.objectstore.object_store import open_object_store
from fakes import Clock, wait_for

TOPIC_ID = uuid.UUID(int=0xCAFE).hex


@pytest.mark.parametrize("reporting, heard, cut_off", [
    ({2, 3}, set(), True),                    # 3 brokers, the controller cut from both others
    ({3}, {2}, False),                        # one broker cut from the rest: it is fenced
    (set(), set(), False),                    # two brokers dead (no reports): fenced
    ({2}, set(), False),                      # two brokers that lost their link: a tie, fence as before
    ({3, 4, 5}, {2}, True),                   # 5 brokers: the controller and broker 2 cut from the other three
    ({3, 4}, {2, 5}, False),                  # 5 brokers: two cut from the controller's side of three
])
def test_the_side_with_more_brokers_wins(reporting, heard, cut_off):
    assert controller_is_cut_off(reporting, heard) is cut_off


async def test_reports_are_per_epoch_written_once_and_withdrawn(tmp_path):
    store = open_object_store(f"file://{tmp_path}/store")
    b2, b3, ctl = (ReachabilityReports(store, "metadata", n) for n in (2, 3, 1))
    assert await b2.report(1, 7) and not await b2.report(1, 7)          # once per epoch
    assert await b3.report(1, 6)                                        # an older controller epoch
    assert await ctl.reporters(7) == {2} and await ctl.reporters(6) == {3}
    assert await b2.withdraw() and not await b2.withdraw()
    assert await ctl.reporters(7) == set()
    # a new incarnation of broker 3 deletes what the old one left, at its first answered heartbeat
    b3_again = ReachabilityReports(store, "metadata", 3)
    assert not await b3_again.withdraw()                                # nothing it wrote itself
    assert await ctl.reporters(6) == set()
    assert [i.key async for i in store.list("metadata/")] == []


async def _cluster(tmp_path):
    """Brokers 1-3 registered and unfenced, t-0 on (1, 2, 3) led by 2; node 1 the active controller."""
    store = open_object_store(f"file://{tmp_path}/store")
    records = [RegisterBrokerRecord(b, f"inc-{b}", None, [("PLAINTEXT", "localhost", 9090 + b)]) for b in (1, 2, 3)]
    records += [TopicRecord("t", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, [1, 2, 3], [1, 2, 3], 2, 5, 7)]
    await ObjectStoreMetadataLog(store).append(MetadataImage(), 0, records)
    controller = ObjectStoreController(store, 1, lease_timeout=1.0, poll_interval=0.05)
    await controller.start()
    await wait_for(lambda: controller.active)
    clock = Clock()
    control = ClusterControl(controller, session_timeout_ms=400, clock=clock,
                             reports=ReachabilityReports(store, "metadata", 1))
    return store, controller, control, clock


async def _report(store, epoch: int, *brokers: int) -> None:
    """`brokers` report controller 1 at `epoch` unreachable."""
    for b in brokers:
        await ReachabilityReports(store, "metadata", b).report(1, epoch)


def _silence(control, clock, silent: dict[int, float]) -> None:
    """Brokers in `silent` were last heard that many seconds ago; the others (and the controller's own broker) just
    now. The session is 0.4 s: 0.2 s of silence counts as not heard, over 0.4 s expires."""
    control._check_active()
    clock.now += 10.0
    for b in control.image.brokers:
        control.last_heartbeat[b] = clock.now - silent.get(b, 0.0)


async def test_a_controller_both_brokers_report_resigns_instead_of_fencing_them(tmp_path):
    """Broker 3's session expires first; broker 2, cut off at the same time, has only been silent for more than half
    a session. Both report: the controller resigns at 3's expiry rather than fence 3 now and 2 a moment later."""
    store, controller, control, clock = await _cluster(tmp_path)
    other = ObjectStoreController(store, 2, lease_timeout=1.0, poll_interval=0.05)
    try:
        epoch = controller.epoch
        await _report(store, epoch, 2, 3)
        _silence(control, clock, {2: 0.25, 3: 0.5})
        await control.check_sessions()
        assert not controller.active
        assert not any(b.fenced for b in controller.image.brokers.values()), "a healthy broker was fenced"
        assert controller.image.topics_by_id[TOPIC_ID].partition(0).isr == (1, 2, 3)
        # the lease is free at once: another node takes over without waiting for it to lapse
        await other.start()
        await wait_for(lambda: other.active, timeout=0.9)
        assert other.epoch == epoch + 1
        # while it holds off, the node that resigned does not campaign, even for a free lease
        await other.stop()                                      # resigns the lease cleanly
        assert not await controller.campaign()
    finally:
        await other.stop()
        await controller.stop()


async def test_a_controller_that_hears_as_many_as_report_it_fences_the_reporter(tmp_path):
    store, controller, control, clock = await _cluster(tmp_path)
    try:
        await _report(store, controller.epoch, 3)
        _silence(control, clock, {3: 0.5})
        await control.check_sessions()
        assert controller.active
        assert controller.image.brokers[3].fenced and not controller.image.brokers[2].fenced
    finally:
        await controller.stop()


async def test_a_report_of_an_older_controller_does_not_count(tmp_path):
    store, controller, control, clock = await _cluster(tmp_path)
    try:
        await _report(store, controller.epoch, 3)
        await _report(store, controller.epoch - 1, 2)
        _silence(control, clock, {2: 0.5, 3: 0.5})
        await control.check_sessions()
        assert controller.active
        assert controller.image.brokers[3].fenced and controller.image.brokers[2].fenced
    finally:
        await controller.stop()


async def test_a_controller_that_got_its_lease_back_unopposed_fences_instead_of_resigning_again(tmp_path):
    """Nobody took the lease when it resigned (no other node could): resigning again would stall the cluster."""
    store, controller, control, clock = await _cluster(tmp_path)
    try:
        await _report(store, controller.epoch, 2, 3)
        _silence(control, clock, {2: 0.5, 3: 0.5})
        await control.check_sessions()
        assert not controller.active
        controller._campaign_after = 0.0                        # the hold-off is over
        await wait_for(lambda: controller.active)
        await _report(store, controller.epoch, 2, 3)
        _silence(control, clock, {2: 0.5, 3: 0.5})
        await control.check_sessions()
        assert controller.active
        assert controller.image.brokers[2].fenced and controller.image.brokers[3].fenced
    finally:
        await controller.stop()


class _Unreadable:
    async def reporters(self, epoch):
        raise OSError("the store does not answer")


@pytest.mark.parametrize("silent, fenced", [({2: 0.5, 3: 0.5}, set()), ({3: 0.5}, {3})])
async def test_unreadable_reports_hold_fencing_only_while_the_silent_brokers_outnumber_the_rest(tmp_path, silent,
                                                                                                 fenced):
    """When the reports cannot be read, a controller that hears from nobody does not fence (it may be the one cut
    off, and its lease will tell); one that hears from as many as are silent fences as before."""
    store, controller, control, clock = await _cluster(tmp_path)
    try:
        control.reports = _Unreadable()
        _silence(control, clock, silent)
        await control.check_sessions()
        assert controller.active
        assert {b for b, r in controller.image.brokers.items() if r.fenced} == fenced
    finally:
        await controller.stop()


class _Channel:
    """The controller as a heartbeat sees it: unreachable until `answer` is set."""

    def __init__(self):
        self.answer = False

    async def send(self, api_key, version, body, timeout=None):
        if not self.answer:
            await asyncio.sleep(0.01)
            raise ControllerUnavailable("cannot connect")
        return types.SimpleNamespace(error_code=0, broker_epoch=4, is_fenced=False)


async def _until(predicate, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_broker_reports_a_silent_controller_and_withdraws_when_it_answers(tmp_path):
    """Session 3 s: nothing is reported while the controller has been silent for under a second, a report naming its
    epoch appears after that, and it is gone once a heartbeat is answered; heartbeats never wait for the store."""
    store = open_object_store(f"file://{tmp_path}/store")
    topics = types.SimpleNamespace(image=types.SimpleNamespace(controller_id=1, controller_epoch=9, offset=20))
    channel = _Channel()
    reader = ReachabilityReports(store, "metadata", 1)
    lifecycle = BrokerLifecycle(2, channel, topics, cluster_id="c", rack=None, endpoint=[],
                                heartbeat_interval_ms=100, session_timeout_ms=3000,
                                reports=ReachabilityReports(store, "metadata", 2))
    lifecycle.start()
    try:
        await asyncio.sleep(0.5)
        assert await reader.reporters(9) == set()              # under a third of a session: nothing said yet
        await _until(lambda: _is(reader, 9, {2}), timeout=3)
        channel.answer = True
        await lifecycle.unfenced.wait()
        await _until(lambda: _is(reader, 9, set()), timeout=3)
    finally:
        await lifecycle.stop(controlled=False)


async def _is(reader, epoch: int, expected: set) -> bool:
    return await reader.reporters(epoch) == expected
