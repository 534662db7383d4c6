"""Kafka record-batch compression codecs (the low 3 bits of the batch attributes).

    0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd

Each codec uses whichever installed library measured fastest here:

* gzip   - cramjam (about 1.6x zlib). Multi-member streams decode as their concatenation, like Java's
           GZIPInputStream.
* snappy - cramjam raw snappy. Two wire shapes exist: librdkafka sends one raw snappy block, while the
           Java client (snappy-java's SnappyOutputStream), kafka-python and aiokafka send xerial framing:
           ``\\x82SNAPPY\\x00`` + int32 version + int32 min-compatible version, then repeated
           [int32 big-endian length][raw snappy block]. decompress() accepts both; compress() writes
           xerial framing (what the Java reference producer writes; every client's reader accepts it).
* lz4    - lz4.frame (LZ4 frame format, the only lz4 shape magic-2 batches use). compress() mirrors the
           Java client: 64 KiB independent blocks, no content size, no checksums.
* zstd   - zstandard, through a streaming decompressor because producers (Java's ZstdOutputStream)
           write frames without a content size.

Every decode failure (corrupt, truncated or empty input) raises CompressionError, a ValueError.
"""
from __future__ import annotations

import struct
import threading

import cramjam
import lz4.frame
import zstandard

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible version 1
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)                 # 16
_XERIAL_BLOCK = 32 * 1024                                 # snappy-java's default block size
_BE_I32 = struct.Struct(">i")
_SNAPPY_MAX_RATIO = 24   # a 3-byte copy element emits at most 64 bytes (21.3x); keep a margin
_LZ4_MAX_RATIO = 256     # each 255 in a match-length run adds 255 bytes

GZIP_LEVEL = 6   # Java's GZIPOutputStream default
ZSTD_LEVEL = 3   # Kafka's default compression.zstd.level

# zstandard (de)compressor objects must not be used by two threads at once; keep one pair per thread.
_zstd_local = threading.local()


def _zstd_objects():
    try:
        return _zstd_local.pair
    except AttributeError:
        _zstd_local.pair = (zstandard.ZstdCompressor(level=ZSTD_LEVEL), zstandard.ZstdDecompressor())
        return _zstd_local.pair


class CompressionError(ValueError):
    """A compressed records section could not be decoded."""


def codec_name(codec: int) -> str:
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise ValueError(f"unknown compression codec {codec}") from None


# --- decompression -------------------------------------------------------------------------------------

def decompress(codec: int, data) -> bytes:
    """Decompress a records section (bytes, bytearray or memoryview) compressed with Kafka codec `codec`."""
    if codec == NONE:
        return bytes(data)
    try:
        fn = _DECOMPRESSORS[codec]
    except KeyError:
        raise ValueError(f"unknown compression codec {codec}") from None
    if len(data) == 0:
        raise CompressionError(f"{CODEC_NAMES[codec]}: empty compressed payload")
    try:
        return fn(data)
    except CompressionError:
        raise
    except Exception as e:  # each library has its own error types (cramjam, RuntimeError, ZstdError)
        raise CompressionError(f"{CODEC_NAMES[codec]} decompression failed: {e}") from e


def _gunzip(data) -> bytes:
    return bytes(cramjam.gzip.decompress(data))


def _snappy_block(block) -> bytes:
    # A raw snappy block starts with its uncompressed length; cramjam allocates that much up front and
    # aborts the whole process if the allocation fails, so a 5-byte garbage payload claiming 4 GiB could
    # kill the broker. No snappy element expands more than 64/3x, so a larger claim is corrupt.
    claimed = cramjam.snappy.decompress_raw_len(block)
    if claimed > _SNAPPY_MAX_RATIO * len(block):
        raise CompressionError(f"snappy: block of {len(block)} bytes claims {claimed} uncompressed bytes")
    return cramjam.snappy.decompress_raw(block)


def _unsnappy(data) -> bytes:
    mv = memoryview(data)
    if mv[:len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(_snappy_block(mv))
    n = len(mv)
    if n < _XERIAL_HEADER_SIZE:
        raise CompressionError(f"snappy: truncated xerial header ({n} bytes)")
    pos = _XERIAL_HEADER_SIZE
    blocks = []
    while pos < n:
        if n - pos < 4:
            raise CompressionError(f"snappy: truncated xerial block length at byte {pos}")
        (block_len,) = _BE_I32.unpack_from(mv, pos)
        pos += 4
        if block_len < 0 or pos + block_len > n:
            raise CompressionError(f"snappy: xerial block of {block_len} bytes at byte {pos} overruns "
                                   f"the {n}-byte payload")
        blocks.append(_snappy_block(mv[pos:pos + block_len]))
        pos += block_len
    return b"".join(blocks)


def _unlz4(data) -> bytes:
    # lz4.frame.decompress stops after the first frame; keep going so concatenated frames are not dropped.
    mv = memoryview(data)
    parts = []
    used = 0
    while used < len(mv):
        frame = mv[used:]
        # python-lz4 preallocates a frame's declared content size; no LZ4 sequence expands more than ~255x,
        # so a larger declaration is corrupt (and would otherwise be a cheap multi-GiB allocation).
        claimed = lz4.frame.get_frame_info(frame)["content_size"]
        if claimed > _LZ4_MAX_RATIO * len(frame) + 65536:
            raise CompressionError(f"lz4: frame of {len(frame)} bytes claims {claimed} uncompressed bytes")
        part, n = lz4.frame.decompress(frame, return_bytes_read=True)
        if n <= 0:
            raise CompressionError(f"lz4: no progress at byte {used}")
        parts.append(part)
        used += n
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unzstd(data) -> bytes:
    # A fresh streaming object per frame: it does not need the frame content size, and its `eof` tells a
    # complete frame from a truncated one (decompress() on a cut frame otherwise just returns less data).
    decompressor = _zstd_objects()[1]
    parts = []
    rest = data
    while True:
        obj = decompressor.decompressobj()
        parts.append(obj.decompress(rest))
        if not obj.eof:
            raise CompressionError("zstd: truncated frame")
        rest = obj.unused_data
        if not rest:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


_DECOMPRESSORS = {GZIP: _gunzip, SNAPPY: _unsnappy, LZ4: _unlz4, ZSTD: _unzstd}


# --- compression ---------------------------------------------------------------------------------------

def compress(codec: int, data) -> bytes:
    """Compress a records section with Kafka codec `codec` in the shape Kafka clients read."""
    if codec == NONE:
        return bytes(data)
    try:
        fn = _COMPRESSORS[codec]
    except KeyError:
        raise ValueError(f"unknown compression codec {codec}") from None
    return fn(data)


def _gzip(data) -> bytes:
    return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))


def _snappy(data) -> bytes:
    mv = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    for i in range(0, len(mv), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(mv[i:i + _XERIAL_BLOCK])
        out += _BE_I32.pack(len(block))
        out += block
    return bytes(out)


def _lz4(data) -> bytes:
    return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              content_checksum=False, block_checksum=False, store_size=False)


def _zstd(data) -> bytes:
    return _zstd_objects()[0].compress(data)


_COMPRESSORS = {GZIP: _gzip, SNAPPY: _snappy, LZ4: _lz4, ZSTD: _zstd}
