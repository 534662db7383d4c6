"""A randomized, stateful test (hypothesis) of one partition's transaction state against a model: producers write
transactional and plain batches, coordinators end transactions with markers (some from fenced epochs, refused), the
high watermark advances, the log is truncated (a follower's divergent tail), crashes and is reopened, and the cleaner
compacts it. After every step:

- the last stable offset is the model's: the first offset of the earliest open or unreplicated transaction, capped at
  the high watermark;
- the producer state's open transactions are the model's (also after a crash: rebuilt from snapshot and log);
- the aborted transactions the indexes give for the whole log are exactly the model's aborted ones still in the log;
- what a read_committed consumer sees below the LSO (records outside aborted transactions, via the index) is the
  model's committed data, also after compaction (latest committed value per key).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from protocol.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT, iter_batches, split_and_validate
from protocol.records import build_records_batch, iter_records
from storage.cleaner.cleaner import CleanerConfig
from storage.cleaner.log_cleaner import LogCleaner
from storage.log.log import Log
from storage.log.log_config import LogConfig

PIDS = (1, 2, 3)
KEYS = (b"a", b"b", b"c")
T0 = 1_700_000_000_000


class Clock:
    now = T0

    def __call__(self) -> int:
        return self.now


class TxnLogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.clock = Clock()
        self.compacted = False
        self.log = self._open()
        # the model: what was written, in offset order
        self.events: list[tuple] = []       # ("data", offset, pid, key, value, transactional) | ("marker", off, pid, commit)
        self.epoch = {pid: 0 for pid in PIDS}
        self.seq = {pid: 0 for pid in PIDS}

    def _open(self) -> Log:
        cfg = LogConfig(cleanup_policy="compact", segment_bytes=600, delete_retention_ms=10**12)
        return Log(self.dir / "t-0", cfg, time_ms=self.clock)

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- rules ---------------------------------------------------------------------------------------------------
    @rule(pid=st.sampled_from(PIDS), key=st.sampled_from(KEYS), n=st.integers(1, 3))
    def transactional_batch(self, pid, key, n):
        values = [b"%d-%d-%d" % (pid, self.epoch[pid], self.seq[pid] + i) for i in range(n)]
        buf = bytearray(build_records_batch([(key, v) for v in values], timestamp_ms=T0, producer_id=pid,
                                            producer_epoch=self.epoch[pid], base_sequence=self.seq[pid],
                                            attributes=TRANSACTIONAL_BIT))
        base = self.log.log_end_offset
        r = self.log.append_as_leader(buf, split_and_validate(buf, 10**8), 0)
        assert r.error_code == 0, r
        self.seq[pid] += n
        self.events += [("data", base + i, pid, key, v, True, self.seq[pid] - n + i, self.epoch[pid])
                        for i, v in enumerate(values)]

    @rule(key=st.sampled_from(KEYS))
    def plain_batch(self, key):
        base = self.log.log_end_offset
        buf = bytearray(build_records_batch([(key, b"plain-%d" % base)], timestamp_ms=T0))
        assert self.log.append_as_leader(buf, split_and_validate(buf, 10**8), 0).error_code == 0
        self.events.append(("data", base, -1, key, b"plain-%d" % base, False, -1, -1))

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans(), stale=st.booleans())
    def marker(self, pid, commit, stale):
        if stale and self.epoch[pid] > 0:
            r = self.log.append_marker(pid, self.epoch[pid] - 1, 0, commit, 0)
            assert r.error_code != 0                     # a fenced epoch writes nothing
            return
        offset = self.log.log_end_offset
        assert self.log.append_marker(pid, self.epoch[pid], 0, commit, 0).error_code == 0
        self.events.append(("marker", offset, pid, commit, self.epoch[pid]))

    @rule(pid=st.sampled_from(PIDS))
    def fence(self, pid):
        """InitProducerId of a new instance: the coordinator aborts with the bumped epoch; sequences restart."""
        self.epoch[pid] += 1
        self.seq[pid] = 0
        self.marker(pid, commit=False, stale=False)

    @rule(data=st.data())
    def advance_high_watermark(self, data):
        hw = data.draw(st.integers(self.log.high_watermark, self.log.log_end_offset))
        self.log.update_high_watermark(hw)

    @precondition(lambda self: not self.compacted)
    @rule(data=st.data())
    def truncate(self, data):
        """A follower drops a divergent tail above its high watermark (on a batch boundary, as truncation is)."""
        hw, leo = self.log.high_watermark, self.log.log_end_offset
        if hw == leo:
            return
        bounds = sorted({h.base_offset for v in self.log.read(hw, 1 << 30, max_offset=leo)
                         for _, h in iter_batches(v) if h.base_offset >= hw})
        if not bounds:
            return
        at = data.draw(st.sampled_from(bounds))
        self.log.truncate_to(at)
        self.events = [e for e in self.events if e[1] < at]
        for pid in PIDS:      # the producer goes on after what the log kept of its current epoch (a client retries)
            self.epoch[pid] = max((e[4] for e in self.events if e[0] == "marker" and e[2] == pid), default=0)
            seqs = [e[6] + 1 for e in self.events if e[0] == "data" and e[2] == pid and e[7] == self.epoch[pid]]
            self.seq[pid] = max(seqs, default=0)

    @rule()
    def crash_and_reopen(self):
        """kill -9 with everything replicated (a restarted broker gets its high watermark back from the checkpoint:
        transactions completed before the last producer snapshot count as stable, as in Kafka)."""
        self.log.update_high_watermark(self.log.log_end_offset)
        hw = self.log.high_watermark
        self.log.flush()
        for seg in self.log.segments():                  # no close(): drop the descriptors only
            seg.release()
        self.log._closed = True
        self.log = self._open()
        self.log.update_high_watermark(hw)

    @rule()
    def roll_and_clean(self):
        self.log.roll()
        c = LogCleaner(CleanerConfig(), logs=lambda: [("t-0", self.log)])
        if c.clean_once() is not None:
            self.compacted = True

    # ---- the model -----------------------------------------------------------------------------------------------
    def replay(self):
        """(open {pid: first offset}, completed [(pid, first, marker, commit)], aborted offsets)."""
        open_: dict[int, int] = {}
        members: dict[int, list[int]] = {}
        completed, dropped = [], set()
        for e in self.events:
            if e[0] == "data":
                _, off, pid, _k, _v, txn, _s, _e = e
                if txn:
                    open_.setdefault(pid, off)
                    members.setdefault(pid, []).append(off)
            else:
                _, off, pid, commit, _epoch = e
                first = open_.pop(pid, None)
                if first is not None:
                    completed.append((pid, first, off, commit))
                    if not commit:
                        dropped.update(members.get(pid, ()))
                members[pid] = []
        return open_, completed, dropped

    def expected_lso(self) -> int:
        hw = self.log.high_watermark
        open_, completed, _ = self.replay()
        firsts = list(open_.values()) + [first for _, first, marker, _ in completed if marker >= hw]
        first = min(firsts) if firsts else None
        return hw if first is None or first >= hw else max(first, self.log.log_start_offset)

    # ---- invariants ----------------------------------------------------------------------------------------------
    @invariant()
    def last_stable_offset_is_the_models(self):
        assert self.log.last_stable_offset == self.expected_lso()
        assert self.log.last_stable_offset <= self.log.high_watermark

    @invariant()
    def open_transactions_are_the_models(self):
        assert self.log.producer_state.ongoing == self.replay()[0]

    @invariant()
    def index_lists_the_aborted_transactions(self):
        got = {(a.producer_id, a.first_offset, a.last_offset)
               for a in self.log.collect_aborted_transactions(self.log.log_start_offset, self.log.log_end_offset)}
        want = {(pid, first, marker) for pid, first, marker, commit in self.replay()[1] if not commit}
        if not self.compacted:
            assert got == want
        else:       # compaction drops entries whose records are all gone; it never invents one
            assert got <= want

    @invariant()
    def read_committed_sees_the_committed_data(self):
        lso = self.log.last_stable_offset
        aborted = self.log.collect_aborted_transactions(self.log.log_start_offset, lso)
        seen: dict[int, tuple[bytes, bytes]] = {}
        for v in self.log.read(self.log.log_start_offset, 1 << 30, max_offset=lso):
            for pos, h in iter_batches(v):
                if h.attributes & CONTROL_BIT:
                    continue
                if h.attributes & TRANSACTIONAL_BIT and any(
                        a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                        for a in aborted):
                    continue
                for r in iter_records(v[pos:pos + h.size]):
                    seen[r.offset] = (r.key, r.value)
        dropped = self.replay()[2]
        expected = {e[1]: (e[3], e[4]) for e in self.events if e[0] == "data" and e[1] < lso and e[1] not in dropped}
        if not self.compacted:
            assert seen == expected
        else:       # the latest committed value of each key survives compaction, nothing aborted reappears
            latest, by_key = {}, {}
            for o in sorted(expected):
                latest[expected[o][0]] = expected[o]
            for o in sorted(seen):
                by_key[seen[o][0]] = seen[o]
            assert by_key == latest
            assert set(seen) <= set(expected)


def _settings(examples: int, steps: int) -> settings:
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


TxnLogMachine.TestCase.settings = _settings(25, 30)
test_partition_transaction_state = TxnLogMachine.TestCase


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_partition_transaction_state_long():
    run_state_machine_as_test(TxnLogMachine, settings=_settings(600, 80))   # ~70 s, 48,000 steps: the CI budget
