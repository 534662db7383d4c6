"""The object-store interface tiered storage, the metadata log and the Spark reader are written against.

One narrow async interface (as Tansu and nisshi do) keeps every backend honest: the same scenario suite
(tests/unit/test_object_store.py) runs against the local filesystem store and against S3 (moto), so code above
this layer cannot come to depend on one backend's quirks. The operations are the ones S3 offers with strong
consistency: whole-object PUT (optionally conditional), ranged GET, HEAD, DELETE and sorted prefix LIST.

Conditional writes (create-only and replace-if-ETag-matches) are what the metadata log and segment manifests
build on, so both backends must make them atomic: S3 via If-None-Match/If-Match, the local store via
link()/flock().
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import AsyncIterator, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

MAX_KEY_BYTES = 1024  # S3's limit; the local store holds to it too so a key valid on one is valid on both
RESERVED_TOP_LEVEL = ".strata"  # the local store keeps temp and lock files there


class ObjectStoreError(Exception):
    """Base of all object-store errors. `retriable` tells the caller that the same call may succeed later
    (outage, throttling, timeout) as opposed to a logic error that retrying cannot fix."""

    def __init__(self, message: str, *, retriable: bool = False):
        super().__init__(message)
        self.retriable = retriable


class ObjectNotFound(ObjectStoreError):
    """The key does not exist (S3 404 NoSuchKey)."""


class PreconditionFailed(ObjectStoreError):
    """A conditional write lost: the key already exists (put_if_absent) or its ETag changed (put_if_match).
    The caller re-reads and decides; retrying the same write blindly would fail again."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str                  # relative to the store's root/prefix
    size: int
    etag: str                 # opaque, without quotes; changes whenever the content changes
    last_modified: datetime   # timezone-aware UTC


@runtime_checkable
class ObjectStore(Protocol):
    """What every backend implements. Keys are '/'-separated relative paths (see `validate_key`)."""

    async def put(self, key: str, data: bytes | memoryview) -> str:
        """Write (or overwrite) the whole object atomically; returns its ETag."""

    async def put_if_absent(self, key: str, data: bytes | memoryview) -> str:
        """Create-only write; raises PreconditionFailed if the key exists."""

    async def put_if_match(self, key: str, data: bytes | memoryview, etag: str) -> str:
        """Replace only if the current ETag is `etag`; raises PreconditionFailed otherwise (also if missing)."""

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) like a slice (end past the size is clamped); raises ObjectNotFound."""

    async def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and mtime, or None if the key does not exist."""

    async def delete(self, key: str) -> None:
        """Remove the key; deleting a missing key is not an error (retries and cleanup stay idempotent)."""

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Objects whose key starts with `prefix`, sorted by key (UTF-8 byte order), fetched page by page."""

    async def close(self) -> None:
        """Release clients/threads; the store is unusable afterwards."""


def validate_key(key: str) -> str:
    """Reject keys that would mean different things on different backends (empty or '.'/'..' components,
    absolute paths, NUL, a trailing '/') or that collide with the local store's internal directory."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"object key must be a non-empty str, got {key!r}")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"object key longer than {MAX_KEY_BYTES} bytes: {key[:64]!r}...")
    parts = key.split("/")
    if "\0" in key or "\\" in key or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}: empty, '.' or '..' component, NUL or backslash")
    if parts[0] == RESERVED_TOP_LEVEL:
        raise ValueError(f"object keys may not start with {RESERVED_TOP_LEVEL}/")
    return key


def check_range(start: int, end: int | None) -> None:
    if start < 0 or (end is not None and end < start):
        raise ValueError(f"invalid range [{start}, {end}): need 0 <= start <= end")


def reads_into(store) -> bool:
    """Whether `store` has `get_into(key, start, view)`: a ranged GET into a buffer the caller owns, answering the
    view of it that was filled (shorter at the object's end). The remote tier's reader reuses its chunks' buffers
    through it: fresh memory for each GET costs page faults and an unmapping, more than the copy into it."""
    return bool(getattr(store, "reads_into", False))


async def list_all(store: ObjectStore, prefix: str = "") -> list[ObjectInfo]:
    """Convenience for small prefixes (tests, manifests); large listings should iterate `store.list`."""
    return [info async for info in store.list(prefix)]


# Options that only apply to one backend; the other ignores them, so one config block can switch backends by URL.
_S3_OPTIONS = {"endpoint_url", "region", "access_key_id", "secret_access_key", "session_token",
               "multipart_threshold", "part_size", "max_concurrency", "max_attempts", "list_page_size",
               "retry_base_delay", "retry_max_delay", "connect_timeout", "read_timeout", "addressing_style"}
_LOCAL_OPTIONS = {"fsync"}
_INT_OPTIONS = {"multipart_threshold", "part_size", "max_concurrency", "max_attempts", "list_page_size"}
_FLOAT_OPTIONS = {"retry_base_delay", "retry_max_delay", "connect_timeout", "read_timeout"}


async def until_answered(call, what: str, log, max_delay: float = 5.0, progress=None):
    """`await call()` until the store answers: a retriable error (outage, throttling, timeout) is logged and tried
    again with a doubling backoff, anything else is raised. For start-up reads a process cannot do without (the
    cluster id, the metadata log): as a Kafka broker waits for its quorum, rather than exiting on one 503. A call
    that resumes where it failed passes `progress()`: while that moves, the backoff starts again from its least."""
    import asyncio
    delay = 0.1
    mark = progress() if progress is not None else None
    while True:
        try:
            return await call()
        except ObjectStoreError as e:
            if not e.retriable:
                raise
            if progress is not None and (now := progress()) != mark:
                mark, delay = now, 0.1
            log.warning("%s: the object store did not answer (%s); trying again in %.1fs", what, e, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)


def _coerce(options: dict) -> dict:
    """Config files hand us strings; convert the numeric/bool options here rather than in every caller."""
    out = {}
    for name, value in options.items():
        if value is None:
            continue
        if name in _INT_OPTIONS:
            value = int(value)
        elif name in _FLOAT_OPTIONS:
            value = float(value)
        elif name == "fsync" and isinstance(value, str):
            value = value.strip().lower() in ("1", "true", "yes")
        out[name] = value
    return out


def open_object_store(url: str, **options) -> ObjectStore:
    """Build a store from a URL: `file:///abs/path`, `file://./rel/path` (relative to the working directory)
    or `s3://bucket[/prefix]`. Unknown option names raise TypeError; options of the other backend are ignored.
    `faults` (a spec string; for fault testing only) wraps the store in storage/objectstore/faulty.py's injector."""
    faults = options.pop("faults", None)
    if faults:
        from storage.objectstore.faulty import FaultyObjectStore
        return FaultyObjectStore.from_spec(open_object_store(url, **options), faults)
    unknown = set(options) - _S3_OPTIONS - _LOCAL_OPTIONS
    if unknown:
        raise TypeError(f"unknown object store option(s): {', '.join(sorted(unknown))}")
    options = _coerce(options)
    parts = urlsplit(url)
    if parts.scheme == "file":
        from storage.objectstore.local import LocalObjectStore
        host, path = parts.netloc, unquote(parts.path)
        if host in ("", "localhost"):
            root = path
        else:  # file://./rel or file://rel: the "host" is the first relative path component
            root = host + path
        if not root:
            raise ValueError(f"object store URL has no path: {url!r}")
        return LocalObjectStore(root, **{k: v for k, v in options.items() if k in _LOCAL_OPTIONS})
    if parts.scheme == "s3":
        from storage.objectstore.s3 import S3ObjectStore
        if not parts.netloc:
            raise ValueError(f"object store URL has no bucket: {url!r}")
        return S3ObjectStore(parts.netloc, unquote(parts.path),
                             **{k: v for k, v in options.items() if k in _S3_OPTIONS})
    raise ValueError(f"unsupported object store URL {url!r}: expected file:// or s3://")
