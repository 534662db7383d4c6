"""The `strata` data source: Spark's Kafka source and sink conventions over Strata, with the tiered part of a topic
read by the executors straight from the object store.

    driver (planning worker)                       executors (one task per OffsetRange)
    options.parse_read_options                     read_range:
    pushdown.push_filters  (pushFilters)             remote pieces -> remote_reader (ranged GETs, decode)
    planning.plan_batch    (partitions)              fetch pieces  -> fetch_reader (Consumer.assign)
      Metadata, ListOffsets, DescribeConfigs,        -> arrow_rows.RowBuilder -> pa.RecordBatch
      __remote_log_metadata -> OffsetRanges

Everything a task needs travels inside its OffsetRange; the reader object itself is pickled to the executors and
holds only parsed options. Libraries are imported inside the methods that run remotely.
"""
from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader

from spark_connector.arrow_rows import RowBuilder, spark_schema
from spark_connector.options import (
    ReadOptions, StrataOptionError, parse_read_options, parse_write_options, with_group_id,
)
from spark_connector.planning import OffsetRange
from spark_connector.pushdown import Bounds, push_filters


def read_range(opts: ReadOptions, part: OffsetRange) -> Iterator:
    """Rows of one OffsetRange as Arrow record batches (direct pieces from the store, the rest by Fetch)."""
    from spark_connector.fetch_reader import fetch_range
    from spark_connector.remote_reader import RemoteReader
    if not getattr(part, "pieces", None):             # nothing to read: Spark turns [] into InputPartition(None)
        return
    builder = RowBuilder(part.topic, part.partition, opts.include_headers)
    remote = wal = None
    txn = part.txn if opts.client.read_committed else None     # the planner's aborted transactions (direct pieces)
    if txn is None and opts.client.read_committed and any(p.key_prefix or p.wal for p in part.pieces):
        raise RuntimeError(f"{part!r} has direct pieces but no aborted transactions for read_committed")
    try:
        for k, piece in enumerate(part.pieces):
            if piece.key_prefix is not None and opts.direct_read:
                if remote is None:
                    remote = RemoteReader(part.store, opts.chunk_bytes, opts.fail_on_data_loss,
                                          opts.read_memory_bytes)
                yield from remote.read(piece, builder, part.ts_lo, txn, part.pieces[k + 1:])
            elif getattr(piece, "wal", ()) and opts.direct_read:
                from spark_connector.wal_reader import WalReader
                if wal is None:
                    wal = WalReader(part.wal_store, opts.read_memory_bytes)
                yield from wal.read(piece, builder, part.ts_lo, None if txn is None else txn[0])
                if wal.stopped_at is not None:          # collected or damaged: the rest by Fetch
                    yield from fetch_range(opts, part.topic, part.partition, wal.stopped_at, piece.end, builder)
            else:
                yield from fetch_range(opts, part.topic, part.partition, piece.start, piece.end, builder)
        last = builder.take()
        if last is not None:
            yield last
    finally:
        for reader in (remote, wal):
            if reader is not None:
                reader.close()


def check_schema(schema, include_headers: bool) -> None:
    expected = spark_schema(include_headers)
    if schema is not None and schema != expected:
        raise StrataOptionError(f"Kafka source has a fixed schema and cannot be set with a custom one: expected "
                                f"{expected.simpleString()}, got {schema.simpleString()}")


class StrataBatchReader(DataSourceReader):
    """A batch read of the whole requested ranges; Spark applies every filter itself (DataSourceReader's own
    pushFilters pushes none), as Spark's Kafka source does."""

    def __init__(self, opts: ReadOptions):
        self.opts = opts
        self.bounds = Bounds()

    def partitions(self):
        from spark_connector.planning import plan_batch
        return plan_batch(self.opts, self.bounds)

    def read(self, partition):
        return read_range(self.opts, partition)


class StrataPushdownReader(StrataBatchReader):
    """With `strata.filterPushdown=true`: filters on offset, partition and timestamp narrow the planned ranges.

    Opt-in because Spark 4.3.0 keeps the plan a pushdown produced on the DataFrame's relation (PythonDataSourceV2's
    readInfo) and reuses it for any later query on that DataFrame that pushes no filter, so `df.where("offset < 5")`
    followed by `df.count()` would count only the narrowed ranges. Nothing the connector sees tells the two queries
    apart (the second one runs no Python code at planning), so only a plan that does not depend on the filters is
    right for both; with this option, use a fresh load() for each filtered query."""

    def pushFilters(self, filters):
        self.bounds, rest = push_filters(filters, self.bounds)
        return rest


class StrataDataSource(DataSource):
    """`spark.read.format("strata")` / `readStream` / `write` / `writeStream`; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "strata"

    def schema(self):
        # Called when a DataFrame is created (load()), for reads only: check the options both batch and streaming
        # reads share now, so that most mistakes fail right there.
        return spark_schema(parse_read_options(self.options, streaming=None).include_headers)

    def reader(self, schema):
        opts = parse_read_options(self.options, streaming=False)
        check_schema(schema, opts.include_headers)
        opts = with_group_id(opts, streaming=False)
        return StrataPushdownReader(opts) if opts.filter_pushdown else StrataBatchReader(opts)

    def streamReader(self, schema):
        from spark_connector.stream import StrataStreamReader
        opts = parse_read_options(self.options, streaming=True)
        check_schema(schema, opts.include_headers)
        return StrataStreamReader(with_group_id(opts, streaming=True))

    def writer(self, schema, overwrite: bool):
        from spark_connector.writer import StrataWriter, check_write_schema
        if overwrite:
            raise StrataOptionError("Save mode Overwrite is not allowed for Kafka (a topic is append-only). Use "
                                    "mode('append').")
        opts = parse_write_options(self.options)
        check_write_schema(schema, opts)
        return StrataWriter(opts)

    def streamWriter(self, schema, overwrite: bool):
        from spark_connector.writer import StrataStreamWriter, check_write_schema
        opts = parse_write_options(self.options)
        check_write_schema(schema, opts)
        return StrataStreamWriter(opts)
