"""RecordBatch v2 (magic 2) header access, validation and in-place rewrites.

The broker treats records as opaque bytes: it reads and rewrites only the 61-byte batch header, never
decoding records into per-record objects. baseOffset and partitionLeaderEpoch sit outside the CRC, so
assigning offsets costs no CRC work; only LogAppendTime (which changes maxTimestamp) recomputes it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from protocol.wire import varint

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12          # baseOffset + batchLength: bytes before batchLength counts
CRC_START = 21             # CRC-32C covers [attributes, end)

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_BASE_OFFSET = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class InvalidRecordError(Exception):
    """A batch a client sent is not acceptable; `error_code` is the Kafka error to answer with."""

    def __init__(self, error_code: int, message: str, record_errors: list[tuple[int, str]] | None = None,
                 request_level: bool = False):
        super().__init__(message)
        self.error_code = error_code
        self.record_errors = record_errors or []     # KIP-467: (batch index, message) of each refused record
        # one of the checks Kafka makes while reading the request (ProduceRequest.validateRecords), before any log
        # is involved: its answer carries no log start offset (-1)
        self.request_level = request_level


class LegacyMagicError(InvalidRecordError):
    """A magic 0 or 1 message set: INVALID_RECORD in a v2-only Produce (v3+), as Kafka answers."""

    def __init__(self, magic: int):
        super().__init__(INVALID_RECORD, f"only record batches with magic 2 are allowed, not magic {magic}",
                         request_level=True)


# Kafka error codes used here (kept numeric so storage does not depend on kio).
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_RECORD = 87


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)


def read_header(buf, pos: int = 0) -> BatchHeader:
    return BatchHeader(*HEADER.unpack_from(buf, pos))


def compute_crc(buf, pos: int, size: int) -> int:
    return crc32c.crc32c(memoryview(buf)[pos + CRC_START:pos + size])


def iter_batches(buf, start: int = 0, end: int | None = None):
    """Yield (position, header) for each complete batch in buf[start:end]; stops at a partial batch."""
    end = len(buf) if end is None else end
    pos = start
    while end - pos >= HEADER_SIZE:
        h = read_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > end:
            return
        yield pos, h
        pos += h.size


def split_and_validate(records, max_message_bytes: int) -> list[BatchHeader]:
    """Validate the record set of one Produce partition; return one header per batch.

    Checks, as Kafka's LogValidator: magic 2, exact framing, CRC-32C, count == lastOffsetDelta + 1, no control
    batches from clients, producer id implies a sequence, and each batch within max.message.bytes.
    """
    n = len(records)
    if n == 0:
        raise InvalidRecordError(INVALID_RECORD, "a produce request needs one record batch per partition",
                                 request_level=True)
    headers: list[BatchHeader] = []
    pos = 0
    while pos < n:
        magic = records[pos + 16] if n - pos >= 17 else 2
        if magic in (0, 1):
            raise LegacyMagicError(magic)
        if magic != 2:        # Kafka's batch reader: "Invalid magic found in record"
            raise InvalidRecordError(CORRUPT_MESSAGE, f"invalid magic {magic}", request_level=True)
        if n - pos < HEADER_SIZE:
            raise InvalidRecordError(CORRUPT_MESSAGE, f"truncated batch header at byte {pos}")
        h = read_header(records, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > n:
            raise InvalidRecordError(CORRUPT_MESSAGE, f"batch length {h.batch_length} does not fit the record set")
        if h.size > max_message_bytes:
            raise InvalidRecordError(MESSAGE_TOO_LARGE,
                                     f"batch of {h.size} bytes exceeds max.message.bytes {max_message_bytes}")
        if compute_crc(records, pos, h.size) != h.crc:
            raise InvalidRecordError(CORRUPT_MESSAGE, "record batch CRC-32C mismatch")
        if h.records_count <= 0 or h.records_count != h.last_offset_delta + 1:
            raise InvalidRecordError(INVALID_RECORD,
                                     f"record count {h.records_count} != lastOffsetDelta+1 ({h.last_offset_delta + 1})")
        if h.is_control:
            raise InvalidRecordError(INVALID_RECORD, "clients may not send control batches")
        if h.compression > 4:
            raise InvalidRecordError(CORRUPT_MESSAGE, f"unknown compression codec {h.compression}")
        if h.producer_id >= 0 and h.base_sequence < 0:
            raise InvalidRecordError(INVALID_RECORD, "producer id set but base sequence is negative")
        headers.append(h)
        pos += h.size
    if len(headers) > 1:
        # Kafka accepts exactly one batch per partition for magic 2 (ProduceRequest.validateRecords).
        raise InvalidRecordError(INVALID_RECORD, "a v2 produce request must carry exactly one batch per partition",
                                 request_level=True)
    return headers


def assign_offset(buf, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch in place (both outside the CRC)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _I32.pack_into(buf, pos + 12, leader_epoch)


def set_log_append_time(buf, pos: int, size: int, now_ms: int) -> None:
    """LogAppendTime: set the timestamp-type bit and maxTimestamp, then recompute the CRC."""
    attrs = _I16.unpack_from(buf, pos + 21)[0]
    _I16.pack_into(buf, pos + 21, attrs | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + 35, now_ms)
    _U32.pack_into(buf, pos + 17, compute_crc(buf, pos, size))


def build_batch(records: list[tuple[bytes | None, bytes | None]], *, base_offset: int = 0,
                timestamp_ms: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, attributes: int = 0, headers=None) -> bytes:
    """Build an uncompressed v2 batch (for tests, benchmarks and internal topics; not a hot path)."""
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = bytearray()
        rec += b"\x00"                       # record attributes
        rec += varint(0)                    # timestamp delta
        rec += varint(i)                    # offset delta
        for field in (key, value):
            if field is None:
                rec += varint(-1)
            else:
                rec += varint(len(field)) + field
        hdrs = headers[i] if headers else []
        rec += varint(len(hdrs))
        for hk, hv in hdrs:
            hkb = hk.encode()
            rec += varint(len(hkb)) + hkb
            rec += varint(-1) if hv is None else varint(len(hv)) + hv
        body += varint(len(rec)) + rec
    n = len(records)
    batch = bytearray(HEADER_SIZE) + body
    HEADER.pack_into(batch, 0, base_offset, len(batch) - LOG_OVERHEAD, -1, 2, 0, attributes, n - 1,
                     timestamp_ms, timestamp_ms, producer_id, producer_epoch, base_sequence, n)
    _U32.pack_into(batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


