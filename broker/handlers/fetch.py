"""Fetch (key 1): long-polling reads with fetch sessions; the response is hand-encoded and carries log bytes as
memoryview slices of the segment mmaps (no copy until the socket write).

Advertised from v0 for librdkafka 2.0.2's feature detection (see produce.py); kio decodes v4+, older versions close
the connection with a log line. v13+ addresses topics by id.

Follower fetching (KIP-392): a consumer Fetch v11+ carries client metadata (its rack), and then any replica may
serve it, up to that replica's high watermark; with `replica.selector.class` set, the leader may instead answer
with `preferred_read_replica` (broker/replica_selector.py) and no records. Older versions read from the leader only.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from broker.fetch_session import FetchSession, SessionPartition
from broker.current_leader import current_leaders
from broker.replica_selector import preferred_read_replica
from broker.security.authorization import CLUSTER_ACTION, READ, TOPIC_DENIED, authorize_cluster, name_checker
from protocol import kio_codec
from protocol.wire import I16, I32, I64, array_len, leader_id_and_epoch, node_endpoints, string, tagged_fields
from protocol.errors import ApiError, ErrorCode
from protocol.replica_fetch import WAL_POINTERS_TAG, encode_wal_pointers

API_KEY = 1
VERSIONS = (0, 16)
DECODABLE = (4, 16)

UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
log = logging.getLogger("strata.fetch")

_NULL_UUID = b"\x00" * 16


class _Wanted:
    """One partition a fetch asks for: key is (topic name or topic id, partition)."""
    __slots__ = ("key", "topic", "index", "fetch_offset", "max_bytes", "leader_epoch", "sp", "part", "error",
                 "remote", "last_fetched_epoch", "diverging", "pointers", "log_start", "preferred", "aborted")

    def __init__(self, key, topic, index, fetch_offset, max_bytes, leader_epoch, sp=None, last_fetched_epoch=-1,
                 log_start=-1):
        self.key, self.topic, self.index = key, topic, index
        self.fetch_offset, self.max_bytes, self.leader_epoch = fetch_offset, max_bytes, leader_epoch
        self.last_fetched_epoch = last_fetched_epoch
        self.sp: SessionPartition | None = sp
        self.part = None
        self.error = 0
        self.remote: asyncio.Task | None = None     # a read from the remote tier (offset below the local log start)
        self.diverging: tuple[int, int] | None = None   # (epoch, end offset) for a follower whose log diverged
        self.pointers = ()                              # WAL pointers for a follower, instead of records (KIP-1176)
        self.log_start = log_start                      # a follower's log start offset
        self.preferred = -1                             # preferred_read_replica for a consumer (KIP-392)
        self.aborted = None                             # read_committed from the remote tier: its aborted txns


def handle(broker, req):
    version = req.api_version
    body = kio_codec.decode_request(API_KEY, version, req.readonly(), req.body_offset)
    by_id = version >= 13
    sessions = broker.fetch_sessions
    session_id = getattr(body, "session_id", 0)
    epoch = getattr(body, "session_epoch", -1)
    session: FetchSession | None = None
    incremental = False

    if epoch > 0:
        session, err = sessions.lookup(session_id, epoch)
        if session is None:
            broker.request_errors.add(API_KEY, 0, {err: 1})
            return _encode(version, err, 0, [])
        incremental = True
        session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
    else:
        if session_id:
            sessions.remove(session_id)
        if epoch == 0:
            session = sessions.new_session()

    wanted: list[_Wanted] = []
    if session is not None:
        for t in body.topics:
            tkey = t.topic_id if by_id else t.topic
            for p in t.partitions:
                key = (tkey, p.partition)
                sp = session.partitions.get(key)
                if sp is None:
                    sp = session.partitions[key] = SessionPartition(p.fetch_offset, p.partition_max_bytes,
                                                                    getattr(p, "log_start_offset", -1))
                else:
                    sp.fetch_offset, sp.max_bytes = p.fetch_offset, p.partition_max_bytes
        for ft in getattr(body, "forgotten_topics_data", ()):
            tkey = ft.topic_id if by_id else ft.topic
            for p in ft.partitions:
                session.partitions.pop((tkey, p), None)
        epochs = {(t.topic_id if by_id else t.topic, p.partition): (getattr(p, "current_leader_epoch", -1),
                                                                    getattr(p, "last_fetched_epoch", -1))
                  for t in body.topics for p in t.partitions}
        for key, sp in session.partitions.items():
            current, last_fetched = epochs.get(key, (-1, -1))
            wanted.append(_Wanted(key, key[0], key[1], sp.fetch_offset, sp.max_bytes, current, sp, last_fetched))
    else:
        for t in body.topics:
            tkey = t.topic_id if by_id else t.topic
            for p in t.partitions:
                wanted.append(_Wanted((tkey, p.partition), tkey, p.partition, p.fetch_offset,
                                      p.partition_max_bytes, getattr(p, "current_leader_epoch", -1), None,
                                      getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1)))

    replica_id = body.replica_state.replica_id if version >= 15 else body.replica_id
    secured = getattr(broker, "authorizer", None) is not None      # the one test when no authorizer is configured
    if replica_id >= 0:
        if secured and not authorize_cluster(broker, req, CLUSTER_ACTION):   # Kafka: a follower needs CLUSTER_ACTION,
            for w in wanted:                                      # else TOPIC_AUTHORIZATION_FAILED everywhere
                w.error = TOPIC_DENIED
            return _finish(broker, version, 0, wanted, [((), 0)] * len(wanted), False, False, by_id, consumer=False)
        return _follower_fetch(broker, version, body, wanted, replica_id, by_id)
    # Kafka's FetchParams.fetchOnlyLeader: a consumer without client metadata (before v11) reads from leaders only
    leader_only = version < 11
    readable = name_checker(broker, req, READ) if secured else None     # READ, once per topic
    _resolve(broker, wanted, by_id, leader_only, readable)
    _check_last_fetched_epoch(wanted)
    if not leader_only and broker.replica_selector is not None:
        image, now, rack = broker.topics.image, time.monotonic(), body.rack_id or None
        for w in wanted:
            if not w.error:
                w.preferred = preferred_read_replica(broker.replica_selector, image, w.part, rack, w.fetch_offset, now)
    max_wait = body.max_wait.total_seconds()
    min_bytes = body.min_bytes
    max_bytes = body.max_bytes if version >= 3 else 2**31 - 1
    if broker.topics.image.client_quotas:
        # Kafka caps a consumer's fetch at what its quota allows in one window, so a fetch never throttles for
        # longer than a window when nothing was fetched recently
        window = broker.client_quotas.fetch.max_value_in_window(broker.topics.image.client_quotas, req.principal,
                                                                req.client_id)
        if window is not None:
            max_bytes = min(max_bytes, max(int(window), 0))
            if min_bytes > max_bytes:
                # Kafka lowers min_bytes to the capped max_bytes, and its DelayedFetch then counts the bytes available
                # (not the batch-aligned bytes read), so such a fetch is answered at once when data is there; here the
                # read total is what counts, which batch alignment keeps below max_bytes: answer whatever there is
                min_bytes = 1
    read_committed = getattr(body, "isolation_level", 0) == 1
    sid = session.session_id if session is not None else 0

    results, total = _read_all(wanted, max_bytes, read_committed=read_committed)
    if any(w.remote is not None for w in wanted):
        if _remote_now(wanted, results, read_committed):
            return _finish(broker, version, sid, wanted, results, incremental, read_committed, by_id,
                           listener=req.listener, req=req)
        return _remote_then_finish(broker, version, sid, wanted, results, incremental, read_committed, by_id,
                                   req.listener, req)
    if max_wait <= 0 or total >= min_bytes or not wanted or \
            any(w.error or w.preferred >= 0 or w.diverging for w in wanted):
        return _finish(broker, version, sid, wanted, results, incremental, read_committed, by_id,
                       listener=req.listener, req=req)
    return _wait_then_finish(broker, version, sid, wanted, results, incremental, read_committed, by_id,
                             max_wait, min_bytes, max_bytes, leader_only, readable, req.listener, req)


async def _wait_then_finish(broker, version, sid, wanted, results, incremental, read_committed, by_id,
                            max_wait, min_bytes, max_bytes, leader_only, readable=None, listener: str = "",
                            req=None):
    deadline = time.monotonic() + max_wait
    parts = [w.part for w in wanted if w.part is not None]
    results, total = _read_all(wanted, max_bytes, read_committed=read_committed)   # again: an append before this
    # first step woke nobody
    while True:
        if any(w.remote is not None for w in wanted):
            return await _remote_then_finish(broker, version, sid, wanted, results, incremental, read_committed, by_id,
                                             listener, req)
        if total >= min_bytes or any(w.error for w in wanted):
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        waited = time.perf_counter()
        await broker.replicas.wait_for_data(parts, remaining)
        if req is not None:
            req.busy_since += time.perf_counter() - waited     # waiting is not handling (request_percentage)
        _resolve(broker, wanted, by_id, leader_only, readable)  # a topic may be gone, or leadership moved, meanwhile
        results, total = _read_all(wanted, max_bytes, read_committed=read_committed)
    return _finish(broker, version, sid, wanted, results, incremental, read_committed, by_id, listener=listener,
                   req=req)


async def _remote_then_finish(broker, version, sid, wanted, results, incremental, read_committed, by_id,
                              listener: str = "", req=None):
    """Kafka's DelayedRemoteFetch: answer when the remote reads are done or after remote.fetch.max.wait.ms; a read
    still running then yields the whole batches it has read so far, or, with none, no records and no error (the
    client fetches the same offset again and gets the read's result); a failed one UNKNOWN_SERVER_ERROR (what Kafka
    maps a RemoteStorageException to). See Partition.remote_read_result.

    read_committed: each partition's aborted transactions are looked up as soon as its own read is done (Kafka does
    it in the read task), within the same deadline, so that a slow read of one partition does not take the time of
    another's lookup, which may wait for transaction index GETs. A read done whose lookup is still waiting for the
    store then answers no records and no error and stays registered for the client's retry (its index GETs go on
    into the cache): a slow index never holds the whole response."""
    remote = [w for w in wanted if w.remote is not None]
    max_wait = remote[0].part.remote_fetch_max_wait
    deadline = time.monotonic() + max_wait
    lookups = {w: asyncio.ensure_future(_read_then_aborted(w)) for w in remote} if read_committed else {}
    try:
        waited = time.perf_counter()
        await asyncio.wait(set(lookups.values()) or {w.remote for w in remote}, timeout=max_wait)
        if req is not None:
            req.busy_since += time.perf_counter() - waited
        partial = _take_remote(wanted, results, lookups)
        if partial:
            waited = time.perf_counter()
            await _remote_aborted(partial, results, deadline - time.monotonic())
            if req is not None:
                req.busy_since += time.perf_counter() - waited     # waiting for the store is not handling
    finally:
        _settle(lookups.values())
    return _finish(broker, version, sid, wanted, results, incremental, read_committed, by_id, listener=listener,
                   req=req)


def _remote_now(wanted, results, read_committed: bool) -> bool:
    """Take the remote reads' outcomes into `results` at once, when every read finished in the call that started it
    (its chunks were cached: remote_read runs reads eagerly) and, read_committed, each lookup of aborted transactions
    finishes eagerly too (its indexes are cached); else change nothing and say so (_remote_then_finish waits)."""
    remote = [w for w in wanted if w.remote is not None]
    if not all(w.remote.done() for w in remote):
        return False
    lookups = {}
    if read_committed:
        for w in remote:
            views = _read_views(w.remote)
            if views is None:
                continue
            lookup = w.part.remote_aborted_transactions_now(w.fetch_offset, views)
            lookups[w] = lookup
            if not lookup.done():
                _settle(lookups.values())         # the index GETs it started go on (shared); the walk stops
                return False
    partial = _take_remote(wanted, results, lookups)
    assert not partial                            # every lookup is done
    return True


def _take_remote(wanted, results, lookups: dict) -> list:
    """The finished remote reads' views into `results` (replacing the budget _read_all reserved for them), with the
    aborted transactions of those whose lookup is done; returns (index, wanted) of the reads answered in part, whose
    lookups have not started. A read done whose lookup is not answers nothing and stays registered for the retry."""
    partial = []
    for i, w in enumerate(wanted):
        task = w.remote
        if task is None:
            continue
        w.remote = None
        lookup = lookups.get(w)
        if lookup is not None and task.done() and not lookup.done():
            w.part.remote.metrics.fetch_expires.inc()
            results[i] = ((), 0)              # the read stays registered (not consumed) for the retry
            continue
        views, w.error = w.part.remote_read_result(w.fetch_offset, task)
        results[i] = (views, sum(len(v) for v in views))
        if lookup is None or not views or w.error:
            continue
        if lookup.done():
            _take_aborted(i, w, results, lookup)
        else:
            partial.append((i, w))
    return partial


async def _read_then_aborted(w):
    """The aborted transactions of `w`'s remote read once it is done (None: it failed or read nothing). Waiting
    never cancels the read: a Fetch that stops waiting leaves it to Partition.remote_read_result."""
    task = w.remote
    await asyncio.wait({task})
    views = _read_views(task)
    if views is None:
        return None
    return await w.part.remote_aborted_transactions(w.fetch_offset, views)


def _read_views(task) -> list | None:
    """The views a finished remote read answered, or None when it failed, was cancelled or read nothing: no aborted
    transactions to look up for it."""
    if task.cancelled() or task.exception() is not None or not task.result():
        return None
    return task.result()


async def _remote_aborted(partial, results, timeout: float) -> None:
    """The aborted transactions of the whole batches a read not done by the deadline answers (`partial`: (index,
    wanted)), looked up all at once: with what is left of the deadline, usually nothing, those whose transaction
    indexes are cached are found (timeout 0 still lets a lookup that needs no GET finish: its first step runs before
    the timeout's). The others answer no records and no error (already counted as expired by remote_read_result)."""
    lookups = {asyncio.ensure_future(w.part.remote_aborted_transactions(w.fetch_offset, results[i][0])): (i, w)
               for i, w in partial}
    try:
        done, _ = await asyncio.wait(lookups, timeout=max(timeout, 0.0))
        for t, (i, w) in lookups.items():
            if t in done:
                _take_aborted(i, w, results, t)
            else:
                results[i] = ((), 0)
    finally:
        _settle(lookups)


def _take_aborted(i: int, w, results, lookup: asyncio.Future) -> None:
    """A finished lookup's answer: `w.aborted`, or, where the index could not be read, UNKNOWN_SERVER_ERROR and no
    records, as a failed read. A lookup cancelled by someone else raises here."""
    exc = lookup.exception()
    if exc is None:
        w.aborted = lookup.result()
    elif isinstance(exc, Exception):
        log.warning("aborted transactions of %s-%d from the remote tier: %s", w.part.topic, w.index, exc)
        results[i], w.error = ((), 0), UNKNOWN_SERVER_ERROR
    else:
        raise exc


def _settle(tasks) -> None:
    """Cancel the lookups not done (the index GETs are shared and shielded: only the walks stop) and take the
    exceptions of those done, which a Fetch cancelled meanwhile (its connection closed) would leave unretrieved."""
    for t in tasks:
        if not t.done():
            t.cancel()
        elif not t.cancelled():
            t.exception()


def _follower_fetch(broker, version, body, wanted, replica_id: int, by_id: bool):
    """A follower's fetch (Kafka's ReplicaManager.fetchMessages with a replica id): no fetch session, reads up to
    the log end, records the follower's fetch offset as its log end offset (the HW and the ISR follow), and answers
    a follower whose last fetched epoch diverged from our log with `diverging_epoch` instead of records. For a
    WAL-enabled partition (KIP-1176) it may answer with pointers into the fast store instead of records."""
    _resolve(broker, wanted, by_id)
    now = time.monotonic()
    for w in wanted:
        if w.error:
            continue
        part = w.part
        if w.last_fetched_epoch >= 0:
            epoch, end = part.last_offset_for_leader_epoch(w.last_fetched_epoch)
            if epoch < w.last_fetched_epoch or end < w.fetch_offset:
                w.diverging = (epoch, end)
                continue
        part.update_follower_fetch_state(replica_id, w.fetch_offset, now,
                                         w.sp.log_start_offset if w.sp is not None else w.log_start)
    max_wait = body.max_wait.total_seconds()

    def answer():
        _count_replication_bytes(broker, replica_id, results)
        return _finish(broker, version, 0, wanted, results, False, False, by_id, consumer=False)

    results, total = _read_all(wanted, body.max_bytes, replica=replica_id, now=now)
    if max_wait <= 0 or total >= body.min_bytes or any(w.error or w.diverging for w in wanted) or not wanted:
        return answer()

    async def wait():
        # Read again before parking: an append that came between this handler's return and this coroutine's first
        # step woke nobody (the waiter was not registered yet), and the fetch would sit out replica.fetch.wait.max.ms.
        # A WAL partition wakes on appends and on published uploads: park again until there is something to send.
        nonlocal results
        deadline = time.monotonic() + max_wait
        while True:
            results, total = _read_all(wanted, body.max_bytes, replica=replica_id, now=time.monotonic())
            remaining = deadline - time.monotonic()
            if total >= body.min_bytes or remaining <= 0 or any(w.error for w in wanted):
                return answer()
            await broker.replicas.wait_for_data([w.part for w in wanted if w.part is not None], remaining)
            _resolve(broker, wanted, by_id)
    return wait()


def _count_replication_bytes(broker, replica_id: int, results) -> None:
    metrics = broker.traffic
    sent = sum(size for _, size in results)
    if sent:
        image = broker.topics.image
        mine, theirs = image.brokers.get(broker.node_id), image.brokers.get(replica_id)
        cross = mine is not None and theirs is not None and (mine.rack or "") != (theirs.rack or "")
        metrics.sent_to_follower(sent, cross)


def _resolve(broker, wanted: list[_Wanted], by_id: bool, leader_only: bool = True, readable=None) -> None:
    """Each partition's replica on this broker, or the error to answer: a follower serves only fetches that may
    read from any replica (`leader_only` False), after the same leader-epoch check (KIP-320) as the leader.
    `readable` (with an authorizer): name -> READ allowed; a refused topic is TOPIC_AUTHORIZATION_FAILED, checked
    after an unknown topic id and before the partition's existence, as Kafka does."""
    cache: dict = {}
    for w in wanted:
        tkey = w.key[0]
        hit = cache.get(tkey)
        if hit is None:
            info = broker.topics.by_id(tkey) if by_id else broker.topics.get(tkey)
            name = info.name if info is not None else None
            hit = cache[tkey] = (name, readable is not None and (name is not None or not by_id) and
                                 not readable(name if by_id else tkey))
        name, denied = hit
        if denied:
            w.part, w.error = None, TOPIC_DENIED
            continue
        w.part = broker.replicas.get(name, w.index) if name is not None else None
        if w.part is None:
            w.error = ErrorCode.unknown_topic_id if by_id and name is None else \
                broker.replicas.missing_error(name, w.index) if name is not None else ErrorCode.unknown_topic_or_partition
        else:
            w.error = (leader_only and w.part.not_leader_error()) or w.part.check_leader_epoch(w.leader_epoch)


def _check_last_fetched_epoch(wanted: list[_Wanted]) -> None:
    """A consumer's last_fetched_epoch (v12+), as Kafka's Partition.fetchRecords checks it for every fetcher: the
    end of that epoch in our log; none known is OFFSET_OUT_OF_RANGE, an earlier epoch or an end below the fetch
    offset answers diverging_epoch instead of records."""
    for w in wanted:
        if w.error or w.last_fetched_epoch < 0:
            continue
        epoch, end = w.part.last_offset_for_leader_epoch(w.last_fetched_epoch)
        if epoch < 0 or end < 0:
            w.error = ErrorCode.offset_out_of_range
        elif epoch < w.last_fetched_epoch or end < w.fetch_offset:
            w.diverging = (epoch, end)


def _read_all(wanted: list[_Wanted], max_bytes: int, replica: int = -1, now: float = 0.0,
              read_committed: bool = False):
    """Read each partition within the byte budgets. A consumer reads below the high watermark (read_committed: the
    last stable offset) and may start a remote read; a follower (`replica` >= 0) reads to the log end, only locally, nothing where its log diverged, and may
    get WAL pointers, whose bytes count against the budgets as records would."""
    results = []
    total = 0
    for w in wanted:
        views = ()
        size = 0
        if not w.error and w.diverging is None and w.preferred < 0:
            budget = min(w.max_bytes, max_bytes - total)
            if budget > 0 or total == 0:
                try:
                    if replica >= 0:
                        views, w.pointers = w.part.read_for_follower(replica, w.fetch_offset, max(budget, 0),
                                                                     min_one_message=(total == 0), now=now)
                        total += sum(p.size for p in w.pointers)
                    else:
                        views, w.remote = w.part.read(w.fetch_offset, max(budget, 0), min_one_message=(total == 0),
                                                      read_committed=read_committed)
                    if w.remote is not None:
                        size = max(budget, 0)      # a remote read (below the local log start): budget reserved
                except ApiError as e:
                    w.error = e.error_code
                except OSError:
                    w.error = ErrorCode.kafka_storage_error
        size += sum(len(v) for v in views)
        total += size
        results.append((views, size))
    return results, total


def _finish(broker, version, sid, wanted, results, incremental, read_committed, by_id, consumer: bool = True,
            listener: str = "", req=None):
    """Encode the response; count bytes out per topic (consumers only) and the error codes it carries, as Kafka's
    FetchResponse.errorCounts does: the top-level one and one per partition in the response, NONE included.
    A consumer over its consumer_byte_rate gets an empty response with the throttle time instead (Kafka's
    getThrottledResponse), its bytes unrecorded; the session does not move on, so it fetches the same again."""
    if req is not None and broker.topics.image.client_quotas:
        throttle = _throttle(broker, req, sum(size for _, size in results))
        if throttle:
            if not incremental and sid:           # Kafka creates a full fetch's session only when it answers data
                broker.fetch_sessions.remove(sid)
                sid = 0
            broker.request_errors.add(API_KEY, 1, None)
            out = _encode(version, 0, sid, [], by_id)
            out[0] = I32.pack(min(throttle, 2**31 - 1))
            return out
    topics: list[tuple[object, list]] = []
    index: dict = {}
    none, errors = 1, None
    traffic = broker.traffic if consumer else None
    for w, (views, size) in zip(wanted, results):
        part = w.part
        if size and traffic is not None and part is not None:
            traffic.topic(part.topic).bytes_out += size
        if w.error == UNKNOWN_SERVER_ERROR or (consumer and w.error):
            # as Kafka's createLogReadResult(exception): unknown (-1) offsets with the error. A follower still gets
            # them with OFFSET_OUT_OF_RANGE and OFFSET_MOVED_TO_TIERED_STORAGE (it restarts at the log start).
            part = None
        hw = part.high_watermark if part is not None else -1
        lso = part.last_stable_offset if part is not None else -1
        aborted = None
        if read_committed:
            aborted = w.aborted if w.aborted is not None else \
                part.aborted_transactions(w.fetch_offset, views) if size and part is not None else ()
        log_start = part.log_start_offset if part is not None else -1
        if incremental:
            sp = w.sp
            changed = (size > 0 or w.error or w.preferred >= 0 or sp.last_hw != hw or sp.last_lso != lso or
                       sp.last_log_start != log_start)
            if not changed:
                continue
        if w.sp is not None:
            w.sp.last_hw, w.sp.last_lso, w.sp.last_log_start = hw, lso, log_start
        if w.error:
            if errors is None:
                errors = {}
            errors[w.error] = errors.get(w.error, 0) + 1
        else:
            none += 1
        tkey = w.key[0]
        if tkey not in index:
            index[tkey] = len(topics)
            topics.append((tkey, []))
        topics[index[tkey]][1].append((w.index, w.error, hw, lso, log_start, w.preferred, views, size, w.diverging,
                                       encode_wal_pointers(part.wal.store_name, w.pointers) if w.pointers else None,
                                       aborted))
    leaders = current_leaders(broker.topics.image, ((w.key[0], w.index, w.error) for w in wanted), listener) \
        if version >= 12 and any(w.error for w in wanted) else None
    broker.request_errors.add(API_KEY, none, errors)
    return _encode(version, 0, sid, topics, by_id, leaders)


def _throttle(broker, req, size: int) -> int:
    """consumer_byte_rate and request_percentage (broker/quotas.py): record the response's size and the handling
    time as Kafka's KafkaApis does; throttled by either, unrecord the size (the answer will be empty) and mute the
    connection for the longer throttle time."""
    quotas = broker.topics.image.client_quotas
    manager = broker.client_quotas.fetch
    request_ms = broker.client_quotas.record_request_time(quotas, req, time.perf_counter() - req.busy_since)
    ms = max(manager.record(quotas, req.principal, req.client_id, size), request_ms)
    if ms:
        manager.unrecord(quotas, req.principal, req.client_id, size)
        req.throttle_ms = max(req.throttle_ms, ms)
    return ms


def _encode(version: int, error: int, session_id: int, topics, by_id: bool = False, leaders=None):
    flexible = version >= 12
    current, endpoints = leaders or ({}, ())
    out = [I32.pack(0)]  # throttle_time_ms
    if version >= 7:
        out.append(I16.pack(error) + I32.pack(session_id))
    out.append(array_len(len(topics), flexible))
    for tkey, parts in topics:
        if by_id:
            out.append(tkey.bytes if isinstance(tkey, uuid.UUID) else _NULL_UUID)
        else:
            out.append(string(tkey, flexible))
        out.append(array_len(len(parts), flexible))
        for index, err, hw, lso, log_start, preferred, views, size, diverging, wal, aborted in parts:
            leader = current.get((tkey, index))
            head = I32.pack(index) + I16.pack(err) + I64.pack(hw) + I64.pack(lso)
            if version >= 5:
                head += I64.pack(log_start)
            # aborted_transactions: null for read_uncommitted, else (producer id, first offset) of each overlapping
            if aborted is None:
                head += b"\x00" if flexible else I32.pack(-1)
            else:
                head += array_len(len(aborted), flexible)
                tail = b"\x00" if flexible else b""
                for a in aborted:
                    head += I64.pack(a.producer_id) + I64.pack(a.first_offset) + tail
            if version >= 11:
                head += I32.pack(preferred)  # preferred_read_replica (KIP-392)
            head += array_len(size, flexible) if flexible else I32.pack(size)
            out.append(head)
            out.extend(views)
            if flexible:
                tags = {}
                if diverging is not None:    # DivergingEpoch {epoch int32, end_offset int64, no tags}
                    tags[0] = I32.pack(diverging[0]) + I64.pack(diverging[1]) + b"\x00"
                if leader is not None:       # CurrentLeader (KIP-595, KIP-951)
                    tags[1] = leader_id_and_epoch(*leader)
                if wal is not None:          # WAL pointers for a follower (KIP-1176, protocol/replica_fetch.py)
                    tags[WAL_POINTERS_TAG] = wal
                out.append(tagged_fields(tags) if tags else b"\x00")
        if flexible:
            out.append(b"\x00")
    if flexible:                             # NodeEndpoints (tag 0, v16+): the leaders named above
        out.append(tagged_fields({0: node_endpoints(endpoints)}) if endpoints and version >= 16 else b"\x00")
    return out
