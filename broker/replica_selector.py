"""Follower fetching (KIP-392): which replica a consumer should fetch a partition from.

`replica.selector.class` names the policy, as in Kafka. Unset (Kafka's default) the leader never redirects anyone;
`org.apache.kafka.common.replica.RackAwareReplicaSelector` sends a consumer whose Fetch (v11+) carries a `rack_id`
(librdkafka's `client.rack`) to an in-sync replica in its rack, so that its reads stay in its zone. The leader answers
such a Fetch with `preferred_read_replica` and no records; the client then fetches from that follower, which serves
consumers up to its high watermark.
"""
from __future__ import annotations

from dataclasses import dataclass

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS = (RACK_AWARE,)


@dataclass(frozen=True)
class ReplicaView:
    """Kafka's ReplicaView: a replica's broker (rack None when the broker has no live endpoint), its log end offset
    and how long ago it was last caught up with the leader."""
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int
    has_endpoint: bool = True


def _most_caught_up(view: ReplicaView):
    """ReplicaView.comparator(): by log end offset, then the most recently caught up, then the broker id."""
    return view.log_end_offset, -view.time_since_last_caught_up_ms, view.broker_id


def rack_aware_select(client_rack: str | None, replicas, leader: ReplicaView) -> ReplicaView:
    """Kafka's RackAwareReplicaSelector.select: the leader unless the client names a rack that holds replicas but
    not the leader; then the most caught-up replica of that rack."""
    if not client_rack:
        return leader
    same_rack = [r for r in replicas if r.has_endpoint and r.rack == client_rack]
    if not same_rack or leader in same_rack:
        return leader
    return max(same_rack, key=_most_caught_up)


def load_selector(class_name: str):
    """The select function for a `replica.selector.class` value; None for the default (always the leader).
    Kafka fails to start on a class it cannot load; so does Strata on one it does not implement."""
    name = (class_name or "").strip()
    if not name:
        return None
    if name == RACK_AWARE:
        return rack_aware_select
    raise ValueError(f"replica.selector.class={name!r} is not a replica selector Strata implements; use "
                     f"{RACK_AWARE} or leave it unset (fetch from the leader)")


def preferred_read_replica(select, image, part, client_rack: str | None, fetch_offset: int, now: float) -> int:
    """ReplicaManager.findPreferredReadReplica on a leader: the replica `select` picks among the leader and the
    in-sync followers that hold `fetch_offset`, or -1 when it picks the leader (or a broker without an endpoint)."""
    if select is None or not part.is_leader:
        return -1
    views = []
    for r in part.replicas:
        if r == part.local_broker_id or r not in part.isr:
            continue
        leo = part.follower_end_offsets.get(r, -1)
        if leo < fetch_offset or part.follower_start_offsets.get(r, -1) > fetch_offset:
            continue
        reg = image.brokers.get(r)
        live = reg is not None and not reg.fenced
        caught_up = part.last_caught_up.get(r, 0.0)
        views.append(ReplicaView(r, reg.rack if live else None, leo, int((now - caught_up) * 1000), live))
    me = image.brokers.get(part.local_broker_id)
    leader = ReplicaView(part.local_broker_id, me.rack if me is not None else None, part.log_end_offset, 0)
    views.append(leader)
    chosen = select(client_rack, views, leader)
    return -1 if chosen == leader or not chosen.has_endpoint else chosen.broker_id
