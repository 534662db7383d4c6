"""S3ObjectStore's per-attempt deadline (storage/objectstore/s3.py): a PUT to an endpoint that accepts the connection
and never answers hangs in aiohttp's wait for `100 Continue`, which botocore's read_timeout does not cover; every
attempt now fails within connect + read timeout as a retriable read timeout. A conditional write whose timed-out
attempt landed is still recognised by the HEAD recheck, and a slow but steady GET body is not cut by the deadline."""
from __future__ import annotations

import asyncio
import hashlib
import time

import botocore.exceptions as bce
import pytest

from storage.objectstore.object_store import ObjectStoreError
from storage.objectstore.s3 import S3ObjectStore

CONNECT, READ = 0.2, 0.3


def _store(url: str, **options) -> S3ObjectStore:
    return S3ObjectStore("bucket", endpoint_url=url, access_key_id="a", secret_access_key="b",
                         connect_timeout=CONNECT, read_timeout=READ, **{"max_attempts": 2, "retry_base_delay": 0.01,
                                                                        **options})


class _Silent:
    """Accepts connections, reads what comes and never answers (a hung endpoint, like a SIGSTOPped server whose
    kernel still completes the handshake)."""

    async def __aenter__(self):
        self.conns: list[asyncio.StreamWriter] = []
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        for w in self.conns:
            w.close()

    async def _handle(self, reader, writer):
        self.conns.append(writer)
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass


@pytest.mark.parametrize("op", ["put", "put_if_absent", "put_if_match"])
async def test_a_put_to_an_endpoint_that_never_answers_fails_retriably_in_bounded_time(op):
    async with _Silent() as endpoint:
        store = _store(endpoint.url)
        calls = {"put": lambda: store.put("k", b"v" * 100), "put_if_absent": lambda: store.put_if_absent("k", b"v"),
                 "put_if_match": lambda: store.put_if_match("k", b"v", "etag")}
        t0 = time.monotonic()
        try:
            with pytest.raises(ObjectStoreError, match="gave up after 2 attempts.*ReadTimeoutError") as e:
                await asyncio.wait_for(calls[op](), 10)      # without the deadline: the outer wait_for's TimeoutError
        finally:
            await store.close()
        took = time.monotonic() - t0
        assert e.value.retriable and isinstance(e.value.__cause__, bce.ReadTimeoutError)
        assert 2 * (CONNECT + READ) * 0.9 <= took < 2 * (CONNECT + READ) + 2, took   # each attempt: about its deadline


class _FakeClient:
    """put_object: the first call writes and then never answers (its answer is lost), later calls are refused with
    412 as S3 refuses a create-only write of an existing key; head_object shows what was written."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}
        self.puts = 0

    async def put_object(self, Bucket, Key, Body, **conditions):
        self.puts += 1
        if self.puts > 1:
            raise bce.ClientError({"Error": {"Code": "PreconditionFailed", "Message": "exists"},
                                   "ResponseMetadata": {"HTTPStatusCode": 412}}, "PutObject")
        self.objects[Key] = Body
        await asyncio.sleep(3600)

    async def head_object(self, Bucket, Key):
        from datetime import datetime, timezone
        body = self.objects[Key]
        return {"ContentLength": len(body), "ETag": f'"{hashlib.md5(body).hexdigest()}"',
                "LastModified": datetime.now(timezone.utc)}


async def test_a_conditional_write_that_landed_before_its_deadline_is_recognised_by_the_recheck():
    store = _store("http://127.0.0.1:9")
    store._client = client = _FakeClient()           # _get_client hands out the client it has
    t0 = time.monotonic()
    etag = await asyncio.wait_for(store.put_if_absent("k", b"mine"), 10)
    assert etag == hashlib.md5(b"mine").hexdigest() and client.puts == 2
    assert CONNECT + READ <= time.monotonic() - t0 < CONNECT + READ + 2


async def test_a_slow_steady_get_body_is_not_cut_by_the_deadline():
    """The deadline covers the wait for the answer; the body of a large GET streams on under read_timeout per
    read, however long the whole transfer takes."""
    body = b"x" * 40

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"e\"\r\n\r\n" % len(body))
        for i in range(0, len(body), 4):             # 10 pieces 0.1 s apart: 1 s in all, past connect + read
            writer.write(body[i:i + 4])
            await writer.drain()
            await asyncio.sleep(0.1)
        writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    store = _store(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", max_attempts=1)
    try:
        t0 = time.monotonic()
        assert await store.get("k") == body
        assert time.monotonic() - t0 > CONNECT + READ
    finally:
        await store.close()
        server.close()
