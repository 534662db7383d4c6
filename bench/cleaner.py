"""Log cleaner throughput: one compaction pass over a large compacted log, built directly with the storage API.

A log of about --size-mb MiB is written with `storage.log.log.Log` (no broker, no network): batches of --batch records,
each a random key out of --keys and a --value-bytes value (random bytes, so compression gains nothing and the codec
cost is the price of recompressing), rolled at --segment-mb. Then `LogCleaner.clean_once()` cleans it on this thread,
exactly the code a broker cleaner thread runs (offset map over the dirty section, copy of every group into .cleaned
files with fsync, swap). Reported as Kafka's cleaner reports it: MB of log processed (the bytes the copy pass read)
per second of the whole pass, plus the map ("indexed") and copy phases separately. MB = 2^20 bytes here.

    .venv/bin/python bench/cleaner.py                      # ~1 GiB, 1 KiB values, 100k keys, uncompressed
    .venv/bin/python bench/cleaner.py --codec lz4          # the same with lz4 batches
    .venv/bin/python bench/cleaner.py --size-mb 64         # smoke test
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from protocol import compression  # noqa: E402
from protocol.record_batch import split_and_validate  # noqa: E402
from protocol.records import build_records_batch, iter_all_records  # noqa: E402
from storage.log.log import Log  # noqa: E402
from storage.cleaner.log_cleaner import CleanerConfig, LogCleaner  # noqa: E402
from storage.log.log_config import LogConfig  # noqa: E402

MIB = 1024 * 1024
CODECS = {name: code for code, name in compression.CODEC_NAMES.items()}


def build_log(path: Path, args) -> tuple[Log, dict[bytes, int], int]:
    cfg = LogConfig(cleanup_policy="compact", segment_bytes=args.segment_mb * MIB)
    lg = Log(path, cfg)
    rnd = random.Random(args.seed)
    pool = rnd.randbytes(4 * MIB)
    codec = CODECS[args.codec]
    latest: dict[bytes, int] = {}
    target = args.size_mb * MIB
    written = 0
    now = int(time.time() * 1000)
    while written < target:
        recs = []
        for _ in range(args.batch):
            key = b"key-%08d" % rnd.randrange(args.keys)
            at = rnd.randrange(len(pool) - args.value_bytes)
            recs.append((key, pool[at:at + args.value_bytes]))
        buf = bytearray(build_records_batch(recs, codec=codec, timestamp_ms=now))
        r = lg.append_as_leader(buf, split_and_validate(buf, len(buf)), 0)
        assert r.error_code == 0, r
        for i, (key, _) in enumerate(recs):
            latest[key] = r.base_offset + i
        written += len(buf)
    lg.roll()                   # everything written becomes cleanable
    return lg, latest, written


def verify(lg: Log, latest: dict[bytes, int]) -> None:
    seen: dict[bytes, int] = {}
    last = -1
    for view in lg.read(0, 1 << 62):
        for r in iter_all_records(view):
            assert r.offset > last
            last = r.offset
            seen[r.key] = r.offset
    assert seen == latest, "the cleaned log does not hold exactly each key's latest record"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="log size to generate (MiB)")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=100, help="records per batch")
    ap.add_argument("--segment-mb", type=int, default=128, help="segment.bytes in MiB")
    ap.add_argument("--codec", choices=sorted(CODECS), default="none")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", help="parent directory for the log (default: a temporary directory)")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args()

    parent = Path(tempfile.mkdtemp(prefix="strata-cleaner-bench-", dir=args.dir))
    try:
        t0 = time.monotonic()
        lg, latest, written = build_log(parent / "bench-0", args)
        build_s = time.monotonic() - t0
        segments = len(lg.segments()) - 1
        print(f"built {written / MIB:.0f} MiB in {segments} segments ({args.codec}, {args.batch} records/batch, "
              f"{args.value_bytes} B values, {len(latest)} distinct keys) in {build_s:.1f}s")
        os.sync()
        cleaner = LogCleaner(CleanerConfig(), logs=lambda: [("bench-0", lg)])
        task = cleaner.clean_once()
        assert task is not None, "the log was not cleanable"
        st = task.stats
        print(st.summary())
        if not args.no_verify:
            verify(lg, latest)
            print("verified: every key's latest record, nothing else")
        copy_s = max(st.elapsed - st.map_seconds, 1e-9)
        print()
        print("| log | codec | keys | pass | map (indexing) | copy | cleaner throughput |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        print(f"| {st.bytes_read / MIB:.0f} MiB, {segments} segments | {args.codec} | {len(latest)} | "
              f"{st.elapsed:.1f} s | {st.map_bytes_read / MIB / max(st.map_seconds, 1e-9):.0f} MiB/s | "
              f"{st.bytes_read / MIB / copy_s:.0f} MiB/s | **{st.mb_per_sec:.0f} MiB/s** |")
        print(f"\n({platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
              f"{platform.machine()})")
        lg.close()
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
