"""Dynamic broker and group configs as Kafka's admin clients change them: IncrementalAlterConfigs on BROKER resources
(one broker, or "" for the cluster-wide default) and GROUP resources, the legacy AlterConfigs that librdkafka's
alter_configs and kafka-python still send, and DescribeConfigs showing where each value comes from. A change takes
effect without a restart and survives one."""
from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType)

from tests.integration.helpers import admin_client, create_topic

pytestmark = pytest.mark.integration


def incremental(admin, resource: ConfigResource, **ops):
    """`name=(op, value)` pairs -> incremental_alter_configs; the result or the KafkaException."""
    resource = ConfigResource(resource.restype, resource.name, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=op) for k, (op, v) in ops.items()])
    try:
        return admin.incremental_alter_configs([resource])[resource].result(timeout=15)
    except KafkaException as e:
        return e


def kp_alter(bootstrap: str, rtype: str, name: str, configs: dict, incremental: bool) -> str:
    """kafka-python's alter_configs: "OK" or the error, for one resource. `incremental=False` sends the legacy
    AlterConfigs; kafka-python (like librdkafka) also reaches the cluster-wide default, name ""."""
    from kafka.admin import ConfigResource as KPResource, ConfigResourceType, KafkaAdminClient
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        out = kp.alter_configs([KPResource(ConfigResourceType[rtype], name, configs=configs)],
                               raise_on_unknown=False, incremental=incremental)
    finally:
        kp.close()
    return out[rtype.lower()][name]


def strata_configs(bootstrap: str, *args: str) -> str:
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "tools.cli", "configs", "--bootstrap-server", bootstrap, *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def describe(admin, resource: ConfigResource) -> dict:
    return admin.describe_configs([resource])[resource].result(timeout=15)


def produce_one(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000})
    p.produce(topic, b"x" * size, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert len(errors) == 1
    return errors[0]


def test_a_cluster_wide_default_applies_without_restart_and_survives_one(make_broker, topic_name):
    b = make_broker()
    admin = admin_client(b.bootstrap)
    create_topic(b.bootstrap, topic_name)
    assert produce_one(b.bootstrap, topic_name, 5000) is None
    # neither librdkafka nor kafka-python reach the cluster-wide default (name ""); kafka-configs.sh does
    assert strata_configs(b.bootstrap, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                          "message.max.bytes=2000,log.retention.ms=3600000") == \
        "Completed updating default config for brokers in the cluster.\n"
    err = produce_one(b.bootstrap, topic_name, 5000)                # the open log was reconfigured
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    entries = describe(admin, ConfigResource(ResourceType.TOPIC, topic_name))
    assert (entries["max.message.bytes"].value, entries["max.message.bytes"].source) == \
        ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert entries["retention.ms"].value == "3600000"
    assert strata_configs(b.bootstrap, "--describe", "--entity-type", "brokers", "--entity-default") == (
        "Default configs for brokers in the cluster are:\n"
        "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000}\n"
        "  message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000}\n")

    b.restart()                                                    # persisted in the metadata log
    admin = admin_client(b.bootstrap)
    err = produce_one(b.bootstrap, topic_name, 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    broker_entry = describe(admin, ConfigResource(ResourceType.BROKER, "1"))["message.max.bytes"]
    assert (broker_entry.value, broker_entry.source, broker_entry.is_read_only) == \
        ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)

    strata_configs(b.bootstrap, "--alter", "--broker-defaults", "--delete-config", "message.max.bytes")
    assert produce_one(b.bootstrap, topic_name, 5000) is None


def test_a_per_broker_value_wins_over_the_default_and_a_topic_override_over_both(make_broker, topic_name):
    b = make_broker()
    admin = admin_client(b.bootstrap)
    create_topic(b.bootstrap, topic_name, config={"max.message.bytes": "9000"})
    strata_configs(b.bootstrap, "--alter", "--broker-defaults", "--add-config", "message.max.bytes=2000")
    assert incremental(admin, ConfigResource(ResourceType.BROKER, "1"),
                       message_max_bytes=(AlterConfigOpType.SET, "3000")) is None
    entry = describe(admin, ConfigResource(ResourceType.BROKER, "1"))["message.max.bytes"]
    assert (entry.value, entry.source) == ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert strata_configs(b.bootstrap, "--describe", "--broker", "1") == (      # confluent keys synonyms by name
        "Dynamic configs for broker 1 are:\n  message.max.bytes=3000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "message.max.bytes=3000, DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:"
        "message.max.bytes=1048588}\n")
    assert produce_one(b.bootstrap, topic_name, 8000) is None       # the topic's own 9000 still applies
    other = topic_name + "-b"
    create_topic(b.bootstrap, other)
    assert produce_one(b.bootstrap, other, 2500) is None            # this broker's 3000, not the default's 2000
    assert produce_one(b.bootstrap, other, 3500).code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_read_only_unknown_and_bad_broker_configs_are_invalid_request_naming_the_key(make_broker):
    b = make_broker()
    admin = admin_client(b.bootstrap)
    for name, value, words in (("log.dirs", "/elsewhere", "Cannot update these configs dynamically: Set(log.dirs)"),
                               ("listeners", "PLAINTEXT://:1", "listeners"),
                               ("no.such.config", "1", "no.such.config"),
                               ("message.max.bytes", "lots", "message.max.bytes")):
        err = incremental(admin, ConfigResource(ResourceType.BROKER, "1"),
                          **{name.replace(".", "_"): (AlterConfigOpType.SET, value)})
        assert isinstance(err, KafkaException), name
        assert err.args[0].code() == KafkaError.INVALID_REQUEST and words in err.args[0].str(), err
    assert describe(admin, ConfigResource(ResourceType.BROKER, "1"))["log.dirs"].is_read_only
    assert strata_configs(b.bootstrap, "--describe", "--broker-defaults") == \
        "Default configs for brokers in the cluster are:\n"
    assert "Traceback" not in b.log_text()


def test_legacy_alter_configs_replaces_the_whole_set(make_broker, topic_name):
    """librdkafka's alter_configs and kafka-python's alter_configs send AlterConfigs (key 33): configs left out of
    the request are removed."""
    b = make_broker()
    admin = admin_client(b.bootstrap)
    create_topic(b.bootstrap, topic_name, config={"retention.ms": "1000000", "segment.bytes": "1048576"})
    res = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"retention.ms": "2000000"})
    admin.alter_configs([res])[res].result(timeout=15)
    entries = describe(admin, ConfigResource(ResourceType.TOPIC, topic_name))
    assert entries["retention.ms"].value == "2000000"
    assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value        # removed: not in the request

    assert kp_alter(b.bootstrap, "BROKER", "1", {"log.retention.ms": "7200000"}, incremental=False) == "OK"
    entry = describe(admin, ConfigResource(ResourceType.BROKER, "1"))["log.retention.ms"]
    assert (entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    bad = ConfigResource(ResourceType.BROKER, "1", set_config={"node.id": "7"})
    with pytest.raises(KafkaException) as e:
        admin.alter_configs([bad])[bad].result(timeout=15)
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST and "node.id" in e.value.args[0].str()


def test_group_configs_are_described_and_bounded(make_broker):
    b = make_broker()
    admin = admin_client(b.bootstrap)
    group = ConfigResource(ResourceType.GROUP, "g-configs")
    entries = describe(admin, group)
    assert (entries["consumer.session.timeout.ms"].value, entries["consumer.session.timeout.ms"].source) == \
        ("45000", ConfigSource.DEFAULT_CONFIG.value)
    assert incremental(admin, group, consumer_session_timeout_ms=(AlterConfigOpType.SET, "50000")) is None
    b.restart()
    admin = admin_client(b.bootstrap)
    entry = describe(admin, group)["consumer.session.timeout.ms"]
    assert (entry.value, entry.source) == ("50000", ConfigSource.GROUP_CONFIG.value)
    err = incremental(admin, group, consumer_session_timeout_ms=(AlterConfigOpType.SET, "10"))
    assert isinstance(err, KafkaException) and err.args[0].code() == KafkaError.INVALID_CONFIG
    err = incremental(admin, group, consumer_no_such=(AlterConfigOpType.SET, "10"))
    assert isinstance(err, KafkaException) and err.args[0].code() == KafkaError.INVALID_CONFIG


async def test_a_group_config_reaches_the_groups_members(make_broker):
    """consumer.heartbeat.interval.ms set on the GROUP resource is what the group's members are told to use."""
    from protocol.client import BrokerConnection
    b = make_broker()
    admin = admin_client(b.bootstrap)
    group = ConfigResource(ResourceType.GROUP, "g-heartbeat")
    assert incremental(admin, group, consumer_heartbeat_interval_ms=(AlterConfigOpType.SET, "7000")) is None
    conn = BrokerConnection("127.0.0.1", b.port, client_id="t")
    try:
        intervals = []
        for group_id in ("g-heartbeat", "g-other"):
            resp = await conn.send(68, 1, {"group_id": group_id, "member_id": uuid.uuid4().hex, "member_epoch": 0,
                                           "instance_id": None, "rack_id": None,
                                           "rebalance_timeout": datetime.timedelta(seconds=30),
                                           "subscribed_topic_names": ["t"], "server_assignor": None,
                                           "topic_partitions": []}, timeout=15)
            assert resp.error_code == 0, resp
            intervals.append(int(resp.heartbeat_interval.total_seconds() * 1000))
    finally:
        conn.close()
    assert intervals == [7000, 5000]
