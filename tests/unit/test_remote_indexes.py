"""A remote segment's offset and time indexes (storage/tiered/remote_log_reader.py `_Indexes`) are searched where they
lie, by bisection, instead of being parsed entry by entry at every segment a consumer reads: the same answers as a
parse that stops at the first entry that does not increase (an index uploaded untrimmed ends in preallocated zeros),
for any offset or timestamp, below, within and past the entries."""
from __future__ import annotations

import bisect
import random
import struct

from storage.tiered.remote_log_reader import _Indexes


def _parsed(base: int, offset_index: bytes, time_index: bytes):
    """What the reader used to do: parse every entry up to the first one that does not increase."""
    offsets, positions = [], []
    for rel, pos in struct.iter_unpack(">II", offset_index[:len(offset_index) // 8 * 8]):
        if offsets and (base + rel <= offsets[-1] or pos <= positions[-1]):
            break
        offsets.append(base + rel)
        positions.append(pos)
    times, time_offsets = [], []
    for ts, rel in struct.iter_unpack(">qI", time_index[:len(time_index) // 12 * 12]):
        if times and (ts <= times[-1] or base + rel < time_offsets[-1]):
            break
        times.append(ts)
        time_offsets.append(base + rel)

    def position_for(offset):
        i = bisect.bisect_right(offsets, offset) - 1
        return positions[i] if i >= 0 else 0

    def offset_for_timestamp(ts):
        i = bisect.bisect_right(times, ts) - 1
        return time_offsets[i] if i >= 0 else base
    return position_for, offset_for_timestamp


def test_bisection_answers_as_the_parse_did():
    rng = random.Random(7)
    for _ in range(300):
        base = rng.randrange(0, 10**9)
        n = rng.choice([0, 1, 2, 3, rng.randrange(4, 300)])
        rels = sorted(rng.sample(range(1, 10**6), n))
        if n and rng.random() < 0.5:
            rels[0] = 0                                  # the segment's first batch is often indexed
        positions = sorted(rng.sample(range(1, 10**8), n))
        if n and rels[0] == 0 and rng.random() < 0.5:
            positions[0] = 0
        ts0 = rng.randrange(0, 2**40)
        stamps = sorted(rng.sample(range(ts0, ts0 + 10**7), n))
        time_rels = sorted(rng.choices(rels, k=n)) if n else []
        tail = bytes(rng.choice([0, 0, 8, 80, 8 * 1000]))      # preallocated, never trimmed
        offset_index = b"".join(struct.pack(">II", r, p) for r, p in zip(rels, positions)) + tail
        time_index = b"".join(struct.pack(">qI", t, r) for t, r in zip(stamps, time_rels)) + bytes(len(tail) // 8 * 12)
        idx = _Indexes(base, offset_index, time_index)
        position_for, offset_for_timestamp = _parsed(base, offset_index, time_index)
        queries = [base - 1, base, base + 10**6 + 1] + [base + r + d for r in rels[:20] for d in (-1, 0, 1)]
        queries += [base + rng.randrange(0, 10**6) for _ in range(20)]
        for q in queries:
            assert idx.position_for(q) == position_for(q), (q, n)
        stamp_queries = [ts0 - 1, ts0 + 10**7 + 1] + [t + d for t in stamps[:20] for d in (-1, 0, 1)]
        stamp_queries += [ts0 + rng.randrange(0, 10**7) for _ in range(20)]
        for q in stamp_queries:
            assert idx.offset_for_timestamp(q) == offset_for_timestamp(q), (q, n)
