"""Three brokers that talk to each other only over SASL_SSL (PLAIN, `inter.broker.listener.name`), with the
authorizer on: replication, forwarding to the controller (Envelope, KIP-590) and failover after kill -9 of the
leader work as on PLAINTEXT, and the brokers act as their own principal (a DENY of CLUSTER_ACTION to the clients'
principal would stop a broker that fell back to it)."""
from __future__ import annotations

from tests.cluster.conftest import Cluster, stop_and_check
from tests.cluster.helpers import create, kill_leaders
from tests.conftest import free_port
from tests.security_certs import CertificateAuthority

BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
               'password="broker-secret" user_broker="broker-secret";')


def test_sasl_ssl_between_brokers_with_leader_kills(tmp_path, topic_name):
    ca = CertificateAuthority(tmp_path / "pki")
    pem = ca.issue("broker", CN="localhost")
    c = Cluster(tmp_path, 3, overrides={
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem.keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker", "allow.everyone.if.no.acl.found": "true"})
    for b in c.brokers.values():
        b.overrides["listeners"] = f"CLIENT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{free_port()}"
    c.start()
    try:
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                           ResourceType)
        admin = c.admin()
        acls = [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                           op, perm)
                for op, perm in ((AclOperation.ALL, AclPermissionType.ALLOW),
                                 (AclOperation.CLUSTER_ACTION, AclPermissionType.DENY))]
        for fut in admin.create_acls(acls).values():       # sent to any broker, forwarded to the controller
            fut.result(timeout=30)
        kill_leaders(c, topic_name, rounds=2)
        text = c.logs()
        assert "broker-secret" not in text
    finally:
        stop_and_check(c)
