"""protocol.compression and protocol.records: codecs, record decoding/encoding, real-client cross-checks."""
from __future__ import annotations

import gzip
import os
import random
import struct

import cramjam
import kafka.codec
import lz4.frame
import pytest
import snappy
import zstandard
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import compression
from protocol.compression import CompressionError, compress, decompress
from protocol.record_batch import (
    CONTROL_BIT, HEADER_SIZE, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, build_batch, compute_crc, read_header,
    set_log_append_time, split_and_validate,
)
from protocol.records import (
    CorruptRecordError, Record, build_records_batch, iter_all_records, iter_records,
)

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
ALL_CODECS = [compression.NONE] + CODECS
CODEC_IDS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _payloads():
    rng = random.Random(7)
    text = b"".join(b'{"id": %d, "user": "user-%d", "score": %f}\n' % (i, rng.randrange(1000), rng.random())
                    for i in range(5000))
    return {
        "empty": b"",
        "one-byte": b"x",
        "text": text,                                   # > 64 KiB: several lz4 / xerial blocks
        "random": rng.randbytes(200_000),               # incompressible
        "zeros": bytes(3_000_000),                      # extreme ratio
    }


PAYLOADS = _payloads()


# --- compression ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_IDS[c])
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_codec_round_trip(codec, name):
    data = PAYLOADS[name]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    for view in (packed, bytearray(packed), memoryview(packed), memoryview(b"pad" + packed)[3:]):
        out = decompress(codec, view)
        assert type(out) is bytes and out == data


def test_codec_none_is_passthrough():
    assert compress(0, b"abc") == b"abc"
    assert decompress(0, memoryview(b"abc")) == b"abc"


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 99])
def test_unknown_codec_is_value_error(codec):
    with pytest.raises(ValueError, match="unknown compression codec"):
        compress(codec, b"abc")
    with pytest.raises(ValueError, match="unknown compression codec"):
        decompress(codec, b"abc")


def test_snappy_raw_block_as_librdkafka_sends():
    data = PAYLOADS["text"]
    assert decompress(compression.SNAPPY, snappy.compress(data)) == data
    assert decompress(compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    assert decompress(compression.SNAPPY, kafka.codec.snappy_encode(data, xerial_compatible=False)) == data


def test_snappy_xerial_from_kafka_python():
    data = PAYLOADS["text"]
    framed = kafka.codec.snappy_encode(data)  # xerial framing, 32 KiB blocks
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert decompress(compression.SNAPPY, framed) == data
    small_blocks = kafka.codec.snappy_encode(data, xerial_blocksize=1000)
    assert decompress(compression.SNAPPY, small_blocks) == data


def test_snappy_xerial_hand_built():
    chunks = [b"alpha" * 100, b"", b"b", os.urandom(5000), b"gamma" * 3000]
    framed = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for chunk in chunks:
        block = snappy.compress(chunk)  # python-snappy: one raw block per xerial block
        framed += struct.pack(">i", len(block)) + block
    assert decompress(compression.SNAPPY, bytes(framed)) == b"".join(chunks)
    # header only: zero blocks
    assert decompress(compression.SNAPPY, b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)) == b""


def test_snappy_output_is_xerial_like_the_java_client():
    data = PAYLOADS["text"]
    packed = compress(compression.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert kafka.codec.snappy_decode(packed) == data
    # walk the blocks with python-snappy to check the framing independently
    pos, out = 16, b""
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        out += snappy.decompress(packed[pos + 4:pos + 4 + n])
        pos += 4 + n
    assert out == data


def test_lz4_output_matches_java_client_frame_settings():
    data = PAYLOADS["text"]
    packed = compress(compression.LZ4, data)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    # FLG: version 01, independent blocks, no block checksum, no content size, no content checksum
    assert packed[4] == 0x60
    assert packed[5] == 0x40  # BD: 64 KiB max block size
    info = lz4.frame.get_frame_info(packed)
    assert info["block_size"] == 65536 and not info["block_linked"] and info["content_size"] == 0
    assert kafka.codec.lz4_decode(packed) == data


def test_other_codecs_readable_by_reference_decoders():
    data = PAYLOADS["text"]
    assert gzip.decompress(compress(compression.GZIP, data)) == data
    assert kafka.codec.gzip_decode(compress(compression.GZIP, data)) == data
    assert zstandard.ZstdDecompressor().decompressobj().decompress(compress(compression.ZSTD, data)) == data
    assert kafka.codec.zstd_decode(compress(compression.ZSTD, data)) == data


def test_reference_encoders_decode():
    data = PAYLOADS["text"]
    assert decompress(compression.GZIP, gzip.compress(data)) == data
    assert decompress(compression.GZIP, kafka.codec.gzip_encode(data)) == data
    assert decompress(compression.LZ4, kafka.codec.lz4_encode(data)) == data
    assert decompress(compression.LZ4, lz4.frame.compress(data, store_size=True, content_checksum=True,
                                                          block_checksum=True, block_linked=True)) == data
    assert decompress(compression.ZSTD, kafka.codec.zstd_encode(data)) == data


def test_zstd_frame_without_content_size():
    data = PAYLOADS["text"]
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(frame) == -1
    assert decompress(compression.ZSTD, frame) == data
    # streamed (as Java's ZstdOutputStream writes) with several flushes
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = b"".join([cobj.compress(data[:1000]), cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK),
                         cobj.compress(data[1000:]), cobj.flush()])
    assert decompress(compression.ZSTD, streamed) == data


def test_concatenated_frames_and_members():
    a, b = b"first " * 1000, b"second " * 2000
    assert decompress(compression.GZIP, gzip.compress(a) + gzip.compress(b)) == a + b
    assert decompress(compression.LZ4, lz4.frame.compress(a) + lz4.frame.compress(b)) == a + b
    zc = zstandard.ZstdCompressor()
    assert decompress(compression.ZSTD, zc.compress(a) + zc.compress(b)) == a + b


def _corruptions(packed: bytes):
    mid = len(packed) // 2
    return {
        "empty": b"",
        "truncated-half": packed[:mid],
        "truncated-tail": packed[:-3],
        "garbage": b"this is not compressed data at all" * 3,
        "zeroed-middle": packed[:20] + bytes(40) + packed[60:],
    }


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_IDS[c])
@pytest.mark.parametrize("kind", ["empty", "truncated-half", "truncated-tail", "garbage", "zeroed-middle"])
def test_corrupt_payload_raises_compression_error(codec, kind):
    data = PAYLOADS["text"]
    bad = _corruptions(compress(codec, data))[kind]
    if codec == compression.ZSTD and kind == "zeroed-middle":
        # zstd frames carry no checksum by default: damage inside literals can decode to wrong bytes
        try:
            assert decompress(codec, bad) != data
        except CompressionError:
            pass
        return
    with pytest.raises(CompressionError) as info:
        decompress(codec, bad)
    assert isinstance(info.value, ValueError)
    assert CODEC_IDS[codec] in str(info.value)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_IDS[c])
def test_random_mutations_never_escape_as_other_errors(codec):
    rng = random.Random(codec)
    packed = compress(codec, PAYLOADS["text"][:20_000])
    for _ in range(300):
        bad = bytearray(packed)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        if rng.random() < 0.3:
            del bad[rng.randrange(len(bad)):]
        try:
            out = decompress(codec, bytes(bad))
        except CompressionError:
            continue
        assert isinstance(out, bytes)
    for _ in range(100):
        try:
            decompress(codec, rng.randbytes(rng.randint(1, 200)))
        except CompressionError:
            pass


def test_snappy_absurd_declared_length_rejected_before_allocating():
    # 5-byte varint preamble claiming 4 GiB: cramjam would try to allocate it (and abort on failure)
    bad = b"\xff\xff\xff\xff\x0f" + bytes(20)
    with pytest.raises(CompressionError, match="claims"):
        decompress(compression.SNAPPY, bad)
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(bad)) + bad
    with pytest.raises(CompressionError, match="claims"):
        decompress(compression.SNAPPY, framed)
    overrun = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 1000) + b"abc"
    with pytest.raises(CompressionError, match="overruns"):
        decompress(compression.SNAPPY, overrun)
    with pytest.raises(CompressionError, match="truncated xerial header"):
        decompress(compression.SNAPPY, b"\x82SNAPPY\x00\x00")


def test_lz4_absurd_content_size_rejected():
    header = lz4.frame.LZ4FrameCompressor().begin(source_size=1 << 40)  # valid header checksum
    body_c = lz4.frame.LZ4FrameCompressor()
    body_header = body_c.begin()
    body = body_c.compress(b"hello" * 100) + body_c.flush()
    frame = header + body
    assert len(body_header) == 7 and lz4.frame.get_frame_info(frame)["content_size"] == 1 << 40
    with pytest.raises(CompressionError, match="claims"):
        decompress(compression.LZ4, frame)


def test_zstd_absurd_frame_size_rejected():
    z = zstandard.ZstdCompressor().compress(b"hello" * 100)
    bad = z[:4] + b"\xe0" + struct.pack("<Q", 1 << 40) + z[7:]  # single-segment frame claiming 1 TiB
    with pytest.raises(CompressionError):
        decompress(compression.ZSTD, bad)


# --- records: round trips ------------------------------------------------------------------------------

def _sample_records(base_offset=1000, base_ts=1_700_000_000_000):
    return [
        Record(base_offset + 0, base_ts, b"key-0", b"value-0" * 50, []),
        Record(base_offset + 1, base_ts + 5, None, b"null key" * 20, [("trace", b"abc"), ("empty", b"")]),
        Record(base_offset + 2, base_ts - 3, b"null value", None, [("h-null", None)]),
        Record(base_offset + 3, base_ts + 10**6, None, None, []),
        Record(base_offset + 4, base_ts + 7, b"", b"", [("ünïcödé", b"\x00\xff"), ("dup", b"1"), ("dup", b"2")]),
        Record(base_offset + 5, base_ts + 8, os.urandom(300), bytes(70_000), []),  # > one lz4/xerial block
    ]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: CODEC_IDS[c])
def test_build_then_iter_round_trip(codec):
    records = _sample_records()
    batch = build_records_batch(records, codec=codec, base_offset=1000, producer_id=42, producer_epoch=3,
                                base_sequence=17)
    h = read_header(batch)
    assert h.magic == 2 and h.compression == codec and h.size == len(batch)
    assert h.base_offset == 1000 and h.last_offset_delta == 5 and h.records_count == 6
    assert h.base_timestamp == records[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 17)
    assert compute_crc(batch, 0, len(batch)) == h.crc
    assert split_and_validate(batch, 1 << 20) == [h]  # acceptable to the produce path
    decoded = list(iter_records(batch, verify_crc=True))
    assert decoded == records
    for view in (bytearray(batch), memoryview(batch), memoryview(batch + b"trailing junk")):
        assert list(iter_records(view)) == records


def test_tuple_items_and_headers_argument_match_record_batch_build_batch():
    items = [(b"k1", b"v1"), (None, b"v2"), (b"k3", None)]
    hdrs = [[("a", b"1")], [], [("n", None)]]
    ours = build_records_batch(items, base_offset=5, timestamp_ms=1234, headers=hdrs)
    theirs = build_batch(items, base_offset=5, timestamp_ms=1234, headers=hdrs)
    assert ours == theirs  # same layout as the existing uncompressed builder
    assert list(iter_records(ours)) == [
        Record(5, 1234, b"k1", b"v1", [("a", b"1")]),
        Record(6, 1234, None, b"v2", []),
        Record(7, 1234, b"k3", None, [("n", None)]),
    ]
    three = build_records_batch([(b"k", b"v", [("x", b"y")])], timestamp_ms=1)
    assert list(iter_records(three)) == [Record(0, 1, b"k", b"v", [("x", b"y")])]


def test_default_timestamp_is_now():
    import time
    before = int(time.time() * 1000)
    (rec,) = iter_records(build_records_batch([(b"k", b"v")]))
    assert before <= rec.timestamp <= int(time.time() * 1000)


def test_gapped_offsets_as_after_compaction():
    survivors = [Record(100, 10, b"a", b"1", []), Record(104, 11, b"b", b"2", []), Record(109, 9, b"c", None, [])]
    batch = build_records_batch(survivors, codec=compression.ZSTD, base_offset=100)
    h = read_header(batch)
    assert h.records_count == 3 and h.last_offset_delta == 9 and h.last_offset == 109
    assert list(iter_records(batch)) == survivors


def test_build_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one record"):
        build_records_batch([])
    with pytest.raises(ValueError, match="unknown compression codec"):
        build_records_batch([(b"k", b"v")], codec=5)
    with pytest.raises(ValueError, match="not above"):
        build_records_batch([Record(5, 0, None, None, []), Record(5, 0, None, None, [])], base_offset=5)
    with pytest.raises(ValueError, match="not above"):
        build_records_batch([Record(4, 0, None, None, [])], base_offset=5)
    with pytest.raises(ValueError, match="expected a Record"):
        build_records_batch([(b"k",)])


def test_flag_attributes_are_kept_and_codec_bits_come_from_codec():
    batch = build_records_batch([(b"k", b"v")], codec=compression.LZ4, timestamp_ms=1,
                                attributes=TRANSACTIONAL_BIT | 0x07, producer_id=1, producer_epoch=0,
                                base_sequence=0)
    h = read_header(batch)
    assert h.is_transactional and h.compression == compression.LZ4 and not h.is_control
    assert list(iter_records(batch, verify_crc=True)) == [Record(0, 1, b"k", b"v", [])]


def test_non_utf8_header_key_bytes_survive_a_round_trip():
    raw = build_batch([(b"k", b"v")], headers=[[("x", b"1")]])
    # patch the header key "x" to the invalid UTF-8 byte 0xff (same length), CRC not verified here
    i = raw.rindex(b"\x02x\x02")
    patched = raw[:i + 1] + b"\xff" + raw[i + 2:]
    (rec,) = iter_records(patched)
    rebuilt = build_records_batch([rec], base_offset=0)
    assert rebuilt[HEADER_SIZE:] == patched[HEADER_SIZE:]


# --- records: real-client cross-checks -----------------------------------------------------------------

def _kafka_python_batch(codec, records):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 22)
    for delta, ts, key, value, headers in records:
        assert builder.append(delta, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


def _client_records():
    base_ts = 1_712_345_678_901
    out = []
    for i in range(200):
        key = None if i % 7 == 0 else b"key-%05d" % i
        value = None if i % 11 == 0 else (b"value %d " % i) * (i % 13 + 1)
        headers = [("idx", b"%d" % i), ("maybe", None if i % 2 else b"set")] if i % 3 else []
        out.append((i, base_ts + (i * 37) % 1000 - 500, key, value, headers))
    return out


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: CODEC_IDS[c])
def test_kafka_python_built_batches_decode_exactly(codec):
    recs = _client_records()
    batch = _kafka_python_batch(codec, recs)
    h = read_header(batch)
    assert h.compression == codec  # data is compressible, so kafka-python did not fall back to none
    if codec == compression.SNAPPY:
        assert batch[HEADER_SIZE:HEADER_SIZE + 8] == b"\x82SNAPPY\x00"  # the xerial path is exercised
    decoded = list(iter_records(batch, verify_crc=True))
    assert decoded == [Record(d, ts, k, v, hs) for d, ts, k, v, hs in recs]
    # and the same through a non-zero base offset, as the broker assigns it (outside the CRC)
    shifted = bytearray(batch)
    struct.pack_into(">q", shifted, 0, 5_000_000_000)
    assert [r.offset for r in iter_records(shifted, verify_crc=True)] == [5_000_000_000 + i for i in range(200)]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: CODEC_IDS[c])
def test_kafka_python_reads_our_batches(codec):
    recs = _client_records()
    ours = build_records_batch([Record(d, ts, k, v, hs) for d, ts, k, v, hs in recs], codec=codec,
                               base_offset=0)
    theirs = DefaultRecordBatch(ours)
    assert theirs.validate_crc() and theirs.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs]
    assert got == [(d, ts, k, v, hs) for d, ts, k, v, hs in recs]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: CODEC_IDS[c])
def test_log_append_time_uses_batch_max_timestamp(codec):
    recs = _client_records()[:20]
    batch = bytearray(_kafka_python_batch(codec, recs))
    set_log_append_time(batch, 0, len(batch), 1_800_000_000_000)
    assert read_header(batch).is_log_append_time
    decoded = list(iter_records(batch, verify_crc=True))
    assert [r.timestamp for r in decoded] == [1_800_000_000_000] * 20
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [(d, k, v, hs) for d, _, k, v, hs in recs]
    # our own builder with the LogAppendTime bit: every record reports maxTimestamp
    ours = build_records_batch([Record(0, 50, b"a", b"1", []), Record(1, 70, b"b", b"2", [])], codec=codec,
                               attributes=TIMESTAMP_TYPE_BIT)
    assert [r.timestamp for r in iter_records(ours)] == [70, 70]
    assert DefaultRecordBatch(ours).timestamp_type == 1


# --- records: buffers of several batches ---------------------------------------------------------------

def test_iter_all_records_walks_mixed_batches_and_stops_at_partial_tail():
    batches, expected, next_offset = [], [], 0
    for codec in ALL_CODECS:
        recs = [Record(next_offset + i, 1000 + i, b"k%d" % i, b"v%d-%d" % (codec, i), []) for i in range(3)]
        batches.append(build_records_batch(recs, codec=codec, base_offset=next_offset))
        expected += recs
        next_offset += 3
    control = build_records_batch([Record(next_offset, 1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
                                  base_offset=next_offset, attributes=CONTROL_BIT | TRANSACTIONAL_BIT)
    buf = b"".join(batches[:2]) + control + b"".join(batches[2:])
    tail = build_records_batch([(b"x", b"y")], base_offset=999)[:-5]
    assert list(iter_all_records(buf + tail, skip_control=True, verify_crc=True)) == expected
    everything = list(iter_all_records(bytearray(buf + tail)))
    assert len(everything) == len(expected) + 1 and everything[6].offset == next_offset
    # start/end window: only the first batch
    assert list(iter_all_records(buf, 0, len(batches[0]))) == expected[:3]
    assert list(iter_all_records(b"")) == []


# --- records: corruption -------------------------------------------------------------------------------

def _replace_section(batch: bytes, section: bytes, *, count: int | None = None) -> bytes:
    out = bytearray(batch[:HEADER_SIZE] + section)
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
    return bytes(out)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_IDS[c])
def test_corrupt_compressed_batch_raises_clear_error(codec):
    batch = build_records_batch(_sample_records(), codec=codec, base_offset=1000)
    section = batch[HEADER_SIZE:]
    for bad in (section[:len(section) // 2], b"\x00" * 40, b"garbage!" * 10):
        with pytest.raises(CorruptRecordError, match=CODEC_IDS[codec]) as info:
            list(iter_records(_replace_section(batch, bad)))
        assert isinstance(info.value, ValueError) and info.value.error_code == 2
        assert isinstance(info.value.__cause__, CompressionError)


def test_crc_mismatch_detected_only_when_asked():
    batch = bytearray(build_records_batch([(b"k", b"v")], timestamp_ms=1))
    batch[-2] ^= 0x01  # flip a bit of the value (the last byte is the header count)
    assert list(iter_records(batch)) == [Record(0, 1, b"k", b"w", [])]
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_records(batch, verify_crc=True))


def test_structural_corruption():
    batch = build_records_batch([(b"key", b"value"), (b"k2", b"v2")], timestamp_ms=1)
    section = batch[HEADER_SIZE:]
    with pytest.raises(CorruptRecordError, match="shorter than"):
        list(iter_records(batch[:40]))
    with pytest.raises(CorruptRecordError, match="does not fit"):
        list(iter_records(batch[:-1]))
    bad_magic = bytearray(batch)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_records(bad_magic))
    for codec_bits in (5, 6, 7):
        bad_codec = bytearray(batch)
        bad_codec[22] |= codec_bits
        with pytest.raises(CorruptRecordError, match="unknown compression codec"):
            list(iter_records(bad_codec))
    with pytest.raises(CorruptRecordError, match="ends after 2 of 3"):
        list(iter_records(_replace_section(batch, section, count=3)))
    with pytest.raises(CorruptRecordError, match="left over"):
        list(iter_records(_replace_section(batch, section, count=1)))
    with pytest.raises(CorruptRecordError, match="negative record count"):
        list(iter_records(_replace_section(batch, section, count=-1)))
    with pytest.raises(CorruptRecordError):
        list(iter_records(_replace_section(batch, section[:-2])))
    # first record's length claims 3 bytes more than its fields use (3 padding bytes appended)
    body_len = section[0] // 2  # zigzag varint of a small length is one byte
    padded = bytes([section[0] + 6]) + section[1:1 + body_len] + b"\x00\x00\x00"
    with pytest.raises(CorruptRecordError, match="declares"):
        list(iter_records(_replace_section(batch, padded, count=1)))
    with pytest.raises(CorruptRecordError, match="varint longer than 5 bytes"):   # the record length is a varint
        list(iter_records(_replace_section(batch, b"\xff" * 12, count=1)))
    null_header_key = build_batch([(b"k", b"v")], headers=[[("x", b"1")]])
    i = null_header_key.rindex(b"\x02x\x02")
    patched = null_header_key[:i] + b"\x01\x00\x02" + null_header_key[i + 3:]  # key length -1, padding
    with pytest.raises(CorruptRecordError):
        list(iter_records(patched))


def test_random_record_section_mutations_only_raise_corrupt_record_error():
    rng = random.Random(3)
    batch = build_records_batch(_sample_records()[:5])
    for _ in range(1000):
        bad = bytearray(batch)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(HEADER_SIZE, len(bad))] = rng.randrange(256)
        try:
            list(iter_records(bad))
        except CorruptRecordError:
            pass



def test_recompress_batch_keeps_offsets_producer_fields_and_headers():
    from protocol.record_batch import read_header, split_and_validate
    from protocol.records import recompress_batch
    src = build_records_batch([(b"k1", b"v1", [("h", b"x")]), (None, b"v2", [])], codec=4, base_offset=10,
                              timestamp_ms=1234, producer_id=7, producer_epoch=2, base_sequence=5)
    out = recompress_batch(src, 1)
    h = split_and_validate(out, 1 << 20)[0]
    assert (h.compression, h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence) == (1, 10, 7, 2, 5)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in iter_records(out)] == \
        [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in iter_records(src)]
    assert read_header(recompress_batch(src, 0), 0).compression == 0


# --- signed varints (protocol.wire: Kafka's ByteUtils.readVarint / readVarlong) ---------------------------

def test_varint_and_varlong_round_trip_and_kafka_limits():
    from protocol.wire import VarintError, read_varint, read_varlong, varint
    for v in (0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -2**31):
        enc = varint(v)
        assert len(enc) <= 5 and read_varint(enc, 0) == (v, len(enc))
    for v in (2**31, -2**31 - 1, 2**62, 2**63 - 1, -2**63):
        enc = varint(v)
        assert 5 <= len(enc) <= 10 and read_varlong(enc, 0) == (v, len(enc))
        if len(enc) > 5:
            with pytest.raises(VarintError, match="varint longer than 5 bytes"):
                read_varint(enc, 0)
    # a 5-byte varint whose value needs more than 32 bits keeps the low 32, as Java's int shifts do
    assert read_varint(b"\xff\xff\xff\xff\x7f", 0) == (-2**31, 5)        # raw 0xFFFFFFFF -> zigzag -2^31
    assert read_varint(b"\xfe\xff\xff\xff\x1f", 0) == (2**31 - 1, 5)     # raw 0xFFFFFFFE
    # the 10th byte of a varlong contributes its lowest bit only (Java's `b << 63`)
    assert read_varlong(b"\xff" * 9 + b"\x7f", 0) == (-2**63, 10)
    with pytest.raises(VarintError, match="varlong longer than 10 bytes"):
        read_varlong(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(IndexError):                   # truncated: the callers' corrupt-data error
        read_varint(b"\x80\x80", 0)
    assert read_varint(b"\x00\x96\x01", 1) == (75, 3)   # reads from `pos`


def test_record_fields_use_varint_limits_and_the_timestamp_delta_a_varlong():
    """A record whose timestamp delta needs 6+ bytes decodes (Kafka reads it with readVarlong); a key length
    spelled in 6 bytes does not (readVarint stops at 5), in every reader of records."""
    from protocol.records import null_key_indexes, scan_records
    far = 1_700_000_000_000
    batch = build_records_batch([Record(0, 0, b"k", b"v", []), Record(1, far, None, b"w", [])], timestamp_ms=0)
    assert [(r.timestamp, r.key) for r in iter_records(batch)] == [(0, b"k"), (far, None)]
    assert null_key_indexes(batch) == [1]
    section = batch[HEADER_SIZE:]
    assert [span[4] for span in scan_records(section, 0, len(section), 2)] == [0, far]
    # key length 1 as a 6-byte varint: 0x82 0x80 0x80 0x80 0x80 0x00 (record length grows by 5)
    one = build_records_batch([(b"k", b"v")], timestamp_ms=0)[HEADER_SIZE:]
    assert one[4] == 2 and one[0] // 2 == len(one) - 1               # key length 1 at byte 4, after 3 one-byte
    padded = bytes([one[0] + 10]) + one[1:4] + b"\x82\x80\x80\x80\x80\x00" + one[5:]
    bad = _replace_section(batch, padded, count=1)
    for decode in (lambda: list(iter_records(bad)), lambda: null_key_indexes(bad),
                   lambda: scan_records(padded, 0, len(padded), 1)):
        with pytest.raises(CorruptRecordError, match="varint longer than 5 bytes"):
            decode()
