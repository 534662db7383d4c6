"""Kafka's per-log-dir offset checkpoint files (OffsetCheckpointFile), here `replication-offset-checkpoint`: the high
watermark of every partition in the dir, so that a restarted broker serves consumers (a KIP-392 follower read, say)
no more than the cluster had committed, and a follower without leader epochs has a safe point to truncate to.

Format, as Kafka writes it: a version line (0), a count line, then `topic partition offset` per line. Written
atomically (a crash leaves the old or the new file); a file that does not parse is ignored with a log line (the high
watermarks then start at each log's start, as with no file)."""
from __future__ import annotations

import logging
from pathlib import Path

from storage.log.files import read_small, write_atomically

log = logging.getLogger("strata.log")

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
_VERSION = 0


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    try:
        lines = read_small(path).decode().splitlines()
    except FileNotFoundError:
        return {}
    try:
        if int(lines[0]) != _VERSION:
            raise ValueError(f"version {lines[0]}")
        count = int(lines[1])
        out = {}
        for line in lines[2:2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        if len(out) != count:
            raise ValueError(f"{len(out)} entries, the header says {count}")
        return out
    except (ValueError, IndexError) as e:
        log.error("%s does not parse (%s): ignored", path, e)
        return {}


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    lines = [str(_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())
