"""FaultyObjectStore: a wrapper that gives any store S3's failure modes, seeded, without a network. For fault
testing only (issue 26): tests hold it and turn faults up and down; `<store prefix>.faults=<spec>` in a broker's
config wraps that broker's store in it (docs/operations.md, "Object-store faults").

Why it looks the way it does:
- Faults are drawn per request and raised *through S3ObjectStore's own request loop* (`_call`) as the botocore and
  aiohttp exceptions a real endpoint produces. The mapping (retriable ObjectStoreError, PreconditionFailed, the
  "gave up after N attempts" wording), the retries with backoff (`attempts`, default 1: every fault reaches the
  caller) and the HEAD recheck of a conditional write after an ambiguous attempt are therefore s3.py's own, not a
  copy that could drift: code above sees exactly what the S3 backend would hand it.
- A write can fail after it landed (`after_write`): the caller gets a 5xx or a timeout although the object is
  there, as when S3's answer is lost. For conditional writes that is the case consensus code must survive.
- Reads cut mid-body raise (aiohttp reports the short body, s3.py retries it); `short_rate` instead returns fewer
  bytes than asked, as any store below a caller might (s3.py itself now checks a 206 against Content-Range and
  retries), so callers' own length checks get exercised too.
- The n-th operation of a kind draws from its own random stream (seed, kind, n) and draws the same numbers
  whatever the settings, so a seed gives the same faults however operations of different kinds interleave, and
  adding latency does not move which calls fail.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time
from collections import Counter, deque
from http import HTTPStatus
from typing import AsyncIterator, Awaitable, Callable, NamedTuple

import aiohttp
import botocore.exceptions as bce

from storage.objectstore.object_store import (
    ObjectInfo, ObjectNotFound, ObjectStore, ObjectStoreError, PreconditionFailed, check_range, reads_into,
    validate_key,
)
from storage.objectstore.s3 import S3ObjectStore

log = logging.getLogger(__name__)

KINDS = ("put", "put_if_absent", "put_if_match", "get", "head", "delete", "list")
CONDITIONAL = ("put_if_absent", "put_if_match")
MUTATING = ("put", "put_if_absent", "put_if_match", "delete")

# Settings: name -> default. `<name>` applies to every kind, `<kind>_<name>` to one kind and wins.
FIELDS: dict[str, float] = {
    "latency_ms": 0.0,        # added to every request
    "jitter_ms": 0.0,         # plus a seeded uniform [0, jitter_ms)
    "bandwidth_mb_s": 0.0,    # each request's body moves at this many MB/s (10^6 bytes) after its first byte; 0: no cap
    "error_rate": 0.0,        # 5xx answers (retriable)...
    "slowdown_share": 0.5,    # ...of which this share is 503 SlowDown, the rest 500 InternalError
    "timeout_rate": 0.0,      # the request hangs timeout_ms, then a read timeout (retriable)
    "timeout_ms": 1000.0,
    "conflict_rate": 0.0,     # 409 ConditionalRequestConflict (conditional writes only; nothing is written)
    "cut_rate": 0.0,          # GET: the connection is cut mid-body (retriable)
    "short_rate": 0.0,        # GET: a complete answer with fewer bytes than asked, returned to the caller
    "after_write": 0.5,       # share of 5xx/timeouts on writes and deletes that come after the write landed
    "attempts": 1,            # requests per operation, as S3ObjectStore's max_attempts
    "backoff_ms": 100.0,      # S3ObjectStore's retry_base_delay / retry_max_delay, between attempts
    "backoff_max_ms": 5000.0,
    "start_after_ms": 0.0,    # a faithful store for this long after it was made (lets a broker process start up)
    "stop_after_ms": 0.0,     # and again from this long after it was made (0: never): a fault that heals
}
_SHARES = {"error_rate", "slowdown_share", "timeout_rate", "conflict_rate", "cut_rate", "short_rate", "after_write"}
_BY_LENGTH = sorted(KINDS, key=len, reverse=True)      # put_if_absent_x must not parse as put + if_absent_x

_OPERATIONS = {"put": "PutObject", "put_if_absent": "PutObject", "put_if_match": "PutObject", "get": "GetObject",
               "head": "HeadObject", "delete": "DeleteObject", "list": "ListObjectsV2"}
_ANSWERS = {  # fault -> (HTTP status, S3 error code, S3's message)
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "409": (409, "ConditionalRequestConflict", "A conflicting conditional operation is currently in progress "
                                               "against this resource. Please try again."),
    "412": (412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold"),
    "404": (404, "NoSuchKey", "The specified key does not exist."),
}
HISTORY = 10_000


class Injected(NamedTuple):
    kind: str
    n: int              # the n-th operation of its kind (from 0)
    attempt: int        # from 1
    key: str            # the key, or the prefix of a list
    fault: str          # "503", "500", "timeout", "409", "cut", "short"
    after: bool         # the write landed before the error


class Faults:
    """What to inject. `faults.error_rate = 0.1` for every kind, `faults.put_if_match_after_write = 1` for one
    (it wins over the general setting); `del faults.put_error_rate` drops that override. Unknown names raise
    AttributeError, so a typo in a test fails loudly. Rates are bands of one draw, in the order error, timeout,
    conflict, cut, short: their sum for a kind should stay <= 1."""

    __slots__ = ("_values",)

    def __init__(self, **settings):
        object.__setattr__(self, "_values", {})
        for name, value in settings.items():
            setattr(self, name, value)

    @staticmethod
    def split(name: str) -> tuple[str | None, str]:
        if name in FIELDS:
            return None, name
        for kind in _BY_LENGTH:
            if name.startswith(kind + "_") and name[len(kind) + 1:] in FIELDS:
                return kind, name[len(kind) + 1:]
        raise AttributeError(f"unknown object store fault setting {name!r} (settings: {', '.join(FIELDS)}, "
                             f"optionally prefixed by one of {', '.join(KINDS)})")

    def __setattr__(self, name: str, value) -> None:
        kind, field = self.split(name)
        value = int(float(value)) if field == "attempts" else float(value)
        if field in _SHARES and not 0 <= value <= 1:
            raise ValueError(f"{name} must be within [0, 1], got {value}")
        if value < 0 or (field == "attempts" and value < 1):
            raise ValueError(f"{name} must be {'>= 1' if field == 'attempts' else '>= 0'}, got {value}")
        self._values[(kind, field)] = value

    def __getattr__(self, name: str):
        kind, field = self.split(name)
        return self.get(kind, field)

    def __delattr__(self, name: str) -> None:
        self._values.pop(self.split(name), None)

    def get(self, kind: str | None, field: str):
        if (kind, field) in self._values:
            return self._values[(kind, field)]
        return self._values.get((None, field), FIELDS[field])

    def clear(self) -> None:
        """Back to a faithful store (no latency, no faults)."""
        self._values.clear()

    def __repr__(self) -> str:
        items = (f"{field if kind is None else kind + '_' + field}={v:g}" for (kind, field), v in self._values.items())
        return f"Faults({', '.join(items)})"


def parse_spec(spec: str) -> tuple[Faults, int]:
    """`latency_ms=200,error_rate=0.5,put_if_match_after_write=1,seed=7` -> (Faults, seed). The seed defaults to 0:
    a configured run is reproducible unless asked otherwise. Raises ValueError on unknown names or bad values."""
    faults, seed = Faults(), 0
    for item in spec.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        try:
            if not sep:
                raise ValueError("expected name=value")
            if name == "seed":
                seed = int(value)
            else:
                setattr(faults, name, value)
        except (AttributeError, ValueError) as e:
            raise ValueError(f"object store faults {spec!r}: {item.strip()!r}: {e}") from None
    return faults, seed


class _RequestLoop:
    """Just enough of an S3ObjectStore for its `_call`: the retry budget and backoff, no client, no semaphore."""

    _call = S3ObjectStore._call

    def __init__(self, attempts: int, base: float, cap: float):
        self.max_attempts, self.retry_base_delay, self.retry_max_delay = attempts, base, cap
        self._sem = contextlib.nullcontext()

    async def _get_client(self):
        return None


def _client_error(kind: str, fault: str) -> bce.ClientError:
    status, code, message = _ANSWERS[fault]
    if kind == "head":  # a HEAD answer has no body: botocore reports the status as the code
        code, message = str(status), HTTPStatus(status).phrase
    return bce.ClientError({"Error": {"Code": code, "Message": message},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, _OPERATIONS[kind])


class FaultyObjectStore:
    """An ObjectStore that delegates to `inner` and injects the faults in `self.faults` (changeable at any time).
    `calls` counts operations per kind (a list counts one per page), `requests` attempts, `injected` faults per
    (kind, fault) and (kind, "after"); `history` keeps the last injected faults in order."""

    def __init__(self, inner: ObjectStore, seed: int = 0, faults: Faults | None = None, *,
                 list_page_size: int = 1000, **settings):
        self.inner = inner
        self.seed = seed
        self.faults = faults if faults is not None else Faults()
        for name, value in settings.items():
            setattr(self.faults, name, value)
        self.list_page_size = list_page_size
        self.calls: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.injected: Counter[tuple[str, str]] = Counter()
        self.history: deque[Injected] = deque(maxlen=HISTORY)
        self._made = time.monotonic()

    @classmethod
    def from_spec(cls, inner: ObjectStore, spec: str) -> "FaultyObjectStore":
        faults, seed = parse_spec(spec)
        log.warning("%r: injecting object store faults %s, seed %d (for fault testing only)", inner, faults, seed)
        return cls(inner, seed, faults)

    def __repr__(self) -> str:
        return f"FaultyObjectStore({self.inner!r}, seed={self.seed}, {self.faults!r})"

    # -- the ObjectStore interface ----------------------------------------------------------------------------

    async def put(self, key: str, data: bytes | memoryview) -> str:
        return await self._op("put", validate_key(key), lambda: self.inner.put(key, data), sent=len(data))

    async def put_if_absent(self, key: str, data: bytes | memoryview) -> str:
        return await self._op("put_if_absent", validate_key(key), lambda: self.inner.put_if_absent(key, data),
                              self._recheck(key, data), sent=len(data))

    async def put_if_match(self, key: str, data: bytes | memoryview, etag: str) -> str:
        return await self._op("put_if_match", validate_key(key), lambda: self.inner.put_if_match(key, data, etag),
                              self._recheck(key, data), sent=len(data))

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        check_range(start, end)
        validate_key(key)
        if end is not None and end == start:  # as s3.py: an empty range has no HTTP form, it sends a HEAD
            if await self.head(key) is None:
                raise ObjectNotFound(f"{key!r} not found")
            return b""
        return await self._op("get", key, lambda: self.inner.get(key, start, end))

    @property
    def reads_into(self) -> bool:
        return reads_into(self.inner)

    async def get_into(self, key: str, start: int, view: memoryview) -> memoryview:
        """As get, into the caller's buffer (object_store.reads_into): the same latency, bandwidth and faults (a
        short answer is a shorter view)."""
        check_range(start, start + len(view))
        validate_key(key)
        return await self._op("get", key, lambda: self.inner.get_into(key, start, view))

    async def head(self, key: str) -> ObjectInfo | None:
        return await self._op("head", validate_key(key), lambda: self.inner.head(key))

    async def delete(self, key: str) -> None:
        await self._op("delete", validate_key(key), lambda: self.inner.delete(key))

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Pages of `list_page_size` keys, each one request that may fail, as ListObjectsV2 pages do: a fault
        can end a listing after earlier pages were yielded."""
        it = aiter(self.inner.list(prefix))
        lookahead: list[ObjectInfo] = []
        more = True

        async def page() -> list[ObjectInfo]:
            nonlocal more
            out = lookahead[:]
            lookahead.clear()
            while more and len(out) <= self.list_page_size:   # one past the page tells whether another follows
                try:
                    out.append(await anext(it))
                except StopAsyncIteration:
                    more = False
            if len(out) > self.list_page_size:
                lookahead.append(out.pop())
            return out

        while True:
            for info in await self._op("list", prefix, page):
                yield info
            if not lookahead:
                return

    async def close(self) -> None:
        await self.inner.close()

    # -- injection --------------------------------------------------------------------------------------------

    async def _op(self, kind: str, key: str, call: Callable[[], Awaitable], recheck=None, sent: int = 0):
        n = self.calls[kind]
        self.calls[kind] += 1
        rng = random.Random(f"{self.seed}/{kind}/{n}")      # str seeds hash with SHA-512: stable across runs
        attempt = 0

        async def request(_client):
            nonlocal attempt
            attempt += 1
            return await self._request(kind, key, n, attempt, rng, call, sent)

        f = self.faults
        loop = _RequestLoop(f.get(kind, "attempts"), f.get(kind, "backoff_ms") / 1000,
                            f.get(kind, "backoff_max_ms") / 1000)
        what = f"{'put' if kind.startswith('put') else kind} {key!r}"     # s3.py's wording
        return await loop._call(what, request, recheck)

    async def _request(self, kind: str, key: str, n: int, attempt: int, rng: random.Random, call, sent: int = 0):
        self.requests[kind] += 1
        g = self.faults.get
        u_jitter, u_fault, u_code, u_after, u_cut = (rng.random() for _ in range(5))
        age, stop = time.monotonic() - self._made, g(kind, "stop_after_ms") / 1000
        if age < g(kind, "start_after_ms") / 1000 or 0 < stop <= age:
            return await self._inner(kind, call)
        delay = g(kind, "latency_ms") + u_jitter * g(kind, "jitter_ms")
        if delay > 0:
            await asyncio.sleep(delay / 1000)
        fault = self._draw(kind, u_fault, u_code)
        if fault is None:
            await self._transfer(kind, sent)            # an upload's body goes out before its answer
            answer = await self._inner(kind, call)
            if kind == "get":
                await self._transfer(kind, len(answer))  # a download's body arrives after its first byte
            return answer
        if fault in ("cut", "short"):
            data = await self._inner(kind, call)
            if not data:
                return data                  # nothing to cut short
            got = int(u_cut * len(data))
            self._note(Injected(kind, n, attempt, key, fault, False))
            if fault == "short":
                return data[:got]
            raise aiohttp.ClientPayloadError(
                "Response payload is not completed: <ContentLengthError: 400, message='Not enough data to satisfy "
                f"content length header (received {got} of {len(data)} bytes).'>")
        after = kind in MUTATING and fault != "409" and u_after < g(kind, "after_write")
        self._note(Injected(kind, n, attempt, key, fault, after))
        if after:
            await self._inner(kind, call)    # it landed; the answer is lost
        if fault == "timeout":
            await asyncio.sleep(g(kind, "timeout_ms") / 1000)
            raise bce.ReadTimeoutError(endpoint_url=f"faulty:///{key}")
        raise _client_error(kind, fault)

    async def _transfer(self, kind: str, nbytes: int) -> None:
        """The time a body of `nbytes` takes at `bandwidth_mb_s` (a per-request cap, as one S3 connection streams at
        a rate of its own whatever others do)."""
        rate = self.faults.get(kind, "bandwidth_mb_s")
        if rate > 0 and nbytes > 0:
            await asyncio.sleep(nbytes / (rate * 1e6))

    def _draw(self, kind: str, u: float, u_code: float) -> str | None:
        g = self.faults.get
        bands = [("5xx", g(kind, "error_rate")), ("timeout", g(kind, "timeout_rate"))]
        if kind in CONDITIONAL:
            bands.append(("409", g(kind, "conflict_rate")))
        if kind == "get":
            bands += [("cut", g(kind, "cut_rate")), ("short", g(kind, "short_rate"))]
        edge = 0.0
        for fault, rate in bands:
            edge += rate
            if u < edge:
                return fault if fault != "5xx" else ("503" if u_code < g(kind, "slowdown_share") else "500")
        return None

    async def _inner(self, kind: str, call):
        """The inner store's answer. Its refusals become the S3 answers they stand for, so s3.py's loop treats them
        as S3's (a 412 after an ambiguous attempt triggers the recheck); other inner errors pass through as they are."""
        try:
            return await call()
        except PreconditionFailed:
            raise _client_error(kind, "412") from None
        except ObjectNotFound:
            raise _client_error(kind, "404") from None

    def _note(self, event: Injected) -> None:
        self.injected[(event.kind, event.fault)] += 1
        if event.after:
            self.injected[(event.kind, "after")] += 1
        self.history.append(event)
        log.debug("injected %s", event)

    def _recheck(self, key: str, data: bytes | memoryview):
        """s3.py's recheck: after a refusal that followed an ambiguous attempt, a HEAD showing our bytes' ETag means
        the earlier attempt landed (the HEAD itself may meet faults, as on S3)."""
        expected = hashlib.md5(memoryview(data).cast("B")).hexdigest()

        async def check() -> str | None:
            try:
                info = await self.head(key)
            except ObjectStoreError:
                return None
            return expected if info is not None and info.etag == expected else None
        return check
