"""Streaming reads (DataSourceStreamReader + SupportsTriggerAvailableNow) with the offsets and behaviour of Spark's
Kafka micro-batch source.

Offsets are Kafka-style JSON per topic-partition, {"topic": {"0": 23, "1": 5}}, the next offset to read, with
topics in name order and partitions in numeric order: Spark compares offsets as JSON text, so the same positions
must always serialize the same way. Partitions that appear later start at their earliest offset. maxOffsetsPerTrigger
is spread over partitions in proportion to their backlog (Spark's rateLimit). minOffsetsPerTrigger holds a trigger
back (no micro-batch) until that many offsets are available or maxTriggerDelay has passed since the last batch
(Spark's delayBatch). Data that disappeared between micro-batches (retention, DeleteRecords, a deleted topic) fails
the query with failOnDataLoss=true, and is skipped with a warning otherwise.

Python's ReadLimits have no composite (Spark's minRows + maxRows), so getDefaultReadLimit tells the engine only one
of them and latestOffset applies both from the options; a ReadAllAvailable from the engine (Trigger.Once) still
wins, as in Spark. With trigger(availableNow=True) the end is fixed when the query starts, so minOffsetsPerTrigger
does not hold back its last batch (Spark's source would stop with the rest unread; pyspark's ReadMinRows leaves
availableNow to the source).

The reader object lives in Spark's streaming planner worker on the driver for the whole query, so it keeps an
AdminClient and the availableNow target between calls; it is also pickled to executors for read(), without them.
"""
from __future__ import annotations

import logging
import math
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow

from spark_connector.options import EARLIEST, LATEST, ReadOptions, consumer_group_id
from spark_connector.planning import make_ranges, report_data_loss, resolve, split_ranges, topic_partitions

log = logging.getLogger("strata.spark")


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
        self._last_trigger_ms = 0.0            # when a micro-batch was last let through (minOffsetsPerTrigger)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    @property
    def cluster(self):
        if self._cluster is None:
            from spark_connector.cluster import Cluster, reachable
            security = self.opts.client.security()
            if security is not None:          # refused credentials or an untrusted certificate fail now, clearly,
                reachable(self.opts.client.bootstrap, security=security)    # not after librdkafka's timeouts
            self._cluster = Cluster(self.opts.client, consumer_group_id(self.opts, "driver"))
        return self._cluster

    def _offsets(self, tps, spec: int) -> dict:
        return self.cluster.list_offsets({tp: spec for tp in tps})

    def _latest_now(self, known: dict | None = None) -> dict:
        """Latest offsets; like Spark's fetchLatestOffsets(knownOffsets), asked again (fetchOffset.numRetries,
        retryIntervalMs apart) while a partition's latest is below an offset the query already reached."""
        tps = topic_partitions(self.opts, self.cluster)
        client = self.opts.client
        for attempt in range(1, client.fetch_offset_retries + 1):
            latest = self._offsets(tps, LATEST)
            wrong = [(f"{t}-{p}", known[(t, p)], o) for (t, p), o in sorted(latest.items())
                     if known and known.get((t, p), -1) > o]
            if not wrong:
                break
            log.warning("Found incorrect offsets in some partitions (partition, previous offset, fetched offset): %s",
                        wrong)
            if attempt < client.fetch_offset_retries:
                log.warning("Retrying to fetch latest offsets because of incorrect offsets")
                time.sleep(client.fetch_offset_retry_interval_ms / 1000)
        return latest

    # ---- offsets ----
    def initialOffset(self) -> dict:
        tps = topic_partitions(self.opts, self.cluster)
        earliest, latest = self._offsets(tps, EARLIEST), self._offsets(tps, LATEST)
        start = resolve(self.opts.starting, "startingOffsets", tps, earliest, latest, self.cluster, starting=True,
                        strategy=self.opts.by_timestamp_strategy)
        return to_json(start)

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest_now()

    def latestOffset(self, start: dict, limit) -> dict:
        begin = from_json(start)
        latest = dict(self._target) if self._target is not None else self._latest_now(begin)
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return to_json(latest)
        new = [tp for tp in latest if tp not in begin]
        earliest_new = self._offsets(new, EARLIEST) if new else {}
        if self.opts.min_offsets_per_trigger and self._target is None and self._delay_batch(begin, latest,
                                                                                          earliest_new):
            return to_json(begin)                  # no new micro-batch yet
        if self.opts.max_offsets_per_trigger:
            latest = rate_limit(self.opts.max_offsets_per_trigger, begin, latest, earliest_new)
        # never move a partition backwards: a shrunk log is reported (data loss) when the batch is planned
        return to_json(latest)

    def _delay_batch(self, begin: dict, latest: dict, earliest_new: dict) -> bool:
        """Spark's delayBatch: hold the trigger back while fewer than minOffsetsPerTrigger offsets are available,
        unless maxTriggerDelay has passed since the last batch went through (the query's first always does)."""
        now = time.time() * 1000
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        available = sum(max(0, e - begin.get(tp, earliest_new.get(tp, 0))) for tp, e in latest.items())
        if available < self.opts.min_offsets_per_trigger:
            return True
        self._last_trigger_ms = now
        return False

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
