"""Coverage-guided fuzzing (atheris, i.e. libFuzzer) of the parsers a client's bytes reach first.

    python tests/fuzz/fuzz_parsers.py requests [libFuzzer flags, e.g. -runs=200000 -seed=1]
    python tests/fuzz/fuzz_parsers.py batches  [...]

`requests`: the first two input bytes choose an (API key, version) the broker decodes, the rest is the request body;
it goes through the decoder that API's handler uses (kio behind its structure walk, or the hand-written decoders of
Produce, DescribeWalPointers and Envelope's principal). The only exception a decoder may raise is MalformedRequest:
anything else would be logged by the broker as an internal error, and a native abort is a crash.

`batches`: the input is a Produce partition's record set. The CRC-32C is recomputed after mutation (otherwise almost
every input stops at the CRC check), then it goes through split_and_validate, which may raise only
InvalidRecordError, and each accepted batch's records are decoded (and decompressed), which may raise only
CorruptRecordError.

`make fuzz` runs both for longer; tests/fuzz/test_fuzz_parsers.py runs each for a bounded number of inputs in the slow
suite.
"""
from __future__ import annotations

import os
import struct
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

with atheris.instrument_imports(include=["protocol", "broker.handlers.produce", "broker.handlers.describe_wal_pointers",
                                         "broker.handlers.envelope"]):
    from broker.handlers import describe_wal_pointers, envelope, load_handlers, produce
    from protocol import kio_codec
    from protocol.record_batch import HEADER_SIZE, InvalidRecordError, split_and_validate
    from protocol.records import CorruptRecordError, iter_records
    from protocol.wire import MalformedRequest

_HANDLERS = load_handlers()
TARGETS = sorted((key, v) for key, h in _HANDLERS.items() for v in range(h.DECODABLE[0], h.DECODABLE[1] + 1))
_CRC = struct.Struct(">I")


def decode_one(api_key: int, version: int, body: bytes) -> None:
    """Decode `body` as the broker's handler for (api_key, version) would; raises only MalformedRequest."""
    if api_key == produce.API_KEY:
        produce.parse(body, 0, version, version >= 9)
    elif api_key == describe_wal_pointers.API_KEY:
        describe_wal_pointers.decode(body, 0, version)
    else:
        e = kio_codec.decode_request(api_key, version, memoryview(body).toreadonly(), 0)
        if api_key == envelope.API_KEY and e.request_principal is not None:
            envelope.deserialize_principal(bytes(e.request_principal))


def request_input(data: bytes) -> None:
    if len(data) < 2:
        return
    api_key, version = TARGETS[int.from_bytes(data[:2], "big") % len(TARGETS)]
    try:
        decode_one(api_key, version, data[2:])
    except MalformedRequest:
        pass


def fix_crc(records: bytearray) -> None:
    """Give the first batch a correct CRC-32C, so inputs get past the check into the header and record parsing."""
    from protocol.record_batch import compute_crc, read_header
    if len(records) >= HEADER_SIZE:
        h = read_header(records, 0)
        if HEADER_SIZE - 12 <= h.batch_length and h.size <= len(records):
            _CRC.pack_into(records, 17, compute_crc(records, 0, h.size))


def batch_input(data: bytes) -> None:
    records = bytearray(data)
    fix_crc(records)
    try:
        headers = split_and_validate(memoryview(records), 1 << 20)
    except InvalidRecordError:
        return
    pos = 0
    for h in headers:
        try:
            for _ in iter_records(memoryview(records)[pos:pos + h.size], verify_crc=True):
                pass
        except CorruptRecordError:
            pass
        pos += h.size


def seed_corpus(target: str) -> list[bytes]:
    """A few valid inputs to start from (libFuzzer finds the rest)."""
    from protocol.records import build_records_batch
    batch = bytes(build_records_batch([(b"k", b"v", [("h", b"x")]), (None, b"second")]))
    if target == "batches":
        from protocol import compression
        return [batch] + [bytes(build_records_batch([(b"k", b"v" * 50)] * 3, codec=c))
                          for c in (compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD)]
    produce_v9 = TARGETS.index((produce.API_KEY, 9)).to_bytes(2, "big")
    body = b"\x00" + b"\xff\xff\x00\x00\x75\x30\x02\x02t\x02\x00\x00\x00\x00" + bytes([len(batch) + 1]) + batch
    return [produce_v9 + body + b"\x00\x00\x00"]


def main() -> None:
    target = sys.argv[1]
    test = {"requests": request_input, "batches": batch_input}[target]
    corpus = os.environ.get("STRATA_FUZZ_CORPUS")
    if corpus:
        os.makedirs(corpus, exist_ok=True)
        for i, s in enumerate(seed_corpus(target)):
            with open(os.path.join(corpus, f"seed-{i}"), "wb") as f:
                f.write(s)
    argv = [sys.argv[0], *sys.argv[2:]] + ([corpus] if corpus else [])
    atheris.Setup(argv, test)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
