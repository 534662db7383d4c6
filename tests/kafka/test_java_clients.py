"""Apache Kafka's Java clients (the producer, the consumer and the AdminClient of kafka-clients 4.1.1) against Strata:
one broker (`strata`) and a three-broker cluster (`strata_cluster`, RF=3), and the same programs against Apache
Kafka (`apache_kafka`, and three KRaft nodes for the admin checks that need three brokers), which proves the checks.

Each program under tests/kafka/java/ runs many checks in one JVM and prints one JSON object per check:
- ProducerCheck: the idempotent acks=all producer with every codec, records with keys and headers on three
  partitions, read back with the consumer record by record; a transactional producer (transaction version 2).
- ConsumerCheck: classic and KIP-848 groups of two members, seek/seekToBeginning/seekToEnd and offset resets,
  pause/resume, offsetsForTimes (CreateTime and LogAppendTime), commits and positions.
- AdminCheck: every admin API Strata serves, with the values, config sources and exception classes a user reads.
All programs of all targets run at once in the `outputs` fixture (a JVM starts in seconds; the checks mostly wait
for brokers); the tests assert on what they printed, each expectation Kafka's documented behaviour."""
from __future__ import annotations

import json
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests import apache_kafka as ak

ALL = ("strata", "strata_cluster", "apache_kafka")
ADMIN_TARGETS = ("strata", "strata_cluster", "apache_kafka", "kafka_cluster")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 2000
PROGRAMS = {"strata": ("ProducerCheck", "ConsumerCheck", "AdminCheck"),
            "strata_cluster": ("ProducerCheck", "ConsumerCheck", "AdminCheck"),
            "apache_kafka": ("ProducerCheck", "ConsumerCheck", "AdminCheck"),
            "kafka_cluster": ("AdminCheck",)}
NODES = {"strata": 1, "apache_kafka": 1, "strata_cluster": 3, "kafka_cluster": 3}


def _run(program: str, bootstrap: str, nodes: int, out_dir) -> list[dict]:
    """The program's JSON lines; its whole output is kept in `out_dir` (pytest's temporary directory)."""
    prefix = f"jc-{program.removesuffix('Check').lower()}-{uuid.uuid4().hex[:8]}"
    rf = str(min(3, nodes))
    args = {"ProducerCheck": (rf, str(RECORDS_PER_CODEC)), "ConsumerCheck": (rf,), "AdminCheck": ()}[program]
    p = ak.run(f"{program}.java", bootstrap, prefix, *args, timeout=420, check=False)
    (out_dir / f"{prefix}.out").write_text(p.stdout + "\n--- stderr\n" + p.stderr)
    if p.returncode != 0:
        raise AssertionError(f"{program} exited {p.returncode}\n--- stdout\n{p.stdout[-4000:]}\n--- stderr\n"
                             f"{p.stderr[-4000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def outputs(request, kafka_jars, tmp_path_factory):
    """{(program, target): Future of the program's JSON lines}. Every run starts as soon as its brokers are up. The
    three-node Apache Kafka (as the `kafka_cluster` fixture makes it) starts here, in the pool, so that its minute
    of start-up overlaps the other runs instead of preceding them."""
    runs: dict[tuple[str, str], Future] = {}
    kafka_cluster = ak.KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), 3)
    out_dir = tmp_path_factory.mktemp("java-clients-output")

    def on_kafka_cluster(program: str) -> list[dict]:
        kafka_cluster.start()
        return _run(program, kafka_cluster.bootstrap, 3, out_dir)

    with ThreadPoolExecutor(4) as pool:
        try:
            (program,) = PROGRAMS["kafka_cluster"]
            runs[(program, "kafka_cluster")] = pool.submit(on_kafka_cluster, program)
            for target in ("strata", "strata_cluster", "apache_kafka"):
                bootstrap = request.getfixturevalue(target).bootstrap
                for program in PROGRAMS[target]:
                    runs[(program, target)] = pool.submit(_run, program, bootstrap, NODES[target], out_dir)
            yield runs
            for f in runs.values():          # every run done before the brokers stop
                f.exception()
        finally:
            kafka_cluster.stop()


def output(outputs, program: str, target: str) -> list[dict]:
    return outputs[(program, target)].result()


def check(outputs, target: str, name: str) -> dict:
    """One AdminCheck line; a check that threw prints its stack trace as "error"."""
    (line,) = [d for d in output(outputs, "AdminCheck", target) if d["check"] == name]
    assert "error" not in line, line["error"]
    return line


def config(value, source, read_only=False) -> dict:
    return {"value": value, "source": source, "read_only": read_only, "sensitive": False}


# ---- the producer ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ALL)
def test_idempotent_producer_every_codec(outputs, target):
    lines = output(outputs, "ProducerCheck", target)
    by_codec = {d["codec"]: d for d in lines}
    assert set(by_codec) == {*CODECS, "*", "transactions"}
    for codec in CODECS:
        d = by_codec[codec]
        assert d["errors"] == [] and d["acked"] == d["sent"] == RECORDS_PER_CODEC, d
        # Offsets per partition are 0, 1, 2... in send order, on all three partitions.
        assert d["offset_problems"] == [], d
        assert len(d["acked_per_partition"]) == 3 and sum(d["acked_per_partition"].values()) == RECORDS_PER_CODEC
        assert d["end_offsets"] == d["acked_per_partition"], d
        # Read back: offsets, keys, values (null and empty too), headers (null, repeated keys), CreateTime stamps.
        assert d["read"] == RECORDS_PER_CODEC and d["mismatch_count"] == 0, d["mismatches"]
    sizes = by_codec["*"]["log_bytes"]
    assert all(sizes[c] < sizes["none"] for c in CODECS if c != "none"), sizes   # stored compressed


@pytest.mark.parametrize("target", ALL)
def test_transactional_producer_with_transaction_version_2(outputs, target):
    """Kafka 4.1's producer on a broker that finalizes transaction.version 2 (KIP-890 part 2): EndTxn v5 bumps the
    epoch per transaction, Produce v12 and TxnOffsetCommit v5 add their partitions without AddPartitionsToTxn or
    AddOffsetsToTxn. Committed transactions are read once each, aborted ones only by read_uncommitted."""
    (d,) = [x for x in output(outputs, "ProducerCheck", target) if x["codec"] == "transactions"]
    assert d["transaction_version"] == 2 and d["final_state"] == "CompleteAbort", d
    assert d["read_committed"] == {"records": 90, "distinct": 90, "transactions": ["t0", "t2", "t4"]}, d
    assert d["read_uncommitted"] == {"records": 180, "distinct": 180,
                                     "transactions": ["t0", "t1", "t2", "t3", "t4", "t5"]}, d
    assert d["group_offset"] == 104, d               # the last committed transaction's offsets; aborted ones vanish
    # six transactions: six epoch bumps, the last marker (from the sixth EndTxn) carrying epoch 6 on each partition
    assert d["producer_epochs"] == [6, 6, 6], d


# ---- the consumer ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("target", ALL)
def test_group_of_two_shares_partitions_and_commits(outputs, target, protocol):
    (d,) = [x for x in output(outputs, "ConsumerCheck", target) if x["check"] == "group" and x["protocol"] == protocol]
    ends = d["end_offsets"]
    assert ends == {str(p): 50 for p in range(4)}
    assert d["first_member_alone"] == [0, 1, 2, 3]          # one member: every partition
    assert d["stable"], d                                    # then two members split them, each read to the end
    a, b = d["members"]
    for m in (a, b):
        assert "error" not in m and "bad_record" not in m, m
        assert m["assignment"], m
        assert m["committed"] == {str(p): ends[str(p)] for p in m["assignment"]}, m
        assert m["position_after_commit"] == m["committed"], m
    assert sorted(a["assignment"] + b["assignment"]) == [0, 1, 2, 3]
    assert a["revoked_events"] >= 1                          # the first member gave partitions up
    assert d["distinct_read"] == 200
    assert d["described"] == {
        "state": "Stable", "type": "Classic" if protocol == "classic" else "Consumer",
        "assignor": "range" if protocol == "classic" else "uniform", "coordinator_known": True,
        "members": {"member-a": a["assignment"], "member-b": b["assignment"]}}
    assert d["admin_offsets_after_close"] == ends


@pytest.mark.parametrize("target", ALL)
def test_seek_and_offsets_for_times(outputs, target):
    (d,) = [x for x in output(outputs, "ConsumerCheck", target) if x["check"] == "seek"]
    base = d["base"]
    assert (d["position_at_beginning"], d["position_after_seek"]) == (0, 17)
    assert d["first_after_seek"] == {"offset": 17, "key": "k-17", "timestamp": base + 17000,
                                     "timestamp_type": "CreateTime"}
    assert 1 <= d["polled_after_seek"] <= 10                 # max.poll.records
    assert (d["position_at_end"], d["records_after_seek_to_end"]) == (50, 0)
    assert d["first_after_seek_to_beginning"] == 0
    assert (d["beginning_offsets"], d["end_offsets"]) == (0, 50)
    # Records at base + i s: the first offset at or after each time, with its timestamp (relative to base).
    assert d["offsets_for_times"] == {"-5000": [0, 0], "0": [0, 0], "2500": [3, 3000], "3000": [3, 3000],
                                      "49000": [49, 49000], "49001": None}
    # Out of range: auto.offset.reset earliest, latest, none.
    assert d["first_after_out_of_range_seek"] == 0
    assert d["position_after_out_of_range_latest"] == 50
    assert d["out_of_range_with_reset_none"] == "org.apache.kafka.clients.consumer.OffsetOutOfRangeException"
    assert d["no_committed_offset_with_reset_none"] == "org.apache.kafka.clients.consumer.NoOffsetForPartitionException"
    # message.timestamp.type=LogAppendTime: the broker's clock replaced the producer's (hour-old) timestamps.
    assert d["log_append_time_records"] == [{"type": "LogAppendTime", "not_before_send": True,
                                             "not_producers": True}] * 5
    assert d["log_append_offset_for_time"] == 0


@pytest.mark.parametrize("target", ALL)
def test_pause_resume(outputs, target):
    (d,) = [x for x in output(outputs, "ConsumerCheck", target) if x["check"] == "pause"]
    assert d["paused"] == [0] and d["p0_read_before_pause"] >= 1
    assert d["records_from_paused"] == 0 and d["p0_position_unchanged"], d
    assert d["p1_read_while_p0_paused"] == 40
    assert d["paused_after_resume"] == []
    assert d["p0_offsets_exact"] and d["p1_offsets_exact"], d   # 0..39 each, no gap, no repeat


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("target", ALL)
def test_committed_offsets_and_positions(outputs, target, protocol):
    (d,) = [x for x in output(outputs, "ConsumerCheck", target) if x["check"] == "commit" and x["protocol"] == protocol]
    assert d["committed_before"] is None
    assert d["committed"] == [20, "meta-20"] and d["position_from_commit"] == 20
    # A new consumer of the group starts at the committed offset; commitSync() commits its position.
    assert d["new_consumer_position"] == 20 and d["new_consumer_first"] == 20
    assert d["position_after_commit"] == 20 + d["new_consumer_polled"] and d["new_consumer_polled"] >= 1
    assert d["committed_after_commit_sync"] == d["position_after_commit"]
    assert d["committed_metadata_after_commit_sync"] == ""
    assert d["committed_last"] == [34, "last"] and d["admin_listed"] == [34, "last"]


# ---- the admin client --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_cluster_features_quorum(outputs, target):
    d = check(outputs, target, "cluster")
    n = NODES[target]
    assert len(d["nodes"]) == n and d["controller_in_nodes"] and d["cluster_id_set"] and d["hosts"] == ["127.0.0.1"]
    assert d["with_fenced"] == [str(i) for i in d["nodes"]]    # KIP-1073: none fenced
    # Racks: the Strata cluster fixture gives its brokers racks a, b, c; the others have none.
    assert d["racks_set"] == [target == "strata_cluster"]
    assert "finalized_features" in d, d                     # describeFeatures answered (ApiVersions v3+)
    assert "transaction.version" in d["finalized_features"], d   # KIP-890 part 2, as a new Kafka 4 cluster
    if target in ("apache_kafka", "kafka_cluster"):
        assert "metadata.version" in d["finalized_features"]
    # describeMetadataQuorum: a leader among the brokers and a voter; voters and observers are every broker
    # (Kafka's combined nodes are all voters; Strata's quorum is its active controller, the others observers).
    assert d["quorum_leader_in_nodes"] and d["quorum_leader_is_voter"] and d["quorum_high_watermark_positive"]
    assert d["quorum_voters_and_observers"] == n


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_create_topics(outputs, target):
    d = check(outputs, target, "create_topics")
    rf = min(3, NODES[target])
    assert d["create"] == "ok" and d["result_partitions"] == 3 and d["result_replication_factor"] == rf
    assert d["result_topic_id_set"] is True
    assert d["result_retention"] == config("123456", "DYNAMIC_TOPIC_CONFIG")
    assert d["result_segment_bytes"] == config("1073741824", "DEFAULT_CONFIG")
    assert (d["validate_only"], d["validate_only_partitions"], d["validate_only_created"]) == ("ok", 2, False)
    # No count, no factor: num.partitions (1) and default.replication.factor, which a Strata cluster sizes to
    # the cluster when unset (docs/configuration.md); Kafka's default is 1.
    assert d["defaults"] == [1, 3 if target == "strata_cluster" else 1]
    assert d["assigned"] == "ok"
    for p in d["assigned_described"]:
        asked = d["assignment_asked"][str(p["partition"])]
        assert p["replicas"] == asked and p["leader"] == asked[0] and p["isr"] == sorted(asked), d
    assert d["errors"] == {
        "exists": "TopicExistsException", "replication_factor_too_big": "InvalidReplicationFactorException",
        "zero_partitions": "InvalidPartitionsException", "zero_replication_factor": "InvalidReplicationFactorException",
        "bad_config_value": "InvalidConfigurationException", "unknown_config": "InvalidConfigurationException",
        "bad_name": "InvalidTopicException", "long_name": "InvalidTopicException",
        "unknown_broker_in_assignment": "InvalidReplicaAssignmentException",
        "duplicate_replica_in_assignment": "InvalidReplicaAssignmentException",
        "validate_only_exists": "TopicExistsException"}
    assert d["failed_ones_absent"] is True


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_describe_and_list_topics(outputs, target):
    d = check(outputs, target, "describe_topics")
    rf = min(3, NODES[target])
    assert d["name"] is True and d["internal"] is False and len(d["partitions"]) == 3
    for p in d["partitions"]:
        assert len(p["replicas"]) == rf and p["leader"] in p["replicas"] and p["isr"] == sorted(p["replicas"]), p
    assert d["by_id"] is True                               # describeTopics(TopicCollection.ofTopicIds)
    assert d["unknown"] == "UnknownTopicOrPartitionException" and d["unknown_id"] == "UnknownTopicIdException"
    lt = check(outputs, target, "list_topics")
    assert lt["mine"] == ["a", "assigned", "default"]       # not the validate-only or failed ones
    assert lt["internal_listed_by_default"] is False
    assert "__consumer_offsets" in lt["internal_with_option"] and lt["listing_ids_set"] is True


# Topic configs both describe (Kafka 4.1 lists a few more: see the report of issue 23).
CORE_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "index.interval.bytes", "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms",
    "max.message.bytes", "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "min.insync.replicas", "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable",
    "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.ms"}


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_topic_configs(outputs, target):
    d = check(outputs, target, "topic_configs")
    assert CORE_TOPIC_CONFIGS <= set(d["names"])
    created = d["created"]
    assert created["retention.ms"] == config("123456", "DYNAMIC_TOPIC_CONFIG")
    assert created["cleanup.policy"] == config("compact", "DYNAMIC_TOPIC_CONFIG")
    assert created["segment.bytes"] == config("1073741824", "DEFAULT_CONFIG")
    assert created["message.timestamp.type"] == config("CreateTime", "DEFAULT_CONFIG")
    assert created["compression.type"] == config("producer", "DEFAULT_CONFIG")
    assert created["max.message.bytes"] == config("1048588", "DEFAULT_CONFIG")
    assert created["min.insync.replicas"]["value"] == "1"   # (Kafka's formatting sets it as a cluster default)
    assert d["retention_synonyms"] == ["retention.ms:DYNAMIC_TOPIC_CONFIG"]
    # incrementalAlterConfigs: SET and DELETE, APPEND and SUBTRACT on a list, validateOnly, errors.
    assert d["set_and_delete"] == "ok" and d["after_set_and_delete"] == {
        "retention.ms": config("999999", "DYNAMIC_TOPIC_CONFIG"), "cleanup.policy": config("delete", "DEFAULT_CONFIG")}
    assert d["append"] == "ok" and d["after_append"] == {"cleanup.policy": config("delete,compact", "DYNAMIC_TOPIC_CONFIG")}
    assert d["subtract"] == "ok" and d["after_subtract"] == {"cleanup.policy": config("compact", "DYNAMIC_TOPIC_CONFIG")}
    assert d["validate_only"] == "ok" and d["after_validate_only"] == {"retention.ms": config("999999", "DYNAMIC_TOPIC_CONFIG")}
    assert (d["bad_value"], d["unknown_name"]) == ("InvalidConfigurationException",) * 2
    assert (d["unknown_topic"], d["describe_unknown_topic"]) == ("UnknownTopicOrPartitionException",) * 2
    assert d["after_errors"] == {"retention.ms": config("999999", "DYNAMIC_TOPIC_CONFIG")}


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_broker_configs(outputs, target):
    d = check(outputs, target, "broker_configs")
    described = d["described"]
    assert described["num.partitions"]["value"] == "1" and described["num.partitions"]["source"] == "STATIC_BROKER_CONFIG"
    assert described["node.id"]["source"] == "STATIC_BROKER_CONFIG" and described["node.id"]["read_only"] is True
    assert described["log.dirs"]["source"] == "STATIC_BROKER_CONFIG" and described["log.dirs"]["read_only"] is True
    assert {k: described["log.retention.hours"][k] for k in ("value", "source")} == {"value": "168",
                                                                                     "source": "DEFAULT_CONFIG"}
    assert described["log.segment.bytes"] == config("1073741824", "DEFAULT_CONFIG")
    assert described["auto.create.topics.enable"]["value"] == "true"
    # Per-broker and cluster-default dynamic configs; the broker's own wins; deleting both restores the default.
    assert (d["set_broker"], d["set_default"], d["delete_broker"], d["delete_default"]) == ("ok",) * 4
    assert d["after_set_broker"] == {"log.retention.ms": config("604800001", "DYNAMIC_BROKER_CONFIG")}
    assert d["default_described"] == {"log.retention.ms": config("604800002", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    assert d["broker_over_default"] == {"log.retention.ms": config("604800001", "DYNAMIC_BROKER_CONFIG")}
    assert d["after_delete_broker"] == {"log.retention.ms": config("604800002", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    assert d["after_delete_default"]["log.retention.ms"]["source"] == "DEFAULT_CONFIG" and d["restored"] is True
    assert d["static_config"] == "InvalidRequestException" and d["bad_value"] == "InvalidRequestException"
    assert d["validate_only"] == "ok" and d["after_validate_only"] == d["after_delete_default"]


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_create_partitions(outputs, target):
    d = check(outputs, target, "create_partitions")
    assert (d["grow"], d["after_grow"]) == ("ok", 5)
    assert d["shrink"] == d["same"] == "InvalidPartitionsException"
    assert (d["validate_only"], d["after_validate_only"]) == ("ok", 5)
    assert d["unknown_topic"] == "UnknownTopicOrPartitionException"
    assert d["grow_assigned"] == "ok"
    replicas = d["assigned_replicas"]
    assert d["after_grow_assigned"] == {"partition": 5, "leader": replicas[0], "replicas": replicas,
                                        "isr": sorted(replicas)}
    assert d["bad_assignment"] == "InvalidReplicaAssignmentException"


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_consumer_groups(outputs, target):
    d = check(outputs, target, "groups")
    empty = {"state": "Empty", "type": "Classic", "assignor": "", "simple": True, "coordinator_known": True,
             "members": []}
    # alterConsumerGroupOffsets creates a group; listConsumerGroupOffsets reads offsets and metadata back.
    assert d["alter_new_group"] == "ok" and d["empty_offsets"] == {"a-0": [5, "m5"], "a-1": [7, ""]}
    assert d["empty_described"] == empty
    assert d["alter_again"] == "ok" and d["empty_offsets_after_alter"] == {"a-0": [3, ""], "a-1": [7, ""]}
    assert d["list_partitions"] == {"1": 7, "2": None}
    assert d["unknown_group_offsets"] == {} and d["unknown_group_described"] == {"error": "GroupIdNotFoundException"}
    # Live groups: a classic one with a static member, a KIP-848 one.
    all6 = [0, 1, 2, 3, 4, 5]
    assert d["static_assignment"] == all6
    assert d["static_described"] == {"state": "Stable", "type": "Classic", "assignor": "range", "simple": False,
                                     "coordinator_known": True, "members": [{
                                         "client_id": "client-static", "instance_id": "static-1", "host_set": True,
                                         "assignment": all6, "target_assignment": None, "epoch_positive": None}]}
    assert d["848_described"] == {"state": "Stable", "type": "Consumer", "assignor": "uniform", "simple": False,
                                  "coordinator_known": True, "members": [{
                                      "client_id": "client-848", "instance_id": None, "host_set": True,
                                      "assignment": all6, "target_assignment": all6, "epoch_positive": True}]}
    assert d["listed_live"] == {"g-848": ["Stable", "Consumer"], "g-empty": ["Empty", "Classic"],
                                "g-static": ["Stable", "Classic"]}
    assert d["live_offsets"] == {f"a-{p}": [0, ""] for p in all6}
    assert d["two_groups_offsets"] == {"g-848": 6, "g-empty": 2}
    # A KIP-848 group's own configs (GROUP resource) over the broker's group.consumer.* defaults.
    assert d["group_config_default"] == {"consumer.session.timeout.ms": config("45000", "DEFAULT_CONFIG")}
    assert d["group_config_set"] == "ok"
    assert d["group_config_after_set"] == {"consumer.session.timeout.ms": config("50000", "DYNAMIC_GROUP_CONFIG")}
    assert d["group_config_out_of_range"] == d["group_config_unknown"] == "InvalidConfigurationException"
    # What a live group refuses.
    assert d["alter_live"] == d["alter_live_848"] == "UnknownMemberIdException"
    assert d["delete_live"] == d["delete_live_848"] == "GroupNotEmptyException"
    assert d["delete_offsets_subscribed"] == d["delete_offsets_subscribed_848"] == "GroupSubscribedToTopicException"
    # removeMembersFromConsumerGroup: a static member by instance id; every member of the KIP-848 group.
    assert d["remove_unknown_static"] == "UnknownMemberIdException"
    assert d["remove_static"] == "ok" and d["static_after_remove"] == {**empty, "simple": False}
    assert d["remove_all_848"] == "ok"
    empty_848 = {**empty, "type": "Consumer", "assignor": "uniform", "simple": False}
    assert d["848_after_remove_all"] == empty_848
    assert d["static_after_close"] == {**empty, "simple": False} and d["848_after_close"] == empty_848
    # deleteConsumerGroupOffsets and deleteConsumerGroups.
    assert d["delete_offsets"] == "ok" and d["after_delete_offsets"] == {"a-1": [7, ""]}
    assert d["delete_offsets_unknown_group"] == "GroupIdNotFoundException"
    assert d["listed_before_delete"] == {"g-848": ["Empty", "Consumer"], "g-empty": ["Empty", "Classic"],
                                         "g-static": ["Empty", "Classic"]}
    assert d["delete_groups"] == "ok" and d["deleted_described"] == {"error": "GroupIdNotFoundException"}
    assert d["delete_unknown_group"] == "GroupIdNotFoundException"
    assert d["listed_after_delete"] == {} and d["offsets_after_delete"] == {}


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_delete_records_and_list_offsets(outputs, target):
    d = check(outputs, target, "delete_records")
    assert (d["delete_to_4"], d["earliest_after"], d["delete_backwards"]) == (4, 4, 4)
    assert d["delete_past_end"] == "OffsetOutOfRangeException"
    assert d["delete_to_high_watermark"] == 10 and d["consumer_beginning"] == 10
    lo = check(outputs, target, "list_offsets")
    # Five records, one batch each, at base + 0, 5000, 1000, 2000, 3000 ms: [offset, timestamp - base].
    assert {k: lo[k] for k in ("earliest", "latest", "max_timestamp", "earliest_local", "latest_tiered")} == {
        "earliest": [0, -1], "latest": [5, -1], "max_timestamp": [1, 5000], "earliest_local": [0, -1],
        "latest_tiered": [-1, -1]}
    assert {k: lo[k] for k in ("ts_before_all", "ts_1500", "ts_5000", "ts_after_all")} == {
        "ts_before_all": [0, 0], "ts_1500": [1, 5000], "ts_5000": [1, 5000], "ts_after_all": [-1, -1]}
    assert lo["read_committed_latest"] == 5 and lo["several"] == 7
    assert lo["unknown_topic"] == "UnknownTopicOrPartitionException"


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_describe_log_dirs(outputs, target):
    d = check(outputs, target, "log_dirs")
    n = NODES[target]
    assert len(d["brokers"]) == n
    replicas = [r for r in d["dirs"] if r["has_records_replica"]]
    assert len(replicas) == min(3, n)                       # every replica of the partition, on its broker
    for r in d["dirs"]:
        assert r["dir_absolute"] and r["dir_error"] is None and r["total_bytes_known"] and r["usable_bytes_known"], r
    for r in replicas:
        assert r["size_positive"] and r["offset_lag"] == 0 and r["future"] is False, r
    assert d["replica_log_dir"] is True


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_elect_leaders(outputs, target):
    d = check(outputs, target, "elect_leaders")
    assert d["preferred_already"] == "ElectionNotNeededException"
    assert d["unclean_healthy"] == "ElectionNotNeededException"
    assert d["unknown_partition"] == "UnknownTopicOrPartitionException"
    assert d["all_partitions_elected"] == 0                 # every leader is preferred already
    if NODES[target] == 3:
        # Replicas reordered (same set): the leader stays until a preferred election moves it to the new first.
        assert d["reorder"] == "ok"
        before, after = d["after_reorder"], d["after_elect"]
        assert before["leader"] == before["replicas"][2] and before["isr"] == sorted(before["replicas"]), d
        assert d["elect_reordered"] == "ok"
        assert after["leader"] == after["replicas"][0] == before["replicas"][0], d
        assert after["isr"] == sorted(after["replicas"]), d


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_partition_reassignments(outputs, target):
    d = check(outputs, target, "reassignments")
    assert d["none_listed"] == 0 and d["listed_after"] == 0
    assert d["to_unknown_broker"] == "InvalidReplicaAssignmentException"
    assert d["cancel_none"] == "NoReassignmentInProgressException"
    assert d["unknown_topic"] == "UnknownTopicOrPartitionException"
    assert d["move"] == "ok"
    after = d["after_move"]
    if NODES[target] == 3:                                  # [first, second] -> [second, third]
        assert len(after["replicas"]) == 2 and after["isr"] == sorted(after["replicas"])
        assert after["leader"] in after["replicas"]
    assert d["records_after_move"] is True


@pytest.mark.parametrize("target", ADMIN_TARGETS)
def test_admin_delete_topics(outputs, target):
    d = check(outputs, target, "delete_topics")
    assert d["delete"] == "ok" and d["delete_by_id"] == "ok"
    assert d["delete_unknown"] == "UnknownTopicOrPartitionException"
    assert d["delete_unknown_id"] == "UnknownTopicIdException"
    assert d["listed_after"] == 0 and d["describe_after"] == "UnknownTopicOrPartitionException"
    assert (d["recreate"], d["recreated_partitions"], d["recreated_empty"]) == ("ok", 1, 0)
