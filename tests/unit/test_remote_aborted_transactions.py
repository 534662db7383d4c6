"""Aborted transactions of read_committed fetches from the remote tier (storage/tiered/remote_log_reader.py): the
entry of a transaction is found in its marker's segment even when that segment comes after the one read, a segment
without a `.txnindex` object has none, and any other error reading one fails the fetch instead of hiding aborted
records (Kafka's RemoteIndexCache: only a missing resource is an empty index)."""
from __future__ import annotations

import pytest

from storage.log.transaction_index import AbortedTxn
from storage.tiered.remote_log_metadata import RemoteResourceNotFoundException, RemoteStorageException
from storage.tiered.remote_log_reader import RemoteLogReader, _LruFutures


class _Segment:
    def __init__(self, start: int, end: int):
        self.start_offset, self.end_offset = start, end
        self.tip = "t"
        self.segment_id = type("Id", (), {"id": f"{start}"})()


class _Log:
    local_log_start_offset = 100

    def collect_aborted_transactions(self, start, upper):
        return []


class _Reader(RemoteLogReader):
    def __init__(self, indexes: dict):
        self.segments = [_Segment(0, 49), _Segment(50, 99)]
        self.indexes = indexes                   # start offset -> bytes | exception
        self._indexes = _LruFutures(1 << 20, lambda x: x.size)

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

    def _following(self, tip, md):
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
    """`_following` (one listing for a whole walk) yields what asking for the next segment again and again gives:
    the finished segment starting first past the end of the one before, over overlapping segments of other leader
    epochs and segments not yet (or no longer) finished."""
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
