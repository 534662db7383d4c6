"""The direct reader's record decoding compiled with numba: a records section (uncompressed v2 records) walked in
machine code into offset, timestamp and key/value position arrays, and the key and value bytes gathered into
contiguous Arrow buffers, with no Python object per record.

decode.py's pure-Python loop costs about 1.4 us per 1 KiB record and building its Arrow columns 0.7 us more; both
were the bound of direct reads (docs/benchmarks.md). This walks the same layout with the same checks (a record's
length inside the section, key and value inside the record, the records filling the section; headers skipped) and
decode.py stays the reference: it decodes headers (includeHeaders) and runs where numba is not installed. Compiled
functions are cached on disk (numba's cache=True), so a Spark worker compiles them once.
"""
from __future__ import annotations

import numpy as np

try:
    from numba import njit
except ImportError:                       # the spark extra installs numba; without it decode.py does the work
    njit = None

# error codes of _scan
OK, BAD_LENGTH, RUN_PAST, LEFT_OVER, TRUNCATED = 0, 1, 2, 3, 4
MESSAGES = {BAD_LENGTH: "a record's length does not fit the records section",
            RUN_PAST: "a record's key/value run past the record",
            LEFT_OVER: "bytes left over after the batch's records",
            TRUNCATED: "records section ends inside a record"}


def _zigzag_py(buf, p, stop):
    """A zigzag varint at buf[p] that must end before `stop`: (value, position after it), position -1 if not."""
    raw = 0
    shift = 0
    while True:
        if p >= stop or shift > 63:
            return 0, -1
        b = buf[p]
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), p
        shift += 7


def _scan_py(buf, count, lo_rel, hi_rel, out):
    """Walk `count` records of `buf` (uint8); keep those whose offset delta is in [lo_rel, hi_rel): for each, its
    offset delta, timestamp delta, key position/length and value position/length (-1 length: null) in the rows of
    `out` (int64[count, 6]). Returns (records kept, error code)."""
    end = buf.shape[0]
    pos = 0
    n = 0
    for _ in range(count):
        length, pos = _zigzag(buf, pos, end)
        if pos < 0:
            return n, TRUNCATED
        stop = pos + length
        if length <= 0 or stop > end:
            return n, BAD_LENGTH
        tsd, p = _zigzag(buf, pos + 1, stop)            # after the attributes byte
        if p < 0:
            return n, TRUNCATED
        od, p = _zigzag(buf, p, stop)
        if p < 0:
            return n, TRUNCATED
        klen, p = _zigzag(buf, p, stop)
        if p < 0:
            return n, RUN_PAST
        kpos = p
        if klen > 0:
            p += klen
        vlen, p = _zigzag(buf, p, stop)
        if p < 0:
            return n, RUN_PAST
        vpos = p
        if vlen > 0:
            p += vlen
        if p >= stop:                                    # the header count must follow
            return n, RUN_PAST
        if lo_rel <= od < hi_rel:
            out[n, 0] = od
            out[n, 1] = tsd
            out[n, 2] = kpos
            out[n, 3] = klen if klen >= 0 else -1
            out[n, 4] = vpos
            out[n, 5] = vlen if vlen >= 0 else -1
            n += 1
        pos = stop
    if pos != end:
        return n, LEFT_OVER
    return n, OK


def _gather_py(buf, pos, lens, total):
    """The bytes of the given (position, length) runs of `buf`, back to back (null runs, length -1, add none)."""
    out = np.empty(total, np.uint8)
    o = 0
    for i in range(pos.shape[0]):
        k = lens[i]
        if k > 0:
            out[o:o + k] = buf[pos[i]:pos[i] + k]
            o += k
    return out


if njit is not None:
    _zigzag = njit(cache=True, nogil=True, inline="always")(_zigzag_py)
    _scan = njit(cache=True, nogil=True)(_scan_py)
    _gather = njit(cache=True, nogil=True)(_gather_py)
    AVAILABLE = True
else:                                     # pragma: no cover
    _zigzag, _scan, _gather = _zigzag_py, None, None
    AVAILABLE = False


def decode_columns(section: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
                   lo: int, hi: int, ts_type: int):
    """The records of `section` with offsets in [lo, hi) as column arrays: (offsets, timestamps in ms, key data,
    key lengths, value data, value lengths), lengths -1 for null. Raises decode.CorruptBatch like decode_into."""
    buf = np.frombuffer(section, np.uint8)
    rows = np.empty((count, 6), np.int64)
    n, err = _scan(buf, count, lo - base_offset, hi - base_offset, rows)
    if err != OK:
        from spark_connector.decode import CorruptBatch
        raise CorruptBatch(f"batch at offset {base_offset} of {count} records: {MESSAGES[err]}")
    rows = rows[:n]
    offsets = rows[:, 0] + base_offset
    if log_append_time is None:
        timestamps = rows[:, 1] + base_timestamp
    else:
        timestamps = np.full(n, log_append_time, np.int64)
    klens, vlens = rows[:, 3], rows[:, 5]
    keys = _gather(buf, rows[:, 2], klens, int(klens[klens > 0].sum()))
    values = _gather(buf, rows[:, 4], vlens, int(vlens[vlens > 0].sum()))
    return offsets, timestamps, keys, klens, values, vlens
