"""Group metrics, computed by each group's coordinator when Prometheus scrapes, so a sum over the cluster counts
every group once.

Counts are Kafka 4's group-coordinator-metrics as jmx_exporter names them (`kafka.server:type=group-coordinator-
metrics,name=group-count,protocol=classic` -> `kafka_server_group_coordinator_metrics_group_count{protocol=
"classic"}`); lag uses kafka-exporter's names and meaning (lag = the partition's high watermark - the group's
committed offset), the de-facto standard of lag dashboards.

The high watermark comes from the local replica when this broker hosts the partition (a follower's lags the
leader's by at most one fetch round), else from a ListOffsets (latest) to the partition's leader sent during the
scrape; a leader that does not answer within LIST_OFFSETS_TIMEOUT leaves that partition's lag out of this scrape
(its last answer is used when there is one). Everything is read on the event loop (the scrape runs in the metrics
server's thread and waits for it), so a scrape sees one consistent state."""
from __future__ import annotations

import asyncio
import logging

from prometheus_client.core import GaugeMetricFamily

from broker.groups.classic.group_metadata import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from broker.groups.consumer.state import GROUP_ASSIGNING, GROUP_EMPTY, GROUP_RECONCILING, GROUP_STABLE

log = logging.getLogger("strata.metrics")

CLASSIC_STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)
CONSUMER_STATES = (GROUP_EMPTY, GROUP_ASSIGNING, GROUP_RECONCILING, GROUP_STABLE, DEAD)
LIST_OFFSETS_VERSION = 4          # non-flexible, with current_leader_epoch; every broker version answers it
LIST_OFFSETS_TIMEOUT = 2.0        # seconds a scrape waits for leaders' end offsets
SCRAPE_TIMEOUT = 5.0              # seconds a scrape waits for the event loop at all


class GroupMetricsCollector:
    def __init__(self, broker):
        self.broker = broker
        self.loop: asyncio.AbstractEventLoop | None = None     # set by start(), on the loop
        self._remote_end: dict[tuple[str, int], int] = {}      # last end offsets from leaders (not hosted here)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()

    def collect(self):
        snap = self._snapshot_from_any_thread()
        if snap is None:
            return []
        classic, consumer, offsets, ends = snap
        ns = "kafka_server_group_coordinator_metrics_"
        count = GaugeMetricFamily(ns + "group_count", "group-count: groups this broker coordinates, by protocol "
                                  "(classic or consumer)", labels=["protocol"])
        count.add_metric(["classic"], sum(classic.values()))
        count.add_metric(["consumer"], sum(consumer.values()))
        by_classic = GaugeMetricFamily(ns + "classic_group_count", "classic-group-count: classic groups this broker "
                                       "coordinates, by state", labels=["state"])
        for state in CLASSIC_STATES:
            by_classic.add_metric([state], classic.get(state, 0))
        by_consumer = GaugeMetricFamily(ns + "consumer_group_count", "consumer-group-count: consumer groups "
                                        "(KIP-848) this broker coordinates, by state", labels=["state"])
        for state in CONSUMER_STATES:
            by_consumer.add_metric([state], consumer.get(state, 0))
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "committed offset of a group, by "
                                    "partition (reported by the group's coordinator)", labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "high watermark - committed offset of a group, by "
                                "partition (reported by the group's coordinator)", labels=labels)
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "a group's lag summed over a topic's "
                                    "partitions", labels=["consumergroup", "topic"])
        for group_id, committed in offsets:
            sums: dict[str, int] = {}
            for (topic, partition), offset in sorted(committed.items()):
                current.add_metric([group_id, topic, str(partition)], offset)
                end = ends.get((topic, partition))
                if end is None:
                    continue
                n = max(end - offset, 0)       # a commit past an end offset read a moment earlier: no lag
                lag.add_metric([group_id, topic, str(partition)], n)
                sums[topic] = sums.get(topic, 0) + n
            for topic, n in sorted(sums.items()):
                lag_sum.add_metric([group_id, topic], n)
        return [count, by_classic, by_consumer, current, lag, lag_sum]

    # ---- the snapshot, taken on the event loop ------------------------------------------------------------------
    def _snapshot_from_any_thread(self):
        loop = self.loop
        if loop is None or not loop.is_running():
            return None
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:                                  # (a test calling collect()): no waiting on ourselves
            return self._local_snapshot()[:4]
        try:
            return asyncio.run_coroutine_threadsafe(self._snapshot(), loop).result(SCRAPE_TIMEOUT)
        except Exception as e:                       # the loop is stuck or shutting down: no group metrics now
            log.warning("group metrics skipped in this scrape: %r", e)
            return None

    def _local_snapshot(self):
        groups = self.broker.groups
        classic: dict[str, int] = {}
        consumer: dict[str, int] = {}
        offsets: list[tuple[str, dict[tuple[str, int], int]]] = []
        for g in groups.groups.values():
            classic[g.state] = classic.get(g.state, 0) + 1
            if g.offsets and g.state != DEAD:
                offsets.append((g.group_id, {tp: om.offset for tp, om in g.offsets.items()}))
        for g in groups.consumer.groups.values():
            if g.exists:
                state = g.state()
                consumer[state] = consumer.get(state, 0) + 1
            if g.offsets:
                offsets.append((g.group_id, {tp: om.offset for tp, om in g.offsets.items()}))
        ends: dict[tuple[str, int], int] = {}
        remote: set[tuple[str, int]] = set()
        replicas = self.broker.replicas
        for _, committed in offsets:
            for tp in committed:
                part = replicas.get(*tp)
                if part is not None:
                    ends[tp] = part.high_watermark
                else:
                    remote.add(tp)
        return classic, consumer, sorted(offsets, key=lambda o: o[0]), ends, remote

    async def _snapshot(self):
        classic, consumer, offsets, ends, remote = self._local_snapshot()
        if remote:
            await self._refresh(remote)
            for tp in remote:
                if tp in self._remote_end:
                    ends[tp] = self._remote_end[tp]
        self._remote_end = {tp: o for tp, o in self._remote_end.items() if tp in remote}    # forget the rest
        return classic, consumer, offsets, ends

    async def _refresh(self, wanted: set[tuple[str, int]]) -> None:
        """The high watermark of each wanted partition from its leader: one ListOffsets per leader, in parallel."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in wanted:
            info = self.broker.topics.get(topic)
            state = info.partition(partition) if info is not None else None
            if state is not None and state.leader >= 0:
                by_leader.setdefault(state.leader, {}).setdefault(topic, []).append(partition)
        if by_leader:
            await asyncio.gather(*(self._ask(leader, topics) for leader, topics in by_leader.items()))

    async def _ask(self, leader: int, topics: dict[str, list[int]]) -> None:
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                       for p in sorted(ps)]} for t, ps in sorted(topics.items())]}
        try:
            async with asyncio.timeout(LIST_OFFSETS_TIMEOUT):
                resp = await self.broker.peer_connection(leader).send(
                    2, LIST_OFFSETS_VERSION, body, timeout=LIST_OFFSETS_TIMEOUT)
        except Exception as e:
            log.info("no end offsets from broker %d for group lag: %r", leader, e)
            return
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.offset >= 0:
                    self._remote_end[(t.name, p.partition_index)] = int(p.offset)
