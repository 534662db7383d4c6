"""Server-side assignors of KIP-848 consumer groups (Kafka's UniformAssignor and RangeAssignor in group-coordinator's
consumer package): pure functions from members' subscriptions and topic sizes to a target assignment, apart from the
coordinator (broker/groups/consumer/consumer_group.py), which picks one per group by name from ASSIGNORS.
"""
from __future__ import annotations

from broker.groups.consumer.state import Assignment


def uniform_assign(subscriptions: dict[str, set], topics: dict,
                   current: dict[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's UniformAssignor in spirit: every partition of the subscribed topics goes to a member subscribed to its
    topic, member loads differ by at most one wherever subscriptions allow, and partitions stay where they are
    (current target) unless balance requires a move."""
    owned: dict[str, set] = {m: set() for m in subscriptions}
    taken = set()
    for m in sorted(subscriptions):
        for topic_id, parts in current.get(m, {}).items():
            if topic_id in subscriptions[m] and topic_id in topics:
                for p in parts:
                    if p < topics[topic_id] and (topic_id, p) not in taken:
                        taken.add((topic_id, p))
                        owned[m].add((topic_id, p))
    if subscriptions and len({frozenset(s & topics.keys()) for s in subscriptions.values()}) == 1:
        return _uniform_homogeneous(subscriptions, topics, owned)
    eligible = {t: sorted(m for m, subs in subscriptions.items() if t in subs) for t in topics}
    for topic_id in sorted(topics, key=str):
        cands = eligible[topic_id]
        if not cands:
            continue
        for p in range(topics[topic_id]):
            if (topic_id, p) not in taken:
                m = min(cands, key=lambda c: (len(owned[c]), c))
                owned[m].add((topic_id, p))
                taken.add((topic_id, p))
    # Balance: move partitions from the most to the least loaded eligible members until no move helps.
    while True:
        moved = False
        for src in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[src], key=lambda x: (str(x[0]), x[1]), reverse=True):
                dsts = [m for m in eligible[tp[0]] if m != src and len(owned[m]) + 1 < len(owned[src])]
                if dsts:
                    dst = min(dsts, key=lambda c: (len(owned[c]), c))
                    owned[src].discard(tp)
                    owned[dst].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return {m: _group_by_topic(tps) for m, tps in owned.items()}


def _uniform_homogeneous(subscriptions: dict[str, set], topics: dict, owned: dict[str, set]) -> dict[str, Assignment]:
    """Everyone subscribes to the same topics: quotas of floor/ceil(P/M), the larger ones to the members that hold
    the most already; members keep what fits their quota and the rest is dealt out to those below it."""
    members = sorted(subscriptions, key=lambda m: (-len(owned[m]), m))
    subscribed = next(iter(subscriptions.values())) & topics.keys()
    everything = [(t, p) for t in sorted(subscribed, key=str) for p in range(topics[t])]
    base, extra = divmod(len(everything), len(members))
    free = set(everything)
    for i, m in enumerate(members):
        quota = base + (1 if i < extra else 0)
        keep = sorted(owned[m], key=lambda x: (str(x[0]), x[1]))[:quota]
        owned[m] = set(keep)
        free.difference_update(keep)
    pool = sorted(free, key=lambda x: (str(x[0]), x[1]), reverse=True)
    for i, m in enumerate(members):
        quota = base + (1 if i < extra else 0)
        while len(owned[m]) < quota and pool:
            owned[m].add(pool.pop())
    return {m: _group_by_topic(tps) for m, tps in owned.items()}


def range_assign(subscriptions: dict[str, set], topics: dict, current: dict[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's RangeAssignor: per topic, the subscribed members (sorted by member id) get contiguous ranges, the
    first `partitions % members` one partition more; co-partitioned topics line up."""
    out: dict[str, set] = {m: set() for m in subscriptions}
    for topic_id, n in sorted(topics.items(), key=lambda kv: str(kv[0])):
        members = sorted(m for m, subs in subscriptions.items() if topic_id in subs)
        if not members:
            continue
        quota, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = quota + (1 if i < extra else 0)
            out[m].update((topic_id, p) for p in range(start, start + count))
            start += count
    return {m: _group_by_topic(tps) for m, tps in out.items()}


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}


def _group_by_topic(tps) -> Assignment:
    out: dict = {}
    for topic_id, p in tps:
        out.setdefault(topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}
