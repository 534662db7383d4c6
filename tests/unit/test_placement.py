"""Replica placement (metadata/placement.py): Kafka's round-robin assignment, rack aware when every broker has a rack.
The rack-unaware case is checked against the layout Kafka's AdminUtils documents; the rack-aware one by the
properties Kafka's assignment promises (a replica per rack, leaders and followers spread evenly)."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from metadata.placement import PlacementError, check_assignment, place_replicas, rack_alternated


def test_rack_unaware_matches_kafkas_documented_layout():
    # AdminUtils' example: 5 brokers, 10 partitions, 3 replicas, start index 0: p0 on 0,1,2 ... p5 on 0,2,3 ...
    got = place_replicas({b: None for b in range(5)}, 10, 3, start=0, shift=0)
    assert got[:5] == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1]]
    assert got[5:] == [[0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def test_rack_alternated_broker_order():
    # Kafka's example: racks {0: rack1, 1: rack3, 2: rack3, 3: rack2, 4: rack2, 5: rack1} -> 0, 3, 1, 5, 4, 2
    assert rack_alternated({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}) == \
        [0, 3, 1, 5, 4, 2]


@pytest.mark.parametrize("racks", [
    {1: "a", 2: "b", 3: "c"},
    {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"},
    {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"},
])
@pytest.mark.parametrize("seed", range(5))
def test_rack_aware_puts_each_replica_in_its_own_rack_and_spreads_leaders(racks, seed):
    n = len(racks)
    got = place_replicas(racks, 4 * n, 3, rng=random.Random(seed))
    for replicas in got:
        assert len(set(replicas)) == 3 and len({racks[b] for b in replicas}) == 3
    assert set(Counter(r[0] for r in got).values()) == {4}                   # every broker leads 4 partitions
    replica_counts = Counter(b for r in got for b in r)
    assert set(replica_counts.values()) == {12}                               # and holds 12 replicas


def test_more_replicas_than_racks_still_uses_distinct_brokers():
    got = place_replicas({1: "a", 2: "a", 3: "b", 4: "b"}, 8, 3, rng=random.Random(1))
    for replicas in got:
        assert len(set(replicas)) == 3 and {"a", "b"} <= {({1: "a", 2: "a"}.get(b, "b")) for b in replicas}


def test_partitions_added_later_continue_the_rotation():
    brokers = {b: None for b in range(3)}
    whole = place_replicas(brokers, 6, 2, start=1, shift=0)
    assert place_replicas(brokers, 3, 2, first_partition=3, start=1, shift=0) == whole[3:]


def test_replication_factor_beyond_the_brokers_is_refused_as_kafka_says():
    with pytest.raises(PlacementError, match="The target replication factor of 3 cannot be reached because only 2 "
                                             "broker\\(s\\) are registered"):
        place_replicas({1: None, 2: None}, 1, 3)
    with pytest.raises(PlacementError, match="larger than 0"):
        place_replicas({1: None}, 1, 0)


@pytest.mark.parametrize("assignment, why", [
    ([[1, 2], [2, 1]], None),
    ([[1, 1]], "Duplicate brokers"),
    ([[1, 9]], "Unknown broker(s) in replica assignment: 9."),
    ([[1, 2], [1]], "same number of replicas"),
    ([[]], "empty"),
])
def test_explicit_assignments_are_checked(assignment, why):
    got = check_assignment(assignment, {1: object(), 2: object()})
    assert (got is None) if why is None else (why in got)
