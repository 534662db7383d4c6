"""A "null" Strata broker: the real protocol stack with the storage layer taken out.

Used by bench/produce_fetch.py as the ceiling Strata is compared against. The process is Strata itself
(`broker.cli` -> `broker.broker_server.Broker`, uvloop, the same framing, dispatch and the same Produce / Fetch / Metadata /
ListOffsets / ApiVersions / CreateTopics handlers, fetch long-polling in `ReplicaManager`); the one thing replaced is
`storage.log.log.Log`, by `NullLog` below, which `replication.replica_manager` instantiates for every partition.

What NullLog does, and what it leaves out:

* Produce: the handler still parses the request and runs `split_and_validate` (CRC-32C of every batch) exactly as in
  Strata. `append_as_leader` then assigns offsets (advances the log end offset and rewrites baseOffset /
  partitionLeaderEpoch in place, as Strata's log does before writing) and drops the bytes. No file, mmap, index,
  time index or producer state is touched. The only bytes it keeps are a copy of the largest batch seen so far per
  partition (a "template", rarely replaced once batch sizes are steady) so that Fetch can serve real records.
* Fetch: `read(offset, max_bytes)` serves the template re-based to start at `offset`, repeated until `max_bytes`
  is filled (each copy gets its own 61-byte header with the next base offset; baseOffset lies outside the CRC, so
  the record bytes are shared, not copied, and every copy is a valid batch). The last copy is cut to the records
  that still fit, and never runs past the high watermark, so a consumer sees exactly offsets 0..LEO-1, as from a
  real log (cut headers, with their CRC, are computed once per record count and cached). Records have the size and
  content of what the producer sent (its largest batch), not its exact batch boundaries. Filling the budget
  exactly is more than a real log can do (Strata and Kafka serve whole batches only), so the null broker is an
  ideal ceiling for fetch, not a replica of Strata's response sizes. Compressed templates are served whole.
* ListOffsets: earliest = log start offset (0, or what DeleteRecords set), latest = high watermark = log end offset;
  timestamp lookups find nothing.
* Nothing survives a restart (topic metadata does, through the unchanged metadata log in log.dirs).

Run exactly like the real broker:  python bench/null_broker.py broker --override listeners=PLAINTEXT://127.0.0.1:9093 ...
If storage/log/log.py does not exist yet, a stand-in `storage.log.log` module is installed so the null broker still runs.
"""
from __future__ import annotations

import bisect
import os
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import crc32c  # noqa: E402

from protocol.record_batch import (CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD, _U32, assign_offset,  # noqa: E402
                                   set_log_append_time)
from protocol.wire import read_varint, read_varlong  # noqa: E402


class NullOffsetOutOfRange(Exception):
    """Used only when storage/log/log.py does not exist yet."""


class NullAppendResult:
    """The fields the Produce handler and ReplicaManager read from Strata's AppendResult."""
    __slots__ = ("error_code", "error_message", "duplicate", "base_offset", "last_offset", "log_append_time",
                 "log_start_offset")

    def __init__(self, base_offset: int, last_offset: int, log_append_time: int, log_start_offset: int):
        self.error_code = 0
        self.error_message = None
        self.duplicate = False
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset


_append_result = NullAppendResult   # install() swaps in storage.log.log.AppendResult when it exists


def _offset_out_of_range(message: str) -> Exception:
    """An instance of the class broker/handlers/fetch.py catches (storage.log.log.OffsetOutOfRangeError)."""
    from broker.handlers import fetch
    cls = fetch.OffsetOutOfRangeError
    try:
        return cls(message)
    except TypeError:
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        return exc


class _Template:
    """One real batch from the producer. Served copies share its record bytes; only the 61-byte header differs.

    `prefix(k)` is the batch cut to its first k records (header rewritten: length, lastOffsetDelta, count,
    maxTimestamp, CRC); cut headers are cached per k, and only baseOffset (outside the CRC) changes per copy.
    Compressed batches cannot be cut without re-compressing, so they are only ever served whole."""
    __slots__ = ("fields", "body", "count", "size", "ends", "max_ts", "_headers")

    def __init__(self, batch: bytes):
        self.fields = list(HEADER.unpack_from(batch, 0))
        self.body = memoryview(batch)[HEADER_SIZE:]
        self.count = self.fields[12]
        self.size = len(batch)
        self._headers: dict[int, bytearray] = {self.count: bytearray(batch[:HEADER_SIZE])}
        self.ends: list[int] = []      # ends[i]: body bytes up to and including record i
        self.max_ts: list[int] = []    # max_ts[i]: largest timestamp among records 0..i
        if self.fields[5] & 0x07:
            return
        pos, best, base_ts = 0, self.fields[7], self.fields[7]
        for _ in range(self.count):
            length, p = read_varint(self.body, pos)
            ts_delta, _ = read_varlong(self.body, p + 1)      # skip the attributes byte
            best = max(best, base_ts + ts_delta)
            pos = p + length
            self.ends.append(pos)
            self.max_ts.append(best)

    def records_fitting(self, budget: int) -> int:
        """How many leading records fit in `budget` bytes as one batch (0 if none, or if it cannot be cut)."""
        if not self.ends:
            return self.count if budget >= self.size else 0
        return bisect.bisect_right(self.ends, budget - HEADER_SIZE)

    def prefix(self, k: int, base_offset: int) -> tuple[bytearray, memoryview]:
        header = self._headers.get(k)
        if header is None:
            f = list(self.fields)
            body_len = self.ends[k - 1]
            if not f[5] & 0x08:          # CreateTime: maxTimestamp is the largest record timestamp
                f[8] = self.max_ts[k - 1]
            f[1], f[6], f[12] = HEADER_SIZE - LOG_OVERHEAD + body_len, k - 1, k
            header = bytearray(HEADER_SIZE)
            HEADER.pack_into(header, 0, *f)
            crc = crc32c.crc32c(bytes(header[CRC_START:]) + bytes(self.body[:body_len]))
            _U32.pack_into(header, 17, crc)
            self._headers[k] = header
        body_len = self.ends[k - 1] if k != self.count else len(self.body)
        out = bytearray(header)
        assign_offset(out, 0, base_offset, self.fields[2])
        return out, self.body[:body_len]


class NullLog:
    """Looks like storage.log.log.Log to the broker; stores nothing (see the module docstring)."""

    def __init__(self, dir, config, clean_shutdown: bool = False, **_ignored):
        self.dir = dir
        self.config = config
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0          # set by the partition layer, as for a real log
        self.remote_log_enabled = False
        self._template: _Template | None = None
        self._largest, self._largest_count = b"", 0
        self._epoch_starts: dict[int, int] = {}

    @property
    def local_log_start_offset(self) -> int:
        return self.log_start_offset

    def size_bytes(self) -> int:
        return 0

    # ---- leader epochs (a one-broker run only ever asks for its own) --------------------------------------------
    def assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        self._epoch_starts.setdefault(epoch, offset)

    def epoch_start_offset(self, epoch: int) -> int:
        return self._epoch_starts.get(epoch, self.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        later = [o for e, o in self._epoch_starts.items() if e > epoch]
        return (epoch, min(later)) if later else (epoch, self.log_end_offset)

    # ---- offsets -----------------------------------------------------------------------------------------------
    def update_high_watermark(self, offset: int) -> int:
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    # ---- write path --------------------------------------------------------------------------------------------
    def append_as_leader(self, records, headers, leader_epoch: int = 0):
        base = self.log_end_offset
        log_append_time = -1
        now_ms = None
        pos = 0
        offset = base
        for h in headers:
            assign_offset(records, pos, offset, leader_epoch)
            if self.config.message_timestamp_type == "LogAppendTime":
                if now_ms is None:
                    now_ms = int(time.time() * 1000)
                set_log_append_time(records, pos, h.size, now_ms)
                log_append_time = now_ms
            offset += h.records_count
            if h.records_count > self._largest_count:     # parsed into a _Template only when a fetch needs it
                self._largest_count, self._largest = h.records_count, bytes(records[pos:pos + h.size])
                self._template = None
            pos += h.size
        self.log_end_offset = offset
        return _append_result(base, offset - 1, log_append_time, self.log_start_offset)

    # ---- read path ---------------------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, min_one_message: bool = True, max_offset: int | None = None):
        """Copies of the template from `offset` on, filling `max_bytes` (the last copy cut to fit, which a real log
        cannot do: it serves whole batches), never past the high watermark; with min_one_message at least one
        record even if max_bytes is smaller."""
        end = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise _offset_out_of_range(f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]")
        t = self._template
        if t is None and self._largest:
            t = self._template = _Template(self._largest)
        views: list = []
        budget = max_bytes
        while offset < end:
            if t.ends:
                k = min(t.records_fitting(budget), end - offset)
                if k <= 0:
                    if views or not min_one_message:
                        break
                    k = 1
            else:                # a compressed template: whole copies only, the last may run past the end
                if budget < t.size and (views or not min_one_message):
                    break
                k = t.count
            header, body = t.prefix(k, offset)
            views.append(header)
            views.append(body)
            budget -= len(header) + len(body)
            offset += k
        return views

    # ---- the rest of Log's interface: nothing to do without storage ---------------------------------------------
    def max_timestamp_entry(self):
        return None

    def fetch_offset_by_timestamp(self, timestamp: int):
        return None

    def delete_records(self, offset: int) -> int:
        self.log_start_offset = max(self.log_start_offset, min(offset, self.log_end_offset))
        return self.log_start_offset

    def delete_old_segments(self) -> int:
        return 0

    def maybe_flush(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def update_config(self, config) -> None:
        self.config = config

    def close(self) -> None:
        pass

    def delete(self) -> None:
        pass


def install() -> None:
    """Make replication.replica_manager build NullLogs (installing a stand-in storage.log.log if the real one is missing)."""
    global _append_result
    try:
        import storage.log.log
        _append_result = getattr(storage.log.log, "AppendResult", NullAppendResult)
    except ImportError:
        stub = types.ModuleType("storage.log.log")
        stub.__doc__ = "stand-in installed by bench/null_broker.py: storage/log/log.py does not exist yet"
        stub.Log = NullLog
        stub.OffsetOutOfRangeError = NullOffsetOutOfRange
        stub.AppendResult = NullAppendResult
        sys.modules["storage.log.log"] = stub
        import storage
        storage.log.log = stub
    import replication.replica_manager as rm
    rm.Log = NullLog


def main(argv: list[str] | None = None) -> int:
    install()
    from broker import cli
    # NullLogs have no segments to compact: the cleaner (which walks segments) has nothing to do here
    argv = list(sys.argv[1:] if argv is None else argv) + ["--override", "log.cleaner.enable=false"]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
