"""Security benchmark: produce and fetch over SSL and SASL_SSL (SCRAM-SHA-512) as ratios to PLAINTEXT, and the cost
of the authorizer per request with 1,000 ACLs, in one run on one broker (a real `strata broker` process with the
three listeners; confluent-kafka, acks=1, linger.ms=5, batch.size=1 MiB).

Listener cases, their order rotated over --rounds, each into a fresh one-partition topic:

    PLAINTEXT      the baseline
    SSL            TLS 1.3 (ECDSA P-256 certificate), no client certificate
    SASL_SSL       TLS 1.3 and SCRAM-SHA-512 (authentication once per connection)

Authorizer cases, on two brokers started alike except for the authorizer, requests/s of a client that sends small
Metadata (one topic) and Produce (one 100-byte record, acks=1) requests one after another over PLAINTEXT:

    no authorizer                     the baseline
    StandardAuthorizer, 1,000 ACLs    990 prefixed and literal ACLs on other resources, plus the ACLs that allow
                                      the client, so every request is checked against a populated index

    .venv/bin/python bench/security.py --messages 20000 --rounds 1     # smoke
    .venv/bin/python bench/security.py --write    # full run, updates "Security (issue 25)" in docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdoc import write_results  # noqa: E402
from tests.conftest import BrokerProcess, free_port  # noqa: E402
from tests.security_certs import CertificateAuthority  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- security:results:begin -->", "<!-- security:results:end -->"
CLIENT = {"linger.ms": 5, "batch.size": 1 << 20, "broker.address.family": "v4"}
PASSWORD = "bench-secret"


def start_broker(tmp: Path, ca, pem) -> BrokerProcess:
    ports = {"SSL": free_port(), "SASL_SSL": free_port()}
    b = BrokerProcess(tmp / "broker", {
        "listeners": None, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem.keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_file),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    b.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{ports['SSL']},"
                                f"SASL_SSL://127.0.0.1:{ports['SASL_SSL']}")
    b.ports = ports
    b.start()
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    up = UserScramCredentialUpsertion("bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())
    admin.alter_user_scram_credentials([up])["bench"].result(30)
    return b


def client_conf(b: BrokerProcess, proto: str, ca) -> dict:
    if proto == "PLAINTEXT":
        return {"bootstrap.servers": b.bootstrap}
    conf = {"bootstrap.servers": f"127.0.0.1:{b.ports[proto]}", "security.protocol": proto,
            "ssl.ca.location": str(ca.ca_file)}
    if proto == "SASL_SSL":
        conf.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": PASSWORD})
    return conf


def create(conf, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(conf if isinstance(conf, dict) else {"bootstrap.servers": conf})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while admin.list_topics(topic, timeout=10).topics[topic].error is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def produce(conf: dict, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer
    p = Producer({**conf, **CLIENT, "acks": 1})
    value = os.urandom(size)
    for _ in range(1000):                        # untimed: connection, handshake, metadata
        p.produce(topic, value, partition=0)
    assert p.flush(60) == 0
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0
    return time.perf_counter() - t0


def fetch(conf: dict, topic: str, expect: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({**conf, "group.id": f"b-{uuid.uuid4()}", "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                  "broker.address.family": "v4"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    while got < expect:
        got += sum(1 for m in c.consume(500, 0.05) if m.error() is None)
        assert time.perf_counter() - t0 < 300, f"stuck at {got} of {expect}"
    dt = time.perf_counter() - t0
    c.close()
    return dt


def request_rate(bootstrap: str, topic: str, seconds: float) -> tuple[float, float]:
    """(Metadata requests/s, Produce requests/s) from one raw client, one request in flight."""
    from tests.integration.rawclient import RawClient
    from protocol.record_batch import build_batch
    batch = build_batch([(None, b"x" * 100)])
    rates = []
    with RawClient(bootstrap) as c:
        for api in ("metadata", "produce"):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                if api == "metadata":
                    r = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
                    assert r.topics[0].error_code == 0, r.topics[0].error_code
                else:
                    r = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": [
                        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
                    assert r.responses[0].partition_responses[0].error_code == 0
                n += 1
            rates.append(n / (time.perf_counter() - t0))
    return rates[0], rates[1]


def thousand_acls(admin_conf: dict, topic: str) -> None:
    """990 ACLs on other resources (literal and prefixed, topics, groups, other principals) plus the client's."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType)
    admin = AdminClient(admin_conf)
    acls = []
    for i in range(990):
        rtype = ResourceType.TOPIC if i % 3 else ResourceType.GROUP
        pattern = ResourcePatternType.PREFIXED if i % 2 else ResourcePatternType.LITERAL
        acls.append(AclBinding(rtype, f"app-{i}", pattern, f"User:user-{i % 50}", "*",
                               AclOperation.READ if i % 4 else AclOperation.WRITE, AclPermissionType.ALLOW))
    for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.READ):
        acls.append(AclBinding(ResourceType.TOPIC, topic[:6], ResourcePatternType.PREFIXED, "User:ANONYMOUS", "*",
                               op, AclPermissionType.ALLOW))
    acls += [AclBinding(ResourceType.TOPIC, f"{topic}-{i}", ResourcePatternType.LITERAL, "User:ANONYMOUS",
                        "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY) for i in range(6)]
    acls.append(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                           AclOperation.ALL, AclPermissionType.ALLOW))
    for i in range(0, len(acls), 200):
        for fut in admin.create_acls(acls[i:i + 200]).values():
            fut.result(60)
    assert len(admin.describe_acls(_any_filter()).result(60)) == 1000


def _any_filter():
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)
    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="per authorizer request-rate measurement")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-security-"))
    ca = CertificateAuthority(tmp / "pki")
    pem = ca.issue("broker", CN="localhost")
    protos = ["PLAINTEXT", "SSL", "SASL_SSL"]
    prod: dict[str, list[float]] = {p: [] for p in protos}
    cons: dict[str, list[float]] = {p: [] for p in protos}
    b = start_broker(tmp, ca, pem)
    try:
        for r in range(args.rounds):
            order = protos[r % 3:] + protos[:r % 3]
            for proto in order:
                topic = f"sec-{proto.lower()}-{r}"
                create(b.bootstrap, topic)
                conf = client_conf(b, proto, ca)
                prod[proto].append(produce(conf, topic, args.messages, args.size))
                cons[proto].append(fetch(conf, topic, args.messages + 1000))
                print(f"round {r} {proto}: produce {args.messages / prod[proto][-1]:,.0f} records/s, "
                      f"fetch {args.messages / cons[proto][-1]:,.0f} records/s", flush=True)
    finally:
        b.stop()
    # the authorizer: the client is User:ANONYMOUS on PLAINTEXT; ACLs are created by a super user over SASL
    sasl_port = free_port()
    plain = BrokerProcess(tmp / "plain").start()
    secured = BrokerProcess(tmp / "secured", {
        "listeners": None, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="{PASSWORD}";'})
    secured.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{secured.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    secured.start()
    rates: dict[str, list[tuple[float, float]]] = {"no authorizer": [], "StandardAuthorizer, 1,000 ACLs": []}
    try:
        admin_conf = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanisms": "PLAIN", "sasl.username": "admin", "sasl.password": PASSWORD}
        topic = "authz-bench"
        for broker, conf in ((plain, {"bootstrap.servers": plain.bootstrap}), (secured, admin_conf)):
            create(conf, topic)
        thousand_acls(admin_conf, topic)
        for r in range(args.rounds):
            pairs = [("no authorizer", plain), ("StandardAuthorizer, 1,000 ACLs", secured)]
            for name, broker in (pairs if r % 2 == 0 else pairs[::-1]):
                rates[name].append(request_rate(broker.bootstrap, topic, args.seconds))
                print(f"round {r} {name}: metadata {rates[name][-1][0]:,.0f}/s, produce {rates[name][-1][1]:,.0f}/s",
                      flush=True)
    finally:
        plain.stop()
        secured.stop()
    micro = authorize_cost()
    mb = args.messages * args.size / 1e6
    rows = []
    for proto in protos:
        tp, tc = statistics.median(prod[proto]), statistics.median(cons[proto])
        bp, bc = statistics.median(prod["PLAINTEXT"]), statistics.median(cons["PLAINTEXT"])
        rows.append(f"| {proto} | {args.messages / tp:,.0f} ({mb / tp:.0f} MB/s) | {bp / tp:.2f} | "
                    f"{args.messages / tc:,.0f} ({mb / tc:.0f} MB/s) | {bc / tc:.2f} |")
    base_m = statistics.median(x[0] for x in rates["no authorizer"])
    base_p = statistics.median(x[1] for x in rates["no authorizer"])
    arows = []
    for name, xs in rates.items():
        m, p = statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs)
        arows.append(f"| {name} | {m:,.0f} | {m / base_m:.2f} | {p:,.0f} | {p / base_p:.2f} |")
    load = os.getloadavg()[0]
    block = "\n".join([
        BEGIN,
        f"One broker with PLAINTEXT, SSL and SASL_SSL listeners, {args.messages:,} records of {args.size} bytes per "
        f"case (acks=1), median of {args.rounds} rounds (order rotated), load average {load:.1f} at the end; "
        "`bench/security.py`. TLS 1.3 with an ECDSA P-256 certificate; SASL_SSL authenticates with SCRAM-SHA-512 "
        "once per connection.",
        "",
        "| listener | produce records/s | ratio | fetch records/s | ratio |", "|---|---|---|---|---|", *rows,
        "",
        f"The authorizer: one client, one request in flight, {args.seconds:.0f} s per measurement, median of "
        f"{args.rounds}; small Metadata (one topic) and Produce (one 100-byte record) requests.",
        "",
        "| broker | Metadata requests/s | ratio | Produce requests/s | ratio |", "|---|---|---|---|---|", *arows,
        "",
        f"In-process, `StandardAuthorizer.authorize` with the same 1,000 ACLs: {micro[0]:.1f} µs per decision on a "
        f"resource seen for the first time, {micro[1]:.2f} µs when repeated (memoised per index); rebuilding the "
        f"index after an ACL change takes {micro[2]:.1f} ms.",
        END])
    print(block)
    if args.write:
        write_results(DOC, BEGIN, END, block, "## Security (issue 25)\n\n")


def authorize_cost() -> tuple[float, float, float]:
    """(µs per fresh decision, µs per repeated decision, ms to index) with 1,000 ACLs, in this process."""
    import uuid as _uuid
    from types import MappingProxyType
    from broker.security.authorizer import StandardAuthorizer
    from metadata.acls import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAcl
    acls = {}
    for i in range(1000):
        acls[_uuid.uuid4().hex] = StandardAcl(ResourceType.TOPIC if i % 3 else ResourceType.GROUP, f"app-{i}",
                                              PatternType.PREFIXED if i % 2 else PatternType.LITERAL,
                                              f"User:user-{i % 50}", "*", AclOperation.READ, AclPermissionType.ALLOW)
    acls = MappingProxyType(acls)
    a = StandardAuthorizer()
    t0 = time.perf_counter()
    a.load(acls)
    index_ms = (time.perf_counter() - t0) * 1000
    n = 20000
    t0 = time.perf_counter()
    for i in range(n):
        a.authorize("User:user-7", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, f"app-{i}-x")
    fresh = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        a.authorize("User:user-7", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "app-7-x")
    repeated = (time.perf_counter() - t0) / n * 1e6
    return fresh, repeated, index_ms


if __name__ == "__main__":
    main()
