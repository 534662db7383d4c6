"""Synchronous access to Strata's asyncio ObjectStore (storage/objectstore/object_store.py) from Spark's Python workers, and the
store-only view of a topic used when no broker answers.

The stores are asyncio objects; Spark's reader code is synchronous generators. A StoreClient runs one event loop
in a daemon thread and submits coroutines to it, so a reader can keep the next ranged GET in flight (a
concurrent.futures.Future) while it decodes the current chunk, on S3 and on the local store alike.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import threading
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

LOG_SUFFIX = ".log"
_SEGMENT_NAME = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.log$")


def local_root(url: str) -> str | None:
    """The directory of a file:// store URL (as open_object_store reads it), None for other schemes."""
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    path = unquote(parts.path)
    return path if parts.netloc in ("", "localhost") else parts.netloc + path


class StoreClient:
    def __init__(self, url: str, options: dict):
        from storage.objectstore.object_store import open_object_store
        root = local_root(url)
        if root is not None and not os.path.isdir(root):
            # opening a local store creates its directory: never do that for a reader with a mistyped URL
            raise FileNotFoundError(f"the object store directory {root} ({url}) does not exist")
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="strata-store-io", daemon=True)
        self._thread.start()

        async def _open():
            return open_object_store(url, **options)
        try:
            self.store = self.call(_open())
        except BaseException:
            self._stop_loop()
            raise

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro, timeout: float | None = None):
        return self.submit(coro).result(timeout)

    def on_loop(self, fn, *args):
        """Call `fn(*args)` on the loop's thread (for state the loop's tasks also change) and return its result."""
        async def run():
            return fn(*args)
        return self.call(run())

    def get(self, key: str, start: int = 0, end: int | None = None) -> concurrent.futures.Future:
        return self.submit(self.store.get(key, start, end))

    def list(self, prefix: str) -> list:
        async def _list():
            return [info async for info in self.store.list(prefix)]
        return self.call(_list())

    def first(self, prefix: str):
        """The first object under `prefix` or None (one LIST request on S3, whatever the prefix holds)."""
        async def _first():
            listing = self.store.list(prefix)
            try:
                async for info in listing:
                    return info
                return None
            finally:
                await listing.aclose()
        return self.call(_first())

    def close(self) -> None:
        try:
            self.call(self.store.close(), timeout=30)
        except Exception:
            pass
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def __enter__(self) -> "StoreClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class StoreSegment:
    """A `.log` object found by listing: the segment's key prefix (without suffix), start offset and size."""
    key_prefix: str
    start: int
    size: int


def scan_topic(client: StoreClient, topic: str) -> tuple[str, dict[int, list[StoreSegment]]]:
    """The store's view of `topic` without the metadata topic: (topic id string, {partition: segments by start}).

    Keys are `<topic>-<topicId>/<partition>/<start:020d>-<segmentId>.log`; the RemoteStorageManager uploads the
    `.log` last and deletes it first, so a listed `.log` is a complete segment. Two `.log` objects with one start
    offset (an orphaned copy retry) hold the same bytes: either will do. Raises LookupError if the store has no
    segment of the topic, or has segments of more than one topic id (a deleted and recreated topic)."""
    by_id: dict[str, dict[int, dict[int, StoreSegment]]] = {}
    for info in client.list(topic + "-"):
        parts = info.key.split("/")
        if len(parts) != 3 or len(parts[0]) != len(topic) + 23 or parts[0][len(topic)] != "-":
            continue
        m = _SEGMENT_NAME.match(parts[2])
        if m is None or not parts[1].isdigit():
            continue
        topic_id = parts[0][len(topic) + 1:]
        start = int(m.group(1))
        segs = by_id.setdefault(topic_id, {}).setdefault(int(parts[1]), {})
        segs.setdefault(start, StoreSegment(info.key[:-len(LOG_SUFFIX)], start, info.size))
    if not by_id:
        raise LookupError(f"the object store {client.url} holds no remote segments of topic '{topic}'")
    if len(by_id) > 1:
        raise LookupError(f"the object store {client.url} holds segments of topic '{topic}' under several topic ids "
                          f"({', '.join(sorted(by_id))}); the topic was deleted and recreated, and without the "
                          "broker the current one cannot be told apart")
    [(topic_id, partitions)] = by_id.items()
    return topic_id, {p: [segs[s] for s in sorted(segs)] for p, segs in sorted(partitions.items())}


def scan_topics(client: StoreClient) -> set[str]:
    """Names of the topics with segments in the store (for subscribePattern without a broker)."""
    names = set()
    for info in client.list(""):
        top = info.key.split("/", 1)[0]
        if len(top) > 23 and top[-23] == "-" and "/" in info.key and info.key.endswith(LOG_SUFFIX):
            names.add(top[:-23])
    return names
