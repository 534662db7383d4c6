"""Client quotas as a Kafka user sees them, on a real broker: `strata configs` sets producer_byte_rate and
consumer_byte_rate for client-id "slow" (kafka-configs.sh's syntax and output); a confluent-kafka producer with that
client id is held near its quota and told so (throttle_cb, from throttle_time_ms), while another client id on the same
broker is not; a consumer with that client id likewise. The broker's quota window is made short (quota.window.num=2)
so that the first window's allowance does not dominate a few seconds of measurement."""
from __future__ import annotations

import contextlib
import io
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

pytestmark = pytest.mark.integration

QUOTA = 100 * 1024                       # bytes per second
MESSAGE = b"x" * 1024
SECONDS = 3.0


def configs(b, *args: str) -> SimpleNamespace:
    """`strata configs ...`, run in this process (a subprocess per call cost a second of imports)."""
    from tools.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["configs", "--bootstrap-server", b.bootstrap, *args])
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def produce_for(b, topic: str, client_id: str, seconds: float, at_end=None) -> tuple[float, list[float]]:
    """Produce as fast as the client goes for `seconds`: (bytes per second acknowledged, throttle times seen).
    `at_end` is called as the time is up, before what is left is purged."""
    throttles: list[float] = []
    acked = [0]

    def delivered(err, msg):
        if err is None:
            acked[0] += len(msg.value())

    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 16384,
                  "max.in.flight.requests.per.connection": 5, "enable.idempotence": False,
                  "queue.buffering.max.messages": 2000,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, MESSAGE, on_delivery=delivered)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    done = acked[0]
    elapsed = time.monotonic() - start
    if at_end is not None:
        at_end()
    p.purge(in_queue=True, in_flight=False)       # what is left would drain at the quota's pace
    p.flush(10)
    return done / elapsed, throttles


def consume_for(b, topic: str, client_id: str, seconds: float) -> tuple[float, list[float]]:
    throttles: list[float] = []
    c = Consumer({"bootstrap.servers": b.bootstrap, "client.id": client_id, "group.id": f"g-{client_id}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, start = 0, None
    try:
        while start is None or time.monotonic() - start < seconds:
            m = c.poll(0.1)
            if m is None or m.error():
                continue
            if start is None:
                start = time.monotonic()       # from the first record: connecting is not the quota's doing
            got += len(m.value())
        return got / (time.monotonic() - start), throttles
    finally:
        c.close()


def _scrape(port: int) -> dict[tuple, float]:
    """The broker's Prometheus samples: (name, labels as sorted pairs) -> value."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_producer_and_consumer_are_held_to_their_quotas(make_broker, topic_name):
    from tests.conftest import free_port
    port = free_port()
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1", "metrics.port": str(port)})
    r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "slow", "--add-config",
                f"producer_byte_rate={QUOTA},consumer_byte_rate={QUOTA}")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for client slow.\n"), r.stderr
    r = configs(b, "--describe", "--entity-type", "clients", "--entity-name", "slow")
    assert r.stdout == f"Quota configs for client-id 'slow' are producer_byte_rate={float(QUOTA)}, " \
                       f"consumer_byte_rate={float(QUOTA)}\n", r.stderr

    fast, fast_throttles = produce_for(b, topic_name, "fast", 1.0)
    scraped = []                          # the quota metrics, read while the throttled client is still producing
    slow, slow_throttles = produce_for(b, topic_name, "slow", SECONDS, at_end=lambda: scraped.append(_scrape(port)))
    assert slow < 2 * QUOTA, f"slow producer at {slow / 1024:.0f} KiB/s"
    assert slow > QUOTA / 4, f"slow producer starved at {slow / 1024:.0f} KiB/s"
    assert fast > 5 * QUOTA, f"unthrottled producer only at {fast / 1024:.0f} KiB/s"
    assert slow_throttles and max(slow_throttles) > 0 and not fast_throttles
    # Kafka's per-client quota metrics: the throttled client id has them, the one without a quota none
    metrics = scraped[0]
    slow_tags = (("client_id", "slow"), ("user", ""))
    assert 0 < metrics[("kafka_server_produce_byte_rate", slow_tags)] < 3 * QUOTA
    assert metrics[("kafka_server_produce_throttle_time", slow_tags)] > 0
    assert not [k for k in metrics if ("client_id", "fast") in k[1]]

    slow_in, slow_in_throttles = consume_for(b, topic_name, "slow", SECONDS)
    assert slow_in < 2 * QUOTA, f"slow consumer at {slow_in / 1024:.0f} KiB/s"
    assert slow_in_throttles and max(slow_in_throttles) > 0
    fast_in, fast_in_throttles = consume_for(b, topic_name, "fast", 1.0)
    assert fast_in > 5 * QUOTA and not fast_in_throttles, f"unthrottled consumer only at {fast_in / 1024:.0f} KiB/s"

    # removing the quota lifts it
    r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "slow", "--delete-config",
                "producer_byte_rate,consumer_byte_rate")
    assert r.returncode == 0, r.stderr
    assert configs(b, "--describe", "--entity-type", "clients").stdout == ""
    time.sleep(2.5)                       # the old samples (2 windows of 1 s) age out
    again, _ = produce_for(b, topic_name, "slow", 1.0)
    assert again > 5 * QUOTA, f"after removal still at {again / 1024:.0f} KiB/s"


def test_request_percentage_throttles_for_at_most_a_window(make_broker, topic_name):
    """request_percentage: a client given almost no handling time is throttled, each time for at most one window
    (quota.window.size.seconds), as Kafka bounds the request quota; another client id is not."""
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "busy", "--add-config",
                "request_percentage=0.01")
    assert r.returncode == 0, r.stderr
    _, throttles = produce_for(b, topic_name, "busy", 2.0)
    assert throttles and 0 < max(throttles) <= 1.0, throttles
    _, others = produce_for(b, topic_name, "idle", 1.0)
    assert not others


def test_bad_quota_alterations_get_kafka_errors(make_broker):
    b = make_broker()
    cases = [
        (["--entity-type", "clients", "--entity-name", "c", "--add-config", "producer_byte_rate=1.5"],
         "producer_byte_rate cannot be a fractional value."),
        (["--entity-type", "clients", "--entity-name", "c", "--add-config", "bogus=1"],
         "Invalid configuration key bogus"),
        (["--entity-type", "users", "--entity-default", "--add-config", "request_percentage=0"],
         "Quota request_percentage must be greater than 0"),
        (["--entity-type", "clients", "--entity-name", "c", "--add-config", "producer_byte_rate=fast"],
         "Cannot parse quota configuration value for producer_byte_rate: fast"),
        (["--entity-type", "clients", "--entity-name", "c", "--delete-config", "producer_byte_rate"],
         "Invalid config(s): producer_byte_rate"),
    ]
    for args, message in cases:
        r = configs(b, "--alter", *args)
        assert r.returncode == 1 and message in r.stderr, (args, r.stderr)
    r = configs(b, "--alter", "--entity-type", "users", "--entity-default", "--add-config",
                "request_percentage=12.5,controller_mutation_rate=10")
    assert (r.returncode, r.stdout) == (0, "Completed updating default config for users in the cluster.\n"), r.stderr
    r = configs(b, "--describe", "--entity-type", "users", "--entity-default")
    assert r.stdout == "Quota configs for the default user-principal are request_percentage=12.5, " \
                       "controller_mutation_rate=10.0\n", r.stderr


def test_a_quota_capped_fetch_does_not_wait_for_min_bytes(make_broker, topic_name):
    """A consumer whose fetch.min.bytes is above what its quota allows in one window: Kafka lowers min_bytes to the
    capped max_bytes, so the fetch is answered with data instead of waiting fetch.max.wait.ms every time."""
    from tests.integration.helpers import produce_all, producer
    from tests.integration.rawclient import RawClient
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    p = producer(b.bootstrap)
    for _ in range(16):         # one 1 KiB batch each: a batch above the quota's window would be throttled forever
        produce_all(p, topic_name, [(None, MESSAGE)], partition=0)
    r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "rawclient", "--add-config",
                "consumer_byte_rate=4096")
    assert r.returncode == 0, r.stderr
    with RawClient(b.bootstrap, timeout=20) as c:
        # max_wait 60 s: had the broker kept min_bytes above the cap, this would go unanswered past the 20 s timeout
        got, throttles = b"", []
        for _ in range(5):
            resp = c.fetch(topic_name, 0, 0, min_bytes=10 << 20, max_wait_ms=60_000)
            assert resp.error_code == 0, resp
            throttles.append(resp.throttle_time)
            if resp.responses:                      # a throttled fetch is answered empty, as in Kafka
                [t] = resp.responses
                [part] = t.partitions
                got = part.records or b""
                if got:
                    break
            time.sleep(resp.throttle_time.total_seconds())
        assert got, f"no records in 5 fetches (throttle times {throttles})"


def test_a_broker_client_id_escapes_quotas_only_with_cluster_action(make_broker, topic_name):
    """Other brokers' writes are never throttled, but a client id like theirs does not make a client a broker: the
    principal needs CLUSTER_ACTION too. With an authorizer that lets everyone do what no ACL names, a producer with
    client id strata-broker-9 and a 100 KiB/s quota is not throttled; once an ACL denies User:ANONYMOUS
    CLUSTER_ACTION, the same producer is held to the quota."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                       ResourcePatternType, ResourceType)
    b = make_broker({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                     "allow.everyone.if.no.acl.found": "true", "quota.window.num": "2",
                     "quota.window.size.seconds": "1"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(timeout=30)
    r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "strata-broker-9", "--add-config",
                f"producer_byte_rate={QUOTA}")
    assert r.returncode == 0, r.stderr
    exempt, exempt_throttles = produce_for(b, topic_name, "strata-broker-9", 1.5)
    assert exempt > 5 * QUOTA and not exempt_throttles, f"exempt producer at {exempt / 1024:.0f} KiB/s"
    deny = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                      AclOperation.CLUSTER_ACTION, AclPermissionType.DENY)
    admin.create_acls([deny])[deny].result(timeout=30)
    time.sleep(2.5)                       # the exempt producer's samples (2 windows of 1 s) age out
    held, throttles = produce_for(b, topic_name, "strata-broker-9", SECONDS)
    assert held < 2 * QUOTA and throttles, f"producer without CLUSTER_ACTION at {held / 1024:.0f} KiB/s"


def test_acks_0_produce_is_outside_the_request_quota(make_broker, topic_name):
    """Kafka leaves acks=0 produce out of request_percentage (no response to carry a throttle time): with almost no
    handling time allowed, an acks=1 producer gets a few requests a second through, an acks=0 producer of the same
    client id is not held."""
    from tests.integration.rawclient import RawClient
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "busy", "--add-config",
                "request_percentage=0.01")
    assert r.returncode == 0, r.stderr

    def sent(acks: str, seconds: float) -> int:
        with RawClient(b.bootstrap) as c:
            before = c.fetch_partition(topic_name, 0, 0, max_bytes=1).high_watermark
        p = Producer({"bootstrap.servers": b.bootstrap, "client.id": "busy", "acks": acks, "linger.ms": 0,
                      "enable.idempotence": False, "max.in.flight.requests.per.connection": 1})
        # the client's ApiVersions and Metadata are charged (as Kafka charges them) and muted: let that pass first
        p.produce(topic_name, MESSAGE)
        p.flush(10)
        time.sleep(2.2)                   # two windows of 1 s
        before += 1 if acks != "0" else 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                p.produce(topic_name, MESSAGE)
            except BufferError:
                pass
            p.poll(0.001)
        p.purge(in_queue=True, in_flight=False)
        p.flush(10)
        time.sleep(0.5)
        with RawClient(b.bootstrap) as c:
            return c.fetch_partition(topic_name, 0, 0, max_bytes=1).high_watermark - before

    produce_for(b, topic_name, "warm", 0.5)   # creates the topic
    with_acks = sent("1", 2.0)
    time.sleep(2.5)
    without = sent("0", 2.0)
    print(f"acks=0: {without} records, acks=1: {with_acks}")
    assert without > 5 * with_acks, f"acks=0: {without} records, acks=1: {with_acks}"


def _connect_all(b, source: str, n: int) -> list[tuple[bool, float]]:
    """Open `n` connections from `source` (a loopback address of this host) at once, send ApiVersions on each: for
    each, whether it was answered, and after how long (from the first connect) it was closed if it was not."""
    import socket
    import struct
    host, port = b.bootstrap.rsplit(":", 1)
    started = time.monotonic()
    socks = [socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0)) for _ in range(n)]
    header = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    out = []
    try:
        for s in socks:
            s.sendall(struct.pack(">i", len(header)) + header)
        for s in socks:
            try:
                head = s.recv(4)
            except (ConnectionResetError, TimeoutError):
                head = b""
            out.append((bool(head), time.monotonic() - started))
        return out
    finally:
        for s in socks:
            s.close()


def test_connection_creation_rate_per_ip_closes_what_is_over_it(make_broker):
    """connection_creation_rate=2 for 127.0.0.1 (KIP-612, `strata configs --entity-type ips`): of twelve
    connections opened at once from that address, the ones over the rate are closed unanswered after a delay of at
    most a window, as Kafka's acceptor does; another address (127.0.0.2) is served all the same, and once the
    window has passed 127.0.0.1 is served again."""
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    r = configs(b, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1", "--add-config",
                "connection_creation_rate=2")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for ip 127.0.0.1.\n"), (r.stdout, r.stderr)
    outcomes = _connect_all(b, "127.0.0.1", 12)
    closed_after = [t for ok, t in outcomes if not ok]
    assert 1 <= 12 - len(closed_after) <= 3, outcomes
    assert all(0.05 < t <= 1.5 for t in closed_after), outcomes
    assert all(ok for ok, _ in _connect_all(b, "127.0.0.2", 12)), "another address was throttled"
    time.sleep(2.5)                       # two windows of 1 s
    assert _connect_all(b, "127.0.0.1", 1)[0][0]
    r = configs(b, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1", "--delete-config",
                "connection_creation_rate")
    assert r.returncode == 0, r.stderr
    assert all(ok for ok, _ in _connect_all(b, "127.0.0.1", 12)), "the quota outlived its removal"


def test_controller_mutation_rate_refuses_or_throttles_partition_changes(make_broker, topic_name):
    """controller_mutation_rate=10 (KIP-599) with a burst of 10 x 2 windows x 1 s = 20 partitions: a CreateTopics v7
    of 40 partitions is taken whole (the bucket may go below zero once, here to -20: two seconds to refill); while
    it is below zero the next creation, deletion or partition addition is refused with THROTTLING_QUOTA_EXCEEDED and
    the time left to refill it; another client id is not; once refilled, the refused creation goes through. Versions
    that do not know the error (CreateTopics below v6) are never refused, only throttled."""
    from tests.conftest import free_port
    from tests.integration.rawclient import RawClient
    port = free_port()
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1", "metrics.port": str(port)})
    for client in ("mut", "old"):
        r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", client, "--add-config",
                    "controller_mutation_rate=10")
        assert r.returncode == 0, r.stderr

    def call(api_key, version, body, client):
        with RawClient(b.bootstrap) as raw:         # a connection each: a throttled one is muted a while
            return raw.request(api_key, version, body, client_id=client)

    def create(name, partitions, client, version=7):
        resp = call(19, version, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                              "assignments": [], "configs": []}],
                                  "timeout": 10000, "validate_only": False}, client)
        t = resp.topics[0]
        return t.error_code, t.error_message, resp.throttle_time.total_seconds() * 1000

    assert create(f"{topic_name}-a", 40, "mut")[0] == 0
    err, msg, throttle = create(f"{topic_name}-b", 1, "mut")
    refilled = time.monotonic() + throttle / 1000
    assert (err, msg) == (89, "The throttling quota has been exceeded."), (err, msg)
    assert 0 < throttle <= 2000, throttle                        # (20 tokens short) / 10 per s, less the time since
    assert -20 <= _scrape(port)[("kafka_server_controllermutation_tokens", (("client_id", "mut"), ("user", "")))] < 0
    deleted = call(20, 6, {"topics": [{"name": f"{topic_name}-a", "topic_id": None}], "timeout": 10000}, "mut")
    added = call(37, 3, {"topics": [{"name": f"{topic_name}-a", "count": 48, "assignments": None}],
                         "timeout": 10000, "validate_only": False}, "mut")
    if time.monotonic() < refilled - 0.1:                       # both answered before the bucket could refill
        assert deleted.responses[0].error_code == 89 and added.results[0].error_code == 89
    assert create(f"{topic_name}-c", 40, "someone-else")[0] == 0
    time.sleep(max(0.0, refilled - time.monotonic()) + 0.3)
    assert create(f"{topic_name}-b", 1, "mut")[0] == 0
    # CreateTopics v5 (permissive): taken, and throttled instead of refused
    assert create(f"{topic_name}-d", 40, "old", version=5)[0] == 0
    err, _, throttle = create(f"{topic_name}-e", 40, "old", version=5)
    assert err == 0 and throttle > 2000, (err, throttle)


def test_request_percentage_charges_every_client_api(make_broker, topic_name):
    """request_percentage on APIs other than Produce and Fetch, as Kafka charges every client request: a client id
    given 0.01% of a thread is answered with throttle_time_ms on Metadata (a handler that answers at once) and on
    CreateTopics (a coroutine, timed only while it runs), and its connection is muted; another client id is not."""
    from tests.integration.rawclient import RawClient
    b = make_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    for client in ("busy", "creator"):
        r = configs(b, "--alter", "--entity-type", "clients", "--entity-name", client, "--add-config",
                    "request_percentage=0.01")
        assert r.returncode == 0, r.stderr
    metadata = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}

    def throttles(client: str, n: int) -> list[float]:
        out = []
        with RawClient(b.bootstrap) as raw:
            for _ in range(n):
                out.append(raw.request(3, 12, metadata, client_id=client).throttle_time.total_seconds())
        return out

    busy = throttles("busy", 5)
    assert max(busy) > 0 and max(busy) <= 1.0, busy              # at most one window, as Kafka bounds it
    assert throttles("idle", 5) == [0.0] * 5
    with RawClient(b.bootstrap) as raw:
        # a client id that has sent nothing else: only the coroutine's own running time can throttle it
        resp = raw.request(19, 7, {"topics": [{"name": f"{topic_name}-{i}", "num_partitions": 1,
                                               "replication_factor": 1, "assignments": [], "configs": []}
                                              for i in range(20)], "timeout": 10000, "validate_only": False},
                           client_id="creator")
        assert all(t.error_code == 0 for t in resp.topics)
        assert resp.throttle_time.total_seconds() > 0
        started = time.monotonic()
        raw.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}, client_id="creator")
        assert time.monotonic() - started > 0.05, "the throttled connection was not muted"
