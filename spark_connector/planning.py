"""Driver-side planning: which topic-partitions, which offset ranges, and for each range which parts an executor
reads straight from the object store and which by Fetch from the leader.

Consistency of direct reads: every range is fixed here, on the driver, before any task runs, and only segments
whose copy FINISHED are handed out; a remote segment's objects never change once written (each copy attempt has a
fresh segment id), so an executor reads exactly the bytes the broker would serve. The only thing that can happen
meanwhile is deletion (retention), which the executor reports as data loss (failOnDataLoss).
"""
from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from spark_connector.options import EARLIEST, LATEST, OffsetSpec, ReadOptions, StrataOptionError, consumer_group_id
from spark_connector.pushdown import Bounds

log = logging.getLogger("strata.spark")
TP = tuple  # (topic, partition)


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, DeleteRecords, a deleted topic) and failOnDataLoss=true."""


DATA_LOSS_HINT = ("Some data may have been lost because they are not available in Kafka any more; either the data "
                  "was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
                  "processed. If you don't want your query to fail on such cases, set the source option "
                  "\"failOnDataLoss\" to \"false\".")


def report_data_loss(fail: bool, message: str) -> None:
    """Spark's Kafka source behaviour: raise with failOnDataLoss=true, else log a warning and carry on."""
    if fail:
        raise DataLossError(f"{message}. {DATA_LOSS_HINT}")
    log.warning("%s. Some data may have been lost; skipping it because failOnDataLoss is false.", message)


@dataclass(frozen=True)
class Piece:
    """Part of an offset range: [start, end) read from one remote segment (key_prefix set) or by Fetch (None)."""
    start: int
    end: int
    key_prefix: str | None = None
    segment_start: int = 0
    size: int = -1                 # bytes of the .log; -1 = unknown (read to the object's end)
    open_end: bool = False         # store-only planning: the segment's last offset is not known
    wal: tuple = ()                # fast-store chunks (key, position, size, crc, base, last) holding [start, end)


class OffsetRange(InputPartition):
    """One Spark task: offsets [start, end) of one topic-partition, with the pieces that make it up."""

    def __init__(self, topic: str, partition: int, start: int, end: int, pieces: tuple = (),
                 store: tuple | None = None, ts_lo: int | None = None, wal_store: tuple | None = None,
                 txn: tuple | None = None):
        self.topic, self.partition, self.start, self.end = topic, partition, start, end
        self.pieces = pieces
        self.store = store                # (url, ((name, value), ...)) when a piece is remote
        self.ts_lo = ts_lo                # batches whose maxTimestamp is below are skipped (Spark re-filters)
        self.wal_store = wal_store        # the fast store, (url, options), when a piece has WAL chunks
        # read_committed with direct pieces: (the leader's local aborted transactions (producer id, first offset,
        # last offset) overlapping the range, (segment start, end, key prefix) of the remote segments from the
        # range's first remote piece on that have a .txnindex object); see transactions.py
        self.txn = txn

    def sources(self) -> dict[str, int]:
        """Offsets this task reads from each source: the slow store, the fast store, Fetch."""
        out = {"remote": 0, "wal": 0, "fetch": 0}
        for p in self.pieces:
            out["remote" if p.key_prefix else "wal" if p.wal else "fetch"] += p.end - p.start
        return out

    def __repr__(self) -> str:
        s = self.sources()
        return (f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}), "
                f"{s['remote']} remote / {s['wal']} fast store / {s['fetch']} fetched)")


# ---- pure helpers (unit-testable) --------------------------------------------------------------------------------
def split_ranges(ranges: list, min_partitions: int | None, max_records: int | None) -> list:
    """Spark's KafkaOffsetRangeCalculator: with minPartitions above the number of ranges, split ranges in
    proportion to their size (rounding up, so there are at least minPartitions); with maxRecordsPerPartition, no
    range holds more than that many offsets."""
    out = list(ranges)
    if min_partitions and len(out) < min_partitions:
        total = sum(e - s for _, _, s, e in out)
        split = []
        for t, p, s, e in out:
            size = e - s
            parts = max(1, -(-size * min_partitions // total)) if total else 1
            split.extend((t, p, s + size * i // parts, s + size * (i + 1) // parts) for i in range(parts))
        out = [r for r in split if r[3] > r[2]]
    if max_records:
        split = []
        for t, p, s, e in out:
            parts = max(1, -(-(e - s) // max_records))
            split.extend((t, p, s + (e - s) * i // parts, s + (e - s) * (i + 1) // parts) for i in range(parts))
        out = [r for r in split if r[3] > r[2]]
    return out


def remote_pieces(start: int, end: int, segments) -> tuple[Piece, ...]:
    """Cut [start, end) into pieces: offsets inside a finished remote segment come from the store, the rest
    (not tiered yet, or no direct read) by Fetch. `segments` are cluster.SegmentInfo sorted by start."""
    pieces: list[Piece] = []
    cur = start
    while cur < end:
        seg = None
        nxt_start = end
        for s in segments:
            if s.start <= cur <= s.end:
                if seg is None or s.end > seg.end:
                    seg = s
            elif s.start > cur:
                nxt_start = min(nxt_start, s.start)
        if seg is not None:
            stop = min(seg.end + 1, end)
            pieces.append(Piece(cur, stop, seg.key_prefix, seg.start, seg.size))
        else:
            stop = min(nxt_start, end)
            if pieces and pieces[-1].key_prefix is None:
                cur = pieces.pop().start
            pieces.append(Piece(cur, stop))
        cur = stop
    return tuple(pieces)


def wal_pieces(pieces: tuple, pointers) -> tuple[Piece, ...]:
    """The Fetch pieces of `pieces` cut where the fast store holds their offsets: `pointers` (key, position, size,
    crc, base, last), in offset order without a gap, as DescribeWalPointers gives them. Offsets no chunk holds stay
    with Fetch."""
    if not pointers:
        return pieces
    out: list[Piece] = []
    for piece in pieces:
        if piece.key_prefix is not None:
            out.append(piece)
            continue
        cur = piece.start
        run = [ptr for ptr in pointers if ptr[5] >= piece.start and ptr[4] < piece.end]
        if run and run[0][4] > cur:
            out.append(Piece(cur, run[0][4]))
            cur = run[0][4]
        if run:
            stop = min(piece.end, run[-1][5] + 1)
            out.append(Piece(cur, stop, wal=tuple(run)))
            cur = stop
        if cur < piece.end:
            out.append(Piece(cur, piece.end))
    return tuple(out)


def store_pieces(start: int, end: int, segments) -> tuple[Piece, ...]:
    """Pieces from a store listing (storeio.StoreSegment by start): segment i covers [start_i, start_i+1), the
    last one is read up to the requested end (its last offset is only known once read)."""
    pieces = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].start if i + 1 < len(segments) else None
        lo, hi = max(start, seg.start), end if nxt is None else min(end, nxt)
        if lo < hi:
            pieces.append(Piece(lo, hi, seg.key_prefix, seg.start, seg.size, open_end=nxt is None))
    return tuple(pieces)


def check_all_specified(option: str, specified, tps) -> None:
    if set(specified) != set(tps):
        raise StrataOptionError(
            f"If {option} contains specific offsets, you must specify all TopicPartitions.\n"
            f"Use -1 for latest, -2 for earliest.\n"
            f"Specified: {sorted(f'{t}-{p}' for t, p in specified)} Assigned: {sorted(f'{t}-{p}' for t, p in tps)}")


# ---- with a broker ------------------------------------------------------------------------------------------------
def topic_partitions(opts: ReadOptions, cluster) -> list[TP]:
    """The partitions the strategy names, as they exist now (new partitions appear on the next call)."""
    if opts.strategy == "assign":
        counts = cluster.partitions({t for t, _ in opts.assign})
        missing = [f"{t}-{p}" for t, p in opts.assign if p >= counts.get(t, 0)]
        if missing:
            raise StrataOptionError(f"Assigned partitions {missing} do not exist on {opts.client.bootstrap}")
        return list(opts.assign)
    if opts.strategy == "subscribe":
        counts = cluster.partitions(opts.topics)
    else:
        pattern = re.compile(opts.pattern)
        counts = cluster.partitions([t for t in cluster.topic_names() if pattern.fullmatch(t)])
    return sorted((t, p) for t, n in counts.items() for p in range(n))


def resolve(spec: OffsetSpec, option: str, tps: list[TP], earliest: dict, latest: dict, cluster,
            *, starting: bool, strategy: str = "error") -> dict:
    """Offsets of `spec` for every tp: earliest/latest/JSON (-2/-1)/timestamps (ListOffsets by timestamp)."""
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if spec.kind == "offsets":
        given = spec.per_partition()
        check_all_specified(option, given, tps)
        return {tp: earliest[tp] if given[tp] == EARLIEST else latest[tp] if given[tp] == LATEST else given[tp]
                for tp in tps}
    if spec.timestamp is not None:
        stamps = {tp: spec.timestamp for tp in tps}
    else:
        stamps = spec.per_partition()
        check_all_specified(option, stamps, tps)
    found = cluster.list_offsets(stamps)
    out = {}
    for tp in tps:
        if found[tp] >= 0:
            out[tp] = found[tp]
        elif starting and strategy == "error":
            raise StrataOptionError(f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and "
                                    f"timestamp {stamps[tp]}. (option {option}; set "
                                    "startingOffsetsByTimestampStrategy=latest to start from the latest offset)")
        else:
            out[tp] = latest[tp]
    return out


def store_location(opts: ReadOptions, cluster, broker_configs=None) -> tuple | None:
    """(url, options) of the object store for direct reads: strata.store.url and strata.store.* if given, else what
    the broker reports (DescribeConfigs; `broker_configs()` gives them if the caller has them), completed by
    strata.store.* options. None if there is none."""
    if opts.client.store_url:
        return opts.client.store_url, opts.client.store_options
    url, options = cluster.store_location(broker_configs() if broker_configs else None)
    if not url:
        return None
    options.update(dict(opts.client.store_options))
    return url, tuple(sorted(options.items()))


def make_ranges(opts: ReadOptions, cluster, ranges: list, ts_lo: int | None = None) -> list[OffsetRange]:
    """OffsetRanges for (topic, partition, start, end) tuples, with remote pieces where the store has them."""
    from storage.tiered.remote_log_metadata import TopicIdPartition
    ranges = [r for r in ranges if r[3] > r[2]]
    broker_configs = functools.cache(cluster.broker_configs)    # DescribeConfigs once, for both stores, if needed
    store = store_location(opts, cluster, broker_configs) if opts.direct_read and ranges else None
    segments: dict = {}
    ids: dict = {}
    if store is not None:
        ids = cluster.topic_ids({t for t, _, _, _ in ranges})
        segments = cluster.remote_segments({TopicIdPartition(ids[t], t, p) for t, p, _, _ in ranges})
    pieces = {(t, p, s, e): remote_pieces(s, e, segments.get((t, p), ())) for t, p, s, e in ranges}
    committed = opts.client.read_committed
    wal, wal_stores, txn = {}, {}, {}
    if opts.direct_read:                 # what is not tiered yet may be in the fast store (KIP-1176)
        starts: dict = {}
        spans: dict = {}
        for (t, p, s, e), ps in pieces.items():
            lo, hi = spans.get((t, p), (s, e))
            spans[(t, p)] = (min(lo, s), max(hi, e))
            for x in ps:
                if x.key_prefix is None:
                    starts[(t, p)] = min(starts.get((t, p), x.start), x.start)
        if committed:                    # every partition: its leader's aborted transactions, with the pointers
            starts = {tp: starts.get(tp, hi) for tp, (_, hi) in spans.items()}
        wal = cluster.wal_pointers(starts, spans if committed else None) if starts else {}
        if committed:
            from spark_connector.transactions import plan_read_committed
            pieces, txn = plan_read_committed(store, pieces, segments, wal, lambda tps: cluster.remote_segments(
                {TopicIdPartition(ids[t], t, p) for t, p in tps}))
        if any(w[1] for w in wal.values()):
            wal_stores = cluster.wal_store_locations(broker_configs())
    out = []
    for (t, p, s, e), ps in pieces.items():
        name, pointers = wal[(t, p)][:2] if (t, p) in wal else ("", ())
        wal_store = wal_stores.get(name)
        if wal_store is not None:
            ps = wal_pieces(ps, pointers)
        remote = any(x.key_prefix for x in ps)
        has_wal = any(x.wal for x in ps)
        out.append(OffsetRange(t, p, s, e, ps, store if remote else None, ts_lo, wal_store if has_wal else None,
                               txn.get((t, p, s, e)) if remote or has_wal else None))
    if any(r.store for r in out):
        check_store(next(r for r in out if r.store))
    if out:
        totals = {k: sum(r.sources()[k] for r in out) for k in ("remote", "wal", "fetch")}
        wal_bytes = sum(ptr[2] for r in out for x in r.pieces for ptr in x.wal)
        log.info("planned %d task(s): %d offsets from the slow store, %d from the fast store (%d bytes of WAL "
                 "chunks), %d by Fetch", len(out), totals["remote"], totals["wal"], wal_bytes, totals["fetch"])
    return out


def check_store(r: OffsetRange) -> None:
    """Fail on the driver, not in every task, when the store the executors would read does not hold the segments
    the metadata names (a wrong strata.store.url, missing credentials)."""
    from spark_connector.storeio import StoreClient
    piece = next(p for p in r.pieces if p.key_prefix)
    url, options = r.store
    try:
        with StoreClient(url, dict(options)) as sc:
            found = sc.first(piece.key_prefix.rsplit("/", 1)[0] + "/")
    except TypeError as e:
        raise StrataOptionError(f"Invalid strata.store.* option: {e}") from None
    except Exception as e:
        raise RuntimeError(f"cannot list the object store {url} for direct reads of {r.topic}-{r.partition}: {e}. "
                           "Check strata.store.url / strata.store.* or set strata.directRead=false") from e
    if found is None:
        raise RuntimeError(f"the object store {url} has no objects of {r.topic}-{r.partition}, but the broker's "
                           f"metadata lists remote segments (e.g. {piece.key_prefix}.log): strata.store.url does not "
                           "point at the broker's remote store? Set it, or strata.directRead=false")


def plan_batch(opts: ReadOptions, bounds: Bounds) -> list[OffsetRange]:
    from spark_connector.cluster import Cluster, reachable
    if not reachable(opts.client.bootstrap, security=opts.client.security()):
        return plan_from_store(opts, bounds)
    cluster = Cluster(opts.client, consumer_group_id(opts, "driver"))
    try:
        tps = topic_partitions(opts, cluster)
        earliest = cluster.list_offsets({tp: EARLIEST for tp in tps})
        latest = cluster.list_offsets({tp: LATEST for tp in tps})
        start = resolve(opts.starting, "startingOffsets", tps, earliest, latest, cluster, starting=True,
                        strategy=opts.by_timestamp_strategy)
        end = resolve(opts.ending, "endingOffsets", tps, earliest, latest, cluster, starting=False)
        tps = [tp for tp in tps if bounds.accepts_partition(tp[1])]
        for tp in tps:
            if start[tp] < earliest[tp]:
                report_data_loss(opts.fail_on_data_loss, f"Cannot fetch offset {start[tp]} of {tp[0]}-{tp[1]}: the "
                                 f"earliest available offset is {earliest[tp]}")
                start[tp] = earliest[tp]
            if end[tp] > latest[tp]:
                what = "last stable offset (kafka.isolation.level=read_committed)" if opts.client.read_committed \
                    else "latest offset"
                raise StrataOptionError(f"endingOffsets for {tp[0]}-{tp[1]} is {end[tp]}, beyond the {what} "
                                        f"{latest[tp]}")
            if start[tp] > end[tp]:
                raise StrataOptionError(
                    f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for topic {tp[0]} partition "
                    f"{tp[1]}. You either provided an invalid fromOffset, or the Kafka topic has been damaged")
        if bounds.ts_lo is not None and tps:
            by_ts = cluster.list_offsets({tp: bounds.ts_lo for tp in tps})
            start = {tp: end[tp] if by_ts[tp] < 0 else max(start[tp], by_ts[tp]) for tp in tps}
        ranges = [(t, p, *bounds.clamp(start[(t, p)], end[(t, p)])) for t, p in tps]
        ranges = split_ranges([r for r in ranges if r[3] > r[2]], opts.min_partitions,
                              opts.max_records_per_partition)
        return make_ranges(opts, cluster, ranges, bounds.ts_lo)
    finally:
        cluster.close()


# ---- without a broker: the store alone ------------------------------------------------------------------------------
def plan_from_store(opts: ReadOptions, bounds: Bounds) -> list[OffsetRange]:
    """Plan from a listing of the object store when no bootstrap server answers: only tiered offsets can be read,
    and the ending offsets must be given (nothing else knows where the log ends)."""
    from spark_connector.storeio import StoreClient, scan_topic, scan_topics
    down = f"The brokers at {opts.client.bootstrap} are unreachable"
    if not opts.direct_read:
        raise RuntimeError(f"{down}, and strata.directRead=false forbids reading the object store directly")
    if not opts.client.store_url:
        raise RuntimeError(f"{down}; to read the tiered data straight from the object store, set the option "
                           "strata.store.url (the broker's remote.log.storage.manager.store.url)")
    if opts.ending.kind != "offsets" or any(o < 0 for _, _, o in opts.ending.offsets):
        raise StrataOptionError(f"{down}; reading straight from the object store needs explicit endingOffsets JSON "
                                "(e.g. {\"topic\":{\"0\":1000}}): 'latest', -1 and timestamps need a broker")
    if opts.starting.kind == "timestamp" or bounds.ts_lo is not None:
        raise StrataOptionError(f"{down}; starting offsets by timestamp (and timestamp filters) need a broker")
    if opts.client.read_committed:
        raise StrataOptionError(f"{down}; kafka.isolation.level=read_committed needs a broker (the last stable "
                                "offset, and the aborted transactions whose markers are not tiered yet)")
    store = (opts.client.store_url, opts.client.store_options)
    try:
        sc = StoreClient(store[0], dict(store[1]))
    except TypeError as e:
        raise StrataOptionError(f"Invalid strata.store.* option: {e}") from None
    except FileNotFoundError as e:
        raise RuntimeError(f"{down}, and {e}") from None
    try:
        if opts.strategy == "assign":
            topics = sorted({t for t, _ in opts.assign})
        elif opts.strategy == "subscribe":
            topics = list(opts.topics)
        else:
            pattern = re.compile(opts.pattern)
            topics = sorted(t for t in scan_topics(sc) if pattern.fullmatch(t))
        listing = {}
        for t in topics:
            try:
                listing[t] = scan_topic(sc, t)[1]
            except LookupError as e:
                raise RuntimeError(f"{down}, and {e}") from None
    finally:
        sc.close()
    segs = {(t, p): s for t, parts in listing.items() for p, s in parts.items()}
    tps = list(opts.assign) if opts.strategy == "assign" else sorted(segs)
    end = opts.ending.per_partition()
    check_all_specified("endingOffsets", end, tps)
    given = opts.starting.per_partition() if opts.starting.kind == "offsets" else None
    if given is not None:
        check_all_specified("startingOffsets", given, tps)
    ranges = []
    for tp in tps:
        if not segs.get(tp):
            raise RuntimeError(f"{down}, and the object store {store[0]} holds no segment of {tp[0]}-{tp[1]}")
        first = segs[tp][0].start
        start = first if given is None or given[tp] == EARLIEST else given[tp]
        if start < first:
            report_data_loss(opts.fail_on_data_loss, f"Cannot read offset {start} of {tp[0]}-{tp[1]}: the object store "
                             f"starts at offset {first} ({down.lower()})")
            start = first
        if start > end[tp]:
            raise StrataOptionError(f"Beginning offset {start} is after the ending offset {end[tp]} for topic "
                                    f"{tp[0]} partition {tp[1]}")
        if bounds.accepts_partition(tp[1]):
            ranges.append((*tp, *bounds.clamp(start, end[tp])))
    ranges = split_ranges([r for r in ranges if r[3] > r[2]], opts.min_partitions, opts.max_records_per_partition)
    return [OffsetRange(t, p, s, e, store_pieces(s, e, segs[(t, p)]), store) for t, p, s, e in ranges]
