"""Fakes the controller and replication tests share: a wrapper that makes an object store slow or fail at a chosen
moment (every call can be delayed, and a call can be made to fail before or after the inner store applied it, which
is what makes an error ambiguous to the caller), an in-memory store for state-machine tests, a settable clock, a
wait for a condition, and a controller operation that appends given records."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Callable

from storage.objectstore.object_store import (ObjectInfo, ObjectNotFound, ObjectStore, ObjectStoreError,
                                              PreconditionFailed)


class FaultyStore:
    def __init__(self, inner: ObjectStore):
        self.inner = inner
        self.delay: dict[str, float] = {}          # operation name -> seconds before it reaches the inner store
        # operation name -> predicate(key) deciding whether this call fails; "before" fails without applying,
        # "after" applies and then raises (an answer lost on the way back)
        self.fail_before: dict[str, Callable[[str], bool]] = {}
        self.fail_after: dict[str, Callable[[str], bool]] = {}
        self.calls: list[tuple[str, str]] = []

    async def _call(self, op: str, key: str, coro_fn):
        self.calls.append((op, key))
        if self.delay.get(op):
            await asyncio.sleep(self.delay[op])
        check = self.fail_before.get(op)
        if check is not None and check(key):
            raise ObjectStoreError(f"injected failure of {op} {key}", retriable=True)
        result = await coro_fn()
        check = self.fail_after.get(op)
        if check is not None and check(key):
            raise ObjectStoreError(f"injected failure after {op} {key}", retriable=True)
        return result

    async def put(self, key, data):
        return await self._call("put", key, lambda: self.inner.put(key, data))

    async def put_if_absent(self, key, data):
        return await self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    async def put_if_match(self, key, data, etag):
        return await self._call("put_if_match", key, lambda: self.inner.put_if_match(key, data, etag))

    async def get(self, key, start=0, end=None):
        return await self._call("get", key, lambda: self.inner.get(key, start, end))

    async def head(self, key):
        return await self._call("head", key, lambda: self.inner.head(key))

    async def delete(self, key):
        return await self._call("delete", key, lambda: self.inner.delete(key))

    def list(self, prefix=""):
        return self.inner.list(prefix)

    async def close(self):
        await self.inner.close()


class MemoryStore:
    """An object store in a dict, with the conditional writes' semantics, for state-machine tests that must run
    thousands of steps fast and deterministically: every call yields to the event loop once before it takes effect
    and once after, so concurrent callers interleave where the test lets the loop run."""

    def __init__(self):
        self.objects: dict[str, tuple[bytes, str]] = {}
        self._etags = 0

    def _store(self, key: str, data) -> str:
        self._etags += 1
        etag = f"e{self._etags}"
        self.objects[key] = (bytes(data), etag)
        return etag

    async def put(self, key, data):
        await asyncio.sleep(0)
        etag = self._store(key, data)
        await asyncio.sleep(0)
        return etag

    async def put_if_absent(self, key, data):
        await asyncio.sleep(0)
        if key in self.objects:
            raise PreconditionFailed(f"{key} exists")
        etag = self._store(key, data)
        await asyncio.sleep(0)
        return etag

    async def put_if_match(self, key, data, etag):
        await asyncio.sleep(0)
        if key not in self.objects or self.objects[key][1] != etag:
            raise PreconditionFailed(f"{key} is not at {etag}")
        etag = self._store(key, data)
        await asyncio.sleep(0)
        return etag

    async def get(self, key, start=0, end=None):
        await asyncio.sleep(0)
        if key not in self.objects:
            raise ObjectNotFound(key)
        return self.objects[key][0][start:end]

    async def head(self, key):
        await asyncio.sleep(0)
        if key not in self.objects:
            return None
        data, etag = self.objects[key]
        return ObjectInfo(key, len(data), etag, datetime.now(timezone.utc))

    async def delete(self, key):
        await asyncio.sleep(0)
        self.objects.pop(key, None)

    async def list(self, prefix=""):
        for key in sorted(k for k in self.objects if k.startswith(prefix)):
            data, etag = self.objects[key]
            yield ObjectInfo(key, len(data), etag, datetime.now(timezone.utc))

    async def close(self):
        pass


class Clock:
    """A monotonic clock the test moves by hand (`now`)."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


async def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def append_op(records):
    """A controller operation that appends `records` whatever the image (test set-up)."""
    return lambda image: (list(records), None)
