"""Filter pushdown: turn Spark's pushed filters on `partition`, `offset` and `timestamp` into bounds that narrow the
offset ranges the driver plans.

`partition` and `offset` filters are applied exactly (the planned ranges contain precisely the matching rows), so
they are not handed back to Spark. `timestamp` lower bounds move each range's start to the first offset whose
timestamp is at or after the bound (ListOffsets by timestamp, which the broker answers from the time indexes,
remote ones included); Kafka timestamps need not grow with offsets, so an upper bound cannot end a range early and
every timestamp filter is handed back to Spark to be evaluated on the rows. `In` on offsets narrows to
[min, max] and is handed back too.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace

_NEVER_NULL = ("partition", "offset", "timestamp", "topic", "timestampType")


@dataclass(frozen=True)
class Bounds:
    offset_lo: int | None = None          # inclusive
    offset_hi: int | None = None          # exclusive
    partition_lo: int | None = None       # inclusive
    partition_hi: int | None = None       # exclusive
    partitions: frozenset | None = None   # allowed partition numbers (EqualTo / In)
    ts_lo: int | None = None              # ms: rows before the first offset with timestamp >= ts_lo are skipped

    def accepts_partition(self, p: int) -> bool:
        if self.partitions is not None and p not in self.partitions:
            return False
        if self.partition_lo is not None and p < self.partition_lo:
            return False
        return self.partition_hi is None or p < self.partition_hi

    def clamp(self, start: int, end: int) -> tuple[int, int]:
        if self.offset_lo is not None:
            start = max(start, self.offset_lo)
        if self.offset_hi is not None:
            end = min(end, self.offset_hi)
        return start, max(start, end)

    def describe(self) -> str:
        parts = []
        for name in ("offset_lo", "offset_hi", "partition_lo", "partition_hi", "partitions", "ts_lo"):
            v = getattr(self, name)
            if v is not None:
                parts.append(f"{name}={sorted(v) if isinstance(v, frozenset) else v}")
        return ", ".join(parts) or "none"


def _lo(a, b):
    return a if b is None else b if a is None else max(a, b)


def _hi(a, b):
    return a if b is None else b if a is None else min(a, b)


def _interval(f, v: int | None, equality: bool = True) -> tuple[int | None, int | None] | None:
    """[lo, hi) of integers a comparison filter with literal `v` accepts (None: unbounded), or None when `f` is not
    such a comparison. With equality=False, EqualTo/EqualNullSafe are left to the caller."""
    from pyspark.sql.datasource import EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, \
        LessThanOrEqual
    if v is None:
        return None
    if equality and isinstance(f, (EqualTo, EqualNullSafe)):
        return v, v + 1
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return None, v
    if isinstance(f, LessThanOrEqual):
        return None, v + 1
    return None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def timestamp_ms(v) -> int | None:
    """A pushed timestamp literal (datetime; naive ones are local time, as PySpark converts them) in ms, rounded
    down so that the bound never excludes a row that matches."""
    if isinstance(v, dt.datetime):
        micros = round(v.timestamp() * 1_000_000)
        return math.floor(micros / 1000)
    return None


def push_filters(filters, bounds: Bounds = Bounds()) -> tuple[Bounds, list]:
    """(narrowed bounds, filters Spark must still evaluate)."""
    from pyspark.sql.datasource import EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull
    rest = []
    b = bounds
    for f in filters:
        col = f.attribute[0] if len(getattr(f, "attribute", ())) == 1 else None
        handled = False
        if isinstance(f, IsNotNull) and col in _NEVER_NULL:
            handled = True
        elif col == "offset":
            iv = _interval(f, _int(getattr(f, "value", None)))
            if iv is not None:
                b, handled = replace(b, offset_lo=_lo(b.offset_lo, iv[0]), offset_hi=_hi(b.offset_hi, iv[1])), True
            elif isinstance(f, In):
                vals = [x for x in (_int(x) for x in f.value) if x is not None]
                if vals and len(vals) == len(f.value):
                    b = replace(b, offset_lo=_lo(b.offset_lo, min(vals)), offset_hi=_hi(b.offset_hi, max(vals) + 1))
                elif not [x for x in f.value if x is not None]:
                    b = replace(b, offset_lo=0, offset_hi=0)      # `offset IN (NULL)` matches nothing
        elif col == "partition":
            v = _int(getattr(f, "value", None))
            if isinstance(f, (EqualTo, EqualNullSafe)) and v is not None:
                allowed = {v} if b.partitions is None else b.partitions & {v}
                b, handled = replace(b, partitions=frozenset(allowed)), True
            elif isinstance(f, In) and all(_int(x) is not None for x in f.value):
                vals = set(f.value)
                allowed = vals if b.partitions is None else b.partitions & vals
                b, handled = replace(b, partitions=frozenset(allowed)), True
            elif (iv := _interval(f, v, equality=False)) is not None:
                b, handled = replace(b, partition_lo=_lo(b.partition_lo, iv[0]),
                                     partition_hi=_hi(b.partition_hi, iv[1])), True
        elif col == "timestamp":
            ms = timestamp_ms(getattr(f, "value", None))
            if ms is not None and isinstance(f, (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual)):
                b = replace(b, ts_lo=_lo(b.ts_lo, ms))
        if not handled:
            rest.append(f)
    return b, rest
