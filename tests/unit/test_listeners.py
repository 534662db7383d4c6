"""Listener settings as Kafka reads them, and which endpoint each listener's clients are given."""
from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.current_leader import current_leaders
from broker.security.listeners import ListenerConfig, listener_setting, mechanism_setting
from metadata.image import MetadataImage
from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord
from protocol.errors import ErrorCode


def test_listeners_advertised_and_inter_broker():
    lc = ListenerConfig.from_config(BrokerConfig({
        "listeners": "CLIENT://0.0.0.0:9092,INTERNAL://10.0.0.1:9093",
        "advertised.listeners": "CLIENT://kafka.example.com:19092,INTERNAL://10.0.0.1:9093",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SSL",
        "inter.broker.listener.name": "internal"}))
    assert [(x.name, x.host, x.port, x.security_protocol) for x in lc.advertised] == [
        ("CLIENT", "kafka.example.com", 19092, "SASL_SSL"), ("INTERNAL", "10.0.0.1", 9093, "SSL")]
    assert lc.inter_broker == lc.controller == "INTERNAL"
    assert lc.by_name("CLIENT").sasl and lc.by_name("CLIENT").ssl and not lc.by_name("INTERNAL").sasl


def test_default_map_and_fallbacks():
    lc = ListenerConfig.from_config(BrokerConfig({"listeners": "SASL_PLAINTEXT://:9092,PLAINTEXT://:9093"}))
    assert lc.inter_broker == "PLAINTEXT"               # security.inter.broker.protocol's default
    assert lc.advertised[0].host == "127.0.0.1"
    lc = ListenerConfig.from_config(BrokerConfig({"listeners": "SSL://127.0.0.1:9092",
                                                  "controller.listener.names": "NOPE,SSL"}))
    assert lc.inter_broker == lc.controller == "SSL"


@pytest.mark.parametrize("props, message", [
    ({"listeners": "CLIENT://:9092"}, "not in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "named twice"),
    ({"listeners": "PLAINTEXT://nohost"}, "is not NAME://host:port"),
    ({"listener.security.protocol.map": "A:TLS"}, "does not map a name"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:9093"}, "is not one of the listeners"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "meta-address"),
    ({"listeners": "A://:9092,B://:9093", "listener.security.protocol.map": "A:SSL,B:PLAINTEXT",
      "inter.broker.listener.name": "B", "advertised.listeners": "A://h:9092"}, "must include the inter-broker"),
])
def test_bad_listener_settings(props, message):
    with pytest.raises(ValueError, match=message):
        ListenerConfig.from_config(BrokerConfig(props))


def test_per_listener_and_per_mechanism_settings():
    cfg = BrokerConfig({"sasl.jaas.config": "global", "listener.name.client.sasl.jaas.config": "listener",
                        "listener.name.client.scram-sha-512.sasl.jaas.config": "mechanism",
                        "ssl.client.auth": "none", "listener.name.client.ssl.client.auth": "required"})
    assert mechanism_setting(cfg, "CLIENT", "SCRAM-SHA-512", "sasl.jaas.config") == "mechanism"
    assert mechanism_setting(cfg, "CLIENT", "PLAIN", "sasl.jaas.config") == "listener"
    assert mechanism_setting(cfg, "OTHER", "PLAIN", "sasl.jaas.config") == "global"
    assert listener_setting(cfg, "CLIENT", "ssl.client.auth") == "required"
    assert listener_setting(cfg, "OTHER", "ssl.client.auth") == "none"


def test_each_listener_gets_its_own_endpoints():
    image = MetadataImage().apply([
        RegisterBrokerRecord(1, "a", None, [["CLIENT", "public", 9092], ["INTERNAL", "private", 9093]]),
        TopicRecord("t", "0" * 32), PartitionRecord("0" * 32, 0, [1], [1], 1, 3)])
    reg = image.brokers[1]
    assert reg.endpoint("INTERNAL") == ("private", 9093)
    assert reg.endpoint("CLIENT") == reg.endpoint() == ("public", 9092)
    assert reg.endpoint("UNKNOWN") is None               # left out, never another listener's port
    leaders, nodes = current_leaders(image, [("t", 0, ErrorCode.not_leader_or_follower)], "INTERNAL")
    assert leaders == {("t", 0): (1, 3)} and nodes == [(1, "private", 9093, None)]


def test_envelope_principal_round_trip():
    """Forwarded requests carry the client's principal as Kafka's DefaultPrincipalData, version-prefixed."""
    from broker.handlers.envelope import deserialize_principal, serialize_principal
    data = serialize_principal("User:alice")
    assert data[:2] == b"\0\0"
    assert deserialize_principal(data) == "User:alice"
    assert deserialize_principal(serialize_principal("User:CN=a,O=b")) == "User:CN=a,O=b"


def test_a_malformed_envelope_principal_is_a_malformed_request():
    """Found by the atheris fuzzer: a principal whose name is a null compact string raised kio's UnexpectedNull, which
    the broker logged as an internal error; the Envelope handler answers PRINCIPAL_DESERIALIZATION_FAILURE instead."""
    from broker.handlers.envelope import deserialize_principal
    from protocol.wire import MalformedRequest
    for data in (b"\0\0\x05User\x00\x00\x00", b"\0\0\x05User", b"\0\0", b"\0\x01\x05User\x06alice\x00\x00", b""):
        with pytest.raises(MalformedRequest):
            deserialize_principal(data)
