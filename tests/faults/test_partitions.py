"""Network partitions between real broker processes, each in its own network namespace (tests/faults/netns.py): the
harness itself; a partition leader cut off from its followers while it still reaches the store and the clients
(the leader a follower of the controller, or the controller itself); the tests/faults workload and checker under a
seeded nemesis of network faults; the controller cut off from everything (no healthy broker may be fenced at the
failover), and cut off from the brokers only (it resigns rather than fence them). Needs root and `ip netns` (skips
otherwise)."""
from __future__ import annotations

import re
import socket
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.cluster.conftest import stop_and_check
from tests.cluster.helpers import AckedProducer, replica_contents
from tests.faults.netns import CLIENT, PREFIX, STORE, ip, net_cluster, network_faults  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow       # about 3 minutes of real clusters: the slow suite (make test-slow, CI)
NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND = 6, 7, 19, 20


def _client_listener(c) -> tuple[socket.socket, int]:
    """A listening socket on the client node's address (the test's own namespace), so brokers can probe it."""
    s = socket.socket()
    s.bind((c.addr(CLIENT), 0))
    s.listen(64)
    return s, s.getsockname()[1]


@pytest.mark.timeout(180)
def test_harness_cuts_and_heals_links(net_cluster):
    """cut(1, 2) stops both directions between brokers 1 and 2 only; heal restores them; cut to the store, isolate,
    one-way cuts, slow links and the nemesis fault kinds do what they say; teardown leaves no namespace or link
    behind."""
    c = net_cluster(s3=True)
    mesh, k = c.mesh, c.mesh.k
    assert len(mesh.namespaces()) == 4                      # brokers 1..3 and the store; the client is this one
    srv, cport = _client_listener(c)
    nodes = [1, 2, 3, STORE, CLIENT]

    def reach(a, b) -> bool:
        return c.probe(a, b, cport if b == CLIENT else None, timeout=1)

    def unreachable() -> set:
        return {(a, b) for a in nodes for b in nodes if a != b and not reach(a, b)}
    try:
        assert unreachable() == set()

        c.cut(1, 2)
        t = time.monotonic()
        assert not reach(1, 2) and not reach(2, 1)
        assert time.monotonic() - t >= 1.8, "a cut must drop (time out), not refuse"
        assert unreachable() == {(1, 2), (2, 1)}                # 1 and 2 still reach 3, the store and the client
        c.heal(1, 2)
        assert unreachable() == set()
        c.wait_for_brokers(3)                                   # the cluster is whole again

        c.cut(1, STORE)
        assert unreachable() == {(1, STORE), (STORE, 1)}
        c.heal_all()

        c.isolate(3)
        assert unreachable() == {(a, b) for a in nodes for b in nodes if a != b and 3 in (a, b)}
        c.heal_all()
        assert unreachable() == set() and mesh.cuts == set()

        # one way: datagrams 1 -> 2 are dropped, 2 -> 1 arrive
        c.cut(1, 2, one_way=True)
        got = {}
        for src, dst in ((1, 2), (2, 1)):
            rx = mesh.socket(dst, socket.SOCK_DGRAM)
            rx.bind((c.addr(dst), 0))
            rx.settimeout(1)
            tx = mesh.socket(src, socket.SOCK_DGRAM)
            tx.sendto(b"x", rx.getsockname())
            try:
                got[(src, dst)] = rx.recvfrom(16)[0]
            except TimeoutError:
                got[(src, dst)] = None
            rx.close(), tx.close()
        assert got == {(1, 2): None, (2, 1): b"x"}
        c.heal(1, 2)

        # slow: 1 -> 2 capped at 64 KiB/s, the other links at full speed; heal lifts the cap
        c.slow(1, 2, 64 * 1024, one_way=True)
        slow, fast, back = (_transfer_seconds(mesh, a, b, 256 * 1024) for a, b in ((1, 2), (2, 1), (1, 3)))
        assert 2.5 < slow < 20 and fast < 1.5 and back < 1.5, (slow, fast, back)
        c.heal(1, 2)
        assert _transfer_seconds(mesh, 1, 2, 256 * 1024) < 1.5 and mesh.slowed == set()

        faults = network_faults(c)
        assert sorted(faults) == ["cut_store", "isolate", "partition_leader", "slow_links"]
        f = faults["slow_links"](2)
        f.apply()
        assert mesh.slowed == {(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b and 2 in (a, b)}
        assert unreachable() == set()
        f.heal()
        assert mesh.slowed == set()
        expected = {"partition_leader": {(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b and 2 in (a, b)},
                    "isolate": {(a, b) for a in nodes for b in nodes if a != b and 2 in (a, b)},
                    "cut_store": {(2, STORE), (STORE, 2)}}
        for kind, cut in expected.items():
            f = faults[kind](2)
            f.apply()
            assert unreachable() == cut, kind
            f.heal()
            assert unreachable() == set(), kind
        c.wait_for_brokers(3)
    finally:
        srv.close()
    c.close()
    assert [l for l in ip("netns", "list").stdout.splitlines() if l.startswith(mesh.tag)] == []
    assert f"sn{k}x" not in ip("-o", "link", "show").stdout
    assert mesh.tag.startswith(PREFIX)


def _transfer_seconds(mesh, src, dst, size: int) -> float:
    """Seconds to send `size` bytes over one TCP connection from src to dst (until dst has read them all)."""
    import threading
    srv = mesh.socket(dst)
    srv.bind((mesh.addr(dst), 0))
    srv.listen(1)
    received = []

    def read() -> None:
        conn, _ = srv.accept()
        n = 0
        while n < size:
            chunk = conn.recv(65536)
            if not chunk:
                break
            n += len(chunk)
        received.append(n)
        conn.close()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    tx = mesh.socket(src)
    tx.settimeout(30)
    started = time.monotonic()
    try:
        tx.connect(srv.getsockname())
        tx.sendall(b"x" * size)
        reader.join(60)
        return time.monotonic() - started
    finally:
        tx.close()
        srv.close()
        assert received == [size], received


def _notes():
    """A `note(what)` that prints what happened with the seconds since the test began (shown when it fails)."""
    t0 = time.monotonic()

    def note(what: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {what}", flush=True)
    return note


def _create_on(c, topic: str, replicas: list[int]) -> None:
    """One partition on `replicas` (the first leads), min.insync.replicas=2, all three in sync."""
    admin = c.admin()                   # kept: the futures fail with _DESTROY if the client is collected first
    fs = admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas],
                                       config={"min.insync.replicas": "2"})])
    fs[topic].result(timeout=30)
    c.wait_for_isr(topic, 3)


def _raw_produce(bootstrap: str, topic: str, value: bytes, timeout_ms: int = 5000) -> int:
    """One acks=all Produce straight to `bootstrap` (whatever leader the client would pick): its error code."""
    from protocol.record_batch import build_batch
    from tests.integration.rawclient import RawClient
    with RawClient(bootstrap, timeout=timeout_ms / 1000 + 10) as raw:
        resp = raw.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": timeout_ms, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, value)])}]}]})
        return resp.responses[0].partition_responses[0].error_code


def _read_to_high_watermark(bootstrap: str, topic: str, timeout: float = 60) -> list:
    """Every record of partition 0 from the beginning to its high watermark (read_committed is not needed: no
    transactions), in offset order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        _, hw = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list = []
        deadline = time.monotonic() + timeout
        while (out[-1].offset() + 1 if out else 0) < hw:
            assert time.monotonic() < deadline, f"read {len(out)} records, not up to the high watermark {hw}"
            for m in c.consume(500, 1):
                assert m.error() is None, m.error()
                out.append(m)
        return out
    finally:
        c.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("leader_is_controller", [False, True], ids=["leader-not-controller", "leader-is-controller"])
def test_leader_partitioned_from_its_followers(net_cluster, topic_name, leader_is_controller):
    """RF=3, min.insync.replicas=2, an idempotent acks=all producer in the client node. The leader's links to both
    followers are cut; it still reaches the store (the metadata log) and the clients. An acks=all produce sent to it
    is never acknowledged (no follower can have it), the controller reacts (a new leader among the followers, or an
    ISR of the leader alone), and after healing the old leader's replica matches the others and rejoins the ISR;
    every acknowledged record is read back exactly once, at its offset. A refused record is read back never if the
    refusal was definite (NOT_ENOUGH_REPLICAS: not appended) or the leader was replaced (it truncates what only it
    had), at most once otherwise: NOT_ENOUGH_REPLICAS_AFTER_APPEND or a timeout leaves the record in the leader's
    log, and it is committed when the followers come back (Kafka's semantics: an ambiguous failure).

    leader-not-controller: the controller is one of the followers, so the leader loses its heartbeats and is fenced,
    as in Kafka. leader-is-controller: the cut-off leader keeps the controller lease (it reaches the store), so it is
    the followers that lose their heartbeats."""
    c = net_cluster()
    note = _notes()
    controller = c.admin().list_topics(timeout=10).controller_id
    leader = controller if leader_is_controller else min(i for i in c.brokers if i != controller)
    followers = [i for i in sorted(c.brokers) if i != leader]
    _create_on(c, topic_name, [leader, *followers])
    c.wait_every_broker(lambda md: md.topics[0].error_code == 0 and md.topics[0].partitions[0].leader_id == leader,
                        [topic_name], 30, f"{topic_name} led by {leader}")
    note(f"controller {controller}, leader {leader}, followers {followers}")

    refused: dict[bytes, int] = {}      # value -> error code
    with AckedProducer(c.bootstrap, topic_name) as prod:
        prod.wait_for_more(200)
        for f in followers:
            c.cut(leader, f)
        note(f"cut {leader} from {followers}; {len(prod.acked)} acknowledged so far")

        # straight to the cut-off leader, at once: it cannot have the followers' acknowledgement
        err = refused[b"refused-1"] = _raw_produce(c.brokers[leader].bootstrap, topic_name, b"refused-1")
        note(f"acks=all produce to the cut-off leader: error {err}")
        assert err in (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
                       NOT_ENOUGH_REPLICAS_AFTER_APPEND), f"acknowledged by a leader cut off from its followers ({err})"

        deadline = time.monotonic() + 60
        while True:
            p = c.partition(topic_name)
            if p.leader in followers or list(p.isrs) == [leader]:
                break
            assert time.monotonic() < deadline, f"no reaction to the partition: {p}\n{c.logs()}"
            time.sleep(0.2)
        moved = p.leader in followers
        note(f"controller reacted: leader {p.leader}, ISR {list(p.isrs)}; {len(prod.acked)} acknowledged")

        err = refused[b"refused-2"] = _raw_produce(c.brokers[leader].bootstrap, topic_name, b"refused-2")
        note(f"acks=all produce to the old leader after that: error {err}")
        assert err in ((NOT_LEADER_OR_FOLLOWER,) if moved else (NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                                                 REQUEST_TIMED_OUT))
        if moved:
            prod.wait_for_more(200)         # the new leader's ISR is both followers: acks=all goes on
            note(f"the new leader {p.leader} acknowledged; {len(prod.acked)} in all")
        else:
            before = len(prod.acked)
            time.sleep(3)
            note(f"leader {leader} alone in the ISR; {len(prod.acked)} acknowledged")
            assert len(prod.acked) == before, "acks=all acknowledged with an ISR below min.insync.replicas"

        for f in followers:
            c.heal(leader, f)
        note("healed")
        c.wait_for_isr(topic_name, 3, timeout=90)
        note(f"ISR {c.partition(topic_name).isrs}, leader {c.leader(topic_name)}")
        prod.wait_for_more(100)
    note(f"{len(prod.acked)} acknowledged, {prod.failed} failed")

    got = _read_to_high_watermark(c.bootstrap, topic_name)
    values = [m.value() for m in got]
    back = [v for v in values if v in refused]
    note(f"refused: {refused}; read back: {back}")
    never = {v for v, e in refused.items() if moved or e == NOT_ENOUGH_REPLICAS}
    assert not never & set(back), f"read back although refused for good: {never & set(back)}"
    assert len(back) == len(set(back)), f"a refused record read back twice: {back}"
    got = [m for m in got if m.value() not in refused]
    values = [m.value() for m in got]
    assert prod.failed == 0
    offsets = [m.offset() for m in got]
    assert offsets == sorted(offsets)
    seen = {int(v): m.offset() for v, m in zip(values, got)}
    assert len(seen) == len(got), "a record was read twice"
    missing = sorted(v for v in prod.acked if v not in seen)
    assert missing == [], f"{len(missing)} acknowledged records lost, first {missing[:5]}\n{c.logs()}"
    assert all(seen[v] == off for v, off in prod.acked.items())

    logs = {i: b.log_text() for i, b in c.brokers.items()}
    stop_and_check(c)
    copies = replica_contents(c, topic_name)
    for i, copy in copies.items():
        assert not never & {v for _, v in copy}, f"broker {i} kept a record refused for good"
    hw = max(prod.acked.values()) + 1
    below = {i: [r for r in copy if r[0] < hw] for i, copy in copies.items()}
    assert all(b == below[leader] for b in below.values()), "the replicas differ below the high watermark"
    if moved:
        truncated = [l for l in logs[leader].splitlines() if f"{topic_name}-0 diverged" in l]
        note(f"old leader's truncation: {truncated[:2]}")
        assert truncated, "the old leader did not truncate what it appended while cut off"


@pytest.mark.timeout(300)
def test_workload_under_network_faults(net_cluster, topic_name, tmp_path):
    """The tests/faults workload (idempotent acks=all producers, consumers, a final read) on RF=3 with the metadata log
    in S3, under a seeded nemesis of network faults: a broker cut from the other brokers, isolated from everything,
    cut from the store. The checker must find nothing lost, duplicated, reordered or inconsistent."""
    import os

    from tests.cluster.helpers import create
    from tests.faults import workload
    partitions = 4
    c = net_cluster(s3=True)
    create(c, topic_name, partitions=partitions, configs={"min.insync.replicas": "2"})
    seed = int(os.environ.get("STRATA_NEMESIS_SEED", "26"))
    workload.run_and_judge(c, topic_name, partitions, network_faults(c), tmp_path, duration=30, seed=seed,
                           quiet=(1.0, 3.0), length=(2.0, 8.0), rate=100, settle_timeout=60)
    stop_and_check(c)


@pytest.mark.timeout(180)
def test_isolated_controller_fails_over_without_fencing_healthy_brokers(net_cluster):
    """The active controller is cut from everything (brokers, store, clients): another broker takes the lease after
    controller.quorum.fetch.timeout.ms and fences the isolated one after a session; the brokers that can reach it
    must not be fenced (KAFKA-14392: a heartbeat stuck on the old controller gives up within half a session)."""
    c = net_cluster(s3=True)
    ctrl = c.admin().list_topics(timeout=10).controller_id
    marks = {i: len(b.log_text()) for i, b in c.brokers.items()}
    c.isolate(ctrl)
    time.sleep(10)                          # lease takeover (2 s) plus more than two sessions (3 s)
    c.heal_all()
    c.wait_for_brokers(3)
    new = {i: b.log_text()[marks[i]:] for i, b in c.brokers.items() if i != ctrl}
    assert any("is the active controller" in text for text in new.values()), "no broker took over the controller"
    fenced = {int(m) for text in new.values() for m in re.findall(r"WARNING strata\.controller: broker (\d+) fenced",
                                                                 text)}
    assert ctrl in fenced, "the isolated controller was not fenced"
    assert fenced == {ctrl}, f"healthy brokers fenced: {sorted(fenced - {ctrl})}\n{c.logs()}"


@pytest.mark.timeout(240)
def test_controller_cut_from_the_brokers_but_not_the_store_resigns(net_cluster, topic_name):
    """The active controller loses its links to both other brokers; it still reaches the store (S3 in its own
    namespace) and the clients, so it keeps renewing its lease. The two brokers report it unreachable in the store;
    at their session expiry it resigns instead of fencing them (metadata/reachability.py), one of them takes the
    lease, and that one fences the cut-off node. Meanwhile an idempotent acks=all producer (RF=3,
    min.insync.replicas=2) keeps being acknowledged once leadership is on the healthy side, and after healing every
    acknowledged record is read back once, at its offset. On the old code the controller fenced both healthy brokers
    and kept the cluster on itself alone."""
    c = net_cluster(s3=True)
    note = _notes()
    ctrl = c.admin().list_topics(timeout=10).controller_id
    others = [i for i in sorted(c.brokers) if i != ctrl]
    _create_on(c, topic_name, [ctrl, *others])
    marks = {i: len(b.log_text()) for i, b in c.brokers.items()}
    with AckedProducer(c.bootstrap, topic_name) as prod:
        prod.wait_for_more(200)
        for o in others:
            c.cut(ctrl, o)
        note(f"cut controller {ctrl} (also the leader) from {others}; {len(prod.acked)} acknowledged")
        deadline = time.monotonic() + 60
        while True:
            new = {i: b.log_text()[marks[i]:] for i, b in c.brokers.items()}
            taken = [i for i in others if "is the active controller" in new[i]]
            if taken and c.partition(topic_name).leader in others:
                break
            assert time.monotonic() < deadline, f"no healthy broker took over\n{c.logs()}"
            time.sleep(0.5)
        note(f"broker {taken[0]} is the controller, leader {c.leader(topic_name)}; {len(prod.acked)} acknowledged")
        prod.wait_for_more(200)         # the two healthy brokers are a big enough ISR: acks=all goes on
        note(f"{len(prod.acked)} acknowledged on the healthy side")
        for o in others:
            c.heal(ctrl, o)
        c.wait_for_brokers(3)
        c.wait_for_isr(topic_name, 3, timeout=90)
        prod.wait_for_more(100)
    note(f"healed; {len(prod.acked)} acknowledged, {prod.failed} failed")

    new = {i: b.log_text()[marks[i]:] for i, b in c.brokers.items()}
    assert f"node {ctrl} resigns as controller" in new[ctrl], new[ctrl][-3000:]
    fenced = {int(m) for text in new.values() for m in re.findall(r"WARNING strata\.controller: broker (\d+) fenced",
                                                                 text)}
    assert fenced == {ctrl}, f"fenced: {sorted(fenced)}, expected only the cut-off controller {ctrl}\n{c.logs()}"
    got = _read_to_high_watermark(c.bootstrap, topic_name)
    seen = {int(m.value()): m.offset() for m in got}
    assert len(seen) == len(got), "a record was read twice"
    missing = sorted(v for v in prod.acked if v not in seen)
    assert missing == [], f"{len(missing)} acknowledged records lost, first {missing[:5]}"
    assert all(seen[v] == off for v, off in prod.acked.items())
    assert prod.failed == 0
    stop_and_check(c)
