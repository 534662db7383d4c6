"""Admin APIs through confluent-kafka's AdminClient: CreateTopics (configs, errors), DescribeConfigs,
IncrementalAlterConfigs, CreatePartitions, DeleteRecords, ListOffsets, DeleteTopics, DescribeCluster, and topic
overrides surviving a broker restart."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic, OffsetSpec, ResourceType)

try:
    from .helpers import (admin_client, consume, consumer, create_topic, produce_all, producer, stored_batches,
                          wait_until, watermarks)
except ImportError:  # tests/integration is not a package
    from helpers import (admin_client, consume, consumer, create_topic, produce_all, producer, stored_batches,
                         wait_until, watermarks)

pytestmark = pytest.mark.integration


def create_error(admin, topic: NewTopic, **kw) -> KafkaError | None:
    fut = admin.create_topics([topic], operation_timeout=10, **kw)[topic.topic]
    try:
        fut.result(timeout=15)
        return None
    except KafkaException as e:
        return e.args[0]


def describe(admin, topic: str) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res])[res].result(timeout=15)


def test_create_with_configs_and_describe(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, partitions=3, admin=admin,
                 config={"retention.ms": "7200000", "segment.bytes": "1048576", "cleanup.policy": "compact,delete"})
    md = admin.list_topics(topic_name, timeout=10).topics[topic_name]
    assert sorted(md.partitions) == [0, 1, 2]
    assert all(p.leader == 1 and list(p.replicas) == [1] and list(p.isrs) == [1] for p in md.partitions.values())

    cfg = describe(admin, topic_name)
    overrides = {"retention.ms": "7200000", "segment.bytes": "1048576", "cleanup.policy": "compact,delete"}
    for name, value in overrides.items():
        assert cfg[name].value == value, name
        assert cfg[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
        assert not cfg[name].is_default, name
    defaults = {"retention.bytes": "-1", "max.message.bytes": "1048588", "min.insync.replicas": "1",
                "message.timestamp.type": "CreateTime", "compression.type": "producer", "segment.ms": "604800000"}
    for name, value in defaults.items():
        assert cfg[name].value == value, name
        assert cfg[name].source in (ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value), name


def test_create_topic_errors(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin)

    err = create_error(admin, NewTopic(topic_name, num_partitions=1, replication_factor=1))
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS

    for bad in ("has space", "slash/name", "x" * 250, ".."):
        err = create_error(admin, NewTopic(bad, num_partitions=1, replication_factor=1))
        assert err is not None and err.code() == KafkaError.TOPIC_EXCEPTION, bad  # INVALID_TOPIC_EXCEPTION (17)

    err = create_error(admin, NewTopic(topic_name + "-rf3", num_partitions=1, replication_factor=3))
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    err = create_error(admin, NewTopic(topic_name + "-p0", num_partitions=0, replication_factor=1))
    assert err.code() == KafkaError.INVALID_PARTITIONS

    for config in ({"no.such.config": "1"}, {"retention.ms": "soon"}, {"cleanup.policy": "shred"},
                   {"message.timestamp.type": "WallClock"}):
        err = create_error(admin, NewTopic(topic_name + "-cfg", num_partitions=1, replication_factor=1,
                                           config=config))
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, config

    # validate_only: the answer is computed but nothing is created
    assert create_error(admin, NewTopic(topic_name + "-dry", num_partitions=2, replication_factor=1),
                        validate_only=True) is None
    md = admin.list_topics(timeout=10)
    assert topic_name + "-dry" not in md.topics
    assert not any(t.startswith(topic_name + "-") for t in md.topics), "a failed create left a topic behind"


def test_explicit_replica_assignments(broker, topic_name):
    """replica_assignment in CreateTopics and CreatePartitions: taken as given when every broker is registered,
    INVALID_REPLICA_ASSIGNMENT (with Kafka's reason) otherwise."""
    admin = admin_client(broker.bootstrap)
    assert create_error(admin, NewTopic(topic_name, num_partitions=2, replica_assignment=[[1], [1]])) is None
    wait_until(lambda: topic_name in admin.list_topics(timeout=5).topics, what="topic in metadata")
    md = admin.list_topics(topic_name, timeout=10).topics[topic_name]
    assert sorted(md.partitions) == [0, 1] and all(list(p.replicas) == [1] for p in md.partitions.values())
    for bad, why in (([[2]], "Unknown broker(s) in replica assignment: 2."),
                     ([[1, 1]], "Duplicate brokers not allowed in replica assignment: 1, 1")):
        err = create_error(admin, NewTopic(topic_name + "-bad", num_partitions=1, replica_assignment=bad))
        assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and why in err.str(), err
    for bad in ([[2]], [[1], [1]]):               # an unknown broker; more assignments than new partitions
        with pytest.raises(KafkaException) as ei:
            admin.create_partitions([NewPartitions(topic_name, 3, replica_assignment=bad)])[topic_name] \
                .result(timeout=15)
        assert ei.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    admin.create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[1]])])[topic_name].result(timeout=15)
    wait_until(lambda: len(admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions) == 3,
               what="3 partitions in metadata")
    assert topic_name + "-bad" not in admin.list_topics(timeout=10).topics


def test_incremental_alter_configs_set_and_delete(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin, config={"retention.ms": "100000"})

    res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.bytes", "5000000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([res])[res].result(timeout=15)
    cfg = describe(admin, topic_name)
    assert (cfg["retention.bytes"].value, cfg["retention.bytes"].source) == (
        "5000000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (cfg["max.message.bytes"].value, cfg["max.message.bytes"].source) == (
        "2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert cfg["retention.ms"].value == "604800000"
    assert cfg["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # the raised max.message.bytes applies to the live log at once: a 1.5 MB record is accepted now
    p = producer(broker.bootstrap, **{"message.max.bytes": 3_000_000})
    [d] = produce_all(p, topic_name, [(b"big", b"\x01" * 1_500_000)], partition=0)
    assert d.offset() == 0

    # an invalid value is rejected and changes nothing
    bad = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.bytes", "lots", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([bad])[bad].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert describe(admin, topic_name)["retention.bytes"].value == "5000000"

    # unknown topic
    missing = ConfigResource(ResourceType.TOPIC, topic_name + "-missing", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([missing])[missing].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_grow_and_produce(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin)
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(timeout=15)
    wait_until(lambda: len(admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions) == 4,
               what="4 partitions in metadata")

    p = producer(broker.bootstrap, **{"topic.metadata.refresh.interval.ms": 500})
    d = produce_all(p, topic_name, [(b"k", b"on-3-%d" % i) for i in range(3)], partition=3)
    assert [(m.partition(), m.offset()) for m in d] == [(3, 0), (3, 1), (3, 2)]
    got = consume(broker.bootstrap, topic_name, 3, partition=3)
    assert [m.value() for m in got] == [b"on-3-%d" % i for i in range(3)]
    assert watermarks(broker.bootstrap, topic_name, 0) == (0, 0)

    # shrinking (or keeping) the count is refused
    for count in (2, 4):
        with pytest.raises(KafkaException) as ei:
            admin.create_partitions([NewPartitions(topic_name, count)])[topic_name].result(timeout=15)
        assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_max_broker_partitions_refuses_what_would_exceed_it(make_broker, topic_name):
    """KIP-578's max.broker.partitions: a creation or addition that would take the broker over it is refused with
    POLICY_VIOLATION and creates nothing; deleting a topic makes room again. The broker's own internal topics
    (here the 50 partitions of __consumer_offsets) count, but are never refused."""
    b = make_broker({"max.broker.partitions": "60"})
    admin = admin_client(b.bootstrap)
    create_topic(b.bootstrap, topic_name, partitions=8, admin=admin)
    err = create_error(admin, NewTopic(topic_name + "-b", 3, 1))
    assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, err
    assert "max.broker.partitions=60" in err.str()
    assert topic_name + "-b" not in admin.list_topics(timeout=5).topics
    err = create_error(admin, NewTopic("__transaction_state", 3, 1))      # a client's, under an internal name
    assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, err
    with pytest.raises(KafkaException) as ei:
        admin.create_partitions([NewPartitions(topic_name, 11)])[topic_name].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert len(admin.list_topics(topic_name, timeout=5).topics[topic_name].partitions) == 8
    admin.create_partitions([NewPartitions(topic_name, 10)])[topic_name].result(timeout=15)   # up to the bound
    admin.delete_topics([topic_name], operation_timeout=10)[topic_name].result(timeout=15)
    wait_until(lambda: create_error(admin, NewTopic(topic_name + "-b", 3, 1)) is None, what="room after the deletion")


def test_max_broker_partitions_defaults_to_half_the_open_file_limit(make_broker, topic_name):
    """Unset, max.broker.partitions is half the broker's open-file limit: a client cannot make the broker run out of
    files (and take its log dir offline) by creating topics."""
    b = make_broker(open_files=400)
    admin = admin_client(b.bootstrap)
    create_topic(b.bootstrap, topic_name, partitions=100, admin=admin)     # and __consumer_offsets' 50
    err = create_error(admin, NewTopic(topic_name + "-b", 51, 1))
    assert err is not None and err.code() == KafkaError.POLICY_VIOLATION and "=200" in err.str(), err
    create_topic(b.bootstrap, topic_name + "-c", partitions=50, admin=admin)
    produce_all(producer(b.bootstrap), topic_name + "-c", [(None, b"fits")], partition=49)
    assert b.alive()


def test_delete_records_moves_log_start(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin)
    base = int(time.time() * 1000) - 60_000
    p = producer(broker.bootstrap, **{"linger.ms": 0})
    for i in range(10):
        produce_all(p, topic_name, [(None, b"r%d" % i, None, base + i * 10)], partition=0)

    tp = TopicPartition(topic_name, 0, 6)
    deleted = admin.delete_records([tp])[tp].result(timeout=15)
    assert deleted.low_watermark == 6
    assert watermarks(broker.bootstrap, topic_name) == (6, 10)

    lo = admin.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    assert [f.result(10).offset for f in lo.values()] == [6]
    hi = admin.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.latest()})
    assert [f.result(10).offset for f in hi.values()] == [10]
    mx = admin.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.max_timestamp()})
    [r] = [f.result(10) for f in mx.values()]
    assert (r.offset, r.timestamp) == (9, base + 90)
    ft = admin.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.for_timestamp(base + 75)})
    [r] = [f.result(10) for f in ft.values()]
    assert (r.offset, r.timestamp) == (8, base + 80)

    # fetching from offset 0 is now out of range: auto.offset.reset=earliest jumps to the new log start
    got = consume(broker.bootstrap, topic_name, 4, offset=0)
    assert [(m.offset(), m.value()) for m in got] == [(i, b"r%d" % i) for i in range(6, 10)]

    # ... and auto.offset.reset=error surfaces the out-of-range fetch to the application
    c = consumer(broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic_name, 0, 2)])
        err = None
        deadline = time.monotonic() + 15
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is not None, f"unexpected record at offset {m.offset()}"
                err = m.error()
        assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET, err
    finally:
        c.close()

    # offset beyond the high watermark is refused
    too_far = TopicPartition(topic_name, 0, 11)
    with pytest.raises(KafkaException) as ei:
        admin.delete_records([too_far])[too_far].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    # delete everything (-1 = high watermark): the log is empty but offsets continue
    everything = TopicPartition(topic_name, 0, -1)
    assert admin.delete_records([everything])[everything].result(timeout=15).low_watermark == 10
    [d] = produce_all(p, topic_name, [(None, b"fresh")], partition=0)
    assert d.offset() == 10
    got = consume(broker.bootstrap, topic_name, 1, offset=0)
    assert (got[0].offset(), got[0].value()) == (10, b"fresh")


def test_min_insync_replicas_refuses_acks_all(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin, config={"min.insync.replicas": "2"})
    # acks=1 does not need the ISR
    d = produce_all(producer(broker.bootstrap, acks=1), topic_name, [(None, b"acks-1")], partition=0)
    assert d[0].offset() == 0
    # acks=all cannot be satisfied by a single broker's ISR of one
    p = producer(broker.bootstrap, **{"acks": "all", "enable.idempotence": False, "retries": 0, "linger.ms": 0})
    errs = []
    p.produce(topic_name, value=b"acks-all", partition=0, on_delivery=lambda e, m: errs.append(e))
    assert p.flush(15) == 0
    assert errs and errs[0] is not None and errs[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errs
    assert watermarks(broker.bootstrap, topic_name) == (0, 1)


def test_delete_records_refused_on_compacted_topic(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin, config={"cleanup.policy": "compact"})
    produce_all(producer(broker.bootstrap), topic_name, [(b"k%d" % i, b"v") for i in range(3)], partition=0)
    tp = TopicPartition(topic_name, 0, 2)
    with pytest.raises(KafkaException) as ei:
        admin.delete_records([tp])[tp].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert watermarks(broker.bootstrap, topic_name) == (0, 3)


def test_small_segments_roll_and_reads_span_them(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin, config={"segment.bytes": "4096"})
    base = int(time.time() * 1000) - 120_000
    n = 200
    p = producer(broker.bootstrap, **{"batch.size": 1000, "linger.ms": 5})
    produce_all(p, topic_name, [(b"k%03d" % i, b"%03d" % i + b"." * 90, None, base + i) for i in range(n)],
                partition=0)
    pdir = broker.data_dir / "logs" / f"{topic_name}-0"
    bases = sorted(int(f.name[:-4]) for f in pdir.glob("*.log"))
    assert len(bases) >= 4 and bases[0] == 0, bases
    assert all(f.stat().st_size <= 4096 for f in pdir.glob("*.log") if int(f.name[:-4]) != bases[-1])

    got = consume(broker.bootstrap, topic_name, n)
    assert [(m.offset(), m.key()) for m in got] == [(i, b"k%03d" % i) for i in range(n)]
    start = bases[2] + 1   # inside the third segment
    got = consume(broker.bootstrap, topic_name, n - start, offset=start)
    assert [m.offset() for m in got] == list(range(start, n))

    c = consumer(broker.bootstrap)
    try:
        [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, base + 150)], timeout=10)
        assert tp.offset == 150
    finally:
        c.close()
    mx = admin.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.max_timestamp()})
    [r] = [f.result(10) for f in mx.values()]
    assert (r.offset, r.timestamp) == (n - 1, base + n - 1)

    # deleting records up to the middle of the third segment removes the two segments below it
    cut = bases[2] + 2
    tp = TopicPartition(topic_name, 0, cut)
    assert admin.delete_records([tp])[tp].result(timeout=15).low_watermark == cut
    assert watermarks(broker.bootstrap, topic_name) == (cut, n)
    wait_until(lambda: sorted(int(f.name[:-4]) for f in pdir.glob("*.log"))[0] == bases[2],
               what="segments below the log start deleted")
    got = consume(broker.bootstrap, topic_name, n - cut, offset=0)
    assert got[0].offset() == cut and got[-1].offset() == n - 1

    # one batch larger than segment.bytes can never fit a segment
    p2 = producer(broker.bootstrap, **{"linger.ms": 0})
    errs = []
    p2.produce(topic_name, key=b"x", value=b"y" * 5000, partition=0, on_delivery=lambda e, m: errs.append(e))
    assert p2.flush(15) == 0
    assert errs and errs[0] is not None and errs[0].code() == KafkaError.RECORD_LIST_TOO_LARGE, errs


def test_topic_compression_type_recompresses(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin, config={"compression.type": "gzip"})
    assert describe(admin, topic_name)["compression.type"].value == "gzip"
    msgs = [(b"k%d" % i, b"compress me " * 20) for i in range(50)]
    produce_all(producer(broker.bootstrap, **{"compression.type": "none"}), topic_name, msgs, partition=0)
    got = consume(broker.bootstrap, topic_name, len(msgs))
    assert [(m.key(), m.value()) for m in got] == msgs
    # Kafka: compression.type is "the final compression type for a given topic"; the broker recompresses
    assert {b["codec"] for b in stored_batches(broker, topic_name, min_records=len(msgs))} == {1}


def test_topic_compression_type_uncompressed_decompresses(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, admin=admin, config={"compression.type": "uncompressed"})
    msgs = [(b"k%d" % i, b"zstd payload " * 10) for i in range(20)]
    produce_all(producer(broker.bootstrap, **{"compression.type": "zstd"}), topic_name, msgs, partition=0)
    got = consume(broker.bootstrap, topic_name, len(msgs))
    assert [(m.key(), m.value()) for m in got] == msgs
    assert {b["codec"] for b in stored_batches(broker, topic_name, min_records=len(msgs))} == {0}


def test_delete_topics(broker, topic_name):
    admin = admin_client(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, partitions=2, admin=admin)
    produce_all(producer(broker.bootstrap), topic_name, [(None, b"doomed")], partition=1)

    admin.delete_topics([topic_name], operation_timeout=10)[topic_name].result(timeout=15)
    wait_until(lambda: topic_name not in admin.list_topics(timeout=5).topics, what="topic gone from metadata")
    assert not (broker.data_dir / "logs" / f"{topic_name}-1").exists()

    with pytest.raises(KafkaException) as ei:
        admin.delete_topics([topic_name], operation_timeout=10)[topic_name].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # the name can be reused; the new topic starts empty
    create_topic(broker.bootstrap, topic_name, admin=admin)
    assert watermarks(broker.bootstrap, topic_name) == (0, 0)


def test_describe_cluster(broker):
    admin = admin_client(broker.bootstrap)
    desc = admin.describe_cluster(request_timeout=10).result(timeout=15)
    assert isinstance(desc.cluster_id, str) and desc.cluster_id
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(1, "127.0.0.1", broker.port)]
    assert desc.controller.id == 1
    # Metadata agrees
    md = admin.list_topics(timeout=10)
    assert md.cluster_id == desc.cluster_id and md.controller_id == 1
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(1, "127.0.0.1", broker.port)]


def test_metadata_comes_from_the_metadata_log(make_broker, topic_name):
    """Topics, partition counts, deletions and the broker's rack are metadata records: they survive a restart and a
    kill -9, and Metadata, DescribeCluster and FindCoordinator answer from the image built from them."""
    from rawclient import RawClient

    b = make_broker({"broker.rack": "rack-a"})
    admin = admin_client(b.bootstrap)
    create_topic(b.bootstrap, topic_name, partitions=2, admin=admin)
    create_topic(b.bootstrap, topic_name + "-gone", admin=admin)
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(timeout=15)
    admin.delete_topics([topic_name + "-gone"])[topic_name + "-gone"].result(timeout=15)
    del admin
    for restart in (b.restart, lambda: (b.kill9(), b.start())):
        restart()
        admin = admin_client(b.bootstrap)
        md = admin.list_topics(timeout=10)
        assert len(md.topics[topic_name].partitions) == 4 and topic_name + "-gone" not in md.topics
        assert all(p.leader == 1 and p.replicas == [1] and p.isrs == [1]
                   for p in md.topics[topic_name].partitions.values())
        desc = admin.describe_cluster(request_timeout=10).result(timeout=15)
        assert [(n.id, n.port, n.rack) for n in desc.nodes] == [(1, b.port, "rack-a")]
        del admin
    with RawClient(b.bootstrap, timeout=10) as c:                        # the leader of the group's partition
        [coord] = c.request(10, 4, {"key_type": 0, "coordinator_keys": ["some-group"]}).coordinators
        assert (coord.error_code, coord.node_id, coord.port) == (0, 1, b.port)
    assert "upgraded" not in b.log_text() and (b.data_dir / "logs" / "__cluster_metadata-0").is_dir()


def test_topic_overrides_survive_restart(make_broker, topic_name):
    b = make_broker()
    admin = admin_client(b.bootstrap)
    create_topic(b.bootstrap, topic_name, partitions=2, admin=admin,
                 config={"retention.ms": "3600000", "cleanup.policy": "compact"})
    res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("max.message.bytes", "500000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=15)
    produce_all(producer(b.bootstrap), topic_name, [(b"k%d" % i, b"v%d" % i) for i in range(5)], partition=1)
    cluster_id = admin.describe_cluster().result(timeout=15).cluster_id
    del admin

    b.restart()
    admin = admin_client(b.bootstrap)
    cfg = describe(admin, topic_name)
    for name, value in {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "500000"}.items():
        assert (cfg[name].value, cfg[name].source) == (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), name
    assert cfg["segment.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert admin.describe_cluster().result(timeout=15).cluster_id == cluster_id
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 2
    got = consume(b.bootstrap, topic_name, 5, partition=1)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(5)]

    # the restored max.message.bytes is enforced by the reopened log
    p = producer(b.bootstrap, **{"message.max.bytes": 2_000_000, "linger.ms": 0})
    errs = []
    p.produce(topic_name, key=b"big", value=b"\x00" * 600_000, partition=0, on_delivery=lambda e, m: errs.append(e))
    assert p.flush(15) == 0
    assert errs and errs[0] is not None and errs[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_describe_broker_configs_hides_store_credentials(make_broker):
    """Kafka answers secrets with a null value and isSensitive=true; the object-store credentials are Strata's."""
    b = make_broker({"remote.log.storage.manager.store.secret.access.key": "s3cr3t-value",
                     "remote.log.storage.manager.store.access.key.id": "AKIDEXAMPLE",
                     "remote.log.storage.manager.store.region": "eu-west-1"})
    res = ConfigResource(ResourceType.BROKER, "1")
    admin = admin_client(b.bootstrap)
    entries = admin.describe_configs([res])[res].result(timeout=15)
    secret = entries["remote.log.storage.manager.store.secret.access.key"]
    key_id = entries["remote.log.storage.manager.store.access.key.id"]
    assert (secret.value, secret.is_sensitive) == (None, True)
    assert (key_id.value, key_id.is_sensitive) == (None, True)
    region = entries["remote.log.storage.manager.store.region"]
    assert (region.value, region.is_sensitive) == ("eu-west-1", False)
