import pytest

from broker.config import BrokerConfig, parse_properties
from storage.log.log_config import LogConfig, TOPIC_CONFIGS, parse_value


def test_properties_file_and_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("# comment\nnode.id=7\nlisteners=PLAINTEXT://0.0.0.0:9999\nlog.retention.hours=2\n! other\n")
    cfg = BrokerConfig.load(str(f), ["log.dirs=" + str(tmp_path / "logs"), "num.partitions=3"])
    assert cfg.node_id == 7
    assert cfg.listener == ("0.0.0.0", 9999)
    assert cfg.advertised == ("127.0.0.1", 9999)   # a wildcard listener is advertised as loopback
    assert cfg.get_int("num.partitions") == 3
    assert cfg.log_config().retention_ms == 2 * 3_600_000


def test_kafka_defaults():
    lc = LogConfig.resolve({}, {})
    assert lc.segment_bytes == 1_073_741_824
    assert lc.retention_ms == 604_800_000
    assert lc.retention_bytes == -1
    assert lc.max_message_bytes == 1_048_588
    assert lc.index_interval_bytes == 4096
    assert lc.message_timestamp_type == "CreateTime"


def test_topic_override_beats_broker_default():
    lc = LogConfig.resolve({"log.segment.bytes": "1000"}, {"segment.bytes": "2000"})
    assert lc.segment_bytes == 2000
    assert LogConfig.resolve({"log.segment.bytes": "1000"}, {}).segment_bytes == 1000


@pytest.mark.parametrize("name,value", [("segment.bytes", "10"), ("retention.ms", "abc"),
                                        ("message.timestamp.type", "Whenever"), ("cleanup.policy", "shred"),
                                        ("remote.storage.enable", "maybe")])
def test_invalid_values_are_rejected(name, value):
    with pytest.raises(ValueError):
        parse_value(TOPIC_CONFIGS[name], value)


def test_cluster_id_is_stable(tmp_path):
    cfg = BrokerConfig.load(None, [f"log.dirs={tmp_path}"])
    first = cfg.cluster_id()
    assert first and BrokerConfig.load(None, [f"log.dirs={tmp_path}"]).cluster_id() == first


def test_bad_property_line():
    with pytest.raises(ValueError):
        parse_properties("no separator here\n")
