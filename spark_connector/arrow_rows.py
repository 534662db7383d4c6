"""The output schema (Spark's Kafka source schema) and a column builder that turns records into Arrow record batches.

Spark checks the first record batch a Python data source yields against `to_arrow_schema(schema, timezone="UTC")`
with `pa.Schema.equals`, so types AND nullability must match exactly: TimestampType is `timestamp[us, tz=UTC]`
(a naive timestamp is refused), arrays are `list<element: ...>`. Records are appended to plain Python lists and
converted in bulk, which is several times faster than building rows.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_BASE_FIELDS = [
    pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()), pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]

DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
       "timestampType int")
DDL_HEADERS = DDL + ", headers array<struct<key: string, value: binary>>"


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(_BASE_FIELDS + ([pa.field("headers", HEADERS_TYPE)] if include_headers else []))


def spark_schema(include_headers: bool):
    """The StructType of DDL / DDL_HEADERS (built directly: parsing DDL needs a running SparkContext)."""
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
    )
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
              StructField("partition", IntegerType()), StructField("offset", LongType()),
              StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                                   StructField("value", BinaryType())]))))
    return StructType(fields)


def binary_array(items: list) -> pa.Array:
    """A binary array from bytes / None, built from one joined buffer and an offsets vector: about 5x faster than
    pa.array(items, pa.binary()) for ~1 KiB values, which converts element by element."""
    lens = np.array([-1 if x is None else len(x) for x in items], dtype=np.int64)
    return binary_from(np.frombuffer(b"".join([x for x in items if x is not None]), np.uint8), lens)


def binary_from(data, lens) -> pa.Array:
    """A binary array from its values back to back and their lengths (-1: null)."""
    n = len(lens)
    valid = lens >= 0
    nulls = n - int(np.count_nonzero(valid))
    if len(data) >= 2**31:
        raise ValueError("more than 2 GiB in one record batch column")
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(valid, lens, 0), out=offsets[1:])
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


class RowBuilder:
    """Column lists for the records of one topic-partition; `take()` converts what was added into a RecordBatch.

    Readers append to the public lists directly (hot loop): keys, values, offsets, timestamps (ms), ts_types, and
    with headers: header_counts (one per record, -1 = null) plus header_keys / header_values (flattened)."""

    def __init__(self, topic: str, partition: int, include_headers: bool, max_rows: int = 32_768,
                 max_bytes: int = 16 << 20):
        self.topic, self.partition, self.include_headers = topic, partition, include_headers
        self.schema = arrow_schema(include_headers)
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.rows_total = 0
        self._reset()

    def _reset(self) -> None:
        self.chunks: list = []        # column arrays from fast_decode, in order, before the lists' rows
        self.chunk_rows = 0
        self.keys: list = []
        self.values: list = []
        self.offsets: list = []
        self.timestamps: list = []
        self.ts_types: list = []
        self.header_counts: list = []
        self.header_keys: list = []
        self.header_values: list = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.offsets) + self.chunk_rows

    def full(self) -> bool:
        return len(self) >= self.max_rows or self.bytes >= self.max_bytes

    def add_columns(self, offsets, timestamps, ts_type: int, key_data, key_lens, value_data, value_lens) -> None:
        """Rows as column arrays (fast_decode.decode_columns: lengths -1 for null), after the rows added so far."""
        if self.offsets:
            self.chunks.append(self._lists_as_columns())
        n = len(offsets)
        self.chunks.append((offsets, timestamps, np.full(n, ts_type, np.int32), key_data, key_lens, value_data,
                            value_lens))
        self.chunk_rows += n
        self.bytes += len(value_data) + len(key_data)

    def _lists_as_columns(self) -> tuple:
        keys, values = self.keys, self.values
        cols = (np.asarray(self.offsets, np.int64), np.asarray(self.timestamps, np.int64),
                np.asarray(self.ts_types, np.int32),
                np.frombuffer(b"".join([k for k in keys if k is not None]), np.uint8),
                np.array([-1 if k is None else len(k) for k in keys], np.int64),
                np.frombuffer(b"".join([v for v in values if v is not None]), np.uint8),
                np.array([-1 if v is None else len(v) for v in values], np.int64))
        self.chunk_rows += len(self.offsets)
        self.keys, self.values, self.offsets, self.timestamps, self.ts_types = [], [], [], [], []
        return cols

    def add(self, offset: int, timestamp_ms: int, ts_type: int, key, value, headers) -> None:
        """One record (the Fetch path; the direct path appends to the lists itself)."""
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms)
        self.ts_types.append(ts_type)
        self.keys.append(key)
        self.values.append(value)
        self.bytes += (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if self.include_headers:
            self.add_headers(headers)

    def add_headers(self, headers) -> None:
        if not headers:
            self.header_counts.append(-1)           # Spark's Kafka source: no headers -> null
            return
        self.header_counts.append(len(headers))
        for k, v in headers:
            self.header_keys.append(k)
            self.header_values.append(v)

    def take(self) -> pa.RecordBatch | None:
        n = len(self)
        if n == 0:
            return None
        if self.chunks:
            return self._take_columns(n)
        ts = pa.array(np.asarray(self.timestamps, dtype=np.int64) * 1000, pa.int64()).view(TIMESTAMP_TYPE)
        columns = [
            binary_array(self.keys),
            binary_array(self.values),
            pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                           pa.array([self.topic], pa.string())).cast(pa.string()),
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(np.asarray(self.offsets, dtype=np.int64)),
            ts,
            pa.array(np.asarray(self.ts_types, dtype=np.int32)),
        ]
        if self.include_headers:
            columns.append(self._headers_column(n))
        self.rows_total += n
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _take_columns(self, n: int) -> pa.RecordBatch:
        """take() when column arrays were added (headers are never wanted then: decode.py decodes those)."""
        if self.offsets:
            self.chunks.append(self._lists_as_columns())
        parts = list(zip(*self.chunks))
        offsets, stamps, types = (np.concatenate(parts[i]) for i in range(3))
        columns = [
            binary_from(np.concatenate(parts[3]), np.concatenate(parts[4])),
            binary_from(np.concatenate(parts[5]), np.concatenate(parts[6])),
            pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                           pa.array([self.topic], pa.string())).cast(pa.string()),
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(offsets),
            pa.array(stamps * 1000, pa.int64()).view(TIMESTAMP_TYPE),
            pa.array(types),
        ]
        self.rows_total += n
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _headers_column(self, n: int) -> pa.Array:
        counts = np.asarray(self.header_counts, dtype=np.int32)
        valid = counts >= 0
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.where(valid, counts, 0), out=offsets[1:])
        items = pa.StructArray.from_arrays([pa.array(self.header_keys, pa.string()),
                                            pa.array(self.header_values, pa.binary())],
                                           fields=list(HEADER_TYPE))
        mask = pa.array(~valid) if not valid.all() else None
        return pa.ListArray.from_arrays(pa.array(offsets), items, type=HEADERS_TYPE, mask=mask)
