"""Streaming reads (DataSourceStreamReader + SupportsTriggerAvailableNow) with the offsets and behaviour of Spark's
Kafka micro-batch source.

Offsets are Kafka-style JSON per topic-partition, {"topic": {"0": 23, "1": 5}}, the next offset to read, with
topics in name order and partitions in numeric order: Spark compares offsets as JSON text, so the same positions
must always serialize the same way. Partitions that appear later start at their earliest offset. maxOffsetsPerTrigger
is spread over partitions in proportion to their backlog (Spark's rateLimit). Data that disappeared between
micro-batches (retention, DeleteRecords, a deleted topic) fails the query with failOnDataLoss=true, and is skipped
with a warning otherwise.

The reader object lives in Spark's streaming planner worker on the driver for the whole query, so it keeps an
AdminClient and the availableNow target between calls; it is also pickled to executors for read(), without them.
"""
from __future__ import annotations

import math

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from spark_connector.options import EARLIEST, LATEST, ReadOptions
from spark_connector.planning import make_ranges, report_data_loss, resolve, split_ranges, topic_partitions


def to_json(offsets: dict) -> dict:
    out: dict = {}
    for (t, p) in sorted(offsets):
        out.setdefault(t, {})[str(p)] = int(offsets[(t, p)])
    return out


def from_json(offsets: dict | None) -> dict:
    return {(t, int(p)): int(o) for t, parts in (offsets or {}).items() for p, o in parts.items()}


def rate_limit(limit: int, start: dict, latest: dict, earliest_new: dict) -> dict:
    """Spark's KafkaMicroBatchStream.rateLimit: at most about `limit` offsets in total, shared in proportion to each
    partition's backlog, every partition with a backlog advancing by at least one."""
    begin = {tp: start.get(tp, earliest_new.get(tp, 0)) for tp in latest}
    sizes = {tp: max(0, latest[tp] - begin[tp]) for tp in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        prorate = limit * sizes[tp] / total
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin[tp] + step) if sizes[tp] else end
    return out


class StrataStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions):
        self.opts = opts
        self._cluster = None
        self._target: dict | None = None       # availableNow: latest offsets when the query started
        self._latest: dict | None = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    @property
    def cluster(self):
        if self._cluster is None:
            from spark_connector.cluster import Cluster
            self._cluster = Cluster(self.opts.client)
        return self._cluster

    def _offsets(self, tps, spec: int) -> dict:
        return self.cluster.list_offsets({tp: spec for tp in tps})

    def _latest_now(self) -> dict:
        return self._offsets(topic_partitions(self.opts, self.cluster), LATEST)

    # ---- offsets ----
    def initialOffset(self) -> dict:
        tps = topic_partitions(self.opts, self.cluster)
        earliest, latest = self._offsets(tps, EARLIEST), self._offsets(tps, LATEST)
        start = resolve(self.opts.starting, "startingOffsets", tps, earliest, latest, self.cluster, starting=True,
                        strategy=self.opts.by_timestamp_strategy)
        return to_json(start)

    def getDefaultReadLimit(self):
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest_now()

    def latestOffset(self, start: dict, limit) -> dict:
        latest = dict(self._target) if self._target is not None else self._latest_now()
        self._latest = latest
        begin = from_json(start)
        if isinstance(limit, ReadMaxRows):
            new = [tp for tp in latest if tp not in begin]
            latest = rate_limit(limit.max_rows, begin, latest, self._offsets(new, EARLIEST) if new else {})
        # never move a partition backwards: a shrunk log is reported (data loss) when the batch is planned
        return to_json(latest)

    def reportLatestOffset(self):
        return to_json(self._latest) if self._latest is not None else None

    # ---- planning ----
    def partitions(self, start: dict, end: dict):
        begin, until = from_json(start), from_json(end)
        fail = self.opts.fail_on_data_loss
        for tp in sorted(set(begin) - set(until)):
            report_data_loss(fail, f"{tp[0]}-{tp[1]} is gone (topic or partition deleted)")
        if not until:
            return []
        earliest = self._offsets(list(until), EARLIEST)
        ranges = []
        for tp, e in sorted(until.items()):
            s = begin.get(tp, earliest[tp])
            if e < s:
                report_data_loss(fail, f"Partition {tp[0]}-{tp[1]}'s offset was changed from {s} to {e}, some data "
                                       "may have been missed")
                continue
            if s < earliest[tp]:
                report_data_loss(fail, f"Cannot fetch offset {s} of {tp[0]}-{tp[1]}: the earliest available offset "
                                       f"is {earliest[tp]}")
                s = min(earliest[tp], e)
            if s < e:
                ranges.append((*tp, s, e))
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return make_ranges(self.opts, self.cluster, ranges)

    def read(self, partition):
        from spark_connector.source import read_range
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        pass                       # offsets live in Spark's checkpoint; nothing is committed to the broker

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
