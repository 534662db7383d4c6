"""The offset after the last batch of a remote read's views (replication/partition.py `_end_of`): remote reads slice
batches at chunk boundaries, so a batch, and its header, may span views. The views are walked where they are (a
read_committed Fetch from the remote tier asks this of every answer), never joined."""
from __future__ import annotations

import random

from protocol.record_batch import build_batch
from replication.partition import _end_of


def _log(n: int) -> bytes:
    return b"".join(build_batch([(b"k", b"v" * random.Random(i).randrange(0, 300))] * (1 + i % 3), base_offset=10 * i)
                    for i in range(n))


def _split(buf: bytes, rng: random.Random) -> list[memoryview]:
    """`buf` cut at random places, some views a few bytes long (a header across three views)."""
    cuts = sorted({rng.randrange(1, len(buf)) for _ in range(rng.randrange(1, 40))} |
                  {c + d for c in [rng.randrange(1, len(buf) - 10)] for d in (1, 3)})
    mv = memoryview(buf)
    return [mv[a:b] for a, b in zip([0, *cuts], [*cuts, len(buf)])]


def test_the_end_is_the_same_however_the_views_are_cut():
    buf = _log(30)
    want = 10 * 29 + 1 + 29 % 3            # the last batch's base offset plus its records
    assert _end_of([memoryview(buf)], 5) == want
    for seed in range(300):
        views = _split(buf, random.Random(seed))
        assert _end_of(views, 5) == want, seed


def test_no_batch_gives_the_start_and_a_cut_off_tail_is_not_a_batch():
    assert _end_of([memoryview(b"")], 7) == 7
    buf = _log(3)
    last = len(build_batch([(b"k", b"v" * random.Random(2).randrange(0, 300))] * 3, base_offset=20))
    views = [memoryview(buf[:10]), memoryview(buf[10:-last]), memoryview(buf[-last:][:30])]   # a header cut short
    assert _end_of(views, 0) == 12
