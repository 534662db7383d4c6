"""S3ObjectStore.get_into against a raw HTTP endpoint: the body arrives in many small pieces (each copied into the
caller's buffer as it comes), a body cut mid-way is retried and the buffer refilled, and a body that stays short
fails retriably instead of answering short data."""
from __future__ import annotations

import asyncio
import os
import re

import pytest

from storage.objectstore.object_store import ObjectStoreError
from storage.objectstore.s3 import S3ObjectStore

OBJECT = os.urandom(100_000)


class _Endpoint:
    """Answers ranged GETs of OBJECT in 997-byte pieces; the first `cut` answers close the connection halfway.
    `chunked`: in chunked transfer encoding, each chunk's closing CRLF sent apart from its data (aiohttp then
    reports the end of a chunk with no data); `ignore_range`: the whole object, 200 without Content-Range."""

    def __init__(self, cut: int = 0, chunked: bool = False, ignore_range: bool = False):
        self.cut, self.chunked, self.ignore_range, self.gets = cut, chunked, ignore_range, 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.store = S3ObjectStore("bucket", endpoint_url=f"http://127.0.0.1:{port}", access_key_id="a",
                                   secret_access_key="b", max_attempts=3, retry_base_delay=0.01)
        return self

    async def __aexit__(self, *exc):
        await self.store.close()
        self.server.close()

    async def _handle(self, reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        first, last = map(int, re.search(r"(?i)range: bytes=(\d+)-(\d+)", head).groups())
        last = min(last, len(OBJECT) - 1)
        body = OBJECT[first:last + 1]
        self.gets += 1
        if self.ignore_range:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"e\"\r\nConnection: close\r\n\r\n"
                         % len(OBJECT) + OBJECT)
        elif self.chunked:
            writer.write(b"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\nContent-Range: bytes %d-%d/%d"
                         b"\r\nETag: \"e\"\r\nConnection: close\r\n\r\n" % (first, last, len(OBJECT)))
            for i in range(0, len(body), 997):
                writer.write(b"%x\r\n" % len(body[i:i + 997]) + body[i:i + 997])
                await writer.drain()
                await asyncio.sleep(0.002)          # the chunk's CRLF in a read of its own
                writer.write(b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\nContent-Range: bytes %d-%d/%d\r\n"
                         b"ETag: \"e\"\r\nConnection: close\r\n\r\n" % (len(body), first, last, len(OBJECT)))
            send = body[:len(body) // 2] if self.gets <= self.cut else body
            for i in range(0, len(send), 997):
                writer.write(send[i:i + 997])
                await writer.drain()
        await writer.drain()
        writer.close()


async def test_a_body_in_many_pieces_fills_the_buffer():
    async with _Endpoint(cut=0) as ep:
        buf = bytearray(60_000)
        got = await ep.store.get_into("k", 1234, memoryview(buf))
        assert len(got) == 60_000 and buf == OBJECT[1234:61_234]
        got = await ep.store.get_into("k", 90_000, memoryview(buf))        # past the object's end: shorter
        assert bytes(got) == OBJECT[90_000:]


async def test_a_body_cut_midway_is_retried_into_the_same_buffer():
    async with _Endpoint(cut=1) as ep:
        buf = bytearray(50_000)
        got = await ep.store.get_into("k", 0, memoryview(buf))
        assert ep.gets == 2 and len(got) == 50_000 and buf == OBJECT[:50_000]


async def test_a_body_that_stays_short_fails_retriably():
    async with _Endpoint(cut=99) as ep:
        with pytest.raises(ObjectStoreError) as e:
            await ep.store.get_into("k", 0, memoryview(bytearray(50_000)))
        assert e.value.retriable and ep.gets == 3


async def test_a_chunked_body_fills_the_buffer():
    """The end of an HTTP chunk is not the end of the body."""
    async with _Endpoint(chunked=True) as ep:
        buf = bytearray(20_000)
        got = await ep.store.get_into("k", 777, memoryview(buf))
        assert len(got) == 20_000 and buf == OBJECT[777:20_777] and ep.gets == 1


async def test_a_server_that_ignores_the_range_answers_the_slice():
    async with _Endpoint(ignore_range=True) as ep:
        buf = bytearray(30_000)
        got = await ep.store.get_into("k", 50_000, memoryview(buf))
        assert len(got) == 30_000 and buf == OBJECT[50_000:80_000]
        got = await ep.store.get_into("k", 90_000, memoryview(buf))
        assert bytes(got) == OBJECT[90_000:]
