"""Aborted transactions of read_committed fetches from the remote tier (storage/tiered/remote_log_reader.py): the
entry of a transaction is found in its marker's segment even when that segment comes after the one read, a segment
without a `.txnindex` object has none, and any other error reading one fails the fetch instead of hiding aborted
records (Kafka's RemoteIndexCache: only a missing resource is an empty index). The walk over later segments
follows the leader epochs, as Kafka's does: after a leadership change the store may hold overlapping segments of
two leaders."""
from __future__ import annotations

import uuid

import pytest

from storage.log.transaction_index import AbortedTxn
from storage.tiered.remote_log_metadata import RemoteResourceNotFoundException, RemoteStorageException
from storage.tiered.remote_log_reader import EmptyWalks, RemoteLogReader, _LruFutures


class _Segment:
    def __init__(self, start: int, end: int):
        self.start_offset, self.end_offset = start, end
        self.tip = "t"
        self.segment_id = type("Id", (), {"id": uuid.UUID(int=start)})()


class _Log:
    local_log_start_offset = 100

    def collect_aborted_transactions(self, start, upper):
        return []


class _Reader(RemoteLogReader):
    def __init__(self, indexes: dict):
        self.segments = [_Segment(0, 49), _Segment(50, 99)]
        self.indexes = indexes                   # start offset -> bytes | exception
        self._indexes = _LruFutures(1 << 20, lambda x: x.size)
        self._empty_walks = EmptyWalks()

        class _Rlmm:
            def segments_version(self, tip):
                return None                      # nothing remembered between walks
        self.rlmm = _Rlmm()

        class _Rsm:
            async def fetch_index(_, md, kind):
                v = indexes[md.start_offset]
                if isinstance(v, Exception):
                    raise v
                return v
        self.rsm = _Rsm()

    def tip_of(self, topic, partition):
        return "t"

    def segment_for_offset(self, tip, lg, offset):
        return next((s for s in self.segments if s.start_offset <= offset <= s.end_offset), None)

    def _following(self, tip, md, lg=None):
        return (s for s in self.segments if s.start_offset > md.end_offset)


async def test_entry_in_a_later_segment_and_missing_indexes():
    entry = AbortedTxn(7, 40, 55, 56)              # data in the first segment, marker in the second
    r = _Reader({0: RemoteResourceNotFoundException("no index"), 50: entry.pack()})
    assert await r.collect_aborted_transactions("t", 0, _Log(), 30, 50) == [entry]


async def test_an_unreadable_index_fails_the_fetch():
    r = _Reader({0: RemoteStorageException("503 Slow Down", retriable=True), 50: b""})
    with pytest.raises(RemoteStorageException):
        await r.collect_aborted_transactions("t", 0, _Log(), 30, 50)
    r.indexes[0] = RemoteResourceNotFoundException("no index")      # the failure was not cached
    assert await r.collect_aborted_transactions("t", 0, _Log(), 30, 50) == []


def test_following_walks_the_chain_of_next_segments():
    """Without the leader's epochs, `_following` (one listing for a whole walk) yields what asking for the next
    segment again and again gives: the finished segment starting first past the end of the one before, over
    overlapping segments and segments not yet (or no longer) finished."""
    import random

    from storage.tiered.remote_log_metadata import RemoteLogSegmentState as S

    class _Md(_Segment):
        def __init__(self, start, end, state, ts):
            super().__init__(start, end)
            self.state, self.event_timestamp_ms = state, ts

    class _Rlmm:
        def __init__(self, segs):
            self.segs = segs

        def list_remote_log_segments(self, tip):
            return sorted(self.segs, key=lambda s: (s.start_offset, s.end_offset, s.event_timestamp_ms))

    def next_one(segs, md):                     # the definition: the smallest start past md's end, finished
        later = [s for s in segs if s.state == S.COPY_SEGMENT_FINISHED and s.start_offset > md.end_offset]
        return min(later, key=lambda s: (s.start_offset, s.end_offset, s.event_timestamp_ms), default=None)

    rnd = random.Random(11)
    states = [S.COPY_SEGMENT_FINISHED] * 4 + [S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED]
    for _ in range(300):
        segs = []
        for _ in range(rnd.randint(0, 12)):
            start = rnd.randint(0, 100)
            segs.append(_Md(start, start + rnd.randint(0, 30), rnd.choice(states), rnd.randint(0, 5)))
        r = RemoteLogReader.__new__(RemoteLogReader)
        r.rlmm = _Rlmm(segs)
        for md in segs:
            want, cur = [], next_one(segs, md)
            while cur is not None:
                want.append(cur)
                cur = next_one(segs, cur)
            assert list(r._following("t", md)) == want
            assert r._next_segment("t", md) is (want[0] if want else None)


def _tiered(segments, tmp_path):
    """A reader over a real RemoteLogMetadataCache holding `segments` [(start, end, epochs, aborted entries)], copied
    in that order, and a leader whose epoch cache says epoch 0 from 0 and epoch 1 from 250."""
    import uuid

    from storage.log.leader_epoch import LeaderEpochFileCache
    from storage.tiered.remote_log_metadata import (RemoteLogMetadataCache, RemoteLogSegmentId,
                                                    RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
                                                    TopicIdPartition)
    from storage.tiered.remote_log_metadata import RemoteLogSegmentState as S

    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    cache = RemoteLogMetadataCache(tip)
    indexes = {}

    def tier(start, end, epochs, entries):
        ts = len(indexes)
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), start, end, 0, 1, ts, 1000, epochs)
        cache.add_copy_in_progress(md)
        cache.update(RemoteLogSegmentMetadataUpdate(md.segment_id, ts, None, S.COPY_SEGMENT_FINISHED, 1))
        indexes[md.segment_id.id] = b"".join(e.pack() for e in entries)
    for segment in segments:
        tier(*segment)

    class _Rlmm:
        def list_remote_log_segments(self, tip):
            return cache.list_segments()

        def segments_version(self, tip):
            return cache.version

        def cache_update(self, u):
            cache.update(u)

        def remote_log_segment_metadata(self, tip, epoch, offset):
            return cache.segment_for(epoch, offset)

    class _Rsm:
        async def fetch_index(self, md, kind):
            return indexes[md.segment_id.id]

    leader = _Log()
    leader.leader_epoch_cache = LeaderEpochFileCache(tmp_path)
    leader.leader_epoch_cache.assign(0, 0)
    leader.leader_epoch_cache.assign(1, 250)

    r = RemoteLogReader.__new__(RemoteLogReader)
    r.rlmm, r.rsm = _Rlmm(), _Rsm()
    r._indexes = _LruFutures(1 << 20, lambda x: x.size)
    r._empty_walks = EmptyWalks()
    r.tip_of = lambda topic, partition: tip
    r.tier = tier                                # tier one more segment: (start, end, epochs, aborted entries)
    return r, tip, leader


ABORTED = AbortedTxn(7, 90, 220, 221)           # producer 7 began at 90, aborted at 220


@pytest.mark.parametrize("new_start", [100, 50], ids=["same-start", "earlier-start"])
async def test_the_walk_covers_every_offset_when_a_new_leader_tiered_segments_of_other_bounds(new_start, tmp_path):
    """The old leader (epoch 0) tiered [0, 99] and [100, 199]. The new one (epoch 1 from 250), whose segments roll at
    other offsets than its predecessor's, went on from offset 200 with its segment [new_start, 249], then [250, 349].
    A read_committed fetch of [20, 100) must find the aborted transaction whose marker is at 220, in the new leader's
    segment only. Going on with the segment starting first past the end skips [200, 249] ([100, 199], then
    [250, 349]); Kafka's findNextSegmentMetadata asks for the segment holding the next offset in its leader epoch,
    and its epoch state drops the entries a later copy covers ([100, 199] once [50, 249] is in), so that the walk
    covers every offset."""
    r, tip, leader = _tiered([(0, 99, ((0, 0),), []), (100, 199, ((0, 100),), []),
                              (new_start, 249, ((0, new_start),), [ABORTED]), (250, 349, ((1, 250),), [])], tmp_path)
    assert await r.collect_aborted_transactions("t", 0, leader, 20, 100) == [ABORTED]
    first = r.segment_for_offset(tip, leader, 20)
    assert (first.start_offset, first.end_offset) == (0, 99)
    assert [(s.start_offset, s.end_offset) for s in r._following(tip, first, leader)] == [(new_start, 249), (250, 349)]


async def test_a_transaction_indexed_by_two_overlapping_segments_is_answered_once(tmp_path):
    """The old leader's [100, 199] and the new leader's [150, 249] both hold the marker at 170, so both indexes list
    producer 7's aborted transaction; the walk from [100, 199] goes on to [150, 249] (which holds 200). Kafka answers
    each (producer id, first offset) once; a duplicate would make a consumer skip a later transaction's records."""
    aborted = AbortedTxn(7, 110, 170, 171)
    r, tip, leader = _tiered([(0, 99, ((0, 0),), []), (100, 199, ((0, 100),), [aborted]),
                              (150, 249, ((0, 150),), [aborted]), (250, 349, ((1, 250),), [])], tmp_path)
    assert await r.collect_aborted_transactions("t", 0, leader, 120, 190) == [aborted]


async def test_a_walk_that_found_no_aborted_transaction_is_not_repeated_until_segments_or_epochs_change(tmp_path):
    """Without aborted transactions a read_committed fetch walked every later segment's index at every fetch (16%
    of the broker's event loop for a consumer catching up on 48 segments; growing with the topic). A walk that found
    none after a segment is remembered while the segments and the leader's epochs stay as they were: the indexes of
    segments never change. A segment tiered since, or a new epoch, makes the next fetch walk again."""
    r, tip, leader = _tiered([(0, 99, ((0, 0),), []), (100, 199, ((0, 100),), []), (200, 249, ((0, 200),), []),
                              (250, 349, ((1, 250),), [])], tmp_path)
    looked_up: list[int] = []

    def count(reader):
        txn_index = reader._txn_index

        def counting(md):
            looked_up.append(md.start_offset)
            return txn_index(md)
        reader._txn_index = counting
    count(r)
    assert await r.collect_aborted_transactions("t", 0, leader, 20, 100) == []
    assert set(looked_up) == {0, 100, 200, 250}
    looked_up.clear()
    assert await r.collect_aborted_transactions("t", 0, leader, 50, 100) == []
    assert set(looked_up) == {0}                    # its own index only: nothing after it has any
    looked_up.clear()
    assert await r.collect_aborted_transactions("t", 0, leader, 150, 190) == []
    assert set(looked_up) == {100}                  # nor after the segments on that walk (the consumer's next)
    late = AbortedTxn(9, 60, 380, 381)           # began at 60 in the first segment, aborted at 380
    r.tier(350, 449, ((1, 350),), [late])
    looked_up.clear()
    assert await r.collect_aborted_transactions("t", 0, leader, 50, 100) == [late]
    assert set(looked_up) == {0, 100, 200, 250, 350}
    looked_up.clear()
    assert await r.collect_aborted_transactions("t", 0, leader, 50, 100) == [late]     # found: not remembered
    assert set(looked_up) == {0, 100, 200, 250, 350}
    r2, tip2, leader2 = _tiered([(0, 99, ((0, 0),), []), (100, 199, ((0, 100),), [])], tmp_path / "b")
    assert await r2.collect_aborted_transactions("t", 0, leader2, 20, 100) == []
    count(r2)
    looked_up.clear()
    leader2.leader_epoch_cache.assign(2, 400)    # a new leader epoch: the walk's path may differ
    assert await r2.collect_aborted_transactions("t", 0, leader2, 20, 100) == []
    assert set(looked_up) == {0, 100}


async def test_a_segment_tiered_while_a_walk_waits_is_not_hidden_by_a_remembered_walk(tmp_path, monkeypatch):
    """A walk from segment 0 waits for its index GET; meanwhile segment 21 is tiered with an aborted transaction that
    began at offset 20 (and its local copy may be gone by then). The walk then reaches segment 10, remembered as
    followed by nothing under the versions it started with: it must not stop there on that, and must answer what a
    walk that remembers nothing does."""
    import asyncio

    r, tip, leader = _tiered([(i * 100, i * 100 + 99, ((0, i * 100),), []) for i in range(21)], tmp_path)
    leader.leader_epoch_cache.truncate_from_end(1)
    assert await r.collect_aborted_transactions("t", 0, leader, 1000, 1050) == []    # remembers segments 10-20
    first = r.rlmm.list_remote_log_segments(tip)[0]
    r._indexes.drop(lambda k: k[1] == first.segment_id.id.int)
    gate = asyncio.Event()
    fetch_index = type(r.rsm).fetch_index

    async def slow(rsm, md, kind):
        if md.start_offset == 0:
            await gate.wait()
        return await fetch_index(rsm, md, kind)
    monkeypatch.setattr(type(r.rsm), "fetch_index", slow)
    walk = asyncio.ensure_future(r.collect_aborted_transactions("t", 0, leader, 10, 50))
    await asyncio.sleep(0.01)
    late = AbortedTxn(9, 20, 2150, 0)
    r.tier(2100, 2199, ((0, 2100),), [late])
    gate.set()
    assert await asyncio.wait_for(walk, 5) == [late]


@pytest.mark.parametrize("seed", range(12))
async def test_remembered_walks_answer_as_a_fresh_walk_does_while_segments_and_epochs_change(seed, tmp_path):
    """Random steps: segments tiered (with aborted transactions that may have begun segments earlier), the oldest
    deleted, new leader epochs; after each, a random read_committed lookup answers the same with remembered walks
    as a reader that walks every time."""
    import random

    from storage.tiered.remote_log_metadata import RemoteLogSegmentMetadataUpdate
    from storage.tiered.remote_log_metadata import RemoteLogSegmentState as S
    rnd = random.Random(seed)
    r, tip, leader = _tiered([(0, 99, ((0, 0),), [])], tmp_path)
    leader.leader_epoch_cache.truncate_from_end(1)       # epoch 0 from 0 only
    fresh = RemoteLogReader.__new__(RemoteLogReader)
    fresh.rsm, fresh._indexes, fresh._empty_walks, fresh.tip_of = r.rsm, r._indexes, EmptyWalks(), r.tip_of

    class _Forgetful:                                    # the same segments, never a version: walks every time
        def __getattr__(self, name):
            return getattr(r.rlmm, name)

        def segments_version(self, tip):
            return None
    fresh.rlmm = _Forgetful()
    epoch, end, producer = 0, 99, 0
    for step in range(60):
        op = rnd.random()
        if op < 0.4:                                     # tier the next segment
            start, end = end + 1, end + rnd.randint(20, 100)
            entries = []
            for _ in range(rnd.choice([0, 0, 1, 2])):
                producer += 1
                last = rnd.randint(start, end)
                entries.append(AbortedTxn(producer, rnd.randint(max(0, start - 250), last), last, 0))
            r.tier(start, end, ((epoch, start),), entries)
        elif op < 0.5:                                   # a new leader epoch from the next offset
            epoch += 1
            leader.leader_epoch_cache.assign(epoch, end + 1)
        elif op < 0.6:                                   # the oldest segment is deleted
            segs = r.rlmm.list_remote_log_segments(tip)
            if len(segs) > 1:
                for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
                    r.rlmm.cache_update(RemoteLogSegmentMetadataUpdate(segs[0].segment_id, step, None, state, 1))
        segs = r.rlmm.list_remote_log_segments(tip)
        for _ in range(3):                               # lookups between changes: the memo answers some
            seg = rnd.choice(segs)
            start = rnd.randint(seg.start_offset, seg.end_offset)
            upper = rnd.randint(start + 1, seg.end_offset + 1)
            got = await r.collect_aborted_transactions("t", 0, leader, start, upper)
            want = await fresh.collect_aborted_transactions("t", 0, leader, start, upper)
            assert got == want, (step, start, upper)
