"""replication.replica_fetcher.ReplicaFetcher against a scripted leader: the fetcher's requests are answered with
Fetch v12 responses encoded by the broker's own encoder, from a real leader Partition's log, so the follower side
(what it applies, when it stops, what it keeps fetching) is checked on real logs. Issue 22: one partition whose
records cannot be applied must not stop the others (fault 4), a response that comes back after the partition moved
on must not be applied, and the leader's log start reaches the followers (fault 5)."""
from __future__ import annotations

import asyncio

import pytest

from broker.handlers.fetch import _encode
from metadata.image import PartitionImage
from protocol.record_batch import build_batch, split_and_validate
from protocol.records import iter_all_records
from replication.partition import Partition
from replication.replica_fetcher import FetchSettings, ReplicaFetcher
from storage.log.log import Log
from storage.log.log_config import LogConfig
from fakes import wait_for

LEADER = 2


def _records(*values: bytes):
    buf = bytearray(build_batch([(None, v) for v in values]))
    return buf, split_and_validate(buf, 10**6)


class Replicas:
    def __init__(self):
        self.parts: dict[tuple[str, int], Partition] = {}

    def get(self, topic, index):
        return self.parts.get((topic, index))


class ScriptedLeader:
    """Answers each fetch from the leader partitions' logs; `hold` parks the next answer until released, so a test
    can change a follower while its request is in flight."""

    def __init__(self, leaders: dict[str, Partition]):
        self.leaders = leaders
        self.requests: list[dict] = []
        self.hold: asyncio.Event | None = None
        self.parked = asyncio.Event()            # set once a request waits on `hold`
        self.log_start_override: dict[str, int] = {}

    async def send_raw(self, api_key, version, body, **_):
        from protocol import kio_codec
        req = kio_codec.decode_request(api_key, version, memoryview(body), 0)
        self.requests.append(req)
        if self.hold is not None:
            self.parked.set()
            await self.hold.wait()
            self.hold = None
        topics = []
        for t in req.topics:
            leader = self.leaders[t.topic]
            parts = []
            for p in t.partitions:
                leader.update_follower_fetch_state(req.replica_id, p.fetch_offset, 0.0, p.log_start_offset)
                views, _ = leader.read(p.fetch_offset, 1 << 20, min_one_message=True, fetch_only_committed=False)
                parts.append((p.partition, 0, leader.high_watermark, leader.high_watermark,
                              self.log_start_override.get(t.topic, leader.log_start_offset), -1, views,
                              sum(len(v) for v in views), None, None, None))
            topics.append((t.topic, parts))
        await asyncio.sleep(0.01)
        return memoryview(b"".join(_encode(12, 0, 0, topics)))

    def close(self):
        pass


def _partition(tmp_path, name: str, broker: int, leader: int, epoch: int = 1) -> Partition:
    p = Partition(name, 0, Log(tmp_path / f"b{broker}" / f"{name}-0", LogConfig()), local_broker_id=broker)
    state = PartitionImage((2, 1), (2, 1), leader, epoch, 1)
    if leader == broker:
        p.make_leader(state, 0.0)
    else:
        p.make_follower(state)
    return p


async def _fetcher(tmp_path, names=("t", "u")):
    leaders = {n: _partition(tmp_path, n, LEADER, LEADER) for n in names}
    replicas = Replicas()
    for n in names:
        replicas.parts[(n, 0)] = _partition(tmp_path, n, 1, LEADER)
    fetcher = ReplicaFetcher(LEADER, ("127.0.0.1", 1), FetchSettings(1, max_wait_ms=10, backoff_ms=50), replicas)
    fetcher.conn = scripted = ScriptedLeader(leaders)
    for n in names:
        fetcher.add(n, 0)
    return fetcher, scripted, leaders, replicas


async def test_records_one_partition_cannot_take_stop_only_that_partition(tmp_path):
    """A disk error (or any unexpected failure) appending to t-0 used to end the fetcher task silently: u-0, followed
    from the same leader, stopped too. Now t-0 is marked failed with a log line and u-0 keeps replicating."""
    fetcher, scripted, leaders, replicas = await _fetcher(tmp_path)
    try:
        def disk_full(*_):
            raise OSError(28, "No space left on device")
        replicas.get("t", 0).log.append_as_follower = disk_full
        for n in ("t", "u"):
            leaders[n].append_records_to_leader(*_records(b"a", b"b"), required_acks=1)
        await wait_for(lambda: replicas.get("u", 0).log_end_offset == 2)
        leaders["u"].append_records_to_leader(*_records(b"c"), required_acks=1)
        await wait_for(lambda: replicas.get("u", 0).log_end_offset == 3)
        assert fetcher.alive and ("t", 0) in fetcher.failed and ("t", 0) not in fetcher.partitions
        fetcher.add("t", 0)                                   # a leadership change adds it back
        assert ("t", 0) not in fetcher.failed
    finally:
        await fetcher.stop()


async def test_a_response_for_a_partition_that_moved_on_is_not_applied(tmp_path):
    """The follower truncated (or took a new leader epoch) while its fetch was in flight: the records answer a request
    for another state of the log and must be dropped, as Kafka's fetcher checks fetch offset and epoch."""
    fetcher, scripted, leaders, replicas = await _fetcher(tmp_path, names=("t",))
    try:
        follower = replicas.get("t", 0)
        for v in (b"a", b"b"):
            leaders["t"].append_records_to_leader(*_records(v), required_acks=1)
        await wait_for(lambda: follower.log_end_offset == 2)
        scripted.hold = hold = asyncio.Event()
        leaders["t"].append_records_to_leader(*_records(b"c"), required_acks=1)
        await asyncio.wait_for(scripted.parked.wait(), 10)
        assert scripted.requests[-1].topics[0].partitions[0].fetch_offset == 2
        follower.make_follower(PartitionImage((2, 1), (2, 1), LEADER, 2, 2))   # a new epoch, same leader
        follower.truncate_to(1)
        hold.set()                                           # the answer for offset 2 arrives now
        await wait_for(lambda: follower.log_end_offset == 3)
        views, _ = follower.read(0, 1 << 20, min_one_message=True, fetch_only_committed=False)
        assert [(r.offset, bytes(r.value)) for v in views for r in iter_all_records(v)] == \
            [(0, b"a"), (1, b"b"), (2, b"c")]                # not (0, a), (2, c): a hole where the late batch landed
    finally:
        await fetcher.stop()


async def test_the_leaders_log_start_reaches_the_follower(tmp_path):
    """DeleteRecords on the leader: followers move their log start too (bounded by their high watermark), so a new
    leader does not serve deleted records again (fault 5)."""
    fetcher, scripted, leaders, replicas = await _fetcher(tmp_path, names=("t",))
    try:
        follower = replicas.get("t", 0)
        for i in range(10):
            leaders["t"].append_records_to_leader(*_records(b"v%d" % i), required_acks=1)
        await wait_for(lambda: follower.log_end_offset == 10 and follower.high_watermark == 10)
        assert leaders["t"].delete_records_on_leader(6) == 6
        await wait_for(lambda: follower.log_start_offset == 6)
        assert leaders["t"].low_watermark() == 6                # what DeleteRecords waits for
    finally:
        await fetcher.stop()


def test_an_empty_follower_whose_log_start_falls_inside_the_first_batch_starts_at_the_batch(tmp_path):
    """Kafka's doAppendRecordsToFollowerOrFutureReplica: a new (or wiped) replica learns the leader's log start, 5,
    which DeleteRecords put in the middle of the batch 0-9; the batch the leader sends from there starts at 0. The
    follower starts its log at 0 and appends it, instead of failing the append forever (fault 4)."""
    leader = _partition(tmp_path, "t", LEADER, LEADER)
    leader.append_records_to_leader(*_records(*[b"v%d" % i for i in range(10)]), required_acks=1)
    follower = _partition(tmp_path, "t", 1, LEADER)
    follower.restart_at(5)                                   # OFFSET_OUT_OF_RANGE: the leader's log starts at 5
    views, _ = leader.read(5, 1 << 20, min_one_message=True, fetch_only_committed=False)
    follower.append_records_to_follower(bytearray(views[0]), 10)
    assert (follower.log_start_offset, follower.log_end_offset) == (0, 10)
    with pytest.raises(Exception):                           # any other gap is still refused
        follower.append_records_to_follower(bytearray(views[0]), 10)
