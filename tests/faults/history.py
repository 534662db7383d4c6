"""An append-only, thread-safe record of what a workload did and saw, in Jepsen's shape.

Every operation is a flat dict: `index` (append order), `time` (seconds since the history began), `process` (who:
"p0", "c1", "final", "nemesis"), `type` and `f`, plus fields of its own. `type` is Jepsen's:

- "invoke": an operation began (a send handed to the producer, a fault about to be applied);
- "ok": it completed and took effect (a send acknowledged, with its partition and offset; a read);
- "fail": it definitely did not take effect (a send the producer refused: never enqueued);
- "info": nobody knows (a send timed out, was purged in flight or hit a fatal producer error; a nemesis note).

The `f`s the workload writes:

- send: invoke {value, key, partition, seq}; ok {value, partition, offset}; fail/info {value, partition, error}
- read: ok {partition, offset, value, hw: the high watermark the consumer had cached when it read, -1 unknown}
- final: ok/info {partition, low, hw, reached}, one per partition after the run: the final read went from low up
  to `reached`, complete (ok) when that is the high watermark hw
- fatal, consumer-error, settle: info {error}: a producer session ended, a consumer saw an error, the cluster did
  not recover in time
- kill, pause, heal, seed: the nemesis (tests/faults/nemesis.py): invoke then ok when a fault is applied or healed

Histories are plain JSON lines, so a failing run's history is saved beside the test's tmp dir and checked again
with `python -m tests.faults.checker FILE`."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class History:
    """Operations in the order they were appended. Appends from any thread; reads take a snapshot."""

    def __init__(self, ops: list[dict] | None = None):
        self._ops: list[dict] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._ops.extend(dict(op) for op in ops or [])

    def append(self, process: str, type: str, f: str, **fields) -> dict:
        assert type in ("invoke", "ok", "fail", "info"), type
        with self._lock:
            op = {"index": len(self._ops), "time": round(time.monotonic() - self._t0, 4), "process": process,
                  "type": type, "f": f, **fields}
            self._ops.append(op)
        return op

    def invoke(self, process: str, f: str, **fields) -> dict:
        return self.append(process, "invoke", f, **fields)

    def ok(self, process: str, f: str, **fields) -> dict:
        return self.append(process, "ok", f, **fields)

    def fail(self, process: str, f: str, **fields) -> dict:
        return self.append(process, "fail", f, **fields)

    def info(self, process: str, f: str, **fields) -> dict:
        return self.append(process, "info", f, **fields)

    @property
    def ops(self) -> list[dict]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self):
        return iter(self.ops)

    def dump(self, path: Path | str) -> Path:
        """Write one JSON object per line; returns the path."""
        path = Path(path)
        with open(path, "w") as out:
            for op in self.ops:
                out.write(json.dumps(op, separators=(",", ":")) + "\n")
        return path

    @classmethod
    def load(cls, path: Path | str) -> "History":
        with open(path) as f:
            return cls([json.loads(line) for line in f if line.strip()])
