"""Followers fetching from leaders (Kafka's ReplicaFetcherManager and ReplicaFetcherThread): one task per leader
broker fetches every partition this broker follows from it, with our replica id, from our log end offset.

Truncation follows KIP-101/KIP-279 through the fetch itself (Fetch v12+): each partition sends the epoch of its last
batch (`last_fetched_epoch`); when the leader's log diverged from ours it answers with `diverging_epoch` and no
records, and we truncate as Kafka's AbstractFetcherThread.getOffsetTruncationState says, then fetch again (a second
divergence in a row is the case KIP-279 fixed). Never to the high watermark: that lost acknowledged records.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from protocol.client import BrokerConnection, ConnectionFailed, encode_request
from protocol.errors import ApiError, ErrorCode
from protocol.replica_fetch import decode_fetch_response
from replication.wal_follower import WalDownloadError, append_chunks

log = logging.getLogger("strata.replica_fetcher")

FETCH, FETCH_VERSION = 1, 12
LIST_OFFSETS, EARLIEST_LOCAL = 2, -4
_RETRY_ON_METADATA = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                      ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition}


@dataclass
class FetchSettings:
    node_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1048576            # per partition (replica.fetch.max.bytes)
    response_max_bytes: int = 10485760
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    security: object = None             # protocol.client_security.ClientSecurity of the inter-broker listener

    @classmethod
    def from_config(cls, config) -> "FetchSettings":
        g = config.get_int
        return cls(config.node_id, g("replica.fetch.wait.max.ms"), g("replica.fetch.min.bytes"),
                   g("replica.fetch.max.bytes"), g("replica.fetch.response.max.bytes"), g("replica.fetch.backoff.ms"),
                   g("replica.socket.timeout.ms"))


def truncation_offset(part, diverging_epoch: int, diverging_end: int) -> tuple[int, bool]:
    """Kafka's getOffsetTruncationState: (offset to truncate to, whether truncation is complete)."""
    leo = part.log_end_offset
    if diverging_end < 0:
        return part.high_watermark, True           # the leader knows no epochs: all it can offer
    if diverging_epoch < 0:
        return min(diverging_end, leo), True
    epoch, end = part.last_offset_for_leader_epoch(diverging_epoch)
    if epoch < 0:
        return min(diverging_end, leo), True
    if epoch == diverging_epoch:
        return min(diverging_end, end), True
    return min(end, leo), False


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, leader_id: int, endpoint: tuple[str, int], settings: FetchSettings, replicas, wal=None,
                 metrics=None):
        self.leader_id = leader_id
        self.settings = settings
        self.replicas = replicas
        self.wal = wal                    # replication.wal_follower.WalReader: downloads WAL pointers (KIP-1176)
        self.metrics = metrics            # replication.traffic_metrics.TrafficMetrics
        self.conn = BrokerConnection(*endpoint, client_id=f"strata-replica-{settings.node_id}",
                                     security=settings.security)
        self.partitions: dict[tuple[str, int], float] = {}      # (topic, index) -> not before (backoff)
        # what the request in flight asked for each partition: (the Partition, fetch offset, leader epoch); a response
        # is applied only if the partition is still that replica at that offset and epoch (Kafka's
        # AbstractFetcherThread check), so a late response never lands after a truncation, a new epoch or in a
        # re-created topic's new replica
        self._sent: dict[tuple[str, int], tuple[object, int, int]] = {}
        self.failed: set[tuple[str, int]] = set()    # partitions whose records could not be applied (logged)
        self._wake = asyncio.Event()
        self._running = True
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    @property
    def alive(self) -> bool:
        return not self._task.done()

    def add(self, topic: str, index: int) -> None:
        self.partitions[(topic, index)] = 0.0
        self.failed.discard((topic, index))
        self._wake.set()

    def remove(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)

    async def stop(self) -> None:
        # The flag as well as the cancel: asyncio.wait_for in Python 3.11 can swallow a cancellation that arrives
        # as the awaited response completes, and the loop would go on.
        self._running = False
        self._task.cancel()
        await asyncio.wait({self._task}, timeout=5)
        self.conn.close()

    def _request(self, now: float):
        topics: dict[str, list] = {}
        parts = []
        self._sent = {}
        for (topic, index), not_before in self.partitions.items():
            if not_before > now:
                continue
            part = self.replicas.get(topic, index)
            if part is None or part.leader_id != self.leader_id:
                continue
            latest = part.log.leader_epoch_cache.latest_epoch()
            if latest is None and part.log_end_offset > part.high_watermark:
                # no epochs to compare with the leader's: Kafka's fallback is the high watermark
                log.info("%s-%d has no leader epochs: truncating to its high watermark %d", topic, index,
                         part.high_watermark)
                part.truncate_to(part.high_watermark)
            self._sent[(topic, index)] = (part, part.log_end_offset, part.leader_epoch)
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": part.leader_epoch, "fetch_offset": part.log_end_offset,
                "last_fetched_epoch": -1 if latest is None else latest, "log_start_offset": part.log_start_offset,
                "partition_max_bytes": self.settings.max_bytes})
            parts.append(part)
        if not parts:
            return None, parts
        s = self.settings
        return {"cluster_id": None, "replica_id": s.node_id, "max_wait": s.max_wait_ms, "min_bytes": s.min_bytes,
                "max_bytes": s.response_max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""}, parts

    async def _run(self) -> None:
        while self._running:
            try:
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except Exception:                  # never let one bad round stop every partition of this leader
                log.exception("fetcher for broker %d: unexpected error; backing off", self.leader_id)
                await asyncio.sleep(self.settings.backoff_ms / 1000)

    async def _fetch_once(self) -> None:
        now = time.monotonic()
        body, parts = self._request(now)
        if body is None:
            self._wake.clear()
            waits = [nb - now for nb in self.partitions.values() if now < nb < float("inf")]
            try:
                await asyncio.wait_for(self._wake.wait(), min(waits) if waits else None)
            except asyncio.TimeoutError:
                pass
            return
        try:
            raw = await self.conn.send_raw(FETCH, FETCH_VERSION, encode_request(FETCH, FETCH_VERSION, body),
                                           timeout=(self.settings.max_wait_ms + self.settings.socket_timeout_ms)
                                           / 1000)
            resp = decode_fetch_response(raw)
        except (ConnectionFailed, OSError) as e:
            log.info("fetch from broker %d failed: %s", self.leader_id, e)
            await asyncio.sleep(self.settings.backoff_ms / 1000)
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("fetch from broker %d failed", self.leader_id)
            await asyncio.sleep(self.settings.backoff_ms / 1000)
            return
        if resp.error_code:
            log.info("fetch from broker %d: error %s", self.leader_id, ErrorCode(resp.error_code).name)
            await asyncio.sleep(self.settings.backoff_ms / 1000)
            return
        sent, self._sent = self._sent, {}
        from_wal = []
        for topic, partitions in resp.responses:
            for p in partitions:
                key = (topic, p.partition_index)
                part = self._current(key, sent.get(key))
                if part is None:
                    continue
                if p.wal_pointers and p.error_code == 0 and p.diverging_epoch is None:
                    from_wal.append((topic, p, sent[key]))
                else:
                    self._apply(part, key, lambda: self._process(topic, p, part))
        if from_wal:
            await self._from_wal(from_wal)

    def _current(self, key, sent):
        """The partition a response entry is for, if it is still in the state the request was made in."""
        if sent is None or key not in self.partitions:
            return None
        part, offset, epoch = sent
        current = self.replicas.get(*key)
        if current is not part or part.closed or part.leader_id != self.leader_id or \
                part.log_end_offset != offset or part.leader_epoch != epoch:
            return None
        return part

    def _apply(self, part, key, step, backoff_ms: int | None = None) -> None:
        """Run one partition's step; a failure other than a refused batch marks only that partition failed (Kafka's
        markPartitionFailed): it is not fetched again until its leader or epoch changes, and the others go on."""
        try:
            step()
        except ApiError as e:
            log.warning("%s-%d: records from leader %d refused: %s", key[0], key[1], self.leader_id, e)
            self.partitions[key] = time.monotonic() + (backoff_ms or self.settings.backoff_ms) / 1000
        except OSError as e:        # the log dir failed (the log reported it): Kafka marks the partition failed
            log.error("%s-%d: appending the fetch from leader %d failed: %s", key[0], key[1], self.leader_id, e)
            self.partitions.pop(key, None)
            self.failed.add(key)
        except Exception:
            log.exception("%s-%d: applying the fetch from leader %d failed; the partition stops fetching until its "
                          "leadership changes", key[0], key[1], self.leader_id)
            self.partitions.pop(key, None)
            self.failed.add(key)

    async def _from_wal(self, wanted: list) -> None:
        """KIP-1176: the leader sent pointers into the fast store instead of records; download them all together
        (one GET per run of neighbouring chunks), check, append. A partition whose download failed appends nothing;
        its next fetch asks for the same offset again."""
        if self.wal is None:
            log.warning("leader %d sent WAL pointers but no fast store is configured here (set "
                        "remote.wal.storage.url)", self.leader_id)
            for topic, p, _ in wanted:
                self.partitions[(topic, p.partition_index)] = time.monotonic() + self.settings.backoff_ms / 1000
            return
        results = await self.wal.download_all([(p.wal_store, p.wal_pointers) for _, p, _ in wanted])
        for (topic, p, sent), result in zip(wanted, results):
            key = (topic, p.partition_index)
            part = self._current(key, sent)
            if part is None:
                continue
            if isinstance(result, WalDownloadError):
                log.warning("%s-%d: WAL download from leader %d's pointers failed: %s", topic, p.partition_index,
                            self.leader_id, result)
                self.partitions[key] = time.monotonic() + min(self.settings.backoff_ms, 200) / 1000
                continue
            def step(part=part, result=result, p=p):
                append_chunks(part, result, p.high_watermark)
                part.update_log_start_from_leader(p.log_start_offset)
            self._apply(part, key, step, min(self.settings.backoff_ms, 200))

    def _process(self, topic: str, p, part) -> None:
        key = (topic, p.partition_index)
        err = int(p.error_code)
        if err == 0:
            div = p.diverging_epoch
            if div is not None and div[1] >= -1 and (div[0] >= 0 or div[1] >= 0):
                offset, _ = truncation_offset(part, div[0], div[1])
                log.info("%s-%d diverged from leader %d at epoch %d (end offset %d): truncating to %d", topic,
                         p.partition_index, self.leader_id, div[0], div[1], offset)
                part.truncate_to(offset)
                return
            if p.records:
                if self.metrics is not None:
                    self.metrics.replication_bytes_in.inc(len(p.records))
                part.append_records_to_follower(bytearray(p.records), p.high_watermark)
            else:
                part.update_follower_high_watermark(p.high_watermark)
            part.update_log_start_from_leader(p.log_start_offset)
        elif err == ErrorCode.offset_out_of_range and p.log_start_offset > part.log_end_offset:
            log.info("%s-%d: leader %d's log starts at %d, above our end %d: starting there", topic,
                     p.partition_index, self.leader_id, p.log_start_offset, part.log_end_offset)
            part.restart_at(p.log_start_offset)
        elif err == ErrorCode.offset_moved_to_tiered_storage and part.remote is not None:
            self.partitions[key] = float("inf")              # until the leader's local start is known
            asyncio.get_running_loop().create_task(self._start_from_remote(part, key, p.log_start_offset))
        else:
            if err not in _RETRY_ON_METADATA:
                log.warning("%s-%d: fetch from leader %d failed with error %d", topic, p.partition_index,
                            self.leader_id, err)
            self.partitions[key] = time.monotonic() + self.settings.backoff_ms / 1000

    async def _start_from_remote(self, part, key, leader_log_start: int) -> None:
        """OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405): what we need lives only in the remote tier; ask the leader
        for its local log start (ListOffsets EARLIEST_LOCAL), take the epoch history and the producer snapshot from
        the remote segment below it, and start fetching there."""
        try:
            resp = await self.conn.send(LIST_OFFSETS, 8, {
                "replica_id": self.settings.node_id, "isolation_level": 0, "topics": [{"name": part.topic,
                "partitions": [{"partition_index": part.index, "current_leader_epoch": part.leader_epoch,
                                "timestamp": EARLIEST_LOCAL}]}]})
            res = resp.topics[0].partitions[0]
            if res.error_code:
                raise ApiError(int(res.error_code), "ListOffsets EARLIEST_LOCAL failed")
            epochs, snapshot = await part.remote.follower_start_state(part.topic, part.index, res.offset)
            part.restart_at(res.offset, leader_log_start, epochs, snapshot)
            log.info("%s-%d: built from the remote tier, fetching from the leader's local log start %d", part.topic,
                     part.index, res.offset)
            delay = 0.0
        except Exception as e:
            log.warning("%s-%d: starting from the remote tier failed: %s", part.topic, part.index, e)
            delay = self.settings.backoff_ms / 1000
        if key in self.partitions:
            self.partitions[key] = time.monotonic() + delay
            self._wake.set()


class ReplicaFetcherManager:
    """Which fetcher (leader) each followed partition is fetched by."""

    def __init__(self, settings: FetchSettings, replicas, endpoint_of, wal=None, metrics=None):
        self.settings, self.replicas, self.endpoint_of = settings, replicas, endpoint_of
        self.wal, self.metrics = wal, metrics
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[tuple[str, int], int] = {}
        self._closed = False

    def follow(self, topic: str, index: int, leader_id: int) -> None:
        if self._closed:
            return
        old = self._leader_of.get((topic, index))
        if old is not None and old != leader_id:
            self.unfollow(topic, index)
        if leader_id < 0:
            return
        fetcher = self.fetchers.get(leader_id)
        endpoint = self.endpoint_of(leader_id)
        if fetcher is None or not fetcher.alive or fetcher.conn.host != endpoint[0] or \
                fetcher.conn.port != endpoint[1]:
            if fetcher is not None:
                asyncio.get_running_loop().create_task(fetcher.stop())
                moved = fetcher.partitions
            else:
                moved = {}
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(leader_id, endpoint, self.settings, self.replicas,
                                                                self.wal, self.metrics)
            for t, i in moved:
                fetcher.add(t, i)
        fetcher.add(topic, index)
        self._leader_of[(topic, index)] = leader_id

    def unfollow(self, topic: str, index: int) -> None:
        leader = self._leader_of.pop((topic, index), None)
        fetcher = self.fetchers.get(leader) if leader is not None else None
        if fetcher is not None:
            fetcher.remove(topic, index)

    async def shutdown(self) -> None:
        self._closed = True
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()
