"""Column-oriented decoding of the records of one v2 batch, for the direct reader's hot loop.

Decompression is protocol/records.py's (records_section: every codec, xerial snappy included). The records are
walked here rather than with records.iter_records because that builds a Record tuple and a headers list per record
through several function calls (2.9 us per 1 KiB record on this VM), and direct reads, which decode in Python where
Fetch has librdkafka decode in C, ran slower than Fetch. This loop appends straight to the column lists, inlines the
one- and two-byte varints that almost every field uses and skips the headers when the query does not want them
(1.4 us per record). It applies the same checks as iter_records (every field inside its record, the records filling
the section) and tests compare the two on every codec.

Record layout (zigzag varints, the timestamp delta a varlong): length | attributes int8 | timestampDelta | offsetDelta | keyLength | key |
valueLength | value | headerCount | (headerKeyLength | headerKey | headerValueLength | headerValue)*
"""
from __future__ import annotations

from protocol.wire import VarintError, read_varint, read_varlong
from spark_connector.fast_decode import AVAILABLE as FAST, decode_columns


class CorruptBatch(ValueError):
    pass


def decode_into(buf, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
                lo: int, hi: int, builder, ts_type: int) -> None:
    """Append the records of the uncompressed records section `buf` (bytes) whose offsets are in [lo, hi) to the
    RowBuilder: compiled (fast_decode.py) when numba is there and headers are not wanted, else in Python."""
    if FAST and not builder.include_headers:
        offsets, stamps, kdata, klens, vdata, vlens = decode_columns(buf, count, base_offset, base_timestamp,
                                                                     log_append_time, lo, hi, ts_type)
        builder.add_columns(offsets, stamps, ts_type, kdata, klens, vdata, vlens)
    else:
        decode_into_py(buf, count, base_offset, base_timestamp, log_append_time, lo, hi, builder, ts_type)


def decode_into_py(buf, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
                   lo: int, hi: int, builder, ts_type: int) -> None:
    """decode_into in Python: the reference, and the path for headers."""
    offsets, stamps, keys, values = builder.offsets, builder.timestamps, builder.keys, builder.values
    types = builder.ts_types
    headers_wanted = builder.include_headers
    end = len(buf)
    pos = 0
    nbytes = 0
    try:
        for i in range(count):
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                length, pos = read_varint(buf, pos)
            stop = pos + length
            if length <= 0 or stop > end:
                raise CorruptBatch(f"record {i} of {count}: length {length} does not fit the records section")
            p = pos + 1                                   # attributes: unused in v2
            # timestamp delta
            b = buf[p]
            if b < 0x80:
                tsd, p = (b >> 1) ^ -(b & 1), p + 1
            elif buf[p + 1] < 0x80:
                raw = (b & 0x7F) | (buf[p + 1] << 7)
                tsd, p = (raw >> 1) ^ -(raw & 1), p + 2
            else:
                tsd, p = read_varlong(buf, p)
            # offset delta
            b = buf[p]
            if b < 0x80:
                od, p = (b >> 1) ^ -(b & 1), p + 1
            elif buf[p + 1] < 0x80:
                raw = (b & 0x7F) | (buf[p + 1] << 7)
                od, p = (raw >> 1) ^ -(raw & 1), p + 2
            else:
                od, p = read_varint(buf, p)
            off = base_offset + od
            if off < lo or off >= hi:
                pos = stop
                continue
            # key
            b = buf[p]
            if b < 0x80:
                n, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                n, p = read_varint(buf, p)
            if n >= 0:
                key = buf[p:p + n]
                p += n
            else:
                key = None
            # value
            b = buf[p]
            if b < 0x80:
                n, p = (b >> 1) ^ -(b & 1), p + 1
            elif buf[p + 1] < 0x80:
                raw = (b & 0x7F) | (buf[p + 1] << 7)
                n, p = (raw >> 1) ^ -(raw & 1), p + 2
            else:
                n, p = read_varint(buf, p)
            if n >= 0:
                value = buf[p:p + n]
                p += n
                nbytes += n
            else:
                value = None
            if p >= stop:                                 # the header count must follow
                raise CorruptBatch(f"record at offset {off}: key/value run past the record")
            if headers_wanted:
                hc, p = read_varint(buf, p)
                if hc < 0:
                    raise CorruptBatch(f"record at offset {off}: negative header count {hc}")
                hdrs = []
                for _ in range(hc):
                    n, p = read_varint(buf, p)
                    if n < 0:
                        raise CorruptBatch(f"record at offset {off}: null header key")
                    hk = buf[p:p + n].decode("utf-8", "surrogateescape")
                    p += n
                    n, p = read_varint(buf, p)
                    if n >= 0:
                        hv = buf[p:p + n]
                        p += n
                    else:
                        hv = None
                    hdrs.append((hk, hv))
                if p != stop:
                    raise CorruptBatch(f"record at offset {off} declares {length} bytes but its fields use "
                                       f"{p - pos}")
                builder.add_headers(hdrs)
            offsets.append(off)
            stamps.append(base_timestamp + tsd if log_append_time is None else log_append_time)
            keys.append(key)
            values.append(value)
            types.append(ts_type)
            pos = stop
    except IndexError:
        raise CorruptBatch(f"records section ends inside a record of {count}") from None
    except VarintError as e:
        raise CorruptBatch(str(e)) from None
    if pos != end:
        raise CorruptBatch(f"{end - pos} bytes left over after the batch's {count} records")
    builder.bytes += nbytes
