"""The metadata log and controller lease on object-store conditional writes, against both stores (local and S3 on
moto): races between two writers, fencing of a deposed controller, lease expiry by the candidate's own clock,
replay that skips a fenced epoch, snapshots and the truncation below them."""
from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest

from metadata.controller_lease import ControllerLease
from metadata.image import MetadataImage
from metadata.object_store_controller import NotControllerError, ObjectStoreController
from metadata.object_store_log import CorruptMetadataError, ObjectStoreMetadataLog
from metadata.records import (TOPIC_RESOURCE, ConfigRecord, LeaderChangeRecord, MetadataBatch, PartitionRecord,
                              ProducerIdsRecord, RegisterBrokerRecord, TopicRecord)
from storage.objectstore.object_store import PreconditionFailed, list_all
from fakes import Clock, append_op, wait_for


def topic(name: str, partitions: int = 2) -> list:
    tid = uuid.uuid4().hex
    return [TopicRecord(name, tid), *(PartitionRecord(tid, p, [1, 2], [1, 2], 1) for p in range(partitions))]


# ---- the log -----------------------------------------------------------------------------------------------------
async def test_two_writers_at_one_position_one_wins_and_every_reader_sees_one_chain(make_store):
    a, b = ObjectStoreMetadataLog(make_store()), ObjectStoreMetadataLog(make_store())
    start = await a.append(MetadataImage(), 1, [LeaderChangeRecord(1, 1)])
    results = await asyncio.gather(a.append(start, 1, topic("from-a")), b.append(start, 1, topic("from-b", 3)),
                                   return_exceptions=True)
    winners = [r for r in results if isinstance(r, MetadataImage)]
    assert len(winners) == 1 and sum(isinstance(r, PreconditionFailed) for r in results) == 1
    # the loser re-reads and appends after the winner's batch
    loser_log, loser_records = (b, topic("from-b", 3)) if winners[0].get("from-a") else (a, topic("from-a"))
    caught_up = (await loser_log.catch_up(start)).image
    assert caught_up.offset == winners[0].offset
    await loser_log.append(caught_up, 1, loser_records)
    views = [(await log.load()).image for log in (a, b)]
    assert all(v.get("from-a") and v.get("from-b") and v.offset == 1 + 3 + 4 - 1 for v in views)
    assert views[0].get("from-a").topic_id == views[1].get("from-a").topic_id


async def test_replay_skips_a_batch_of_a_fenced_epoch(store):
    mlog = ObjectStoreMetadataLog(store)
    image = await mlog.append(MetadataImage(), 1, [LeaderChangeRecord(1, 1)])
    image = await mlog.append(image, 2, [LeaderChangeRecord(2, 2)])
    # a late write of the epoch-1 controller at the next free position (what the create-only chain already prevents
    # a live controller from doing; replay must be safe even so)
    late = msgspec.msgpack.encode(MetadataBatch(1, topic("late")))
    await store.put_if_absent(mlog.batch_key(image.offset + 1), late)
    image2 = (await ObjectStoreMetadataLog(store).load()).image
    assert image2.get("late") is None and image2.offset == image.offset + 3 and image2.controller_id == 2
    replayed = await ObjectStoreMetadataLog(store).catch_up(image)
    assert replayed.skipped == 1
    # the next append goes after the skipped batch, and it applies
    image3 = await mlog.append(image2, 2, topic("kept"))
    assert (await ObjectStoreMetadataLog(store).load()).image.get("kept") is not None and image3.get("late") is None


async def test_a_batch_that_does_not_decode_stops_replay_loudly(store):
    mlog = ObjectStoreMetadataLog(store)
    await store.put_if_absent(mlog.batch_key(0), b"\xc1 not msgpack")
    with pytest.raises(CorruptMetadataError, match="log/00000000000000000000"):
        await mlog.load()


async def test_snapshot_rebuilds_the_image_and_truncation_sends_laggards_to_it(store):
    mlog = ObjectStoreMetadataLog(store)
    image = await mlog.append(MetadataImage(), 1, [LeaderChangeRecord(1, 1),
                                                  RegisterBrokerRecord(1, "inc", "a", [("PLAINTEXT", "h", 1)])])
    behind = image
    image = await mlog.append(image, 1, topic("t", 3))
    image = await mlog.append(image, 1, [ConfigRecord(TOPIC_RESOURCE, "t", "retention.ms", "7"),
                                         ProducerIdsRecord(1, 5000)])
    await mlog.write_snapshot(image)
    assert await mlog.delete_before(image.offset) == 3
    image = await mlog.append(image, 1, topic("after"))
    for loaded in ((await ObjectStoreMetadataLog(store).load()).image,
                   (await ObjectStoreMetadataLog(store).catch_up(behind)).image):     # its next batch is gone
        assert loaded.offset == image.offset and loaded.get("t").configs == {"retention.ms": "7"}
        assert loaded.get("t").partition(2).replicas == (1, 2) and loaded.get("after") is not None
        assert loaded.next_producer_id == 5000 and loaded.brokers[1].rack == "a"
        assert (loaded.controller_id, loaded.controller_epoch) == (1, 1)


# ---- the lease ---------------------------------------------------------------------------------------------------
async def test_two_candidates_for_a_missing_lease_one_wins(make_store):
    leases = [ControllerLease(make_store(), "metadata/controller-lease", n, timeout=2.0) for n in (1, 2)]
    won = await asyncio.gather(*(lease.campaign() for lease in leases))
    assert sorted(won) == [False, True]
    assert [lease.epoch for lease in leases if lease.holding] == [1]


async def test_lease_expires_by_the_candidates_clock_and_renewals_keep_it(make_store):
    clock1, clock2 = Clock(), Clock()
    holder = ControllerLease(make_store(), "lease", 1, timeout=2.0, clock=clock1)
    candidate = ControllerLease(make_store(), "lease", 2, timeout=2.0, clock=clock2)
    assert await holder.campaign()
    assert not await candidate.campaign()            # first sight of the lease starts the candidate's timer
    for _ in range(3):                               # renewals change the ETag: the timer starts again each time
        clock1.now += 0.5
        clock2.now += 1.5
        assert await holder.renew()
        assert not await candidate.campaign()
    clock2.now += 1.9
    assert not await candidate.campaign()            # not yet 2 s without a change
    # the holder is paused (no renewals): it stops trusting its lease before any candidate can take it over
    clock1.now += 1.5
    assert not holder.valid()
    clock2.now += 0.2
    assert await candidate.campaign() and candidate.epoch == 2
    clock1.now += 10
    assert not await holder.renew() and not holder.holding     # the paused holder wakes up: its renewal is refused


async def test_a_resigned_lease_is_taken_at_once_and_a_restarted_holder_takes_its_own_back(make_store):
    a = ControllerLease(make_store(), "lease", 1, timeout=60.0)
    b = ControllerLease(make_store(), "lease", 2, timeout=60.0)
    assert await a.campaign()
    assert not await b.campaign()
    await a.resign()
    assert await b.campaign() and b.epoch == 2
    b_again = ControllerLease(make_store(), "lease", 2, timeout=60.0)    # node 2 restarted: a new process
    assert await b_again.campaign() and b_again.epoch == 3
    assert not await b.renew()


async def test_a_renewal_answered_with_an_error_that_landed_does_not_lose_the_lease(store):
    """The store applies a renewal but its answer is lost (a timeout, a 5xx): the holder's next renewal, sent with
    the ETag from before it, is refused. The lease still names the holder at its epoch, so nobody took it over: the
    holder keeps it (it used to step down and campaign again, a needless failover). A candidate still cannot take
    it, and a lease that really was taken over is still given up."""
    from storage.objectstore.faulty import FaultyObjectStore
    from storage.objectstore.object_store import ObjectStoreError
    faulty = FaultyObjectStore(store, seed=3)
    clock1, clock2 = Clock(), Clock()
    holder = ControllerLease(faulty, "lease", 1, timeout=2.0, clock=clock1)
    candidate = ControllerLease(store, "lease", 2, timeout=2.0, clock=clock2)
    assert await holder.campaign() and holder.epoch == 1
    assert not await candidate.campaign()
    faulty.faults.put_if_match_error_rate = 1.0
    faulty.faults.put_if_match_after_write = 1.0
    clock1.now += 0.5
    with pytest.raises(ObjectStoreError):
        await holder.renew()
    assert faulty.injected[("put_if_match", "after")] == 1
    faulty.faults.put_if_match_error_rate = 0.0
    clock1.now += 0.5
    assert await holder.renew() and holder.holding and holder.valid() and holder.epoch == 1
    clock2.now += 1.9
    assert not await candidate.campaign()                  # the renewals changed the ETag: its timer restarted
    # a real take-over is still noticed: the candidate's clock runs out while the holder is paused
    clock2.now += 2.1
    assert await candidate.campaign() and candidate.epoch == 2
    assert not await holder.renew() and not holder.holding


async def test_a_lease_rewritten_at_the_same_epoch_by_another_process_is_not_adopted(store):
    """The lease object is deleted (by hand, or lost) while node 1 holds epoch 1, and another process with node id 1
    takes the new lease at epoch 1. The first process's renewal is refused; the lease names node 1 at epoch 1, but
    another process wrote it, so the first one gives it up instead of renewing over it."""
    first = ControllerLease(store, "lease", 1, timeout=60.0)
    assert await first.campaign() and first.epoch == 1
    await store.delete("lease")
    second = ControllerLease(store, "lease", 1, timeout=60.0)
    assert await second.campaign() and second.epoch == 1
    assert not await first.renew() and not first.holding
    assert await second.renew() and second.holding


# ---- the controller ----------------------------------------------------------------------------------------------
async def test_failover_fences_the_deposed_controller_and_followers_apply_in_order(make_store):
    timeout = 1.0
    c1 = ObjectStoreController(make_store(), 1, lease_timeout=timeout, poll_interval=0.05)
    c2 = ObjectStoreController(make_store(), 2, lease_timeout=timeout, poll_interval=0.05)
    follower = ObjectStoreController(make_store(), 3, controller_role=False, poll_interval=0.05)
    published: list[int] = []
    follower.add_publisher(lambda old, new: published.append(new.offset))
    await c1.start()
    await wait_for(lambda: c1.active)
    await c2.start()
    await follower.start()
    with pytest.raises(NotControllerError):
        await c2.run(append_op(topic("refused")))
    await c1.run(append_op(topic("t1")))
    await wait_for(lambda: c2.image.get("t1") is not None and follower.image.get("t1") is not None)

    # c1 hangs (its loop stops: no renewals) but still believes in its lease, as a paused process would
    c1._task.cancel()
    frozen = c1.lease.clock()
    c1.lease.clock = lambda: frozen
    await wait_for(lambda: c2.active, timeout=timeout * 10)
    assert c2.image.controller_id == 2 and c2.epoch == 2
    await c2.run(append_op(topic("t2")))
    with pytest.raises(NotControllerError, match="lost the controller role to 2"):
        await c1.run(append_op(topic("from-the-deposed")))
    assert not c1.active and c1.image.get("t2") is not None
    await wait_for(lambda: follower.image.get("t2") is not None)
    assert follower.image.get("from-the-deposed") is None and follower.image.controller_id == 2
    assert published == sorted(published) and follower.image.offset == c2.image.offset
    fresh = ObjectStoreController(make_store(), 4, controller_role=False)
    await fresh.start()
    assert fresh.image.offset == c2.image.offset and fresh.image.get("from-the-deposed") is None
    for c in (c1, c2, follower, fresh):
        await c.stop()


async def test_a_controller_past_its_lease_answers_not_controller_before_its_loop_notices(store):
    """A paused controller wakes up with `active` still set until its loop runs; in that window it must not answer
    controller requests (a heartbeat from its stale image said "unfenced" while the new controller had fenced it)."""
    from types import SimpleNamespace
    from broker.handlers.controller_api import serve
    from protocol.client import decode_response
    c = ObjectStoreController(store, 1, lease_timeout=60.0, poll_interval=0.05)
    await c.start()
    await wait_for(lambda: c.active)
    c._task.cancel()                                       # its loop is not running, as in a paused process
    clock = Clock()
    c.lease.clock, c.lease._renewed_sent_at = clock, clock.now
    assert c.acting
    answered = []

    async def answer(control):
        answered.append(control)
        return {"error_code": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False}

    broker = SimpleNamespace(cluster_control=object(), controller=c)
    refusal = {"is_caught_up": False, "is_fenced": True, "should_shut_down": False}
    assert decode_response(63, 0, await serve(broker, 63, 0, answer, refusal)).error_code == 0
    clock.now += 60.0                                      # the lease lapsed while it was not looking
    assert c.active and not c.acting
    resp = decode_response(63, 0, await serve(broker, 63, 0, answer, refusal))
    assert resp.error_code == 41 and resp.is_fenced and len(answered) == 1          # NOT_CONTROLLER, not asked
    with pytest.raises(NotControllerError):
        await c.run(append_op(topic("refused")))
    await c.stop()


async def test_clean_stop_hands_over_without_waiting_and_snapshots_bound_the_log(make_store):
    store = make_store()
    c1 = ObjectStoreController(store, 1, lease_timeout=60.0, poll_interval=0.05, snapshot_bytes=200)
    c2 = ObjectStoreController(make_store(), 2, lease_timeout=60.0, poll_interval=0.05, snapshot_bytes=200)
    await c1.start()
    await wait_for(lambda: c1.active)
    await c2.start()
    for i in range(4):
        await c1.run(append_op(topic(f"t{i}", 4)))
    await wait_for(lambda: c1._snapshot_task is None)
    snaps = await list_all(store, "metadata/snapshot/")
    batches = await list_all(store, "metadata/log/")
    assert snaps and len(batches) < 5                      # a snapshot replaced the batches before it
    await c1.stop()                                        # resigns: the standby need not wait 60 s
    await wait_for(lambda: c2.active, timeout=10)
    await c2.run(append_op(topic("after-handover")))
    fresh = ObjectStoreController(make_store(), 3, controller_role=False)
    await fresh.start()
    assert all(fresh.image.get(n) is not None for n in ("t0", "t3", "after-handover"))
    assert fresh.image.controller_epoch == 2
    for c in (c2, fresh):
        await c.stop()


async def test_records_that_do_not_apply_are_refused_before_anything_is_written(store):
    c = ObjectStoreController(store, 1, poll_interval=0.05)
    await c.start()
    await wait_for(lambda: c.active)
    before = len(await list_all(store, "metadata/log/"))
    with pytest.raises(ValueError):
        await c.run(append_op([PartitionRecord(uuid.uuid4().hex, 0, [1], [1], 1)]))
    assert len(await list_all(store, "metadata/log/")) == before and c.active
    await c.stop()


async def test_a_leader_change_append_answered_with_an_error_that_landed_still_makes_the_node_active(store):
    """The new controller's LeaderChangeRecord lands but the store's answer is an error. Its next try finds its
    own record (its epoch, its node id) at the end of the log: it is active at that epoch. It used to take the
    log for being ahead of its lease, resign, and make the cluster elect again."""
    from storage.objectstore.faulty import FaultyObjectStore
    from storage.objectstore.object_store import ObjectStoreError
    faulty = FaultyObjectStore(store, seed=5)
    controller = ObjectStoreController(faulty, 1, lease_timeout=30.0, poll_interval=0.05)
    await controller.load()
    try:
        assert await controller.lease.campaign() and controller.lease.epoch == 1
        faulty.faults.put_if_absent_error_rate = 1.0
        faulty.faults.put_if_absent_after_write = 1.0
        with pytest.raises(ObjectStoreError):
            await controller.campaign()
        assert not controller.active
        faulty.faults.put_if_absent_error_rate = 0.0
        assert await controller.campaign()
        assert controller.lease.holding and controller.lease.epoch == 1
        assert (controller.image.controller_id, controller.image.controller_epoch) == (1, 1)
        reader = ObjectStoreMetadataLog(store)
        image = (await reader.load()).image
        assert (image.controller_id, image.controller_epoch, image.offset) == (1, 1, controller.image.offset)
        await controller.run(append_op(topic("after")))            # and it can write
        assert controller.image.get("after") is not None
    finally:
        await controller.stop()


async def test_start_waits_for_a_store_that_answers_503_instead_of_failing(store, caplog):
    """A broker's first read of the metadata log retries what the store may answer later (503, timeouts): one 503
    used to end the process at start-up with a traceback."""
    from storage.objectstore.faulty import FaultyObjectStore
    image = await ObjectStoreMetadataLog(store).append(MetadataImage(), 1, [LeaderChangeRecord(1, 1), *topic("t")])
    faulty = FaultyObjectStore(store, seed=1, error_rate=1.0)
    controller = ObjectStoreController(faulty, 2, lease_timeout=30.0, poll_interval=0.05, controller_role=False)
    starting = asyncio.create_task(controller.start())
    await asyncio.sleep(0.5)
    assert not starting.done()
    faulty.faults.error_rate = 0.0
    await asyncio.wait_for(starting, 10)
    try:
        assert controller.image.offset == image.offset and controller.image.get("t") is not None
        assert "the object store did not answer" in caplog.text
    finally:
        await controller.stop()


async def test_start_reads_a_long_log_from_a_store_that_fails_every_other_request(store):
    """40 batches; the store answers 500/503 to half of its requests and does not retry. Start-up goes on from the
    last batch it read after each error: it used to replay from the start, so it needed 40 answers in a row and
    never finished."""
    from storage.objectstore.faulty import FaultyObjectStore
    writer = ObjectStoreMetadataLog(store)
    image = await writer.append(MetadataImage(), 1, [LeaderChangeRecord(1, 1)])
    for i in range(39):
        image = await writer.append(image, 1, topic(f"t{i}", 1))
    faulty = FaultyObjectStore(store, seed=11, error_rate=0.5)
    controller = ObjectStoreController(faulty, 2, lease_timeout=30.0, poll_interval=0.05, controller_role=False)
    try:
        await asyncio.wait_for(controller.start(), 30)
        assert controller.image.offset == image.offset and controller.image.get("t38") is not None
        assert faulty.injected[("get", "503")] + faulty.injected[("get", "500")] >= 10
    finally:
        await controller.stop()
