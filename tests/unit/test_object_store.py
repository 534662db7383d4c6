"""One scenario suite for every ObjectStore backend: the local filesystem store and S3 (a moto_server subprocess).

Everything above storage/objectstore/object_store.py may rely only on what these tests pin down, so the shared tests come
first; backend-specific tests (cross-process locking, on-disk layout, outages of the S3 endpoint) follow.
The S3 parameter carries the `s3` marker (`-m "not s3"` skips it); moto does ~100 PUT/s, so object counts stay small.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from moto_server import (  # noqa: F401  (moto_server, private_moto_server are fixtures)
    S3_TEST_OPTIONS, MotoServer, client_error, inject_faults, moto_server, private_moto_server,
)
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.object_store import (
    ObjectNotFound, ObjectStore, ObjectStoreError, PreconditionFailed, list_all, open_object_store, reads_into,
)
from storage.objectstore.s3 import MiB, S3ObjectStore

ROOT = Path(__file__).resolve().parents[2]


# -- shared scenarios -----------------------------------------------------------------------------------------

async def test_put_get_head_overwrite(store):
    assert isinstance(store, ObjectStore)
    etag = await store.put("topic-0/00000000000000000000.log", b"hello world")
    assert etag == hashlib.md5(b"hello world").hexdigest()  # S3's single-part ETag; the local store matches it
    assert await store.get("topic-0/00000000000000000000.log") == b"hello world"
    info = await store.head("topic-0/00000000000000000000.log")
    assert (info.key, info.size, info.etag) == ("topic-0/00000000000000000000.log", 11, etag)
    assert info.last_modified.tzinfo is not None
    assert abs(info.last_modified - datetime.now(timezone.utc)) < timedelta(minutes=1)

    etag2 = await store.put("topic-0/00000000000000000000.log", memoryview(bytearray(b"second version")))
    assert etag2 != etag
    assert await store.get("topic-0/00000000000000000000.log") == b"second version"
    assert (await store.head("topic-0/00000000000000000000.log")).etag == etag2

    assert await store.put("empty", b"") == hashlib.md5(b"").hexdigest()
    assert await store.get("empty") == b"" and await store.get("empty", 0, 10) == b""
    assert (await store.head("empty")).size == 0


async def test_ranged_get_is_a_slice(store):
    data = bytes(range(256)) * 4
    await store.put("seg", data)
    for start, end in [(0, None), (10, 20), (0, 1), (1000, None), (1023, 1024), (1020, 5000), (1024, None),
                       (2000, None), (2000, 3000), (5, 5)]:
        assert await store.get("seg", start, end) == data[start:end], (start, end)
    for start, end in [(-1, None), (10, 5)]:
        with pytest.raises(ValueError):
            await store.get("seg", start, end)


async def test_ranged_get_into_a_buffer_is_the_same_slice(store):
    """get_into (object_store.reads_into: the remote reader's reused chunk buffers) answers what get does, in the
    caller's buffer: the view filled, shorter at the object's end, empty past it; a missing key is ObjectNotFound."""
    assert reads_into(store)
    data = os.urandom(300_000)
    await store.put("seg", data)
    for start, length in [(0, 300_000), (10, 20), (0, 1), (299_000, 1000), (299_000, 5000), (300_000, 10),
                          (400_000, 10), (5, 0), (123_456, 100_000)]:
        buf = bytearray(b"\xaa" * length)
        got = await store.get_into("seg", start, memoryview(buf))
        assert bytes(got) == data[start:start + length], (start, length)
        assert buf[len(got):] == b"\xaa" * (length - len(got))       # nothing written past what came
    with pytest.raises(ObjectNotFound):
        await store.get_into("nope", 0, memoryview(bytearray(10)))


async def test_missing_keys(store):
    for start, end in [(0, None), (5, 10), (3, 3)]:
        with pytest.raises(ObjectNotFound) as e:
            await store.get("nope", start, end)
        assert not e.value.retriable and isinstance(e.value, ObjectStoreError)
    assert await store.head("nope") is None
    await store.delete("nope")  # idempotent
    await store.put("k", b"v")
    await store.delete("k")
    await store.delete("k")
    assert await store.head("k") is None
    with pytest.raises(ObjectNotFound):
        await store.get("k")
    with pytest.raises(PreconditionFailed):  # if-match on a missing key is a lost race, not "not found"
        await store.put_if_match("k", b"v2", hashlib.md5(b"v").hexdigest())


async def test_list_by_prefix_sorted_and_paginated(make_store):
    store = make_store(list_page_size=2)  # pages of 2 keys force several list_objects_v2 round trips on S3
    keys = ["p/a/1", "p/a/10", "p/a/2", "p/a-b", "p/b/1", "q/1", "pz"]
    for k in keys:
        await store.put(k, k.encode() * 3)
    assert [i.key for i in await list_all(store)] == sorted(keys)
    # byte order, not directory order: "p/a-b" < "p/a/1" because "-" < "/"
    assert [i.key for i in await list_all(store, "p/")] == ["p/a-b", "p/a/1", "p/a/10", "p/a/2", "p/b/1"]
    assert [i.key for i in await list_all(store, "p/a")] == ["p/a-b", "p/a/1", "p/a/10", "p/a/2"]
    assert [i.key for i in await list_all(store, "p/a/1")] == ["p/a/1", "p/a/10"]
    assert [i.key for i in await list_all(store, "p")] == ["p/a-b", "p/a/1", "p/a/10", "p/a/2", "p/b/1", "pz"]
    for prefix in ("nothing/", "../", "p/../", "/p", ".strata/", "p//"):
        assert await list_all(store, prefix) == [], prefix
    for info in await list_all(store, "p/b"):
        assert (info.size, info.etag) == (15, hashlib.md5(b"p/b/1" * 3).hexdigest())
        assert info.last_modified.tzinfo is not None
    await store.delete("p/b/1")
    assert [i.key for i in await list_all(store, "p/b")] == []


async def test_put_if_absent(store):
    etag = await store.put_if_absent("manifest/0001", b"first")
    with pytest.raises(PreconditionFailed) as e:
        await store.put_if_absent("manifest/0001", b"second")
    assert not e.value.retriable
    assert await store.get("manifest/0001") == b"first"
    assert (await store.head("manifest/0001")).etag == etag
    await store.delete("manifest/0001")
    assert await store.put_if_absent("manifest/0001", b"third") == hashlib.md5(b"third").hexdigest()


async def test_put_if_absent_race_has_one_winner(make_store):
    stores = [make_store(), make_store()]  # two clients, as two brokers would race
    for round_ in range(3):
        key = f"race/{round_}"
        results = await asyncio.gather(*(stores[i % 2].put_if_absent(key, f"writer-{i}".encode()) for i in range(8)),
                                       return_exceptions=True)
        winners = [i for i, r in enumerate(results) if isinstance(r, str)]
        assert len(winners) == 1, results
        assert all(isinstance(r, PreconditionFailed) for r in results if not isinstance(r, str)), results
        assert await stores[0].get(key) == f"writer-{winners[0]}".encode()


async def test_put_if_match(store):
    e1 = await store.put("meta", b"v1")
    e2 = await store.put_if_match("meta", b"v2", e1)
    assert e2 == hashlib.md5(b"v2").hexdigest()
    with pytest.raises(PreconditionFailed):
        await store.put_if_match("meta", b"v3", e1)  # stale ETag
    assert await store.get("meta") == b"v2"
    assert await store.put_if_match("meta", b"v3", f'"{e2}"') == hashlib.md5(b"v3").hexdigest()  # quoted is fine


async def test_compare_and_swap_counter_loses_no_update(make_store):
    """Read-modify-write with put_if_match from concurrent clients: every increment must survive."""
    stores = [make_store(), make_store()]
    await stores[0].put("counter", b"0")

    async def worker(store: ObjectStore, increments: int) -> None:
        while increments:
            info = await store.head("counter")
            value = int(await store.get("counter"))
            try:
                await store.put_if_match("counter", str(value + 1).encode(), info.etag)
                increments -= 1
            except PreconditionFailed:
                pass  # someone else won this round; re-read and retry

    await asyncio.gather(*(worker(stores[i % 2], 6) for i in range(4)))
    assert await stores[0].get("counter") == b"24"


async def test_large_object_over_multipart_threshold(store):
    data = os.urandom(11 * MiB + 123)  # 3 parts of 5 MiB, 5 MiB, 1 MiB+123 on S3
    etag = await store.put_if_absent("big/segment.log", data)
    if isinstance(store, S3ObjectStore):
        assert etag.endswith("-3"), etag  # went up as a multipart upload
    assert await store.get("big/segment.log") == data
    assert await store.get("big/segment.log", 5 * MiB - 10, 5 * MiB + 10) == data[5 * MiB - 10:5 * MiB + 10]
    info = await store.head("big/segment.log")
    assert (info.size, info.etag) == (len(data), etag)
    with pytest.raises(PreconditionFailed):  # If-None-Match on CompleteMultipartUpload
        await store.put_if_absent("big/segment.log", data[::-1])
    assert (await store.head("big/segment.log")).etag == etag
    if isinstance(store, S3ObjectStore):  # the losing upload was aborted, not left behind costing storage
        client = await store._get_client()
        assert not (await client.list_multipart_uploads(Bucket=store.bucket)).get("Uploads")


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "./a", "a/", ".strata/x", "a\0b", "a\\b", "k" * 1025])
async def test_invalid_keys_rejected_everywhere(store, key):
    with pytest.raises(ValueError):
        await store.put(key, b"x")
    with pytest.raises(ValueError):
        await store.get(key)


async def test_closed_store_refuses_calls(make_store):
    store = make_store()
    await store.put("k", b"v")
    await store.close()
    with pytest.raises(ObjectStoreError):
        await store.get("k")


# -- local store ----------------------------------------------------------------------------------------------

CROSS_PROCESS_WORKER = textwrap.dedent("""
    import asyncio, sys
    from storage.objectstore.local import LocalObjectStore
    from storage.objectstore.object_store import PreconditionFailed

    async def main(root, name, increments):
        store = LocalObjectStore(root)
        try:
            await store.put_if_absent("winner", name.encode())
            print("won")
        except PreconditionFailed:
            print("lost")
        while increments:
            info = await store.head("counter")
            value = int(await store.get("counter"))
            try:
                await store.put_if_match("counter", str(value + 1).encode(), info.etag)
                increments -= 1
            except PreconditionFailed:
                pass

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
""")


async def test_local_conditional_writes_are_atomic_across_processes(tmp_path):
    store = LocalObjectStore(tmp_path)
    await store.put("counter", b"0")
    procs = [subprocess.Popen([sys.executable, "-c", CROSS_PROCESS_WORKER, str(tmp_path), f"p{i}", "15"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True) for i in range(4)]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4
    assert sorted(o[0] for o in outputs) == ["lost", "lost", "lost", "won"]
    winner = next(f"p{i}" for i, o in enumerate(outputs) if o[0] == "won")
    assert await store.get("winner") == winner.encode()
    assert await store.get("counter") == b"60"


async def test_local_layout_and_housekeeping(tmp_path):
    store = LocalObjectStore(tmp_path, fsync=False)
    await store.put("t-0/a/seg.log", b"data")
    assert (tmp_path / "t-0" / "a" / "seg.log").read_bytes() == b"data"  # operators can inspect it like a bucket
    with pytest.raises(PreconditionFailed):
        await store.put_if_absent("t-0/a/seg.log", b"other")
    assert os.listdir(tmp_path / ".strata" / "tmp") == []  # no temp files left behind, even by a lost race
    # A directory is not an object, and a filesystem cannot hold both "t-0/a" and "t-0/a/seg.log".
    assert await store.head("t-0/a") is None
    with pytest.raises(ObjectNotFound):
        await store.get("t-0/a")
    with pytest.raises(ObjectStoreError) as e:
        await store.put("t-0/a", b"x")
    assert not e.value.retriable
    await store.delete("t-0/a")  # a prefix, not an object: nothing to delete
    # Deleting the last object prunes the empty directories.
    await store.delete("t-0/a/seg.log")
    assert sorted(os.listdir(tmp_path)) == [".strata"]
    # A file copied in by hand has no ETag xattr: the store hashes it instead.
    (tmp_path / "manual").write_bytes(b"copied in")
    assert (await store.head("manual")).etag == hashlib.md5(b"copied in").hexdigest()
    # Crash leftovers in the temp directory are swept at open; fresh ones (a writer in another process) are not.
    stale, fresh = tmp_path / ".strata" / "tmp" / "stale", tmp_path / ".strata" / "tmp" / "fresh"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    LocalObjectStore(tmp_path)
    assert os.listdir(tmp_path / ".strata" / "tmp") == ["fresh"]


def test_open_object_store_urls(tmp_path, monkeypatch):
    s = open_object_store(f"file://{tmp_path}/abs", max_attempts=3)  # S3-only options are ignored for file://
    assert isinstance(s, LocalObjectStore) and s.root == tmp_path / "abs"
    monkeypatch.chdir(tmp_path)
    s = open_object_store("file://./rel/dir", fsync="false")
    assert isinstance(s, LocalObjectStore) and s.root == tmp_path / "rel" / "dir" and s.fsync is False
    s = open_object_store("s3://my-bucket/some/prefix/", endpoint_url="http://127.0.0.1:9", max_attempts="2",
                          list_page_size="10", retry_base_delay="0.5")
    assert isinstance(s, S3ObjectStore)
    assert (s.bucket, s.prefix, s.max_attempts, s.list_page_size, s.retry_base_delay) == \
        ("my-bucket", "some/prefix/", 2, 10, 0.5)
    assert open_object_store("s3://b").prefix == ""
    with pytest.raises(TypeError):
        open_object_store("s3://b", endpoint="typo")
    for bad in ("gs://b/p", "s3:///p", "file://"):
        with pytest.raises(ValueError):
            open_object_store(bad)
    with pytest.raises(ValueError):
        open_object_store("s3://b", part_size=MiB)  # S3 rejects parts under 5 MiB


# -- S3 retry policy (faults injected into the aiobotocore client) ---------------------------------------------

@pytest.mark.s3
async def test_s3_retry_policy(moto_server):
    store = open_object_store(f"s3://{moto_server.new_bucket()}", **moto_server.store_options(**S3_TEST_OPTIONS))
    try:
        client = await store._get_client()
        calls = inject_faults(client, "put_object", [client_error(503, "SlowDown"), client_error(500, "InternalError")])
        assert await store.put("k", b"v") == hashlib.md5(b"v").hexdigest()  # two retriable failures, then success
        assert len(calls) == 3
        calls = inject_faults(client, "put_object", [client_error(403, "AccessDenied")])
        with pytest.raises(ObjectStoreError) as e:
            await store.put("k", b"v")
        assert not e.value.retriable and len(calls) == 1  # not retried
        calls = inject_faults(client, "put_object", [ConnectionResetError()] * 3)
        with pytest.raises(ObjectStoreError) as e:
            await store.put("k", b"v")
        assert e.value.retriable and len(calls) == 3  # max_attempts=3, then give up as retriable
    finally:
        await store.close()


@pytest.mark.s3
async def test_s3_conditional_put_retried_after_lost_response(moto_server):
    """The first attempt landed but its response was lost: the retry's 412 is our own success, not a conflict."""
    store = open_object_store(f"s3://{moto_server.new_bucket()}", **moto_server.store_options(**S3_TEST_OPTIONS))
    other = open_object_store(f"s3://{store.bucket}", **moto_server.store_options(**S3_TEST_OPTIONS))
    try:
        client = await store._get_client()
        inject_faults(client, "put_object", [("after", TimeoutError())])
        etag = await store.put_if_absent("m", b"mine")
        assert etag == hashlib.md5(b"mine").hexdigest() and await store.get("m") == b"mine"
        inject_faults(client, "put_object", [("after", TimeoutError())])
        assert await store.put_if_match("m", b"mine 2", etag) == hashlib.md5(b"mine 2").hexdigest()
        # The first attempt did NOT land and another writer got there first: that stays a lost race.
        inject_faults(client, "put_object", [TimeoutError()])
        client_put = client.put_object

        async def racing_put(**kwargs):
            if not hasattr(racing_put, "done"):
                racing_put.done = True
                await other.put_if_absent("n", b"theirs")
            return await client_put(**kwargs)
        client.put_object = racing_put
        with pytest.raises(PreconditionFailed):
            await store.put_if_absent("n", b"mine")
        assert await store.get("n") == b"theirs"
    finally:
        await store.close()
        await other.close()


# -- S3 outages -----------------------------------------------------------------------------------------------

def _outage_store(server: MotoServer, bucket: str, **options) -> S3ObjectStore:
    options = {"max_attempts": 2, "retry_base_delay": 0.01, "connect_timeout": 1, "read_timeout": 1, **options}
    return open_object_store(f"s3://{bucket}", **server.store_options(**options))


async def _expect_retriable(call, within: float) -> None:
    t0 = time.monotonic()
    with pytest.raises(ObjectStoreError) as e:
        await asyncio.wait_for(call, within + 5)  # a hang fails the test instead of blocking it
    assert e.value.retriable, repr(e.value)
    assert not isinstance(e.value, (ObjectNotFound, PreconditionFailed))
    assert time.monotonic() - t0 < within, f"took {time.monotonic() - t0:.1f}s"


@pytest.mark.s3
async def test_s3_endpoint_down_fails_fast_and_retriable_then_recovers(private_moto_server):
    server = private_moto_server
    store = _outage_store(server, server.new_bucket())
    try:
        await store.put("before", b"1")
        server.stop()  # connection refused
        for call in (lambda: store.put("k", b"v"), lambda: store.put_if_absent("k", b"v"),
                     lambda: store.put_if_match("k", b"v", "x"), lambda: store.get("before"),
                     lambda: store.get("before", 0, 1), lambda: store.head("before"),
                     lambda: store.delete("before"), lambda: list_all(store)):
            await _expect_retriable(call(), within=3)
        server.start()  # moto keeps state in memory: the bucket has to be made again
        server.create_bucket(store.bucket)
        await store.put("after", b"2")  # same store object: the client reconnects by itself
        assert await store.get("after") == b"2"
    finally:
        await store.close()


@pytest.mark.s3
async def test_s3_hung_endpoint_times_out_then_retries_recover(private_moto_server):
    server = private_moto_server
    bucket = server.new_bucket()
    store = _outage_store(server, bucket)
    # Retries absorb an outage shorter than the retry budget.
    patient = _outage_store(server, bucket, max_attempts=20, retry_base_delay=0.05, retry_max_delay=0.2,
                            read_timeout=0.3)
    try:
        await store.put("k", b"v")
        server.pause()  # accepts connections, never answers: only timeouts end the call
        try:
            await _expect_retriable(store.head("k"), within=5)
        finally:
            server.resume()
        assert await store.get("k") == b"v"
        server.pause()
        asyncio.get_running_loop().call_later(1.0, server.resume)
        t0 = time.monotonic()
        assert await asyncio.wait_for(patient.get("k"), 20) == b"v"
        assert time.monotonic() - t0 >= 0.9  # it really waited out the outage
    finally:
        server.resume() if server.paused else None
        await store.close()
        await patient.close()
