"""A three-broker cluster of real processes: metadata through the object store, replication with acks=all,
failover after kill -9, and the controller moving when its broker dies."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from moto_server import moto_server  # noqa: F401  (fixture)
from tests.cluster.helpers import AckedProducer, consume_all, create, kill_leaders, read_back_once_in_order, replica_contents
from tests.integration.helpers import records


def test_cluster_names_its_controller_and_every_broker(cluster):
    admin = cluster.admin()                     # kept: a collected AdminClient fails its pending futures
    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    assert md.controller_id in (1, 2, 3)
    # DescribeCluster names the active controller too
    desc = admin.describe_cluster().result(timeout=10)
    assert desc.controller.id == md.controller_id and sorted(n.id for n in desc.nodes) == [1, 2, 3]


def test_topic_created_through_any_broker_is_replicated_with_acks_all(cluster, topic_name):
    md = cluster.admin().list_topics(timeout=10)
    other = next(b for i, b in cluster.brokers.items() if i != md.controller_id)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": other.bootstrap})       # forwarded to the controller
    for f in admin.create_topics([NewTopic(topic_name, 3, 3)]).values():
        f.result(timeout=30)
    for p in range(3):
        isr = cluster.wait_for_isr(topic_name, 3, p)
        assert sorted(isr) == [1, 2, 3]
    leaders = {cluster.leader(topic_name, p) for p in range(3)}
    assert leaders == {1, 2, 3}                         # round-robin placement spreads the leaders
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    errors = []
    for i in range(300):
        p.produce(topic_name, str(i).encode(), partition=i % 3,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(30) == 0 and errors == []
    got = consume_all(cluster.bootstrap, topic_name, 300)
    assert sorted(int(m.value()) for m in got) == list(range(300))


def test_kafka_python_produces_and_consumes_on_the_cluster(cluster, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    create(cluster, topic_name, partitions=2)
    prod = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(50):
        prod.send(topic_name, str(i).encode())
    prod.flush(30)
    prod.close()
    cons = KafkaConsumer(topic_name, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                         consumer_timeout_ms=15000, group_id="kp")
    values = sorted(int(m.value) for m in cons)
    cons.close()
    assert values == list(range(50))
    # auto-created (Metadata through a broker that is not the controller): default.replication.factor is unset,
    # so it is sized to the cluster, 3
    prod = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    prod.send(topic_name + "-auto", b"x").get(timeout=30)
    prod.close()
    assert len(cluster.partition(topic_name + "-auto").replicas) == 3


def test_acks_all_waits_for_min_insync_replicas(cluster, topic_name):
    """With two of three brokers gone the ISR shrinks to one: acks=all is refused (NOT_ENOUGH_REPLICAS), acks=1
    still works; when the brokers return they rejoin the ISR and acks=all works again."""
    create(cluster, topic_name, configs={"min.insync.replicas": "2"})
    leader = cluster.leader(topic_name)
    others = [i for i in cluster.brokers if i != leader]
    for i in others:
        cluster.brokers[i].kill9()
    cluster.wait_for_isr(topic_name, 1)
    from kafka import KafkaProducer
    from kafka.errors import NotEnoughReplicasError
    prod = KafkaProducer(bootstrap_servers=cluster.brokers[leader].bootstrap, acks="all", retries=0,
                         enable_idempotence=False)
    with pytest.raises(NotEnoughReplicasError):
        prod.send(topic_name, b"refused").get(timeout=30)
    one = KafkaProducer(bootstrap_servers=cluster.brokers[leader].bootstrap, acks=1)
    one.send(topic_name, b"one").get(timeout=30)
    for i in others:
        cluster.brokers[i].start()
    cluster.wait_for_isr(topic_name, 3)
    prod.send(topic_name, b"accepted").get(timeout=30)
    prod.close()
    one.close()
    assert [m.value() for m in consume_all(cluster.bootstrap, topic_name, 2)] == [b"one", b"accepted"]


def test_kill_9_of_the_leader_loses_no_acknowledged_record(cluster, topic_name):
    kill_leaders(cluster, topic_name, rounds=3)


@pytest.mark.slow
def test_kill_9_of_the_leader_twenty_times(cluster, topic_name):
    kill_leaders(cluster, topic_name, rounds=20)


def test_controller_killed_another_takes_over_and_metadata_survives(cluster, topic_name):
    create(cluster, topic_name)
    controller = cluster.admin().list_topics(timeout=10).controller_id
    cluster.brokers[controller].kill9()
    # Every live broker names the new controller before an AdminClient caches one: the brokers apply the leader
    # change with a lag, and librdkafka kept sending CreateTopics to the killed controller that a lagging broker named.
    cluster.wait_every_broker(lambda md: md.controller_id not in (-1, controller), None, 60, "a new controller")
    create(cluster, topic_name + "-after", rf=2)          # the new controller appends
    from confluent_kafka.admin import AdminClient
    for b in [b for b in cluster.brokers.values() if b.alive()]:   # each follows the log: both topics, soon
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        deadline = time.monotonic() + 10
        while not {topic_name, topic_name + "-after"} <= set(admin.list_topics(timeout=10).topics):
            assert time.monotonic() < deadline, f"broker at {b.bootstrap} does not list both topics"
            time.sleep(0.1)
    cluster.brokers[controller].start()
    cluster.wait_for_isr(topic_name, 3)


def test_consumer_group_survives_its_coordinators_broker_dying(cluster, topic_name):
    from broker.groups.metadata_store import partition_for
    create(cluster, topic_name)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce(topic_name, str(i).encode())
    assert p.flush(30) == 0
    group = f"g-{topic_name}"
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    c.subscribe([topic_name])
    first = []
    deadline = time.monotonic() + 60
    while len(first) < 50 and time.monotonic() < deadline:
        first += records([c.poll(1)])
    c.commit(message=first[49], asynchronous=False)
    c.close()
    coordinator = cluster.leader("__consumer_offsets", partition_for(group, 3))
    cluster.brokers[coordinator].kill9()         # the commit was answered once the ISR had it
    c = Consumer(conf)
    c.subscribe([topic_name])
    rest = []
    deadline = time.monotonic() + 90
    while len(rest) < 50 and time.monotonic() < deadline:
        rest += records(c.consume(50, 1))
    c.close()
    assert [int(m.value()) for m in rest] == list(range(50, 100))       # from the committed offset, nothing twice
    assert cluster.leader("__consumer_offsets", partition_for(group, 3)) != coordinator


def test_a_returning_leader_truncates_its_divergent_tail(cluster, topic_name):
    """The leader takes acks=1 records its followers never get (they are paused), then dies; a follower becomes
    leader at a new epoch and takes other records at the same offsets. When the old leader returns it must drop its
    tail (KIP-101/279), not keep it: afterwards all three replicas hold the same records at the same offsets."""
    import signal
    from kafka import KafkaProducer
    create(cluster, topic_name, configs={"min.insync.replicas": "1"})
    prod = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(100):
        prod.send(topic_name, f"committed-{i}".encode())
    prod.flush(30)
    prod.close()
    leader = cluster.leader(topic_name)
    followers = [i for i in cluster.brokers if i != leader]
    only_leader = KafkaProducer(bootstrap_servers=cluster.brokers[leader].bootstrap, acks=1, linger_ms=50)
    only_leader.send(topic_name, b"warm-up").get(timeout=10)      # metadata and connection ready before the pause
    for i in followers:                          # paused well under broker.session.timeout.ms: they stay in the ISR
        cluster.brokers[i].proc.send_signal(signal.SIGSTOP)
    time.sleep(1)        # fetches parked on the leader (replica.fetch.wait.max.ms) are answered before the records come
    try:
        futures = [only_leader.send(topic_name, f"divergent-{i}".encode()) for i in range(50)]
        only_leader.flush(10)
        assert all(f.get(timeout=1) for f in futures)
        cluster.brokers[leader].kill9()
    finally:
        for i in followers:
            cluster.brokers[i].proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 60
    while cluster.leader(topic_name) in (-1, leader):
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.2)
    prod = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(30):
        prod.send(topic_name, f"new-leader-{i}".encode()).get(timeout=30)
    prod.close()
    cluster.brokers[leader].start()
    cluster.wait_for_isr(topic_name, 3)
    assert "diverged from leader" in cluster.brokers[leader].log_text()
    expected = [f"committed-{i}".encode() for i in range(100)] + [b"warm-up"] + \
        [f"new-leader-{i}".encode() for i in range(30)]
    assert [m.value() for m in consume_all(cluster.bootstrap, topic_name, 131)] == expected
    only_leader.close(timeout=1)
    cluster.stop()
    copies = replica_contents(cluster, topic_name)
    assert copies[leader] == copies[followers[0]] == copies[followers[1]]
    assert [v for _, v in copies[leader]] == expected and [o for o, _ in copies[leader]] == list(range(131))


def test_preferred_leader_election_moves_leadership_back(cluster, topic_name):
    from confluent_kafka import ElectionType, TopicPartition
    create(cluster, topic_name)
    preferred = cluster.partition(topic_name).replicas[0]
    assert cluster.leader(topic_name) == preferred
    cluster.brokers[preferred].kill9()
    deadline = time.monotonic() + 60
    while cluster.leader(topic_name) in (-1, preferred):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    cluster.brokers[preferred].start()
    cluster.wait_for_isr(topic_name, 3)
    assert cluster.leader(topic_name) != preferred          # no automatic rebalance: it stays where it moved
    admin = cluster.admin()
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)]).result(timeout=30)
    assert result[TopicPartition(topic_name, 0)] is None
    deadline = time.monotonic() + 30
    while cluster.leader(topic_name) != preferred:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)]).result(timeout=30)
    assert again[TopicPartition(topic_name, 0)].code() == 84          # ELECTION_NOT_NEEDED


def test_reassignment_moves_a_replica_and_keeps_the_data(cluster, topic_name):
    """KIP-455: replicas [a, b] -> [b, c]: c catches up and joins the ISR, then a leaves (and deletes its copy);
    consumers read every record throughout."""
    from kafka import KafkaAdminClient, TopicPartition as KTP
    admin = cluster.admin()
    ids = sorted(cluster.brokers)
    for f in admin.create_topics([NewTopic(topic_name, num_partitions=1, replica_assignment=[[ids[0], ids[1]]])]).values():
        f.result(timeout=30)
    cluster.wait_for_isr(topic_name, 2)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(500):
        p.produce(topic_name, str(i).encode())
    assert p.flush(30) == 0
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    result = kadmin.alter_partition_reassignments({KTP(topic_name, 0): [ids[1], ids[2]]})
    assert result.get(KTP(topic_name, 0)) is None
    deadline = time.monotonic() + 60
    while True:
        part = cluster.partition(topic_name)
        if sorted(part.replicas) == [ids[1], ids[2]] and sorted(part.isrs) == [ids[1], ids[2]] and \
                not kadmin.list_partition_reassignments():
            break
        assert time.monotonic() < deadline, f"reassignment did not complete: {part.replicas} {part.isrs}"
        time.sleep(0.2)
    kadmin.close()
    assert part.leader in (ids[1], ids[2])
    assert sorted(int(m.value()) for m in consume_all(cluster.bootstrap, topic_name, 500)) == list(range(500))
    deadline = time.monotonic() + 30
    while (cluster.brokers[ids[0]].data_dir / "logs" / f"{topic_name}-0").exists():
        assert time.monotonic() < deadline, "the removed replica kept its log"
        time.sleep(0.2)


def test_controller_killed_during_topic_creation(cluster, topic_name):
    """Creations in flight when the controller dies are all or nothing: a topic either exists with every partition
    placed and led, or not at all and can be created again on the new controller."""
    from confluent_kafka.admin import AdminClient
    controller = cluster.admin().list_topics(timeout=10).controller_id
    via = next(b for i, b in cluster.brokers.items() if i != controller)
    admin = AdminClient({"bootstrap.servers": via.bootstrap})
    names = [f"{topic_name}-{i}" for i in range(5)]
    # librdkafka sends CreateTopics to the controller itself and waits out request_timeout if that one dies
    futures = admin.create_topics([NewTopic(n, 3, 3) for n in names], request_timeout=15)
    cluster.brokers[controller].kill9()
    for f in futures.values():
        try:
            f.result(timeout=90)
        except Exception:
            pass                                         # refused or cut off: what counts is what exists
    deadline = time.monotonic() + 60
    while cluster.admin().list_topics(timeout=10).controller_id in (-1, controller):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    admin = cluster.admin()
    existing = admin.list_topics(timeout=10).topics
    for n in names:
        if n in existing:
            parts = existing[n].partitions
            assert sorted(parts) == [0, 1, 2] and all(len(p.replicas) == 3 for p in parts.values())
    cluster.brokers[controller].start()                  # RF=3 needs the third broker back
    cluster.wait_for_brokers(3)
    for n in names:
        if n not in existing:
            for f in admin.create_topics([NewTopic(n, 3, 3)]).values():
                f.result(timeout=30)
        for i in range(3):
            cluster.wait_for_isr(n, 3, i)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for n in names:
        for i in range(3):
            p.produce(n, b"x", partition=i)
    assert p.flush(60) == 0


@pytest.mark.s3
def test_cluster_with_its_metadata_log_on_s3(tmp_path, moto_server, topic_name):
    """The same cluster with the metadata log, lease and cluster id in S3 (moto, If-None-Match/If-Match): leaders
    and the controller fail over without losing an acknowledged record or a metadata change."""
    from tests.cluster.conftest import Cluster, stop_and_check
    c = Cluster(tmp_path, 3, store_url=f"s3://{moto_server.new_bucket()}/cluster",
                store_options=moto_server.store_options(max_attempts=3, retry_base_delay=0.05, connect_timeout=1,
                                                        read_timeout=2)).start()
    try:
        kill_leaders(c, topic_name, rounds=1)
        controller = c.admin().list_topics(timeout=10).controller_id
        c.brokers[controller].kill9()
        deadline = time.monotonic() + 60
        while c.admin().list_topics(timeout=10).controller_id in (-1, controller):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        create(c, topic_name + "-after", rf=2)
        c.brokers[controller].start()
        c.wait_for_isr(topic_name, 3)
    finally:
        stop_and_check(c)


def test_not_leader_answers_name_the_current_leader(cluster, topic_name):
    """KIP-951: Produce v10+ answered NOT_LEADER_OR_FOLLOWER by a follower, and Fetch v16 by a broker that holds no
    replica (a follower serves consumer Fetch v11+ itself, KIP-392), carry the leader, its epoch and its endpoint
    (decoded here with kio, the way clients read them)."""
    from protocol.record_batch import build_batch
    from tests.integration.rawclient import RawClient
    create(cluster, topic_name, rf=2)
    part = cluster.partition(topic_name)
    follower = next(i for i in part.replicas if i != part.leader)
    outsider = next(i for i in cluster.brokers if i not in part.replicas)
    leader = cluster.brokers[part.leader]
    with RawClient(cluster.brokers[follower].bootstrap) as raw, \
            RawClient(cluster.brokers[outsider].bootstrap) as other:
        resp = raw.request(0, 11, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": build_batch([(None, b"v")])}]}]})
        p = resp.responses[0].partition_responses[0]
        assert p.error_code == 6                                          # NOT_LEADER_OR_FOLLOWER
        assert p.current_leader.leader_id == part.leader and p.current_leader.leader_epoch >= 0
        [node] = resp.node_endpoints
        assert (node.node_id, node.host, node.port) == (part.leader, "127.0.0.1", leader.port)
        md = raw.request(3, 12, {"topics": [{"topic_id": None, "name": topic_name}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        tid = md.topics[0].topic_id
        resp = other.request(1, 16, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                                     "session_id": 0, "session_epoch": -1, "topics": [{"topic_id": tid, "partitions": [
                                         {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                          "last_fetched_epoch": -1, "log_start_offset": -1,
                                          "partition_max_bytes": 1 << 20}]}],
                                     "forgotten_topics_data": [], "rack_id": ""})
        p = resp.responses[0].partitions[0]
        assert p.error_code == 6 and p.current_leader.leader_id == part.leader
        assert [n.node_id for n in resp.node_endpoints] == [part.leader]


def _seen_by(cluster, broker_id: int, topic: str):
    """(controller id, partition 0 of `topic`) as broker `broker_id` sees them (a paused broker is not asked)."""
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap}).list_topics(topic, timeout=5)
    return md.controller_id, md.topics[topic].partitions[0]


def _fenced_for_silence(cluster, broker_id: int) -> int:
    """How often a controller fenced `broker_id` for missing heartbeats, as its logs say."""
    return sum(b.log_text().count(f"broker {broker_id} fenced: no heartbeat") for b in cluster.brokers.values())


def pause_the_leader(cluster, topic_name: str, controller_too: bool) -> None:
    """SIGSTOP the leader of an RF=3 acks=all topic (also the active controller if `controller_too`) for longer
    than broker.session.timeout.ms while a producer keeps writing: leadership (and the controller) move; after
    SIGCONT the woken broker must find the new controller, get unfenced, truncate what it alone had and rejoin the
    ISR within seconds, and every acknowledged record is read back once, in order."""
    import signal
    from tests.integration.helpers import wait_until
    controller = cluster.admin().list_topics(timeout=10).controller_id
    paused = controller if controller_too else next(i for i in sorted(cluster.brokers) if i != controller)
    others = [i for i in sorted(cluster.brokers) if i != paused]
    admin = cluster.admin()
    for f in admin.create_topics([NewTopic(topic_name, 1, replica_assignment=[[paused, *others]])]).values():
        f.result(timeout=30)
    cluster.wait_for_isr(topic_name, 3)
    assert cluster.leader(topic_name) == paused
    silent = {i: _fenced_for_silence(cluster, i) for i in cluster.brokers}
    with AckedProducer(cluster.bootstrap, topic_name) as prod:
        prod.wait_for_more(200)
        cluster.brokers[paused].proc.send_signal(signal.SIGSTOP)
        try:
            def moved():
                try:
                    ctl, p = _seen_by(cluster, others[0], topic_name)
                except Exception:
                    return False
                return p.leader not in (-1, paused) and paused not in p.isrs and \
                    (ctl not in (-1, paused) if controller_too else True)
            wait_until(moved, timeout=30, interval=0.2, what="leadership (and the controller) to move")
        finally:
            cluster.brokers[paused].proc.send_signal(signal.SIGCONT)
        woke = time.monotonic()

        def rejoined():
            try:
                ctl, p = _seen_by(cluster, others[0], topic_name)
            except Exception:
                return False
            return ctl not in (-1, paused) and len(p.isrs) == 3 and p.leader != paused
        wait_until(rejoined, timeout=20, interval=0.2, what=f"broker {paused} to rejoin the ISR")
        print(f"broker {paused} rejoined the ISR {time.monotonic() - woke:.1f}s after SIGCONT")
        wait_until(lambda: _seen_by(cluster, paused, topic_name)[1].leader not in (-1, paused), timeout=10,
                   interval=0.2, what=f"broker {paused} to follow the new leader")
        prod.wait_for_more(200)
    # only the paused broker lost its session: the others reached the new controller in time (KAFKA-14392)
    assert {i: _fenced_for_silence(cluster, i) for i in others} == {i: silent[i] for i in others}
    read_back_once_in_order(cluster, topic_name, prod)


@pytest.mark.parametrize("controller_too", [True, False], ids=["leader-and-controller", "leader-only"])
def test_a_paused_leader_wakes_up_fenced(tmp_path, topic_name, controller_too):
    """Two rounds, each on a new topic led by the broker that is paused (the active controller of the moment if
    `controller_too`)."""
    from tests.cluster.conftest import Cluster, stop_and_check
    c = Cluster(tmp_path, 3).start()
    try:
        for round_ in range(2):
            pause_the_leader(c, f"{topic_name}-{round_}", controller_too)
    finally:
        stop_and_check(c)
