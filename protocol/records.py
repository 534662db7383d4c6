"""Decode and build the records inside RecordBatch v2 batches.

The broker's produce/fetch path never looks inside a batch (see record_batch.py). This module is for the
few places that must: ListOffsets by timestamp, compaction, the Spark reader and tests. It favours clarity
over speed, but every step is linear in the batch size.

Record layout inside the (possibly compressed) records section, all integers zigzag varints (at most 5 bytes; the
timestamp delta a varlong of at most 10, as Kafka's DefaultRecord reads them):

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value          (length -1 = null)
    headerCount varint | [headerKeyLength varint | headerKey utf8 | headerValueLength varint | value]*
"""
from __future__ import annotations

import struct
import time
from typing import Iterable, Iterator, NamedTuple

from protocol import compression
from protocol.wire import VarintError, read_varint, read_varlong, varint
from protocol.record_batch import (
    COMPRESSION_MASK, CONTROL_BIT, CORRUPT_MESSAGE, HEADER, HEADER_SIZE, LOG_OVERHEAD, TIMESTAMP_TYPE_BIT,
    compute_crc, iter_batches, read_header,
)

_MAX_INT32 = 2**31 - 1
_MIN_INT64, _MAX_INT64 = -2**63, 2**63 - 1

# Header keys are decoded as UTF-8; surrogateescape keeps invalid bytes so a decode -> build round trip
# reproduces them exactly.
_KEY_ERRORS = "surrogateescape"


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class CorruptRecordError(ValueError):
    """A batch's header or records section cannot be decoded."""

    error_code = CORRUPT_MESSAGE


# --- decoding ------------------------------------------------------------------------------------------

def records_from(views, start: int) -> tuple[list[Record], int]:
    """The data records at or after `start` in the batches of `views` (what Log.read returns), control batches
    skipped, and the offset after the last batch seen (`start` when there was none). For readers of internal topics
    (__consumer_offsets, __remote_log_metadata) that replay a log off the hot path."""
    out: list[Record] = []
    nxt = start
    for view in views:
        for pos, h in iter_batches(view):
            nxt = max(nxt, h.last_offset + 1)
            if h.attributes & CONTROL_BIT:
                continue
            out.extend(r for r in iter_records(view[pos:pos + h.size]) if r.offset >= start)
    return out, nxt


def batches_from(views, start: int) -> tuple[list[tuple[object, list[Record]]], int]:
    """Like records_from, but per batch: (header, its records at or after `start`), control batches included (their
    one record is the marker), for loaders that must know a batch's producer and transaction."""
    out = []
    nxt = start
    for view in views:
        for pos, h in iter_batches(view):
            nxt = max(nxt, h.last_offset + 1)
            if h.last_offset >= start:
                out.append((h, [r for r in iter_records(view[pos:pos + h.size]) if r.offset >= start]))
    return out, nxt


def iter_records(batch, *, verify_crc: bool = False) -> Iterator[Record]:
    """Yield the records of the one RecordBatch v2 that starts at batch[0].

    `batch` is bytes, bytearray or memoryview; bytes past the batch's own length are ignored. Compressed
    batches are decompressed. With LogAppendTime every record's timestamp is the batch maxTimestamp.
    Control batches are decoded like any other (their key/value are the control record's schema bytes).
    Raises CorruptRecordError (a ValueError, error_code CORRUPT_MESSAGE) for anything that does not
    decode exactly: header and decompression problems at the call, record problems while iterating.
    """
    n = len(batch)
    if n < HEADER_SIZE:
        raise CorruptRecordError(f"batch of {n} bytes is shorter than the {HEADER_SIZE}-byte header")
    h = read_header(batch, 0)
    if h.magic != 2:
        raise CorruptRecordError(f"magic {h.magic} is not supported, only 2")
    size = h.size
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or size > n:
        raise CorruptRecordError(f"batch length {h.batch_length} does not fit the {n}-byte buffer")
    if verify_crc and compute_crc(batch, 0, size) != h.crc:
        raise CorruptRecordError("record batch CRC-32C mismatch")
    if h.records_count < 0:
        raise CorruptRecordError(f"negative record count {h.records_count}")

    codec = h.attributes & COMPRESSION_MASK
    if codec == compression.NONE:
        buf = batch if type(batch) is bytes else bytes(memoryview(batch)[:size])
        pos, end = HEADER_SIZE, size
    else:
        if codec not in compression.CODEC_NAMES:
            raise CorruptRecordError(f"unknown compression codec {codec}")
        try:
            buf = compression.decompress(codec, memoryview(batch)[HEADER_SIZE:size])
        except compression.CompressionError as e:
            raise CorruptRecordError(f"batch at offset {h.base_offset}: {e}") from e
        pos, end = 0, len(buf)

    log_append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_BIT else None
    return _decode_records(buf, pos, end, h.records_count, h.base_offset, h.base_timestamp, log_append_time)


def _decode_records(buf: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int,
                    log_append_time: int | None) -> Iterator[Record]:
    for i in range(count):
        if pos >= end:
            raise CorruptRecordError(f"records section ends after {i} of {count} records")
        try:
            record, pos = _decode_record(buf, pos, end, base_offset, base_timestamp, log_append_time)
        except IndexError:
            raise CorruptRecordError(f"record {i} of {count} runs past the end of the records section") from None
        except VarintError as e:
            raise CorruptRecordError(f"record {i} of {count}: {e}") from None
        yield record
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left over after the batch's {count} records")


def _decode_record(buf: bytes, pos: int, end: int, base_offset: int, base_timestamp: int,
                   log_append_time: int | None) -> tuple[Record, int]:
    length, pos = read_varint(buf, pos)
    start = pos
    stop = pos + length
    if length <= 0 or stop > end:
        raise CorruptRecordError(f"record length {length} at byte {start} does not fit the records section")
    pos += 1  # record attributes: unused in v2
    ts_delta, pos = read_varlong(buf, pos)
    offset_delta, pos = read_varint(buf, pos)
    key, pos = _read_bytes(buf, pos, stop)
    value, pos = _read_bytes(buf, pos, stop)
    header_count, pos = read_varint(buf, pos)
    if header_count < 0:
        raise CorruptRecordError(f"negative header count {header_count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(header_count):
        hkey, pos = _read_bytes(buf, pos, stop)
        if hkey is None:
            raise CorruptRecordError("null header key")
        hvalue, pos = _read_bytes(buf, pos, stop)
        headers.append((hkey.decode("utf-8", _KEY_ERRORS), hvalue))
    if pos != stop:
        raise CorruptRecordError(f"record at byte {start} declares {length} bytes but its fields use {pos - start}")
    timestamp = base_timestamp + ts_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, headers), pos


def _read_bytes(buf: bytes, pos: int, stop: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > stop:
        raise CorruptRecordError(f"field of {n} bytes at byte {pos} runs past its record")
    return buf[pos:pos + n], pos + n


def iter_all_records(buf, start: int = 0, end: int | None = None, *, skip_control: bool = False,
                     verify_crc: bool = False) -> Iterator[Record]:
    """Yield the records of every complete batch in buf[start:end] (e.g. a log segment or fetch response).

    A trailing partial batch is ignored, as consumers do. skip_control drops transaction markers.
    """
    mv = memoryview(buf)
    for pos, h in iter_batches(mv, start, end):
        if skip_control and h.attributes & CONTROL_BIT:
            continue
        yield from iter_records(mv[pos:pos + h.size], verify_crc=verify_crc)


# --- building ------------------------------------------------------------------------------------------

def build_records_batch(records: Iterable, codec: int = compression.NONE, base_offset: int = 0,
                        timestamp_ms: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
                        base_sequence: int = -1, headers=None, *, attributes: int = 0,
                        partition_leader_epoch: int = -1) -> bytes:
    """Build one RecordBatch v2 (CRC-32C set) whose records section is compressed with `codec`.

    Each item of `records` is either
      * a Record: its offset (>= base_offset, strictly increasing), timestamp and headers are kept, so
        decoded records (e.g. survivors of compaction) re-encode faithfully; or
      * a (key, value) or (key, value, headers) tuple: it takes the next offset and `timestamp_ms`
        (default: now); its headers come from the tuple, else from headers[i] when `headers` is given.
    baseTimestamp is the first record's timestamp and maxTimestamp the largest. `attributes` adds flag
    bits (transactional 0x10, control 0x20, LogAppendTime 0x08); the codec bits come from `codec`.
    """
    compression.codec_name(codec)  # ValueError for an unknown codec
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)

    entries = []  # (offset_delta, timestamp, key, value, headers)
    last_delta = -1
    for i, item in enumerate(records):
        if isinstance(item, Record):
            delta, ts, key, value, hdrs = item.offset - base_offset, item.timestamp, item.key, item.value, item.headers
            if delta <= last_delta:
                raise ValueError(f"record offset {item.offset} is not above the previous one / base_offset "
                                 f"{base_offset}")
        else:
            if len(item) == 2:
                key, value = item
                hdrs = headers[i] if headers else ()
            elif len(item) == 3:
                key, value, hdrs = item
            else:
                raise ValueError(f"record {i}: expected a Record or a (key, value[, headers]) tuple")
            delta, ts = last_delta + 1, timestamp_ms
        if delta > _MAX_INT32:
            raise ValueError(f"record {i}: offset delta {delta} does not fit an int32")
        last_delta = delta
        entries.append((delta, ts, key, value, hdrs or ()))
    if not entries:
        raise ValueError("a record batch needs at least one record")

    base_timestamp = entries[0][1]
    max_timestamp = max(e[1] for e in entries)
    body = bytearray()
    for delta, ts, key, value, hdrs in entries:
        ts_delta = ts - base_timestamp
        if not _MIN_INT64 <= ts_delta <= _MAX_INT64:
            raise ValueError(f"timestamp {ts} is too far from the base timestamp {base_timestamp}")
        rec = bytearray(b"\x00")  # record attributes
        rec += varint(ts_delta)
        rec += varint(delta)
        _put_bytes(rec, key)
        _put_bytes(rec, value)
        rec += varint(len(hdrs))
        for hkey, hvalue in hdrs:
            if hkey is None:
                raise ValueError("header keys may not be null")
            _put_bytes(rec, hkey.encode("utf-8", _KEY_ERRORS) if isinstance(hkey, str) else hkey)
            _put_bytes(rec, hvalue)
        body += varint(len(rec))
        body += rec

    section = compression.compress(codec, body) if codec != compression.NONE else body
    batch = bytearray(HEADER_SIZE)
    batch += section
    attrs = (attributes & ~COMPRESSION_MASK) | codec
    HEADER.pack_into(batch, 0, base_offset, len(batch) - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attrs,
                     last_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                     len(entries))
    crc = compute_crc(batch, 0, len(batch))
    batch[17:21] = crc.to_bytes(4, "big")
    return bytes(batch)


def _put_bytes(out: bytearray, data) -> None:
    if data is None:
        out += b"\x01"  # length -1 means null; zigzag(-1) == 1
        return
    out += varint(len(data))
    out += data


def recompress_batch(batch, codec: int) -> bytearray:
    """Rewrite one batch with its records section compressed by `codec` (topic `compression.type` other than
    `producer`). Offsets, timestamps, headers, producer id/epoch/sequence and the non-codec attribute bits are kept."""
    h = read_header(batch, 0)
    records = list(iter_records(batch))
    return bytearray(build_records_batch(
        records, codec, base_offset=h.base_offset, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, attributes=h.attributes & ~COMPRESSION_MASK,
        partition_leader_epoch=h.partition_leader_epoch))


# --- key-level scanning (log compaction, compacted-topic produce checks) --------------------------------

# One tuple per record, positions relative to the records section it was scanned from:
#   (start, attributes_pos, timestamp_delta_end, stop, timestamp_delta, offset_delta, key, is_tombstone)
# buf[start:stop] is the whole record (length varint included); buf[attributes_pos] its attributes byte;
# buf[timestamp_delta_end:stop] everything after the timestamp delta (what a re-based record keeps).
RecordSpan = tuple


def scan_records(buf: bytes, pos: int, end: int, count: int) -> list[RecordSpan]:
    """Walk `count` records of an uncompressed records section buf[pos:end], decoding only the timestamp and
    offset deltas, the key and whether the value is null (compaction's view of a record; values and headers
    are skipped). Raises CorruptRecordError unless the records fill the section exactly."""
    out: list[RecordSpan] = []
    append = out.append
    try:
        for i in range(count):
            start = pos
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = read_varint(buf, pos)
            stop = pos + length
            if length <= 0 or stop > end:
                raise CorruptRecordError(f"record {i} of {count}: length {length} does not fit the records section")
            attrs_at = pos
            p = pos + 1
            b = buf[p]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                ts_delta, p = read_varlong(buf, p)
            ts_end = p
            b = buf[p]
            if b < 0x80:
                offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                offset_delta, p = read_varint(buf, p)
            b = buf[p]
            if b < 0x80:
                key_len, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                key_len, p = read_varint(buf, p)
            if key_len >= 0:
                key = buf[p:p + key_len]
                p += key_len
            else:
                key = None
            b = buf[p]
            if b < 0x80:
                value_len = (b >> 1) ^ -(b & 1)
            else:
                value_len = read_varint(buf, p)[0]
            if p >= stop:
                raise CorruptRecordError(f"record {i} of {count}: key runs past the record")
            append((start, attrs_at, ts_end, stop, ts_delta, offset_delta, key, value_len < 0))
            pos = stop
    except IndexError:
        raise CorruptRecordError(f"records section ends inside a record of {count}") from None
    except VarintError as e:
        raise CorruptRecordError(str(e)) from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left over after the batch's {count} records")
    return out


def records_section(batch, h=None) -> bytes:
    """The uncompressed records section of the batch at batch[0] (decompressed if needed)."""
    if h is None:
        h = read_header(batch, 0)
    codec = h.attributes & COMPRESSION_MASK
    body = memoryview(batch)[HEADER_SIZE:h.size]
    if codec == compression.NONE:
        return bytes(body)
    try:
        return compression.decompress(codec, body)
    except compression.CompressionError as e:
        raise CorruptRecordError(f"batch at offset {h.base_offset}: {e}") from e


def null_key_indexes(buf) -> list[int]:
    """Indexes (within their batch, as Kafka's RecordError.batchIndex) of the records of the batches in `buf` that
    have a null key, which a compacted topic refuses. Decompresses and walks keys only; raises CorruptRecordError
    for records that do not decode."""
    mv = memoryview(buf)
    out = []
    for pos, h in iter_batches(mv):
        if h.attributes & CONTROL_BIT:
            continue
        section = records_section(mv[pos:pos + h.size], h)
        out += [i for i, span in enumerate(scan_records(section, 0, len(section), h.records_count)) if span[6] is None]
    return out


def has_null_key(buf) -> bool:
    return bool(null_key_indexes(buf))


# --- control records (transaction markers) ---------------------------------------------------------------

CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")           # version 0, type (Kafka's ControlRecordType)
_END_TXN_MARKER = struct.Struct(">hi")        # version 0, coordinator epoch (Kafka's EndTxnMarker)


def build_control_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                        timestamp_ms: int) -> bytes:
    """A COMMIT or ABORT marker as Kafka's MemoryRecords.withEndTransactionMarker writes it: one uncompressed record
    in a transactional control batch of the producer, without a sequence."""
    from protocol.record_batch import TRANSACTIONAL_BIT, build_batch
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    return build_batch([(key, _END_TXN_MARKER.pack(0, coordinator_epoch))], timestamp_ms=timestamp_ms,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                       attributes=TRANSACTIONAL_BIT | CONTROL_BIT)


def read_control_marker(batch) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of the control batch starting at batch[0]; None when it has no record (the
    cleaner emptied it) or its record is not a transaction marker."""
    for r in iter_records(batch):
        if r.key is None or len(r.key) < 4:
            return None
        _, kind = _CONTROL_KEY.unpack_from(r.key, 0)
        epoch = _END_TXN_MARKER.unpack_from(r.value, 0)[1] if r.value is not None and len(r.value) >= 6 else -1
        return kind, epoch
    return None
