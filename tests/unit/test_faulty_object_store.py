"""FaultyObjectStore (storage/objectstore/faulty.py): with no faults it is a faithful store (the shared scenario suite
of test_object_store.py runs against it); a seed reproduces its faults; each fault shows up at about its rate and
looks to callers exactly as the S3 backend presents it (checked against S3ObjectStore talking to a scripted HTTP
endpoint); a conditional write can fail after it landed; faults change at run time and come from broker config."""
from __future__ import annotations

import asyncio
import hashlib
import re
import time
from datetime import datetime, timezone
from http import HTTPStatus

import pytest

from moto_server import S3_TEST_OPTIONS, MotoServer  # noqa: F401
from storage.objectstore.faulty import FaultyObjectStore, Faults, parse_spec
from storage.objectstore.object_store import (
    ObjectInfo, ObjectNotFound, ObjectStore, ObjectStoreError, PreconditionFailed, list_all, open_object_store,
)
from storage.objectstore.s3 import S3ObjectStore
# The shared scenarios, collected again here so they run against this module's `make_store` (the wrapper).
from test_object_store import (  # noqa: F401
    test_closed_store_refuses_calls, test_compare_and_swap_counter_loses_no_update,
    test_invalid_keys_rejected_everywhere, test_large_object_over_multipart_threshold,
    test_list_by_prefix_sorted_and_paginated, test_missing_keys, test_put_get_head_overwrite, test_put_if_absent,
    test_put_if_absent_race_has_one_winner, test_put_if_match, test_ranged_get_is_a_slice,
)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
async def make_store(request, tmp_path):
    """The wrapper with zero faults around each backend, made through open_object_store as a broker makes it."""
    made: list[ObjectStore] = []
    if request.param == "s3":
        server: MotoServer = request.getfixturevalue("moto_server")
        url, base = f"s3://{server.new_bucket()}/cluster-1", server.store_options(**S3_TEST_OPTIONS)
    else:
        url, base = f"file://{tmp_path}/store", {}

    def factory(**options) -> ObjectStore:
        made.append(open_object_store(url, faults="latency_ms=0,seed=1", **{**base, **options}))
        assert isinstance(made[-1], FaultyObjectStore)
        return made[-1]

    yield factory
    for s in made:
        await s.close()


class MemoryStore:
    """A dict with the ObjectStore semantics the wrapper relies on: fast enough for thousands of draws."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}

    async def put(self, key, data):
        self.objects[key] = bytes(data)
        return hashlib.md5(self.objects[key]).hexdigest()

    async def put_if_absent(self, key, data):
        if key in self.objects:
            raise PreconditionFailed(f"{key!r} exists")
        return await self.put(key, data)

    async def put_if_match(self, key, data, etag):
        if key not in self.objects or hashlib.md5(self.objects[key]).hexdigest() != etag.strip('"'):
            raise PreconditionFailed(f"{key!r} changed")
        return await self.put(key, data)

    async def get(self, key, start=0, end=None):
        if key not in self.objects:
            raise ObjectNotFound(f"{key!r} not found")
        return self.objects[key][start:end]

    async def head(self, key):
        if key not in self.objects:
            return None
        data = self.objects[key]
        return ObjectInfo(key, len(data), hashlib.md5(data).hexdigest(), datetime.now(timezone.utc))

    async def delete(self, key):
        self.objects.pop(key, None)

    async def list(self, prefix=""):
        for key in sorted(k for k in self.objects if k.startswith(prefix)):
            yield await self.head(key)

    async def close(self):
        pass


async def outcome(call) -> str:
    """What a caller sees, as a short label."""
    try:
        result = await call
    except PreconditionFailed:
        return "precondition"
    except ObjectNotFound:
        return "not_found"
    except ObjectStoreError as e:
        assert e.retriable, e
        return "retriable"
    return "ok" if not isinstance(result, bytes) or len(result) == 4 else "short"


async def mixed_workload(store: FaultyObjectStore, rounds: int) -> list[str]:
    out = []
    for i in range(rounds):
        key = f"k/{i % 7}"
        out.append(await outcome(store.put(key, b"data")))
        out.append(await outcome(store.put_if_absent(f"new/{i}", b"data")))
        out.append(await outcome(store.put_if_match(key, b"data", hashlib.md5(b"data").hexdigest())))
        out.append(await outcome(store.get(key)))
        out.append(await outcome(store.head(key)))
        out.append(await outcome(list_all(store, "k/")))
        if i % 5 == 4:
            out.append(await outcome(store.delete(key)))
    return out


ALL_FAULTS = dict(error_rate=0.15, timeout_rate=0.05, timeout_ms=0, conflict_rate=0.1, cut_rate=0.1, short_rate=0.1)


async def test_a_seed_reproduces_the_faults():
    runs = []
    for seed in (7, 7, 8):
        store = FaultyObjectStore(MemoryStore(), seed, **ALL_FAULTS)
        runs.append((await mixed_workload(store, 60), list(store.history)))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert {e.fault for e in runs[0][1]} == {"503", "500", "timeout", "409", "cut", "short"}

    # Each kind draws from its own stream: interleaving kinds differently does not move any kind's faults,
    # and neither does adding latency.
    async def by_kind(interleave: bool, **extra) -> dict:
        store = FaultyObjectStore(MemoryStore(), 3, **ALL_FAULTS, **extra)
        await store.inner.put("x", b"data")
        puts = [lambda i=i: store.put(f"p{i}", b"v") for i in range(40)]
        gets = [lambda: store.get("x") for _ in range(40)]
        order = [c for pair in zip(puts, gets) for c in pair] if interleave else puts + gets
        for call in order:
            await outcome(call())
        return {k: [e for e in store.history if e.kind == k] for k in ("put", "get")}
    assert await by_kind(False) == await by_kind(True) == await by_kind(True, latency_ms=0.01)


async def test_each_fault_appears_at_about_its_rate():
    n = 3000
    store = FaultyObjectStore(MemoryStore(), 11, error_rate=0.2, slowdown_share=0.25, timeout_rate=0.1, timeout_ms=0,
                              put_if_absent_conflict_rate=0.15, get_cut_rate=0.1, get_short_rate=0.05)
    await store.inner.put("x", b"data")
    seen = {kind: [] for kind in ("put", "put_if_absent", "get", "head", "delete")}
    for i in range(n):
        seen["put"].append(await outcome(store.put(f"p/{i}", b"data")))
        seen["put_if_absent"].append(await outcome(store.put_if_absent(f"a/{i}", b"data")))
        seen["get"].append(await outcome(store.get("x")))
        seen["head"].append(await outcome(store.head("x")))
        seen["delete"].append(await outcome(store.delete(f"p/{i}")))

    def rate(kind, fault):
        return store.injected[(kind, fault)] / store.requests[kind]

    def share(kind, label):
        return seen[kind].count(label) / n
    close = pytest.approx
    for kind in seen:
        assert store.requests[kind] == n                                  # attempts=1: one request per call
        assert rate(kind, "503") + rate(kind, "500") == close(0.2, abs=0.03), kind
        assert rate(kind, "503") == close(0.05, abs=0.02), kind           # slowdown_share of the 5xx
        assert rate(kind, "timeout") == close(0.1, abs=0.02), kind
    assert rate("put_if_absent", "409") == close(0.15, abs=0.03)
    assert rate("put", "409") == rate("get", "409") == 0                  # only conditional writes conflict
    assert rate("get", "cut") == close(0.1, abs=0.02) and rate("get", "short") == close(0.05, abs=0.02)
    # Half of the write errors came after the write landed (after_write defaults to 0.5); reads never "land".
    for kind in ("put", "put_if_absent", "delete"):
        errors = sum(store.injected[(kind, f)] for f in ("503", "500", "timeout"))
        assert store.injected[(kind, "after")] / errors == close(0.5, abs=0.07), kind
    assert store.injected[("get", "after")] == store.injected[("head", "after")] == 0
    # The caller's view: retriable errors at the summed rates, lost races as PreconditionFailed, short data.
    assert share("put", "retriable") == close(0.3, abs=0.03)
    assert share("put_if_absent", "retriable") == close(0.3, abs=0.03)
    assert share("put_if_absent", "precondition") == close(0.15, abs=0.03)
    assert share("get", "retriable") == close(0.4, abs=0.03) and share("get", "short") == close(0.05, abs=0.02)
    assert share("head", "retriable") == close(0.3, abs=0.03)


async def test_latency_jitter_and_timeouts_take_their_time():
    store = FaultyObjectStore(MemoryStore(), 1, latency_ms=40, jitter_ms=20)
    t0 = time.monotonic()
    for i in range(5):
        await store.put(f"k{i}", b"v")
    assert 0.2 <= time.monotonic() - t0 < 5
    store.faults.clear()
    store.faults.get_timeout_rate = 1
    store.faults.timeout_ms = 300
    await store.put("k", b"v")                                            # puts are not affected
    t0 = time.monotonic()
    with pytest.raises(ObjectStoreError, match="ReadTimeoutError") as e:
        await store.get("k")
    assert e.value.retriable and time.monotonic() - t0 >= 0.29
    with pytest.raises(asyncio.TimeoutError):                             # a caller's own deadline cuts it short
        await asyncio.wait_for(store.get("k"), 0.05)


async def test_bandwidth_caps_each_request_not_the_store():
    """Issue 27's slow store: a body moves at bandwidth_mb_s after the first byte, per request (as one S3
    connection), so parallel ranged GETs each get the rate and together move more than one."""
    store = FaultyObjectStore(MemoryStore(), 1, latency_ms=30, bandwidth_mb_s=2)
    body = bytes(400_000)                               # 0.2 s at 2 MB/s
    t0 = time.monotonic()
    await store.put("seg", body)
    assert time.monotonic() - t0 >= 0.23                # 30 ms to the first byte, 200 ms of body
    t0 = time.monotonic()
    assert await store.get("seg", 0, 200_000) == body[:200_000]
    assert time.monotonic() - t0 >= 0.13                # a ranged GET pays for its own bytes only
    t0 = time.monotonic()
    parts = await asyncio.gather(*(store.get("seg", i * 50_000, (i + 1) * 50_000) for i in range(8)))
    assert b"".join(parts) == body
    assert 0.055 <= time.monotonic() - t0 < 0.2 * 8 - 0.4   # eight at once take about one's time, not eight's
    store.faults.bandwidth_mb_s = 0
    t0 = time.monotonic()
    await store.get("seg")
    assert time.monotonic() - t0 < 0.2                  # uncapped: the latency only


async def test_a_conditional_write_can_fail_after_it_landed():
    store = FaultyObjectStore(MemoryStore(), 5)
    # Before the write: nothing is there.
    store.faults.put_if_absent_error_rate = 1
    store.faults.after_write = 0
    with pytest.raises(ObjectStoreError) as e:
        await store.put_if_absent("lease", b"mine")
    assert e.value.retriable and not isinstance(e.value, PreconditionFailed)
    assert await store.head("lease") is None
    # After it: the caller saw a retriable error, yet the object is written; retrying the same write now loses.
    store.faults.after_write = 1
    with pytest.raises(ObjectStoreError) as e:
        await store.put_if_absent("lease", b"mine")
    assert e.value.retriable
    assert await store.get("lease") == b"mine"
    assert store.history[-1].after and store.injected[("put_if_absent", "after")] == 1
    del store.faults.put_if_absent_error_rate
    with pytest.raises(PreconditionFailed):
        await store.put_if_absent("lease", b"mine")
    # The same for put_if_match, with a timeout: the ETag moved although the caller was told it timed out.
    etag = hashlib.md5(b"mine").hexdigest()
    store.faults.put_if_match_timeout_rate = 1
    store.faults.timeout_ms = 0
    with pytest.raises(ObjectStoreError, match="ReadTimeoutError"):
        await store.put_if_match("lease", b"renewed", etag)
    assert (await store.head("lease")).etag == hashlib.md5(b"renewed").hexdigest()
    store.faults.clear()
    with pytest.raises(PreconditionFailed):
        await store.put_if_match("lease", b"renewed again", etag)


async def test_with_retries_a_landed_attempt_is_recognised_as_s3_does():
    """attempts > 1 runs s3.py's loop: a retry refused by its own landed attempt is a success (the HEAD recheck),
    while a race really lost to another writer stays PreconditionFailed."""
    mine = hashlib.md5(b"mine").hexdigest()
    store = FaultyObjectStore(MemoryStore(), 9, attempts=3, backoff_ms=1, after_write=1, timeout_ms=0,
                              put_if_absent_timeout_rate=0.5)
    recovered = 0
    for i in range(40):
        before = len(store.history)
        try:
            assert await store.put_if_absent(f"m{i}", b"mine") == mine
            recovered += len(store.history) > before            # a fault, yet the caller saw success
        except ObjectStoreError as e:                           # every attempt timed out: the caller cannot know
            assert e.retriable and "gave up after 3 attempts" in str(e)
        assert await store.get(f"m{i}") == b"mine"              # after_write=1: it landed either way
    assert recovered >= 5 and store.requests["put_if_absent"] > store.calls["put_if_absent"]
    # Per-kind settings win: one attempt only, the landed write is reported as a failure.
    store.faults.put_if_absent_attempts = 1
    requests = store.requests["put_if_absent"]
    while await outcome(store.put_if_absent("one", b"mine")) == "ok":
        await store.delete("one")
        requests = store.requests["put_if_absent"]
    assert store.requests["put_if_absent"] == requests + 1 and await store.get("one") == b"mine"
    # Someone else's object: the recheck finds other bytes, the lost race stays lost.
    store.faults.clear()
    await store.put("theirs", b"theirs")
    store.faults.attempts, store.faults.backoff_ms, store.faults.after_write = 3, 1, 0
    store.faults.put_if_absent_error_rate = 1
    with pytest.raises(ObjectStoreError, match="gave up after 3 attempts: put 'theirs': (SlowDown|InternalError)"):
        await store.put_if_absent("theirs", b"mine")
    store.faults.put_if_absent_error_rate = 0.5
    for _ in range(10):
        assert await outcome(store.put_if_absent("theirs", b"mine")) in ("precondition", "retriable")
    assert await store.get("theirs") == b"theirs"


async def test_reads_cut_short_raise_or_return_less():
    store = FaultyObjectStore(MemoryStore(), 2)
    await store.put("seg", bytes(range(100)))
    store.faults.get_cut_rate = 1
    with pytest.raises(ObjectStoreError, match="ClientPayloadError: Response payload is not completed") as e:
        await store.get("seg", 10, 60)
    assert e.value.retriable
    store.faults.get_attempts, store.faults.backoff_ms, store.faults.get_cut_rate = 6, 1, 0.5  # s3.py retries a cut
    assert all([await store.get("seg", 10, 60) == bytes(range(10, 60)) for _ in range(5)])
    store.faults.clear()
    store.faults.get_short_rate = 1
    for _ in range(20):
        data = await store.get("seg", 10, 60)
        assert len(data) < 50 and data == bytes(range(10, 10 + len(data)))
    assert await store.get("seg", 5, 5) == b""                    # an empty range is a HEAD on S3: no body to cut


async def test_faults_change_at_run_time_and_reject_typos():
    store = FaultyObjectStore(MemoryStore(), 4)
    await store.put("a", b"1")
    store.faults.put_error_rate = 1
    with pytest.raises(ObjectStoreError):
        await store.put("a", b"2")
    assert await store.get("a") in (b"1", b"2") and await store.head("a") is not None     # other kinds unaffected
    assert store.faults.put_error_rate == 1 and store.faults.get_error_rate == 0
    del store.faults.put_error_rate
    await store.put("a", b"3")
    with pytest.raises(AttributeError):
        store.faults.put_eror_rate = 0.5
    with pytest.raises(AttributeError):
        store.faults.gett_error_rate = 0.5
    with pytest.raises(ValueError):
        store.faults.error_rate = 1.5
    with pytest.raises(ValueError):
        store.faults.attempts = 0
    # start_after_ms: faithful at first (a broker process has to start), then failing.
    late = FaultyObjectStore(MemoryStore(), 4, error_rate=1, start_after_ms=300)
    await late.put("k", b"v")
    await asyncio.sleep(0.35)
    with pytest.raises(ObjectStoreError):
        await late.put("k", b"v")
    # stop_after_ms: failing at first, faithful from then on (a fault that heals).
    healing = FaultyObjectStore(MemoryStore(), 4, error_rate=1, stop_after_ms=300)
    with pytest.raises(ObjectStoreError):
        await healing.put("k", b"v")
    await asyncio.sleep(0.35)
    await healing.put("k", b"v")
    # A listing is one request per page: a fault can end it after earlier pages came through.
    small = FaultyObjectStore(MemoryStore(), 4, list_page_size=2)
    for k in "abcde":
        await small.put(k, b"x")
    got = []
    with pytest.raises(ObjectStoreError):
        async for info in small.list():
            got.append(info.key)
            if len(got) == 2:
                small.faults.list_error_rate = 1
    assert got == ["a", "b"]
    small.faults.clear()
    assert [i.key for i in await list_all(small)] == list("abcde") and small.calls["list"] == 2 + 3


def test_config_spec_and_wiring(tmp_path):
    faults, seed = parse_spec(" latency_ms=200, error_rate=0.5,put_if_match_after_write=1 ,seed=7,")
    assert seed == 7 and (faults.latency_ms, faults.error_rate, faults.put_if_match_after_write) == (200, 0.5, 1)
    assert faults.put_after_write == 0.5 and parse_spec("")[1] == 0
    for bad in ("error_rate", "eror_rate=0.5", "error_rate=x", "error_rate=2", "seed=x"):
        with pytest.raises(ValueError):
            parse_spec(bad)
    assert not isinstance(open_object_store(f"file://{tmp_path}", faults=""), FaultyObjectStore)
    with pytest.raises(ValueError):
        open_object_store(f"file://{tmp_path}", faults="bogus=1")
    with pytest.raises(TypeError):                            # the inner store still checks its own options
        open_object_store(f"file://{tmp_path}", faults="seed=1", endpoint="typo")
    # From broker config: every store prefix passes `faults` through to open_object_store.
    from broker.config import BrokerConfig
    spec = "latency_ms=5,error_rate=0.5,seed=7"
    cfg = BrokerConfig.load(None, [f"remote.wal.storage.faults={spec}", f"metadata.log.storage.faults={spec}",
                                   f"remote.log.storage.manager.store.faults={spec}", "remote.wal.storage.fsync=false"])
    for options in (cfg.wal_store_options(), cfg.store_options(cfg.METADATA_STORE_PREFIX), cfg.remote_store_options()):
        assert options["faults"] == spec
        store = open_object_store(f"file://{tmp_path}/s", **options)
        assert isinstance(store, FaultyObjectStore) and store.seed == 7 and store.faults.error_rate == 0.5
    assert store.inner.fsync is True
    assert open_object_store(f"file://{tmp_path}/s", **cfg.wal_store_options()).inner.fsync is False
    assert repr(Faults(error_rate=0.5, put_latency_ms=3)) == "Faults(error_rate=0.5, put_latency_ms=3)"


# -- parity with the S3 backend: the same answer from a real HTTP endpoint gives the same exception ------------

class ScriptedS3:
    """An HTTP endpoint that answers each request with the next scripted answer: (status, code, message) as S3's
    XML error (no body for HEAD), ("cut", size) a body cut after half of `size` bytes, ("hang",) nothing."""

    def __init__(self):
        self.answers: list[tuple] = []
        self.server = None
        self.closing = asyncio.Event()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.closing.set()
        self.server.close()

    async def _handle(self, reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")   # a PUT's body never comes: it waits for 100 Continue
            answer = self.answers.pop(0)
            if answer[0] == "hang":
                await self.closing.wait()
            elif answer[0] == "cut":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"e\"\r\n\r\n" % answer[1]
                             + b"x" * (answer[1] // 2))
            else:
                status, code, message = answer
                body = b"" if head.startswith(b"HEAD") else (
                    f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}"
                    f"</Message><RequestId>r</RequestId></Error>").encode()
                writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n\r\n"
                             % (status, HTTPStatus(status).phrase.encode(), len(body)) + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _label(e: BaseException) -> tuple:
    text = re.sub(r'endpoint URL: "[^"]*"', 'endpoint URL: "?"', str(e))
    text = re.sub(r"received \d+ of \d+ bytes", "received ? of ? bytes", text)
    return type(e), getattr(e, "retriable", None), text


async def test_faults_look_to_callers_exactly_as_the_s3_backend_presents_them():
    cases = [  # (operation, S3's answer on the wire, the wrapper's settings that inject the same)
        ("put", (503, "SlowDown", "Please reduce your request rate."),
         dict(error_rate=1, slowdown_share=1, after_write=0)),
        ("put", (500, "InternalError", "We encountered an internal error. Please try again."),
         dict(error_rate=1, slowdown_share=0, after_write=0)),
        ("put_if_absent", (409, "ConditionalRequestConflict", "A conflicting conditional operation is currently in "
                                                              "progress against this resource. Please try again."),
         dict(conflict_rate=1)),
        ("put_if_match", (503, "SlowDown", "Please reduce your request rate."),
         dict(error_rate=1, slowdown_share=1, after_write=0)),
        ("head", (503, "SlowDown", ""), dict(error_rate=1, slowdown_share=1)),
        ("head", (500, "InternalError", ""), dict(error_rate=1, slowdown_share=0)),
        ("get", (503, "SlowDown", "Please reduce your request rate."), dict(error_rate=1, slowdown_share=1)),
        ("get", ("cut", 100), dict(cut_rate=1)),
        ("get", ("hang",), dict(timeout_rate=1, timeout_ms=1)),
        ("delete", (500, "InternalError", "We encountered an internal error. Please try again."),
         dict(error_rate=1, slowdown_share=0, after_write=0)),
        ("list", (503, "SlowDown", "Please reduce your request rate."), dict(error_rate=1, slowdown_share=1)),
    ]
    calls = {"put": lambda s: s.put("k", b"v" * 100), "put_if_absent": lambda s: s.put_if_absent("k", b"v"),
             "put_if_match": lambda s: s.put_if_match("k", b"v", "e"), "head": lambda s: s.head("k"),
             "get": lambda s: s.get("k", 0, 100), "delete": lambda s: s.delete("k"),
             "list": lambda s: list_all(s, "k")}
    async with ScriptedS3() as endpoint:
        s3 = S3ObjectStore("bucket", endpoint_url=endpoint.url, access_key_id="a", secret_access_key="b",
                           max_attempts=1, read_timeout=0.3)
        inner = MemoryStore()
        await inner.put("k", b"v" * 100)
        try:
            for op, answer, settings in cases:
                endpoint.answers.append(answer)
                with pytest.raises(ObjectStoreError) as real:
                    await calls[op](s3)
                with pytest.raises(ObjectStoreError) as faked:
                    await calls[op](FaultyObjectStore(inner, 1, **settings))
                assert _label(faked.value) == _label(real.value), op
                assert type(faked.value.__cause__) is type(real.value.__cause__), op
        finally:
            await s3.close()
