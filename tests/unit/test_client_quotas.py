"""Client quotas: the controller's AlterClientQuotas operation (metadata/quota_control.py, Kafka's
ClientQuotaControlManager messages), the image and snapshots, DescribeClientQuotas filters against a brute-force
model (hypothesis), and the enforcement maths of broker/quotas.py against Kafka's own ClientQuotaManagerTest cases."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.quotas import ClientQuotaManager, ConnectionRateQuotas, Rate, throttle_time
from metadata.image import MetadataImage
from metadata.quota_control import (DescribeError, QuotaAlteration, alter_quotas, describe_quotas, parse_filter)
from metadata.records import Envelope, decode, encode
from protocol.errors import ErrorCode

INVALID = ErrorCode.invalid_request


def alter(image, *alterations, validate_only=False):
    records, answer = alter_quotas(list(alterations), validate_only)(image)
    return image.apply(records), records, answer


def client(name, **ops):
    return QuotaAlteration([("client-id", name)], list(ops.items()))


def test_set_change_remove_and_snapshot():
    image, records, answer = alter(MetadataImage(), client("slow", producer_byte_rate=1024.0,
                                                           consumer_byte_rate=2048.0))
    assert answer == [([("client-id", "slow")], 0, None)]
    assert dict(image.client_quotas[(("client-id", "slow"),)]) == {"producer_byte_rate": 1024.0,
                                                                   "consumer_byte_rate": 2048.0}
    again, records, _ = alter(image, client("slow", producer_byte_rate=1024.0))
    assert records == []                                # an unchanged value writes nothing (Kafka)
    image, _, _ = alter(image, client("slow", producer_byte_rate=None, request_percentage=None))   # missing: fine
    assert dict(image.client_quotas[(("client-id", "slow"),)]) == {"consumer_byte_rate": 2048.0}
    rebuilt = MetadataImage().apply(image.to_records())
    assert rebuilt.client_quotas == image.client_quotas
    for r in image.to_records():                        # the records survive the log's encoding
        assert decode(encode(Envelope(0, r))).record == r
    image, _, _ = alter(image, client("slow", consumer_byte_rate=None))
    assert not image.client_quotas                       # an entity without quotas is gone


def test_validate_only_writes_nothing():
    image, records, answer = alter(MetadataImage(), client("x", producer_byte_rate=10.0), validate_only=True)
    assert records == [] and answer[0][1] == 0 and not image.client_quotas


@pytest.mark.parametrize("entity,ops,message", [
    ([], [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ([("group", "g")], [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ([("user", "")], [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ([("ip", "1.2.3.4"), ("user", "u")], [("connection_creation_rate", 1.0)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([("ip", "not an ip")], [("connection_creation_rate", 1.0)], "not an ip is not a valid IP or resolvable host."),
    ([("user", "u")], [("connection_creation_rate", 1.0)], "Invalid configuration key connection_creation_rate"),
    ([("ip", None)], [("producer_byte_rate", 1.0)], "Invalid configuration key producer_byte_rate"),
    ([("user", "u")], [("bogus", 1.0)], "Invalid configuration key bogus"),
    ([("user", "u")], [("producer_byte_rate", 0.0)], "Quota producer_byte_rate must be greater than 0"),
    ([("user", "u")], [("request_percentage", -1.0)], "Quota request_percentage must be greater than 0"),
    ([("user", "u")], [("producer_byte_rate", 1.5)], "producer_byte_rate cannot be a fractional value."),
    ([("user", "u")], [("producer_byte_rate", 1e19)], "Proposed value for producer_byte_rate is too large for a LONG."),
    ([("ip", None)], [("connection_creation_rate", 3e9)],
     "Proposed value for connection_creation_rate is too large for an INT."),
    ([("user", "u")], [("producer_byte_rate", math.nan)], "Quota producer_byte_rate must be greater than 0"),
])
def test_refusals_carry_kafkas_messages(entity, ops, message):
    image, records, answer = alter(MetadataImage(), QuotaAlteration(entity, ops))
    assert records == [] and answer[0][1:] == (INVALID, message)


def test_infinite_double_quota_is_accepted_and_never_throttles():
    image, _, answer = alter(MetadataImage(), client("x", request_percentage=math.inf))
    assert answer[0][1] == 0
    assert ClientQuotaManager("request_percentage").record(image.client_quotas, "User:u", "x", 1e12) == 0


def test_refused_entity_leaves_the_others():
    image, _, answer = alter(MetadataImage(), client("ok", producer_byte_rate=5.0),
                             client("bad", producer_byte_rate=5.0, bogus=1.0))
    assert [a[1] for a in answer] == [0, INVALID]
    assert list(image.client_quotas) == [(("client-id", "ok"),)]


def test_duplicates_as_kafka_answers_them():
    dup_key = QuotaAlteration([("client-id", "a")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)])
    _, records, answer = alter(MetadataImage(), dup_key)
    assert records == [] and answer == [([("client-id", "a")], INVALID,
                                         "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=a})")]
    _, _, answer = alter(MetadataImage(), client("a", producer_byte_rate=1.0), client("a", consumer_byte_rate=1.0))
    assert len(answer) == 1 and answer[0][1] == INVALID
    both = QuotaAlteration([("user", "u"), ("client-id", None), ("ip", None)][:2],
                           [("request_percentage", 12.5), ("controller_mutation_rate", 0.5)])
    image, _, answer = alter(MetadataImage(), both)
    assert answer[0][1] == 0
    assert dict(image.client_quotas[(("client-id", None), ("user", "u"))]) == {"request_percentage": 12.5,
                                                                              "controller_mutation_rate": 0.5}


# ---- DescribeClientQuotas filters ------------------------------------------------------------------------------
TYPES = ["user", "client-id", "ip"]
NAMES = [None, "a", "b"]
entity_st = st.one_of(
    st.tuples(st.sampled_from(NAMES)).map(lambda n: (("user", n[0]),)),
    st.tuples(st.sampled_from(NAMES)).map(lambda n: (("client-id", n[0]),)),
    st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)).map(lambda p: (("client-id", p[1]), ("user", p[0]))),
    st.tuples(st.sampled_from([None, "10.0.0.1"])).map(lambda n: (("ip", n[0]),)))
component_st = st.tuples(st.sampled_from(TYPES + ["", "group"]), st.sampled_from([0, 1, 2, 3]),
                         st.sampled_from(NAMES))


def model(entities, components, strict):
    """The filter as Kafka's DescribeClientQuotasRequest documents it, written independently: None for an invalid
    filter, else the entities every component matches (strict: and no other entity types)."""
    types = [c[0] for c in components]
    if any(t not in TYPES for t in types) or len(set(types)) != len(types):
        return None
    if "ip" in types and len(types) > 1:
        return None
    for _, match_type, match in components:
        if match_type not in (0, 1, 2) or (match_type == 0) != (match is not None):
            return None
    out = []
    for entity in entities:
        names = dict(entity)
        ok = all(t in names and (mt == 2 or names[t] == (m if mt == 0 else None)) for t, mt, m in components)
        if ok and strict and set(names) != set(types):
            ok = False
        if ok:
            out.append(entity)
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(entity_st, max_size=8, unique=True), st.lists(component_st, max_size=3), st.booleans())
def test_describe_filter_matches_the_model(entities, components, strict):
    image = MetadataImage()
    for i, entity in enumerate(entities):
        key = "connection_creation_rate" if entity[0][0] == "ip" else "producer_byte_rate"
        image, _, answer = alter(image, QuotaAlteration(list(entity), [(key, float(i + 1))]))
        assert answer[0][1] == 0
    expected = model(entities, components, strict)
    try:
        found = describe_quotas(image, components, strict)
    except DescribeError as e:
        assert expected is None, f"refused: {e}"
        unsupported = any(t not in TYPES and t for t, _, _ in components)
        assert e.code in ((ErrorCode.unsupported_version, INVALID) if unsupported else (INVALID,))
        return
    assert expected is not None
    assert sorted(map(repr, (e for e, _ in found))) == sorted(map(repr, expected))


def test_describe_refusals():
    with pytest.raises(DescribeError, match="MATCH_TYPE_EXACT, but set match string to null"):
        parse_filter([("user", 0, None)])
    with pytest.raises(DescribeError) as e:
        parse_filter([("group", 2, None)])
    assert e.value.code == ErrorCode.unsupported_version


# ---- enforcement maths -----------------------------------------------------------------------------------------
def test_throttle_time_is_kafkas():
    """ClientQuotaManagerTest.testQuotaViolation: quota 500 B/s, 11 samples of 1 s."""
    rate, t = Rate(11, 1000), 1_000_000
    for _ in range(10):
        rate.record(400, t)
        assert throttle_time(rate, 500, t) == 0
        t += 1000
    t += 500
    rate.record(2300, t)                 # 400*10 + 2000 + 300 = 6300 over 10.5 s = 600 B/s
    assert throttle_time(rate, 500, t) == 2100           # (600-500)/500 * 10.5 s
    t += 2100                            # the client waits its throttle time
    for _ in range(10):
        rate.record(400, t)
        t += 1000
    rate.record(0, t)
    assert throttle_time(rate, 500, t) == 0               # the burst's sample has rolled over


def quotas_of(*entries) -> MetadataImage:
    image = MetadataImage()
    for entity, value in entries:
        image, _, answer = alter(image, QuotaAlteration(entity, [("producer_byte_rate", float(value))]))
        assert answer[0][1] == 0
    return image


def test_quota_precedence_is_kafkas():
    """ClientQuotaManagerTest.testQuotaConfigPrecedence, first part: (user, client-id, expected bound, value,
    throttled), the value recorded 11 times at one instant as Kafka's checkQuota does."""
    U, C = "user", "client-id"
    image = quotas_of(([(U, None)], 1000), ([(C, None)], 2000), ([(U, None), (C, None)], 3000), ([(U, "userA")], 4000),
                      ([(U, "userA"), (C, "client1")], 5000), ([(U, "userB")], 6000),
                      ([(U, "userB"), (C, "client1")], 7000), ([(U, "userB"), (C, None)], 8000),
                      ([(U, "userC")], 10000), ([(C, "client1")], 9000))
    manager = ClientQuotaManager("producer_byte_rate")
    t = 5_000_000

    def check(q, user, client_id, bound, value, throttled):
        assert manager.resolve(q, user, client_id)[1] == bound
        assert manager.max_value_in_window(q, f"User:{user}", client_id) == bound * 10
        ms = manager.record(q, f"User:{user}", client_id, value * 11, t)
        assert (ms > 0) == throttled, (user, client_id)

    q = image.client_quotas
    check(q, "userA", "client1", 5000, 4500, False)
    check(q, "userA", "client2", 4000, 4500, True)
    check(q, "userA", "client3", 4000, 0, True)      # the <user> quota is shared by the user's clients
    check(q, "userA", "client1", 5000, 0, False)
    check(q, "userB", "client1", 7000, 8000, True)
    check(q, "userB", "client2", 8000, 7000, False)
    check(q, "userB", "client3", 8000, 7000, False)
    check(q, "userD", "client1", 3000, 3500, True)
    check(q, "userD", "client2", 3000, 2500, False)
    check(q, "userE", "client1", 3000, 2500, False)
    q = alter(image, QuotaAlteration([(U, None), (C, None)], [("producer_byte_rate", None)]))[0].client_quotas
    check(q, "userD", "client1", 1000, 0, False)     # metric tags changed: a new counter
    check(q, "userE", "client4", 1000, 1500, True)
    check(q, "userF", "client4", 1000, 800, False)
    check(q, "userF", "client5", 1000, 800, True)


def test_no_quota_means_no_sensor():
    manager = ClientQuotaManager("producer_byte_rate")
    q = quotas_of(([("client-id", "slow")], 100)).client_quotas
    assert manager.record(q, "User:ANONYMOUS", "fast", 10**9) == 0
    assert manager.max_value_in_window(q, "User:ANONYMOUS", "fast") is None
    assert not manager.sensors
    assert manager.record(q, "User:ANONYMOUS", "slow", 10**6) > 0


def test_request_quota_is_bounded_by_a_window():
    """ClientRequestQuotaManager: percent of one thread; its throttle time is at most quota.window.size.seconds."""
    from types import SimpleNamespace

    from broker.quotas import ClientQuotas
    image, _, _ = alter(MetadataImage(), QuotaAlteration([("client-id", "busy")], [("request_percentage", 1.0)]))
    managers = ClientQuotas(11, 2)
    busy = SimpleNamespace(principal="User:ANONYMOUS", client_id="busy")
    assert managers.record_request_time(image.client_quotas, busy, 0.05) == 0        # 5 %-s over 10 s: 0.5 %
    assert managers.record_request_time(image.client_quotas, busy, 10.0) == 2000     # unbounded: ~900 s
    other = SimpleNamespace(principal="User:ANONYMOUS", client_id="other")
    assert managers.record_request_time(image.client_quotas, other, 10.0) == 0


def test_window_configs_have_kafkas_defaults_and_bounds():
    from broker.config import BrokerConfig
    from broker.quotas import ClientQuotas
    managers = ClientQuotas.from_config(BrokerConfig.load(None))
    assert (managers.produce.samples, managers.produce.window_ms) == (11, 1000)
    for bad in ("quota.window.num=0", "quota.window.size.seconds=x"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            BrokerConfig.load(None, [bad])


def test_connection_creation_rate_per_ip_falls_back_to_the_default_and_uncounts_throttled_connections():
    """KIP-612: an address's own quota, else the default IP quota, else none; a connection over the quota is delayed
    (at most one window) and not counted, so a client retrying in a loop gets through at the quota's rate."""
    quotas = {(("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
              (("ip", None),): {"connection_creation_rate": 1.0}}
    rates = ConnectionRateQuotas(samples=11, window_seconds=1)
    now = 1_000_000
    own = [rates.record(quotas, "10.0.0.1", now) for _ in range(60)]
    assert own[:50] == [0] * 50 and all(0 < d <= 1000 for d in own[50:])    # 5/s over 10 s of windows
    default = [rates.record(quotas, "10.0.0.2", now) for _ in range(20)]
    assert default[:10] == [0] * 10 and all(d > 0 for d in default[10:])
    assert rates.record({}, "10.0.0.2", now) == 0                         # no quota at all
    # the throttled ones were not counted: the ten served are all the rate holds
    assert sum(s[2] for s in rates._rates["10.0.0.2"].slots) == 10


def test_a_timed_handler_is_charged_its_running_time_not_its_waits():
    import asyncio
    import time as _time
    from broker.quotas import TimedCoroutine, _with_throttle_time
    from protocol.kio_codec import EncodedResponse

    async def handler(fail: bool):
        _time.sleep(0.02)                 # handling
        await asyncio.sleep(0.2)          # waiting (the controller, the log)
        _time.sleep(0.02)
        if fail:
            raise ValueError("bad")
        return b"\x00\x00\x00\x00rest"

    async def main():
        ok = TimedCoroutine(handler(False))
        assert await asyncio.ensure_future(ok) == b"\x00\x00\x00\x00rest"
        assert 0.035 < ok.busy < 0.15, ok.busy
        bad = TimedCoroutine(handler(True))
        with pytest.raises(ValueError):
            await asyncio.ensure_future(bad)
        cancelled = asyncio.ensure_future(TimedCoroutine(handler(False)))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
    asyncio.run(main())
    encoded = EncodedResponse(b"\x00\x00\x00\x00body")
    encoded.error_counts = {0: 1}
    patched = _with_throttle_time(encoded, 300)
    assert patched == (300).to_bytes(4, "big") + b"body" and patched.error_counts == {0: 1}
    assert _with_throttle_time([b"\x00\x00", b"\x00\x00tail"], 7) == [(7).to_bytes(4, "big") + b"tail"]
