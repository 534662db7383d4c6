"""Slow links between real broker processes: a rate cap (tc tbf) on the veth pair of two brokers, each in its own
network namespace (tests/faults/netns.py). Needs root and `ip netns` (skips otherwise)."""
from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import stop_and_check
from tests.cluster.helpers import AckedProducer
from tests.faults.netns import net_cluster  # noqa: F401 (fixture)
from tests.faults.test_partitions import _create_on, _notes, _read_to_high_watermark

pytestmark = pytest.mark.slow       # a real cluster for about a minute: the slow suite (make test-slow, CI)


class _Filler(AckedProducer):
    """Another producer on the same partition, about 400 KB/s of 1 KiB records (acks=1), so that a capped link
    cannot carry what the leader takes in."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(bootstrap, topic, {"acks": 1, "enable.idempotence": False, "linger.ms": 20})
        self.sent = 0

    def _run(self) -> None:
        value = b"f" * 1024
        while not self._stop.is_set():
            for _ in range(40):
                try:
                    self._p.produce(self.topic, value, partition=0)
                    self.sent += 1
                except BufferError:
                    break
            self._p.poll(0.1)


@pytest.mark.timeout(300)
def test_a_follower_behind_a_slow_link_leaves_the_isr_and_rejoins(net_cluster, topic_name):
    """RF=3, min.insync.replicas=2. The link between the leader and one follower is capped at 32 KiB/s each way
    while the partition takes about 400 KB/s: that follower falls behind, and after replica.lag.time.max.ms the
    leader drops it from the ISR (Kafka's rule: not caught up to the log end within the lag time). acks=all produce
    goes on with the other follower. Once the cap is lifted the follower catches up and rejoins the ISR, and every
    acknowledged record is read back once, at its offset."""
    c = net_cluster()
    note = _notes()
    controller = c.admin().list_topics(timeout=10).controller_id
    leader, slow = [i for i in sorted(c.brokers) if i != controller]       # the controller's links stay fast
    _create_on(c, topic_name, [leader, slow, controller])
    with AckedProducer(c.bootstrap, topic_name) as prod, _Filler(c.bootstrap, topic_name) as filler:
        prod.wait_for_more(200)
        c.slow(leader, slow, 32 * 1024)
        note(f"capped {leader} <-> {slow} at 32 KiB/s; {len(prod.acked)} acknowledged")
        deadline = time.monotonic() + 60
        while sorted(c.partition(topic_name).isrs) != sorted([leader, controller]):
            assert time.monotonic() < deadline, f"the slow follower stayed in the ISR: {c.partition(topic_name)}"
            time.sleep(0.2)
        note(f"ISR {sorted(c.partition(topic_name).isrs)}; {len(prod.acked)} acknowledged, {filler.sent} filler")
        prod.wait_for_more(300)         # acks=all with the fast follower alone
        c.heal(leader, slow)
        note(f"cap lifted; {len(prod.acked)} acknowledged")
        c.wait_for_isr(topic_name, 3, timeout=120)
        note(f"ISR {sorted(c.partition(topic_name).isrs)}")
        prod.wait_for_more(100)
    assert prod.failed == 0, prod.errors
    got = [m for m in _read_to_high_watermark(c.bootstrap, topic_name, timeout=120) if m.value() != b"f" * 1024]
    seen = {int(m.value()): m.offset() for m in got}
    assert len(seen) == len(got), "a record was read twice"
    missing = sorted(v for v in prod.acked if v not in seen)
    assert missing == [], f"{len(missing)} acknowledged records lost, first {missing[:5]}"
    assert all(seen[v] == off for v, off in prod.acked.items())
    note(f"{len(prod.acked)} acknowledged records read back; {filler.sent} filler records sent")
    stop_and_check(c)
