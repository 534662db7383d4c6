"""KIP-392's RackAwareReplicaSelector (broker/replica_selector.py) on a leader Partition: which replica a consumer
with a given rack is sent to, and which followers qualify (in the ISR, holding the fetch offset)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.replica_selector import RACK_AWARE, load_selector, preferred_read_replica, rack_aware_select
from metadata.image import BrokerRegistration, PartitionImage
from replication.partition import Partition
from storage.log.log import Log
from storage.log.log_config import LogConfig
from test_partition import _append


def _image(racks: dict[int, str | None], fenced=()):
    return SimpleNamespace(brokers={b: BrokerRegistration(b, "x", r, (("PLAINTEXT", "h", 9000 + b),), b in fenced)
                                    for b, r in racks.items()})


@pytest.fixture
def leader(tmp_path):
    """Broker 1 (rack a) leads replicas 1, 2 (rack b), 3 (rack b), 4 (rack c, not in the ISR); 5 records."""
    p = Partition("t", 0, Log(tmp_path / "t-0", LogConfig()), local_broker_id=1)
    p.make_leader(PartitionImage((1, 2, 3, 4), (1, 2, 3), 1, 1, 1), 0.0)
    _append(p, 5)
    p.update_follower_fetch_state(2, 4, 1.0)          # behind the leader's end: last caught up at 0.0
    p.update_follower_fetch_state(3, 5, 1.0)          # at the leader's end
    p.update_follower_fetch_state(4, 5, 1.0)
    return p


RACKS = {1: "a", 2: "b", 3: "b", 4: "c"}


def test_rack_aware_selector_picks_the_most_caught_up_replica_in_the_clients_rack(leader):
    select, image = rack_aware_select, _image(RACKS)
    assert preferred_read_replica(select, image, leader, "b", 0, 2.0) == 3     # 3 has more of the log than 2
    assert preferred_read_replica(select, image, leader, "b", 5, 2.0) == 3     # 2 does not hold offset 5
    assert preferred_read_replica(select, image, leader, "a", 0, 2.0) == -1    # the leader's own rack
    assert preferred_read_replica(select, image, leader, None, 0, 2.0) == -1   # no rack: the leader
    assert preferred_read_replica(select, image, leader, "c", 0, 2.0) == -1    # 4 is not in the ISR
    assert preferred_read_replica(select, image, leader, "z", 0, 2.0) == -1    # nobody there
    assert preferred_read_replica(None, image, leader, "b", 0, 2.0) == -1      # replica.selector.class unset
    fenced = _image(RACKS, fenced={3})
    assert preferred_read_replica(select, fenced, leader, "b", 0, 2.0) == 2    # a fenced broker has no endpoint


def test_only_a_leader_redirects(leader):
    leader.make_follower(PartitionImage((1, 2, 3, 4), (1, 2, 3), 2, 2, 2))
    assert preferred_read_replica(rack_aware_select, _image(RACKS), leader, "b", 0, 2.0) == -1


def test_replica_selector_class_values():
    assert load_selector("") is None and load_selector(RACK_AWARE) is rack_aware_select
    with pytest.raises(ValueError, match="is not a replica selector Strata implements"):
        load_selector("com.example.NearestSelector")
