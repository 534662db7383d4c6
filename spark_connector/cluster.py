"""Driver-side access to the brokers with confluent-kafka: topics and topic ids (Metadata), offsets (ListOffsets),
the object store location (DescribeConfigs), and the remote segments of partitions (`__remote_log_metadata`).

Only the driver talks to the brokers for planning; executors receive everything they need in their input
partitions (offset ranges and the segment objects to read), so a task does no metadata lookups.

On a cluster every ListOffsets goes to the partition's leader (librdkafka groups the partitions by leader), so the
earliest and latest offsets are the leaders' log start and high watermark. Lookups are retried as Spark's
KafkaOffsetReaderAdmin does: up to fetchOffset.numRetries attempts, fetchOffset.retryIntervalMs apart, each of
which (like the Java AdminClient under it) retries retriable errors, such as a partition whose leader just died or
a new leader whose high watermark is not known yet (OFFSET_NOT_AVAILABLE), for up to strata.brokerTimeoutMs.
"""
from __future__ import annotations

import concurrent.futures
import logging
import socket
import ssl
import struct
import time
import uuid
from dataclasses import dataclass

from spark_connector.options import ClientOptions

log = logging.getLogger("strata.spark")

METADATA_TOPIC = "__remote_log_metadata"
STORE_URL = "remote.log.storage.manager.store.url"
STORE_PREFIX = "remote.log.storage.manager.store."
# Never taken from the broker, even though Strata's DescribeConfigs does not mark them sensitive (Kafka would
# answer null): credentials come from strata.store.* options or the usual AWS environment.
_CREDENTIALS = {"access.key.id", "secret.access.key", "session.token"}


class BrokerUnavailable(Exception):
    """No bootstrap server accepted a connection."""


class BrokerSecurityError(RuntimeError):
    """A broker answered, but refused the client's credentials or showed a certificate the truststore does not
    verify: a failure of the query, never a reason to read around the broker."""


class OffsetLookupError(RuntimeError):
    """ListOffsets failed for good (after strata.brokerTimeoutMs of retries), naming the partitions."""


# Kafka's RetriableException error codes that ListOffsets may answer (the Java AdminClient retries them)
_RETRIABLE = {3, 5, 6, 7, 9, 13, 14, 15, 16, 56, 74, 75, 78}
_RETRY_BACKOFF_S = 0.1                # Kafka's retry.backoff.ms
# One request's timeout within an attempt: librdkafka keeps a request to a leader that just died waiting for the
# connection (and then answers ListOffsets with offset -1001 and no error), while the cluster elects a new one
_CALL_TIMEOUT_S = 10.0
OFFSET_INVALID = -1001


def _retriable(exc: Exception) -> bool:
    err = exc.args[0] if exc.args else None
    if not hasattr(err, "code"):
        return False
    return bool(getattr(err, "retriable", lambda: False)()) or err.code() in _RETRIABLE or err.code() in (
        -195, -187, -185, -156)       # librdkafka: _TRANSPORT, _ALL_BROKERS_DOWN, _TIMED_OUT, _NOENT (no leader)


_PROBE_CORRELATION_ID = 0x53545241
# ApiVersions v0 with a null client id: size, api key 18, version 0, correlation id, client id length -1
_PROBE = struct.pack(">ihhih", 10, 18, 0, _PROBE_CORRELATION_ID, -1)


def reachable(bootstrap: str, timeout: float = 2.0, security=None) -> bool:
    """True if any bootstrap server answers an ApiVersions request (librdkafka would retry until its timeout).
    A bare TCP connect is not enough: once a broker stops, another local process (Spark's own worker sockets) may
    listen on its freed port, and on loopback a connect to an ephemeral port can even connect to itself.

    `security` (ClientOptions.security(), a protocol.client_security.ClientSecurity) secures the probe as the
    listener wants: TLS on SSL and SASL_SSL listeners; on SASL ones ApiVersions is answered before authentication,
    and the probe then authenticates, so wrong credentials fail the query at once, with the broker's reason
    (AuthenticationFailed), instead of librdkafka retrying until its timeouts. A broker whose certificate does not
    verify, or a TLS listener that refuses the handshake, fails it too (BrokerSecurityError): the broker is up, and
    reading around it from the object store is not what the user asked for."""
    from protocol.client_security import AuthenticationFailed
    from protocol.wal_pointers_client import authenticate
    untrusted = None
    for server in bootstrap.split(","):
        server = server.strip()
        if "://" in server:
            server = server.split("://", 1)[1]
        host, _, port = server.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as raw:
                raw.settimeout(timeout)
                s = raw
                if security is not None and security.ssl_context is not None:
                    s = security.ssl_context.wrap_socket(raw, server_hostname=host)
                with s:
                    s.sendall(_PROBE)
                    head = _read_up_to(s, 8)
                    if len(head) < 8 or struct.unpack(">ii", head)[1] != _PROBE_CORRELATION_ID:
                        continue
                    if security is not None and security.sasl_client is not None:
                        _read_up_to(s, struct.unpack(">i", head[:4])[0] - 4)     # the rest of the answer
                        authenticate(s, security, f"{host}:{port}", "strata-spark-probe")
            return True
        except ssl.SSLCertVerificationError as e:
            untrusted = (f"TLS with {host}:{port} failed: {e.verify_message or e}: the broker's certificate does not "
                         "verify against kafka.ssl.truststore.location (or kafka.ssl.ca.location)")
        except ssl.SSLError as e:
            if "ALERT" not in str(e.reason or "").upper():
                continue
            # a TLS server that refused the handshake (e.g. a listener that requires a client certificate)
            untrusted = f"TLS with {host}:{port} failed: {e.reason} (kafka.ssl.keystore.location?)"
        except AuthenticationFailed as e:
            raise BrokerSecurityError(f"{e} (kafka.sasl.mechanism, kafka.sasl.jaas.config)") from None
        except (OSError, ValueError, struct.error):
            continue
    if untrusted is not None:
        raise BrokerSecurityError(untrusted)
    return False


def _read_up_to(s, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


@dataclass(frozen=True)
class SegmentInfo:
    """A remote segment that finished copying: what an executor needs to read it."""
    key_prefix: str
    start: int
    end: int                  # inclusive last offset
    size: int
    max_timestamp: int


def uuid_of(kafka_uuid_obj) -> uuid.UUID:
    """confluent-kafka's Uuid (two signed 64-bit halves) as a uuid.UUID."""
    msb = kafka_uuid_obj.get_most_significant_bits() & (2**64 - 1)
    lsb = kafka_uuid_obj.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


class Cluster:
    def __init__(self, client: ClientOptions, group_id: str | None = None):
        from confluent_kafka.admin import AdminClient
        self.client = client
        self.group_id = group_id or f"spark-kafka-relation-{uuid.uuid4()}-driver"   # the metadata consumer's
        self.timeout = client.broker_timeout_ms / 1000
        self.security = client.security()       # the connector's own connections (DescribeWalPointers)
        self.admin = AdminClient(client.conf())
        self._metadata = None
        # __remote_log_metadata partitions read so far: a streaming query plans every micro-batch with the same
        # Cluster, and then only reads the events appended since the previous one
        self._md_events: dict[int, list[bytes]] = {}
        self._md_next: dict[int, int] = {}

    # ---- metadata ----
    def metadata(self, refresh: bool = False):
        from confluent_kafka import KafkaException
        if self._metadata is None or refresh:
            try:
                self._metadata = self.with_retries("Metadata", lambda: self.admin.list_topics(timeout=self.timeout))
            except KafkaException as e:
                raise BrokerUnavailable(f"cannot get metadata from {self.client.bootstrap}: {e}") from None
        return self._metadata

    def partitions(self, topics) -> dict[str, int]:
        """{topic: partition count} for the existing topics among `topics` (missing ones are left out)."""
        from confluent_kafka import KafkaError
        md = self.metadata(refresh=True)
        out = {}
        for t in topics:
            tm = md.topics.get(t)
            # a partition without a leader right now (LEADER_NOT_AVAILABLE) is still the topic's: its offsets
            # lookup waits for a leader or fails, but the partition is never silently left out
            if tm is not None and tm.partitions and (tm.error is None or
                                                    tm.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART):
                out[t] = len(tm.partitions)
        return out

    def topic_names(self) -> list[str]:
        """User topics (internal `__*` topics are excluded, as Kafka's consumer does for patterns)."""
        return sorted(t for t in self.metadata(refresh=True).topics if not t.startswith("__"))

    def topic_ids(self, topics) -> dict[str, uuid.UUID]:
        from confluent_kafka import TopicCollection
        if not topics:
            return {}
        futures = self.admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=self.timeout)
        return {t: uuid_of(f.result(timeout=self.timeout).topic_id) for t, f in futures.items()}

    # ---- offsets ----
    def with_retries(self, what: str, fn):
        """Spark's KafkaOffsetReaderAdmin.withRetries: fetchOffset.numRetries attempts, fetchOffset.retryIntervalMs
        apart, each with a fresh AdminClient; the last error is raised."""
        from confluent_kafka.admin import AdminClient
        attempts = self.client.fetch_offset_retries
        for attempt in range(1, attempts + 1):
            try:
                return fn()
            except Exception as e:
                if attempt == attempts:
                    raise
                log.warning("Error in attempt %d getting Kafka offsets (%s): %s", attempt, what, e)
                time.sleep(self.client.fetch_offset_retry_interval_ms / 1000)
                self.admin = AdminClient(self.client.conf())
        raise AssertionError("unreachable")

    def list_offsets(self, specs: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """ListOffsets from each partition's leader: spec -2 earliest, -1 latest (the high watermark; the last
        stable offset with kafka.isolation.level=read_committed), >= 0 a timestamp (-> first offset with timestamp
        >= it, below the last stable offset with read_committed, or -1 if there is none). The isolation level goes
        with every lookup, as Spark's KafkaOffsetReaderAdmin passes it in its ListOffsetsOptions."""
        if not specs:
            return {}
        return self.with_retries("ListOffsets", lambda: self._list_offsets(specs))

    def _list_offsets(self, specs: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """One attempt: retriable errors (no leader yet, a new leader's HW unknown, a lost connection) are tried
        again until strata.brokerTimeoutMs, as the Java AdminClient does until default.api.timeout.ms."""
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec
        isolation = IsolationLevel.READ_COMMITTED if self.client.read_committed else IsolationLevel.READ_UNCOMMITTED
        req = {}
        for (t, p), s in specs.items():
            spec = OffsetSpec.earliest() if s == -2 else OffsetSpec.latest() if s == -1 else \
                OffsetSpec.for_timestamp(s)
            req[TopicPartition(t, p)] = spec
        deadline = time.monotonic() + self.timeout
        while True:
            call = max(min(deadline - time.monotonic(), _CALL_TIMEOUT_S), 1.0)
            try:
                futures = self.admin.list_offsets(req, isolation_level=isolation, request_timeout=call)
                try:
                    out = {(tp.topic, tp.partition): f.result(timeout=call + 5).offset for tp, f in futures.items()}
                except concurrent.futures.TimeoutError:
                    out = {tp: OFFSET_INVALID for tp in specs}
                # earliest and latest are never negative; a timestamp lookup answers -1 when nothing matches
                missing = sorted(f"{t}-{p}" for (t, p), o in out.items()
                                 if o == OFFSET_INVALID or (o < 0 and specs[(t, p)] < 0))
                if not missing:
                    return out
                if time.monotonic() + _RETRY_BACKOFF_S > deadline:
                    raise OffsetLookupError(f"ListOffsets of {missing} got no answer from their leader within "
                                            f"{self.timeout:.0f}s (strata.brokerTimeoutMs)")
                log.info("ListOffsets: no answer for %s (retrying)", missing)
            except KafkaException as e:
                if not _retriable(e) or time.monotonic() + _RETRY_BACKOFF_S > deadline:
                    raise OffsetLookupError(f"ListOffsets of {sorted(f'{t}-{p}' for t, p in specs)} from "
                                            f"{self.client.bootstrap} failed: {e}") from e
                log.info("ListOffsets: %s (retrying)", e)
            time.sleep(_RETRY_BACKOFF_S)

    # ---- object store ----
    def broker_configs(self) -> dict:
        """The broker configs (DescribeConfigs, BROKER) from the controller, or else any broker that answers (one
        may have just died). A planning asks once and hands the result to store_location and wal_store_locations."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType
        md = self.metadata(refresh=True)
        ids = sorted(md.brokers, key=lambda b: (b != md.controller_id, b))
        configs = None
        for broker_id in ids:
            res = ConfigResource(ResourceType.BROKER, str(broker_id))
            try:
                configs = self.admin.describe_configs([res], request_timeout=self.timeout)[res].result(
                    timeout=self.timeout)
                break
            except KafkaException as e:
                if broker_id == ids[-1] or not _retriable(e):
                    raise
                log.info("DescribeConfigs of broker %d: %s (asking the next broker)", broker_id, e)
        return configs

    def store_location(self, configs: dict | None = None) -> tuple[str | None, dict]:
        """The remote store URL and non-secret store options the brokers run with (from `configs`, the
        broker_configs() a caller already has, else asked now)."""
        if configs is None:
            configs = self.broker_configs()
        url, options = None, {}
        for name, entry in configs.items():
            if not name.startswith(STORE_PREFIX) or entry.value is None or entry.is_sensitive:
                continue
            short = name[len(STORE_PREFIX):]
            if name == STORE_URL:
                url = entry.value.strip() or None
            elif short not in _CREDENTIALS:
                options[short.replace(".", "_")] = entry.value
        return url, options

    def wal_store_locations(self, configs: dict | None = None) -> dict[str, tuple]:
        """The fast stores (KIP-1176) the brokers upload to, by the name pointers carry ("" the default, else a
        rack's): (url, non-secret options) from the broker configs (`configs`, else asked now); credentials come
        from the environment."""
        if configs is None:
            configs = self.broker_configs()
        pre = "remote.wal.storage."
        urls, options = {}, {}
        for name, entry in configs.items():
            if not name.startswith(pre) or entry.value is None or entry.is_sensitive or not entry.value.strip():
                continue
            short = name[len(pre):]
            if short == "url":
                urls[""] = entry.value.strip()
            elif short.startswith("rack.") and short.endswith(".url"):
                urls[short[5:-4]] = entry.value.strip()
            elif not short.startswith("rack.") and short not in _CREDENTIALS:
                options[short.replace(".", "_")] = entry.value
        return {n: (u, tuple(sorted(options.items()))) for n, u in urls.items()}

    def wal_pointers(self, starts: dict[tuple[str, int], int],
                     txn_ranges: dict[tuple[str, int], tuple[int, int]] | None = None) -> dict[tuple[str, int], tuple]:
        """{(topic, partition): (store name, pointers, aborted, local log start)} from each partition's leader
        (DescribeWalPointers) for the committed chunks from `starts[tp]` on. Pointers are tuples (key, position,
        size, crc, base, last). With `txn_ranges` (read_committed, {tp: (start, end)} for every tp of `starts`) the
        request is v1, and `aborted` holds the aborted transactions (producer id, first offset, last offset) of the
        leader's local log overlapping [start, end) and the leader's local log start; otherwise they are None and -1.
        Partitions whose leader gave no answer are left out (so are, without txn_ranges, those with no pointer)."""
        from protocol.wal_pointers_client import describe_wal_pointers
        md = self.metadata(refresh=True)
        by_leader: dict[tuple[int, str], dict[int, int]] = {}
        for (t, p), o in starts.items():
            meta = md.topics.get(t)
            leader = meta.partitions[p].leader if meta is not None and p in meta.partitions else -1
            if leader in md.brokers:
                by_leader.setdefault((leader, t), {})[p] = o
        out = {}
        for (leader, t), offsets in by_leader.items():
            b = md.brokers[leader]
            ranges = None if txn_ranges is None else {p: txn_ranges[(t, p)] for p in offsets}
            try:
                answer = describe_wal_pointers(b.host, b.port, t, offsets, timeout=self.timeout, txn_ranges=ranges,
                                               security=self.security)
            except (OSError, ValueError, struct.error) as e:
                log.warning("no fast-store pointers%s from broker %d for %s: %s; those offsets are fetched",
                            "" if ranges is None else " or aborted transactions", leader, t, e)
                continue
            for p, w in answer.items():
                if w.error_code != 0:
                    log.info("DescribeWalPointers of %s-%d: error %d; those offsets are fetched", t, p, w.error_code)
                elif w.pointers or ranges is not None:
                    out[(t, p)] = (w.store, tuple((x.key, x.position, x.size, x.crc, x.base_offset, x.last_offset)
                                                  for x in w.pointers), w.aborted, w.local_log_start_offset)
        return out

    # ---- remote segments ----
    def remote_segments(self, tips) -> dict[tuple[str, int], list[SegmentInfo]]:
        """Finished remote segments (COPY_SEGMENT_FINISHED, not being deleted) of each TopicIdPartition, by start
        offset, folded from `__remote_log_metadata` read from its start to its high watermark."""
        from storage.tiered.remote_log_metadata import metadata_partition
        tips = list(tips)
        md_topic = self.metadata().topics.get(METADATA_TOPIC)
        if not tips or md_topic is None or not md_topic.partitions:
            return {(t.topic, t.partition): [] for t in tips}
        n = len(md_topic.partitions)
        parts = sorted({metadata_partition(t, n) for t in tips})
        _read_partitions(self.client, self.group_id, parts, self.timeout, self._md_next, self._md_events)
        return fold_segments((v for p in parts for v in self._md_events.get(p, ())), set(tips))

    def close(self) -> None:
        self.admin = None


def _read_partitions(client: ClientOptions, group_id: str, partitions: list[int], timeout: float,
                     next_offsets: dict, events: dict) -> None:
    """Append the record values of the given `__remote_log_metadata` partitions from next_offsets[p] (else the
    start) up to the high watermark to events[p], in order, and move next_offsets[p] to the high watermark."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    c = Consumer(client.conf(**{"group.id": group_id, "enable.auto.commit": False,
                                "enable.auto.offset.store": False, "enable.partition.eof": True,
                                "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50}))
    try:
        ends, assign = {}, []
        for p in partitions:
            low, high = _watermarks(c, TopicPartition(METADATA_TOPIC, p), timeout)
            start = next_offsets.get(p, low)
            if start < low or start > high:                  # never expected (retention -1); start over
                start = low
                events[p] = []
            events.setdefault(p, [])
            if high > start:
                ends[p] = high
                assign.append(TopicPartition(METADATA_TOPIC, p, start))
            else:
                next_offsets[p] = start
        if not assign:
            return
        c.assign(assign)
        deadline = time.monotonic() + max(timeout, 30.0)
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {METADATA_TOPIC} partitions {sorted(ends)} from {client.bootstrap} did "
                                   f"not reach the high watermark in {max(timeout, 30.0):.0f}s")
            for m in c.consume(num_messages=10_000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.partition() in ends and m.offset() >= ends[m.partition()]:
                            next_offsets[m.partition()] = ends.pop(m.partition())
                        continue
                    raise KafkaException(err)
                p = m.partition()
                if p not in ends or m.offset() < next_offsets.get(p, -1) or m.offset() >= ends[p]:
                    continue
                if m.value() is not None:
                    events[p].append(m.value())
                next_offsets[p] = m.offset() + 1
                if m.offset() + 1 >= ends[p]:
                    ends.pop(p)
    finally:
        c.close()


def _watermarks(consumer, tp, timeout: float) -> tuple[int, int]:
    """A partition's (log start, high watermark) from its leader, retrying retriable errors (a leader that just
    died, a new one whose high watermark is not known yet) for up to `timeout` seconds."""
    from confluent_kafka import KafkaException
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(min(deadline - time.monotonic(), _CALL_TIMEOUT_S),
                                                                  1.0), cached=False)
        except KafkaException as e:
            if not _retriable(e) or time.monotonic() + _RETRY_BACKOFF_S > deadline:
                raise
            log.info("watermarks of %s-%d: %s (retrying)", tp.topic, tp.partition, e)
            time.sleep(_RETRY_BACKOFF_S)


def fold_segments(values, wanted) -> dict[tuple[str, int], list[SegmentInfo]]:
    """Replay metadata events (RemoteLogMetadataSerde bytes) and keep the segments of `wanted` TopicIdPartitions
    whose last state is COPY_SEGMENT_FINISHED."""
    from storage.tiered.remote_log_metadata import (
        RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState, deserialize,
    )
    from storage.tiered.remote_storage_manager import segment_key_prefix
    segments: dict = {}
    for v in values:
        try:
            ev = deserialize(v)
        except ValueError as e:
            log.warning("skipping an unreadable %s record: %s", METADATA_TOPIC, e)
            continue
        if isinstance(ev, RemoteLogSegmentMetadata):
            if ev.tip in wanted:
                segments[ev.segment_id] = ev
        elif isinstance(ev, RemoteLogSegmentMetadataUpdate):
            prev = segments.get(ev.segment_id)
            if prev is not None:
                segments[ev.segment_id] = prev.with_update(ev)
    out: dict[tuple[str, int], list[SegmentInfo]] = {(t.topic, t.partition): [] for t in wanted}
    for md in segments.values():
        if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            out[(md.tip.topic, md.tip.partition)].append(
                SegmentInfo(segment_key_prefix(md), md.start_offset, md.end_offset, md.segment_size_in_bytes,
                            md.max_timestamp_ms))
    for segs in out.values():
        segs.sort(key=lambda s: (s.start, -s.end))
    return out
