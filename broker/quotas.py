"""Client quota enforcement (Kafka's ClientQuotaManager with its DefaultQuotaCallback): each (user, client-id) is
measured by a windowed rate, and a request that takes it over its quota is answered with the time the client must
wait (KIP-219: the response goes out at once with throttle_time_ms, then the connection is muted for that time).

The quotas come from the metadata image (AlterClientQuotas). With none set, `throttle_ms` is never called: the
handlers test `image.client_quotas` first, so a cluster without quotas pays one attribute read per request.
"""
from __future__ import annotations

import collections.abc
import time
from collections import deque

from metadata.quota_control import (CLIENT_ID, CONNECTION_CREATION_RATE, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE,
                                    IP, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, USER)

INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000     # Kafka's ClientQuotaManager.InactiveSensorExpirationTimeSeconds
_MAX_RESOLVED = 100_000     # cached (principal, client id) -> quota lookups, cleared when full


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Rate:
    """Kafka's Rate over a WindowedSum (SampledStat): `samples` samples of `window_ms` each, plus one that may
    overlap the oldest; the rate is the sum over the retained samples divided by their elapsed time, counted as at
    least samples-1 full windows so that a new sensor does not see a burst as a huge rate."""
    __slots__ = ("samples", "window_ms", "slots", "current", "last_ms")

    def __init__(self, samples: int, window_ms: int):
        self.samples, self.window_ms = samples, window_ms
        self.slots: list[list] = []                  # [start ms, last event ms, value]
        self.current = 0
        self.last_ms = 0

    def record(self, value: float, now: int) -> None:
        slots = self.slots
        if not slots:
            slots.append([now, now, 0.0])
        s = slots[self.current]
        if now - s[0] >= self.window_ms:            # Sample.isComplete (no event window for quotas)
            self.current = (self.current + 1) % (self.samples + 1)
            if self.current >= len(slots):
                s = [now, now, 0.0]
                slots.append(s)
            else:
                s = slots[self.current]
                s[0], s[1], s[2] = now, now, 0.0
        s[2] += value
        s[1] = now
        self.last_ms = now

    def _purge(self, now: int) -> None:
        expire = self.samples * self.window_ms
        for s in self.slots:
            if now - s[1] >= expire:
                s[0], s[1], s[2] = now, now, 0.0

    def window_size(self, now: int) -> int:
        """Rate.windowSize: the elapsed time the rate is measured over, in ms."""
        self._purge(now)
        if not self.slots:
            self.slots.append([now, now, 0.0])
        return self._span(self.slots, now)

    def _span(self, slots: list, now: int) -> int:
        """The time since the oldest of `slots` began, counted as at least samples-1 full windows, in ms."""
        total = now - min(s[0] for s in slots)
        full = total // self.window_ms
        if full < self.samples - 1:
            total += (self.samples - 1 - full) * self.window_ms
        return max(total, 1)

    def peek(self, now: int) -> float:
        """The rate as `measure` computes it, without purging: for the metrics thread, which must not change
        samples the event loop is recording into."""
        expire = self.samples * self.window_ms
        live = [s for s in list(self.slots) if now - s[1] < expire]
        return sum(s[2] for s in live) / (self._span(live, now) / 1000) if live else 0.0

    def measure(self, now: int, window_ms: int | None = None) -> float:
        """Per second, over `window_ms` when the caller already has window_size(now) (which purges)."""
        if window_ms is None:
            window_ms = self.window_size(now)
        return sum(s[2] for s in self.slots) / (window_ms / 1000)


def throttle_time(rate: Rate, bound: float, now: int) -> int:
    """Kafka's QuotaUtils.throttleTime for a rate measured above `bound`: the delay X that brings the observed rate
    O back to the bound T over the window W, O*W/(W+X) = T, so X = (O-T)/T*W; 0 within the quota."""
    window = rate.window_size(now)
    observed = rate.measure(now, window)
    if observed <= bound:                           # Quota.acceptable (an upper bound)
        return 0
    return int(round((observed - bound) / bound * window))


def user_of(principal: str) -> str:
    """KafkaPrincipal.getName: "User:alice" -> "alice"."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class ClientQuotaManager:
    """One quota type (producer_byte_rate, consumer_byte_rate or request_percentage): resolution of a client's quota
    and its sensors. `max_throttle_ms` bounds the throttle time (Kafka bounds only the request quota's, to a window)."""

    def __init__(self, key: str, samples: int = 11, window_seconds: int = 1, max_throttle_ms: int | None = None):
        self.key = key
        self.max_throttle_ms = max_throttle_ms
        self.samples, self.window_ms = samples, window_seconds * 1000
        self.sensors: dict[tuple[str, str], Rate] = {}      # metric tags (user, client-id) -> rate
        self.throttles: dict[tuple[str, str], deque] = {}   # metric tags -> (ms when, throttle ms), last windows
        self._quotas = None                                 # the image's client_quotas the cache was built from
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float | None]] = {}
        self._swept = now_ms()

    def _value(self, quotas, user: str | None, client: str | None, *, u: bool, c: bool):
        """This type's quota of the entity (user or its default if u, client-id or its default if c), or None."""
        pairs = []
        if c:
            pairs.append((CLIENT_ID, client))
        if u:
            pairs.append((USER, user))
        values = quotas.get(tuple(pairs))
        return None if values is None else values.get(self.key)

    def resolve(self, quotas, user: str, client: str) -> tuple[tuple[str, str], float | None]:
        """(metric tags, quota bound or None) of a client: DefaultQuotaCallback.quotaMetricTags, in Kafka's order
        (user+client, user+default client, user, default user+client, default user+default client, default user,
        client, default client), then quotaLimit for those tags."""
        def has(user_name, client_name, u=True, c=True):
            return self._value(quotas, user_name, client_name, u=u, c=c) is not None
        if has(user, client) or has(user, None):
            tags = (user, client)
        elif has(user, None, c=False):
            tags = (user, "")
        elif has(None, client) or has(None, None):
            tags = (user, client)
        elif has(None, None, c=False):
            tags = (user, "")
        else:
            tags = ("", client)
        u, c = tags
        bound = None
        if u and c:
            for uu, cc in ((u, c), (u, None), (None, c), (None, None)):
                bound = self._value(quotas, uu, cc, u=True, c=True)
                if bound is not None:
                    break
        elif u:
            bound = self._value(quotas, u, None, u=True, c=False)
            if bound is None:
                bound = self._value(quotas, None, None, u=True, c=False)
        elif c:
            bound = self._value(quotas, None, c, u=False, c=True)
            if bound is None:
                bound = self._value(quotas, None, None, u=False, c=True)
        return tags, bound

    def _lookup(self, quotas, principal: str, client_id: str | None):
        if quotas is not self._quotas:                # the image changed: resolve again (sensors keep their samples)
            self._quotas, self._resolved = quotas, {}
        key = (principal, client_id or "")
        found = self._resolved.get(key)
        if found is None:
            if len(self._resolved) >= _MAX_RESOLVED:      # a client cycling client ids must not grow it forever
                self._resolved.clear()
            found = self._resolved[key] = self.resolve(quotas, user_of(principal), client_id or "")
        return found

    def _sensor(self, tags: tuple[str, str], now: int) -> Rate:
        rate = self.sensors.get(tags)
        if rate is None:
            if now - self._swept > 60_000:            # Kafka expires a sensor idle for an hour
                self._swept = now
                for t in [t for t, r in self.sensors.items() if now - r.last_ms > INACTIVE_SENSOR_EXPIRATION_MS]:
                    del self.sensors[t]
                    self.throttles.pop(t, None)
            rate = self.sensors[tags] = Rate(self.samples, self.window_ms)
        return rate

    def record(self, quotas, principal: str, client_id: str | None, value: float, now: int | None = None) -> int:
        """Kafka's recordAndGetThrottleTimeMs: record `value` and answer the throttle time in ms (0 within quota)."""
        tags, bound = self._lookup(quotas, principal, client_id)
        if bound is None:
            return 0
        now = now_ms() if now is None else now
        rate = self._sensor(tags, now)
        rate.record(value, now)
        ms = throttle_time(rate, bound, now)
        ms = ms if self.max_throttle_ms is None else min(ms, self.max_throttle_ms)
        if ms > 0:                                    # Kafka's throttle-time sensor records only throttles
            recent = self.throttles.get(tags)
            if recent is None:
                recent = self.throttles[tags] = deque(maxlen=1024)
            while recent and now - recent[0][0] >= self.samples * self.window_ms:
                recent.popleft()
            recent.append((now, ms))
        return ms

    def throttle_avg(self, tags: tuple[str, str], now: int) -> float:
        """Kafka's throttle-time metric: the mean of the throttle times of the last quota.window.num windows (read
        only: the metrics thread calls it)."""
        recent = [ms for t, ms in list(self.throttles.get(tags, ())) if now - t < self.samples * self.window_ms]
        return sum(recent) / len(recent) if recent else 0.0

    def unrecord(self, quotas, principal: str, client_id: str | None, value: float, now: int | None = None) -> None:
        """Kafka's unrecordQuotaSensor: a throttled fetch answers no data, so its bytes do not count."""
        tags, bound = self._lookup(quotas, principal, client_id)
        if bound is not None:
            now = now_ms() if now is None else now
            self._sensor(tags, now).record(-value, now)

    def max_value_in_window(self, quotas, principal: str, client_id: str | None) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: what the client may take in one quota window, None without a quota."""
        _, bound = self._lookup(quotas, principal, client_id)
        return None if bound is None else bound * (self.samples - 1) * self.window_ms / 1000


class ClientQuotas:
    """The broker's client quota managers (Kafka's QuotaFactory), sized by quota.window.num and
    quota.window.size.seconds. The request quota is charged the time a Produce or consumer Fetch spent being handled
    (not waiting for replication or data), in Kafka's unit: percent of one thread over the window
    (ClientRequestQuotaManager's nanosToPercentage); its throttle is at most one window, as in Kafka."""

    def __init__(self, samples: int = 11, window_seconds: int = 1):
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_seconds)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_seconds)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window_seconds, window_seconds * 1000)
        self.connections = ConnectionRateQuotas(samples, window_seconds)
        self.mutations = ControllerMutationQuotas(samples, window_seconds)

    def record_request_time(self, quotas, req, seconds: float) -> int:
        """request_percentage: `seconds` of handling, as percent-seconds; the throttle time in ms."""
        return self.request.record(quotas, req.principal, req.client_id, seconds * 100)

    @classmethod
    def from_config(cls, config) -> "ClientQuotas":
        return cls(config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds"))


class ConnectionRateQuotas:
    """connection_creation_rate per IP (KIP-612, Kafka's ConnectionQuotas.recordIpConnectionMaybeThrottle): the quota
    of the address, else the default IP quota; a connection that takes the address over it is not counted and is
    closed, unread, after the throttle time (at most one quota window), as Kafka's acceptor does with a
    DelayedCloseSocket, so a client reconnecting in a loop is slowed down rather than served."""

    def __init__(self, samples: int = 11, window_seconds: int = 1):
        self.samples, self.window_ms = samples, window_seconds * 1000
        self._rates: dict[str, Rate] = {}
        self._swept = 0
        self._quotas = None                          # the image's client_quotas the IP map was built from
        self._by_ip: dict[str | None, float] = {}    # normalized address (None: the default) -> quota

    def _bound(self, quotas, ip: str) -> float | None:
        if quotas is not self._quotas:               # AlterClientQuotas keeps an address as written: compare them
            from broker.socket_limits import normal_ip   # as addresses (Kafka compares InetAddresses)
            by_ip: dict[str | None, float] = {}
            for entity, values in quotas.items():
                if len(entity) == 1 and entity[0][0] == IP and CONNECTION_CREATION_RATE in values:
                    name = entity[0][1]
                    by_ip[normal_ip(name) if name is not None else None] = values[CONNECTION_CREATION_RATE]
            self._quotas, self._by_ip = quotas, by_ip
        bound = self._by_ip.get(ip)
        return self._by_ip.get(None) if bound is None else bound

    def record(self, quotas, ip: str, now: int | None = None) -> int:
        """Count a new connection from `ip`; the delay in ms before it is closed unserved, 0 to serve it."""
        bound = self._bound(quotas, ip)
        if bound is None:
            return 0
        if now is None:
            now = now_ms()
        if now - self._swept >= self.window_ms:      # a rate idle for all its windows is a new one: drop it
            self._swept = now
            expire = self.samples * self.window_ms
            self._rates = {k: r for k, r in self._rates.items() if now - r.last_ms < expire}
        rate = self._rates.get(ip)
        if rate is None:
            rate = self._rates[ip] = Rate(self.samples, self.window_ms)
        rate.record(1.0, now)
        delay = min(throttle_time(rate, bound, now), self.window_ms)
        if delay > 0:
            rate.record(-1.0, now)                  # a throttled connection does not count (Kafka unrecords it)
        return delay


class MutationQuotaExceeded(Exception):
    """THROTTLING_QUOTA_EXCEEDED for one topic of a CreateTopics, CreatePartitions or DeleteTopics."""
    message = "The throttling quota has been exceeded."


class _TokenBucket:
    """Kafka's TokenBucket stat: full (quota x samples x window seconds) when first used, refilled at the quota's
    rate, and allowed to go below zero by the mutation that empties it."""
    __slots__ = ("tokens", "last_ms", "bound", "burst")

    def __init__(self):
        self.tokens: float | None = None
        self.last_ms = 0
        self.bound = self.burst = 0.0             # the quota it is used under (set at each request)

    def refill(self, now: int) -> float:
        self.tokens = self.peek(now)
        self.last_ms = now
        return self.tokens

    def peek(self, now: int) -> float:
        """The tokens there would be now (read only)."""
        burst = self.burst
        return burst if self.tokens is None else min(burst, self.tokens + self.bound * (now - self.last_ms) / 1000)


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict- and PermissiveControllerMutationQuota). Strict (the
    request versions that know THROTTLING_QUOTA_EXCEEDED): a mutation is refused while the bucket is below zero, else
    taken whole even if it empties the bucket. Permissive (older versions): every mutation is taken, and the
    response is throttled for the time the bucket needs to get back to zero."""
    __slots__ = ("bucket", "strict", "_throttle")

    def __init__(self, bucket: _TokenBucket | None, strict: bool = True):
        self.bucket, self.strict = bucket, strict
        self._throttle = (0, 0)                     # (throttle ms, when it was computed)

    def record(self, permits: int, now: int | None = None) -> None:
        """Take `permits` partitions created or deleted; MutationQuotaExceeded when strict and over the quota."""
        b = self.bucket
        if b is None:
            return
        now = now_ms() if now is None else now
        tokens = b.refill(now)
        if self.strict and tokens < 0:
            self._throttle = (round(-tokens / b.bound * 1000), now)
            raise MutationQuotaExceeded()
        b.tokens = min(b.burst, tokens - permits)
        if not self.strict and b.tokens < 0:
            self._throttle = (round(-b.tokens / b.bound * 1000), now)

    def throttle_ms(self, now: int | None = None) -> int:
        """The response's throttle time: what was computed, less the time since (Kafka's throttleTime)."""
        ms, at = self._throttle
        return max(0, ms - ((now_ms() if now is None else now) - at)) if ms else 0


class ControllerMutationQuotas:
    """controller_mutation_rate (KIP-599): partitions created, added or deleted per second by a (user, client id),
    resolved in the same order as the other client quotas, each a token bucket."""

    def __init__(self, samples: int = 11, window_seconds: int = 1):
        self.resolver = ClientQuotaManager(CONTROLLER_MUTATION_RATE, samples, window_seconds)
        self.burst_seconds = samples * window_seconds
        self.buckets: dict[tuple[str, str], _TokenBucket] = {}
        self._swept = 0

    def quota_for(self, quotas, req, strict: bool) -> MutationQuota:
        if not quotas:
            return MutationQuota(None)
        tags, bound = self.resolver._lookup(quotas, req.principal, req.client_id)
        if bound is None:
            return MutationQuota(None)
        now = now_ms()
        if now - self._swept >= 1000:                   # a bucket full again is a new one: drop it
            self._swept = now
            self.buckets = {t: b for t, b in self.buckets.items()
                            if b.tokens is None or b.peek(now) < b.burst}
        bucket = self.buckets.get(tags)
        if bucket is None:
            bucket = self.buckets[tags] = _TokenBucket()
        bucket.bound, bucket.burst = bound, bound * self.burst_seconds
        return MutationQuota(bucket, strict)


# APIs only brokers send each other, never charged to a client's request quota (Kafka answers them with
# sendResponseExemptThrottle); Produce and Fetch charge their own handling time (handlers/produce.py, fetch.py)
REQUEST_QUOTA_EXEMPT = frozenset({0, 1, 27, 56, 58, 62, 63, 67})


class TimedCoroutine(collections.abc.Coroutine):
    """A handler's coroutine, timed while it runs (not while it waits): the request quota charges handling time,
    as Kafka charges its request threads' time and not the purgatory's."""
    __slots__ = ("coro", "busy")

    def __init__(self, coro):
        self.coro, self.busy = coro, 0.0

    def send(self, value):
        started = time.perf_counter()
        try:
            return self.coro.send(value)
        finally:
            self.busy += time.perf_counter() - started

    def throw(self, *args):
        started = time.perf_counter()
        try:
            return self.coro.throw(*args)
        finally:
            self.busy += time.perf_counter() - started

    def close(self):
        return self.coro.close()

    def __await__(self):
        return self.coro.__await__()        # awaited directly it is the handler itself (only a Task times it)

    def __getattr__(self, name):            # cr_frame, cr_code, __qualname__...: task reprs and stacks name the handler
        return getattr(self.coro, name)


def _from_a_broker(broker, req) -> bool:
    """Another broker's own request (its client id and CLUSTER_ACTION, as for Produce): never held to a client
    quota."""
    if not (req.client_id or "").startswith("strata-broker-"):
        return False
    from broker.security.authorization import CLUSTER_ACTION, authorize_cluster
    return authorize_cluster(broker, req, CLUSTER_ACTION)


def charged_to_request_quota(broker, req, quotas) -> bool:
    """Whether request_percentage applies to this request here: the client has a request quota, the API is a
    client's, and the client is not another broker."""
    if not quotas or req.api_key in REQUEST_QUOTA_EXEMPT:
        return False
    if broker.client_quotas.request._lookup(quotas, req.principal, req.client_id)[1] is None:
        return False
    return not _from_a_broker(broker, req)


def mutation_quota(broker, req, strict: bool) -> MutationQuota:
    """The controller_mutation_rate of a CreateTopics, CreatePartitions or DeleteTopics (unbounded for another
    broker's own, such as a topic it creates automatically)."""
    quotas = broker.topics.image.client_quotas
    if not quotas or _from_a_broker(broker, req):
        return MutationQuota(None)
    return broker.client_quotas.mutations.quota_for(quotas, req, strict)


def charge_request_time(broker, req, busy: float, result):
    """request_percentage for a request other than Produce and Fetch: record `busy` seconds of handling; over the
    quota, the response says how long to back off (throttle_time_ms, where the version has it first) and the
    connection is muted that long (req.throttle_ms). The response, with the throttle time written in."""
    from protocol import kio_codec
    ms = broker.client_quotas.record_request_time(broker.topics.image.client_quotas, req, busy)
    if ms <= 0:
        return result
    req.throttle_ms = ms = max(req.throttle_ms, ms)
    if result is None or not kio_codec.throttle_time_first(req.api_key, req.api_version):
        return result
    return _with_throttle_time(result, ms)


def _with_throttle_time(result, ms: int):
    from protocol.kio_codec import EncodedResponse
    head = ms.to_bytes(4, "big", signed=True)
    if isinstance(result, list):
        first = bytes(result[0]) if result else b""
        if len(first) < 4:
            first, result = b"".join(bytes(c) for c in result), [b""]
        return [head + first[4:], *result[1:]]
    if len(result) < 4:
        return result
    patched = head + bytes(result[4:])
    if isinstance(result, EncodedResponse):
        out = EncodedResponse(patched)
        out.error_counts = result.error_counts
        return out
    return patched
