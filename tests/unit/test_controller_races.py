"""Two control-plane events at once, on the real ObjectStoreController over a store whose appends are slow enough
for the events to overlap. Each test here failed before the controller ran its operations one at a time against
the latest image (issue 22): the second operation's records were computed from the image before the first one's,
so the last append won and undid part of the first (a fenced broker back in the ISR, a leader epoch going back,
two brokers given the same producer-id block)."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from metadata.cluster_control import ClusterControl
from metadata.controller import PRODUCER_ID_BLOCK
from metadata.image import MetadataImage
from metadata.object_store_controller import ObjectStoreController
from metadata.object_store_log import ObjectStoreMetadataLog
from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
from storage.objectstore.object_store import open_object_store
from fakes import Clock, FaultyStore, wait_for

TOPIC_ID = uuid.UUID(int=0xBEEF).hex


async def _cluster(tmp_path, leader: int = 1, leader_epoch: int = 5):
    """A metadata log with brokers 1-3 registered and unfenced and topic t: one partition on (1, 2, 3), all in
    sync; then an active controller (node 1) over a store whose appends can be slowed down."""
    store = FaultyStore(open_object_store(f"file://{tmp_path}/store"))
    mlog = ObjectStoreMetadataLog(store)
    records = [RegisterBrokerRecord(b, f"inc-{b}", None, [("PLAINTEXT", "localhost", 9090 + b)]) for b in (1, 2, 3)]
    records += [TopicRecord("t", TOPIC_ID),
                PartitionRecord(TOPIC_ID, 0, [1, 2, 3], [1, 2, 3], leader, leader_epoch, 7)]
    await mlog.append(MetadataImage(), 0, records)
    controller = ObjectStoreController(store, 1, lease_timeout=30.0, poll_interval=0.05)
    await controller.start()
    await wait_for(lambda: controller.active)
    clock = Clock()
    control = ClusterControl(controller, session_timeout_ms=400, clock=clock)
    return store, controller, control, clock


def _partition(controller) -> object:
    return controller.image.topics_by_id[TOPIC_ID].partition(0)


async def _partition_history(store) -> list[PartitionRecord]:
    replayed = []
    image = (await ObjectStoreMetadataLog(store).load()).image
    mlog = ObjectStoreMetadataLog(store)
    offset = -1
    import msgspec
    from metadata.records import MetadataBatch
    while offset < image.offset:
        batch = msgspec.msgpack.decode(await store.get(mlog.batch_key(offset + 1)), type=MetadataBatch)
        replayed += [r for r in batch.records if isinstance(r, PartitionRecord)]
        offset += len(batch.records)
    return replayed


@pytest.mark.parametrize("shutting_down", [3, 1], ids=["follower-shuts-down", "leader-shuts-down"])
async def test_controlled_shutdown_while_another_broker_is_fenced(tmp_path, shutting_down):
    """Broker `shutting_down` asks for a controlled shutdown while broker 2's session expires. Both must leave the
    ISR; with the leader shutting down, leadership ends on the one broker left, its epoch one up per move."""
    store, controller, control, clock = await _cluster(tmp_path)
    try:
        image = controller.image
        epochs = {b: image.brokers[b].epoch for b in (1, 2, 3)}
        await control.heartbeat(1, epochs[1], image.offset, False)          # the controller's view of sessions
        clock.now += 10.0                                                    # broker 2 stops heartbeating
        for b in (1, 3):
            await control.heartbeat(b, epochs[b], image.offset, False)
        store.delay["put_if_absent"] = 0.3                                   # appends take a while
        shutdown = asyncio.create_task(control.heartbeat(shutting_down, epochs[shutting_down], image.offset, True))
        await asyncio.sleep(0.05)                                            # its records are being appended
        control.start()                                                      # the session check fences broker 2
        try:
            assert (await shutdown)[0] == 0
            await wait_for(lambda: controller.image.brokers[2].fenced)
            await asyncio.sleep(0.5)                                         # any late append lands
        finally:
            await control.stop()
        p = _partition(controller)
        left = ({1, 2, 3} - {2, shutting_down}).pop()
        assert controller.image.brokers[shutting_down].fenced and controller.image.brokers[2].fenced
        assert p.isr == (left,) and p.leader == left
        history = await _partition_history(store)
        epochs_seen = [(r.partition_epoch, r.leader_epoch) for r in history]
        assert [pe for pe, _ in epochs_seen] == list(range(7, 7 + len(history)))   # each change follows the last
        assert all(a[1] <= b[1] for a, b in zip(epochs_seen, epochs_seen[1:]))     # leader epochs never go back
        assert p.partition_epoch == 9
        leaders = [(5, 1)] + [(r.leader_epoch, r.leader) for r in history[1:]]
        changes = sum(a[1] != b[1] for a, b in zip(leaders, leaders[1:]))
        assert all(b[0] == a[0] + (a[1] != b[1]) for a, b in zip(leaders, leaders[1:]))  # +1 per leader change
        assert p.leader_epoch == 5 + changes
        assert changes == 0 if shutting_down == 3 else changes >= 1      # a follower leaving moves no leadership
    finally:
        await controller.stop()


async def test_concurrent_producer_id_blocks_are_disjoint(tmp_path):
    store, controller, control, clock = await _cluster(tmp_path)
    try:
        store.delay["put_if_absent"] = 0.2
        starts = await asyncio.gather(*(control.allocate_producer_ids(b) for b in (1, 2, 3, 1)))
        assert len(set(starts)) == 4
        ordered = sorted(starts)
        assert all(b - a >= PRODUCER_ID_BLOCK for a, b in zip(ordered, ordered[1:]))
        assert controller.image.next_producer_id >= ordered[-1] + PRODUCER_ID_BLOCK
    finally:
        await controller.stop()


async def test_a_lease_winner_whose_catch_up_fails_keeps_trying_and_becomes_active(tmp_path):
    """The node wins the lease, then cannot read the metadata log for longer than the lease lasts (a slow or failing
    store). It must not stay a lease holder that is never active and never renews: once the store answers again it
    becomes the active controller."""
    store = FaultyStore(open_object_store(f"file://{tmp_path}/store"))
    await ObjectStoreMetadataLog(store).append(MetadataImage(), 0, [
        RegisterBrokerRecord(1, "inc-1", None, [("PLAINTEXT", "localhost", 9091)])])
    broken = {"on": True}
    store.fail_before["get"] = lambda key: broken["on"] and "/log/" in key
    controller = ObjectStoreController(store, 1, lease_timeout=0.6, poll_interval=0.05)
    broken["on"] = False
    await controller.start()                   # reads the log once; the failures start after it
    broken["on"] = True
    try:
        await wait_for(lambda: controller.lease.holding or controller.lease.epoch > 0, timeout=10)
        await asyncio.sleep(1.5)               # well past the lease: the catch-up kept failing
        assert not controller.active
        broken["on"] = False
        await wait_for(lambda: controller.active, timeout=10)
        assert controller.image.controller_id == 1 and controller.acting
    finally:
        await controller.stop()


async def test_a_caller_that_gives_up_does_not_stop_the_queue(tmp_path):
    """A request whose caller is cancelled (a client that disconnected) while operations queued before it are being
    appended is skipped; the ones queued after it are still run and answered."""
    store, controller, control, clock = await _cluster(tmp_path)
    try:
        store.delay["put_if_absent"] = 0.3
        first = asyncio.create_task(control.allocate_producer_ids(1))
        await asyncio.sleep(0.05)                                 # its batch is being appended
        gives_up = asyncio.create_task(control.allocate_producer_ids(2))
        after = asyncio.create_task(control.allocate_producer_ids(3))
        await asyncio.sleep(0.05)
        gives_up.cancel()
        starts = await asyncio.wait_for(asyncio.gather(first, after), 10)
        assert starts[1] == starts[0] + PRODUCER_ID_BLOCK         # the cancelled one took no block
        assert gives_up.cancelled()
    finally:
        await controller.stop()
    with pytest.raises(Exception, match="not the active controller"):
        await controller.run(lambda image: ([], None))            # a stopped controller runs nothing
