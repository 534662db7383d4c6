"""Replica placement for new partitions: Kafka's round-robin assignment (AdminUtils.assignReplicasToBrokers), rack
aware when every broker has a rack.

- Rack-unaware: partition p's first replica (its preferred leader) is broker (p + start) mod n; the others follow at
  a shift that grows by one every n partitions, so leaders spread evenly and followers of one broker's leaders spread
  over the others.
- Rack-aware: brokers are first interleaved by rack (a1, b1, c1, a2, b2, ...), then the same walk picks, for each
  further replica, the next broker whose rack holds no replica yet (or any rack once every rack has one), and never a
  broker twice (until every broker has one). With as many racks as replicas, each replica sits in its own rack.

`start` and `shift` are random in Kafka (so topics do not all lead on the same broker); tests pass them fixed.
"""
from __future__ import annotations

import random
from typing import Mapping


class PlacementError(ValueError):
    """The replication factor cannot be met (Kafka answers INVALID_REPLICATION_FACTOR)."""


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn: the first broker of each rack (racks sorted), then the second, ..."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[r] for r in sorted(by_rack)]
    return [col[i] for i in range(max(map(len, columns), default=0)) for col in columns if i < len(col)]


def place_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int, *,
                   first_partition: int = 0, start: int | None = None, shift: int | None = None,
                   rng: random.Random | None = None) -> list[list[int]]:
    """Replica lists (preferred leader first) for partitions first_partition .. first_partition + partitions - 1.
    `brokers` maps each usable (registered, unfenced) broker id to its rack or None."""
    if replication_factor <= 0:
        raise PlacementError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise PlacementError(f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                             f"factor of {replication_factor} cannot be reached because only {len(brokers)} "
                             f"broker(s) are registered.")
    rng = rng or random.Random()
    rack_aware = all(r is not None for r in brokers.values())
    order = rack_alternated(brokers) if rack_aware else sorted(brokers)
    n = len(order)
    start = rng.randrange(n) if start is None else start
    shift = rng.randrange(n) if shift is None else shift
    racks = len(set(brokers.values())) if rack_aware else 0
    out = []
    for p in range(max(0, first_partition), max(0, first_partition) + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [order[first]]
        if not rack_aware:
            replicas += [order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            used_racks, k = {brokers[order[first]]}, 0
            while len(replicas) < replication_factor:
                b = order[_replica_index(first, shift * racks, k, n)]
                k += 1
                if (brokers[b] not in used_racks or len(used_racks) == racks) and \
                        (b not in replicas or len(replicas) == n):
                    replicas.append(b)
                    used_racks.add(brokers[b])
        out.append(replicas)
    return out


def check_assignment(assignment: list[list[int]], registered) -> str | None:
    """Why an explicit replica assignment is invalid (Kafka's INVALID_REPLICA_ASSIGNMENT messages), or None."""
    sizes = {len(a) for a in assignment}
    for a in assignment:
        if not a:
            return "The replica assignment is empty."
        if len(set(a)) != len(a):
            return f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, a))}"
        unknown = [b for b in a if b not in registered]
        if unknown:
            return f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
    if len(sizes) > 1:
        return "All partitions should have the same number of replicas"
    return None
