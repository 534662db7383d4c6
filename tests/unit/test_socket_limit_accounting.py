"""The bookkeeping behind Kafka's connection and request-memory limits (broker/socket_limits.py) and the rate-limited
log (broker/log_limits.py), without sockets; tests/integration/test_socket_limits.py drives them on a broker."""
from __future__ import annotations

import asyncio
import logging

import pytest

from broker.config import BrokerConfig
from broker.log_limits import RateLimitedLog
from broker.security.listeners import ListenerConfig
from broker.socket_limits import SMALL_FRAME, ConnectionQuotas, RequestMemoryPool, parse_ip_overrides, validate


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rate_limited_log_keeps_the_first_lines_then_a_few_and_counts_the_rest(caplog):
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("t.rl"), logging.WARNING, burst=3, per_interval=2, interval=10,
                             clock=clock)
    with caplog.at_level(logging.WARNING, logger="t.rl"):
        written = [limited.log("bad frame %d", i) for i in range(100)]
        assert written[:3] == [True] * 3 and not any(written[3:])
        clock.now = 5.0                                   # one token back (2 per 10 s)
        assert limited.log("bad frame %d", 100)
        clock.now = 5.1
        assert not limited.log("bad frame %d", 101)
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[:3] == ["bad frame 0", "bad frame 1", "bad frame 2"]
    assert msgs[3] == "suppressed 97 similar messages in the last 5.0 s"
    assert msgs[4] == "bad frame 100"
    assert len(msgs) == 5
    limited.flush()
    assert caplog.records[-1].getMessage().startswith("suppressed 1 similar messages")


async def test_rate_limited_log_reports_a_flood_that_stopped(caplog):
    limited = RateLimitedLog(logging.getLogger("t.rl2"), logging.WARNING, burst=1, per_interval=1, interval=0.05)
    with caplog.at_level(logging.WARNING, logger="t.rl2"):
        for i in range(10):
            limited.log("x %d", i)
        await asyncio.sleep(0.2)
    assert [r.getMessage().split(" in the last")[0] for r in caplog.records] == \
        ["x 0", "suppressed 9 similar messages"]


def test_rate_limited_log_is_silent_below_its_level(caplog):
    limited = RateLimitedLog(logging.getLogger("t.rl3"), logging.DEBUG, burst=1)
    with caplog.at_level(logging.INFO, logger="t.rl3"):
        assert not limited.log("hidden")
    assert limited.suppressed == 0 and not caplog.records


async def test_memory_pool_lets_one_allocation_overshoot_and_wakes_waiters_in_order():
    u = SMALL_FRAME                                       # sizes in units above which frames can wait
    pool = RequestMemoryPool(100 * u)
    woken = []

    class Conn:
        closed = False

        def __init__(self, name, size):
            self.name, self.size = name, size

        def memory_available(self):
            if pool.try_allocate(self.size):
                woken.append(self.name)
            else:
                pool.wait(self)

    assert pool.try_allocate(250 * u)                     # larger than the pool, taken while anything is left
    assert pool.available == -150 * u and pool.used() == 250 * u
    a, b, c = Conn("a", 10 * u), Conn("b", 10 * u), Conn("c", 200 * u)
    for conn in (a, b, c):
        assert not pool.try_allocate(conn.size)
        pool.wait(conn)
    assert pool.depleted_since is not None
    assert pool.try_allocate(u), "a small frame (a heartbeat, a fetch request) never waits"
    pool.release(u)
    pool.release(250 * u)
    assert not pool.try_allocate(2 * u), "a newcomer does not jump the queue"
    await asyncio.sleep(0)
    assert woken == ["a", "b", "c"] and pool.available == 100 * u - 220 * u
    for n in (10, 10, 200):
        pool.release(n * u)
    assert pool.available == 100 * u and pool.used() == 0 and pool.depleted_seconds > 0


def test_unbounded_memory_pool_never_refuses():
    pool = RequestMemoryPool(-1)
    assert not pool.bounded
    assert all(pool.try_allocate(1 << 30) for _ in range(10))


def config(**props) -> BrokerConfig:
    return BrokerConfig({k.replace("_", "."): str(v) for k, v in props.items()})


def test_overrides_and_validation_as_kafka():
    assert parse_ip_overrides("hostName:100, 127.0.0.1:200,[::1]:3") == {"hostName": 100, "127.0.0.1": 200,
                                                                          "::1": 3}
    for bad in ("127.0.0.1", "127.0.0.1:x", ":5"):
        with pytest.raises(ValueError):
            parse_ip_overrides(bad)
    with pytest.raises(ValueError, match="can be set to zero only if"):
        validate(config(max_connections_per_ip=0))
    validate(BrokerConfig({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:2"}))
    with pytest.raises(ValueError, match="at least 0"):
        validate(config(max_connections=-1))
    validate(BrokerConfig({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1000000"}))


def quotas(listeners: str, **props) -> ConnectionQuotas:
    props = {"listeners": listeners, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
             **{k.replace("_", "."): str(v) for k, v in props.items()}}
    cfg = BrokerConfig(props)
    return ConnectionQuotas(cfg, ListenerConfig.from_config(cfg))


def test_per_ip_limit_and_override():
    q = quotas("PLAINTEXT://127.0.0.1:9092", max_connections_per_ip=1,
               **{"max.connections.per.ip.overrides": "127.0.0.2:2"})
    assert q.limited
    assert q.inc("PLAINTEXT", "127.0.0.1") and not q.inc("PLAINTEXT", "127.0.0.1")
    assert q.inc("PLAINTEXT", "127.0.0.2") and q.inc("PLAINTEXT", "127.0.0.2")
    assert not q.inc("PLAINTEXT", "127.0.0.2")
    assert q.total == 3 and q.rejected == 2
    q.dec("PLAINTEXT", "127.0.0.1")
    assert q.inc("PLAINTEXT", "127.0.0.1")


def test_no_limit_configured_means_the_loops_own_server():
    assert not quotas("PLAINTEXT://127.0.0.1:9092").limited


def test_inter_broker_listener_is_protected_only_beside_another_listener():
    single = quotas("INTERNAL://127.0.0.1:9093", max_connections=1, inter_broker_listener_name="INTERNAL")
    assert single.protected is None
    assert single.inc("INTERNAL", "127.0.0.1") and not single.slot_available("INTERNAL")
    q = quotas("PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093", max_connections=1,
               inter_broker_listener_name="INTERNAL", **{"listener.name.internal.max.connections": "2"})
    assert q.protected == "INTERNAL"
    assert q.inc("PLAINTEXT", "127.0.0.1")
    assert not q.slot_available("PLAINTEXT") and q.slot_available("INTERNAL")
    assert q.inc("INTERNAL", "127.0.0.1") and q.exceeded() == 1
    assert q.inc("INTERNAL", "127.0.0.1") and not q.slot_available("INTERNAL"), "its own listener limit applies"


async def test_wait_for_slot_wakes_when_a_connection_closes():
    q = quotas("PLAINTEXT://127.0.0.1:9092", max_connections=1)
    assert q.inc("PLAINTEXT", "127.0.0.1")
    waiter = asyncio.ensure_future(q.wait_for_slot("PLAINTEXT"))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    q.dec("PLAINTEXT", "127.0.0.1")
    await asyncio.wait_for(waiter, 1)


async def test_a_connection_paused_for_writing_is_not_resumed_by_other_paths():
    """A client that does not read its answers: reading stays paused until the transport's buffer drains, whatever
    else (an answered request, the end of a quota throttle, memory coming back) would resume it."""
    from types import SimpleNamespace
    from broker.socket_server import KafkaConnection

    class Transport:
        reading = True

        def pause_reading(self):
            self.reading = False

        def resume_reading(self):
            self.reading = True

    broker = SimpleNamespace(memory_pool=None)
    conn = KafkaConnection(broker)
    conn.transport = t = Transport()
    conn.pause_writing()
    assert not t.reading
    conn._resume()                       # what an answered request, memory_available and a throttle's end call
    conn._throttle(1)
    conn._end_throttle()
    assert not t.reading
    conn.resume_writing()
    assert t.reading
