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
        # sent to a broker that is not the controller, so it is forwarded in an Envelope (KIP-590)
        from tests.cluster.conftest import metadata_of
        from tests.integration.rawclient import RawClient
        controller = metadata_of(c.bootstrap.split(",")[0]).controller_id
        other = next(b for i, b in c.brokers.items() if i != controller)
        with RawClient(other.bootstrap) as raw:
            r = raw.request(30, 3, {"creations": [
                {"resource_type": 4, "resource_name": "kafka-cluster", "resource_pattern_type": 3,
                 "principal": "User:ANONYMOUS", "host": "*", "operation": op, "permission_type": perm}
                for op, perm in ((2, 3), (9, 2))]})          # ALL allowed, CLUSTER_ACTION denied
            assert [x.error_code for x in r.results] == [0, 0], r
        c.wait_every_broker(lambda md: True, None, 30, "the ACLs")
        kill_leaders(c, topic_name, rounds=2)
        text = c.logs()
        assert "broker-secret" not in text
    finally:
        stop_and_check(c)
