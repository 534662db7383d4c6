"""storage.log.leader_epoch.LeaderEpochFileCache: Kafka checkpoint format and OffsetsForLeaderEpoch semantics."""
from __future__ import annotations

import pytest

from storage.log.leader_epoch import LeaderEpochFileCache


def test_assign_and_checkpoint_format(tmp_path):
    c = LeaderEpochFileCache(tmp_path)
    assert c.latest_epoch() is None and not (tmp_path / "leader-epoch-checkpoint").exists()
    assert c.assign(0, 0) and not c.assign(0, 10)                 # same epoch later: no-op
    assert c.assign(2, 10) and c.assign(5, 30)
    assert c.dirty and not (tmp_path / "leader-epoch-checkpoint").exists()   # the log flushes it (roll, close)
    c.flush()
    assert not c.dirty and (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n5 30\n"
    assert not list(tmp_path.glob("*.tmp"))
    assert LeaderEpochFileCache(tmp_path).entries == c.entries
    # A conflicting assignment drops entries with a larger/equal epoch or start offset.
    assert c.assign(3, 20)
    assert c.entries == [(0, 0), (2, 10), (3, 20)]
    assert c.epoch_for_offset(15) == 2 and c.epoch_for_offset(25) == 3


def test_end_offset_for(tmp_path):
    c = LeaderEpochFileCache(tmp_path)
    assert c.end_offset_for(0, 100) == (-1, -1)
    c.assign(1, 0)
    c.assign(3, 40)
    c.assign(6, 90)
    assert c.end_offset_for(6, 120) == (6, 120)                   # latest epoch ends at the log end
    assert c.end_offset_for(3, 120) == (3, 90)
    assert c.end_offset_for(4, 120) == (3, 90)                    # unknown epoch: the largest below it
    assert c.end_offset_for(0, 120) == (0, 0)                     # below the first epoch
    assert c.end_offset_for(7, 120) == (-1, -1)
    assert c.end_offset_for(-1, 120) == (-1, -1)


def test_truncation(tmp_path):
    c = LeaderEpochFileCache(tmp_path)
    for epoch, start in [(1, 0), (3, 40), (6, 90)]:
        c.assign(epoch, start)
    c.truncate_from_end(90)
    assert c.entries == [(1, 0), (3, 40)]
    c.truncate_from_start(50)
    assert c.entries == [(3, 50)]
    assert LeaderEpochFileCache(tmp_path).entries == [(3, 50)]
    c.clear()
    assert LeaderEpochFileCache(tmp_path).entries == []


def test_malformed_checkpoint_is_reported(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n1 0\n")
    with pytest.raises(ValueError):
        LeaderEpochFileCache(tmp_path)
