"""S3 (and MinIO, moto, any S3-compatible endpoint) object store on aiobotocore.

Why it looks the way it does:
- One aiobotocore client, created lazily on first use (inside the running loop, which aiohttp requires) and
  shared by all calls; `max_concurrency` bounds in-flight HTTP requests with a semaphore taken per request, not
  per operation, so a multipart upload waiting for part slots can never deadlock against itself.
- Retries are ours, not botocore's (its retries are switched off): exponential backoff with full jitter on
  5xx, throttling, timeouts and connection errors, up to `max_attempts` in total, then
  ObjectStoreError(retriable=True). An outage therefore surfaces in bounded time instead of hanging, and the
  caller (copy task, fetch path) decides whether to back off further.
- Every request waits for its answer at most connect_timeout + read_timeout: botocore's read_timeout does not
  cover a PUT's wait for `100 Continue` (it sends `Expect: 100-continue`), so an endpoint that accepts the
  connection and never answers would hang a write forever. Past the deadline the attempt fails with botocore's
  read timeout and is retried like one. A GET's body streams on after the answer, each read under read_timeout,
  so a large object is not cut by the deadline; a PUT's body goes out within it.
- A ranged GET's answer is checked against the range asked for: a 206 shorter than the range and not ended by the
  object's end (Content-Range's total) is a truncated answer, retried like a cut body, never passed up as data.
- Conditional writes use If-None-Match: * and If-Match: "<etag>" (PutObject and CompleteMultipartUpload). A
  conditional write retried after an ambiguous failure (timeout: did the first attempt land?) may be refused by
  its own earlier success; we then HEAD the key and treat an ETag equal to the one our bytes produce as success.
- Above `multipart_threshold` the object goes up in `part_size` parts concurrently; any failure or
  cancellation aborts the upload so no invisible parts keep costing money.
- Request checksums are only sent when an API requires them: newer botocore defaults to CRC trailers that
  several S3-compatible servers (older MinIO, Ceph) reject.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import random
import re
from datetime import datetime, timezone
from typing import AsyncIterator, Awaitable, Callable

import aiohttp
import botocore.exceptions as bce
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from storage.objectstore.object_store import (
    ObjectInfo, ObjectNotFound, ObjectStoreError, PreconditionFailed, check_range, validate_key,
)

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB      # S3 rejects smaller parts except the last
MAX_PARTS = 10_000
_THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
                   "RequestTimeout", "RequestTimeoutException", "InternalError", "ServiceUnavailable"}
_NETWORK_ERRORS = tuple(e for e in (
    bce.HTTPClientError, bce.ConnectionError, bce.ReadTimeoutError, bce.ConnectTimeoutError,
    getattr(bce, "ResponseStreamingError", None), getattr(bce, "IncompleteReadError", None),
    aiohttp.ClientError, asyncio.TimeoutError, OSError) if e is not None)


class S3ObjectStore:
    """Keys are stored as `<prefix><key>` in `bucket`. See the module docstring for the design."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str | None = None, access_key_id: str | None = None,
                 secret_access_key: str | None = None, session_token: str | None = None,
                 multipart_threshold: int = 16 * MiB, part_size: int = 8 * MiB, max_concurrency: int = 16,
                 max_attempts: int = 5, retry_base_delay: float = 0.1, retry_max_delay: float = 5.0,
                 connect_timeout: float = 5.0, read_timeout: float = 30.0, list_page_size: int = 1000,
                 addressing_style: str | None = None):
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size must be >= {MIN_PART_SIZE} (S3 minimum), got {part_size}")
        if multipart_threshold < MIN_PART_SIZE:
            raise ValueError(f"multipart_threshold must be >= {MIN_PART_SIZE}, got {multipart_threshold}")
        if max_attempts < 1 or max_concurrency < 1 or not 1 <= list_page_size <= 1000:
            raise ValueError("max_attempts and max_concurrency must be >= 1, list_page_size in 1..1000")
        self.bucket = bucket
        prefix = prefix.strip("/")
        self.prefix = prefix + "/" if prefix else ""
        self.endpoint_url = endpoint_url
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self._credentials = (access_key_id, secret_access_key, session_token)
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.max_attempts = max_attempts
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.list_page_size = list_page_size
        self.request_timeout = connect_timeout + read_timeout
        # Custom endpoints (MinIO, moto, IPs) rarely have wildcard DNS for virtual-hosted buckets.
        self._config = AioConfig(
            connect_timeout=connect_timeout, read_timeout=read_timeout, max_pool_connections=max_concurrency,
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": addressing_style or ("path" if endpoint_url else "auto")},
            request_checksum_calculation="when_required", response_checksum_validation="when_required")
        self._sem = asyncio.Semaphore(max_concurrency)
        self._client_lock = asyncio.Lock()
        self._stack = contextlib.AsyncExitStack()
        self._client = None
        self._closed = False

    def __repr__(self) -> str:
        return f"S3ObjectStore(s3://{self.bucket}/{self.prefix}, endpoint={self.endpoint_url})"

    # -- public API -------------------------------------------------------------------------------------------

    async def put(self, key: str, data: bytes | memoryview) -> str:
        return await self._put(validate_key(key), data, {})

    async def put_if_absent(self, key: str, data: bytes | memoryview) -> str:
        return await self._put(validate_key(key), data, {"IfNoneMatch": "*"})

    async def put_if_match(self, key: str, data: bytes | memoryview, etag: str) -> str:
        quoted = '"' + etag.strip('"') + '"'
        try:
            return await self._put(validate_key(key), data, {"IfMatch": quoted})
        except ObjectNotFound as e:  # S3 answers If-Match on a missing key with 404; to callers it is a lost race
            raise PreconditionFailed(f"{key!r} does not exist: {e}") from e

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        check_range(start, end)
        full = self.prefix + validate_key(key)
        if end is not None and end == start:  # an empty range has no HTTP form; still report a missing key
            if await self.head(key) is None:
                raise ObjectNotFound(f"{key!r} not found")
            return b""
        kwargs = {"Bucket": self.bucket, "Key": full}
        if start or end is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end - 1}"

        async def fn(c):
            try:
                resp = await self._answer(c.get_object(**kwargs))
            except bce.ClientError as e:
                if _code(e) == "InvalidRange":  # start at or past the end: an empty slice, like bytes[start:end]
                    return b""
                raise
            async with resp["Body"] as body:  # read inside the semaphore and the retry loop
                data = await body.read()
            return _ranged(data, resp.get("ContentRange"), start, end) if "Range" in kwargs else data
        return await self._call(f"get {key!r}", fn)

    reads_into = True       # object_store.reads_into

    async def get_into(self, key: str, start: int, view: memoryview) -> memoryview:
        """As get(key, start, start + len(view)), but the body goes into `view` piece by piece as it arrives (each
        piece aiohttp hands over is copied once, straight into `view`) instead of being joined into fresh memory;
        the part of `view` filled, shorter at the object's end."""
        end = start + len(view)
        check_range(start, end)
        if not view:
            return view[:len(await self.get(key, start, end))]
        kwargs = {"Bucket": self.bucket, "Key": self.prefix + validate_key(key), "Range": f"bytes={start}-{end - 1}"}

        async def fn(c):
            try:
                resp = await self._answer(c.get_object(**kwargs))
            except bce.ClientError as e:
                if _code(e) == "InvalidRange":  # start at or past the end: nothing, as get answers
                    return view[:0]
                raise
            got = 0
            async with resp["Body"] as body:  # read inside the semaphore and the retry loop
                if not resp.get("ContentRange"):        # a server that ignored the Range header: the whole object
                    data = _ranged(await body.read(), None, start, end)
                    view[:len(data)] = data
                    return view[:len(data)]
                # aiohttp's StreamReader (aiobotocore 3 names the response raw_stream; 2 proxies it): each piece
                # as it came off the socket, copied into `view`; read(n) and readinto join pieces into fresh memory
                content = getattr(body, "raw_stream", body).content
                while got < len(view):
                    piece, chunk_end = await content.readchunk()
                    if not piece:
                        if chunk_end:
                            continue            # the end of an HTTP chunk (chunked encoding), not of the body
                        break
                    n = min(len(piece), len(view) - got)
                    view[got:got + n] = memoryview(piece)[:n]
                    got += n
            return view[:_ranged_length(resp["ContentRange"], start, end, got)]
        return await self._call(f"get {key!r}", fn)

    async def head(self, key: str) -> ObjectInfo | None:
        full = self.prefix + validate_key(key)
        try:
            r = await self._call(f"head {key!r}", lambda c: self._answer(
                c.head_object(Bucket=self.bucket, Key=full)))
        except ObjectNotFound:
            return None
        return ObjectInfo(key, r["ContentLength"], r["ETag"].strip('"'), _utc(r["LastModified"]))

    async def delete(self, key: str) -> None:
        full = self.prefix + validate_key(key)
        try:  # S3 answers 204 for a missing key; tolerate servers that say 404
            await self._call(f"delete {key!r}", lambda c: self._answer(c.delete_object(Bucket=self.bucket, Key=full)))
        except ObjectNotFound:
            pass

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        kwargs = {"Bucket": self.bucket, "Prefix": self.prefix + prefix, "MaxKeys": self.list_page_size}
        while True:
            page = await self._call(f"list {prefix!r}",
                                    lambda c, kw=dict(kwargs): self._answer(c.list_objects_v2(**kw)))
            for o in page.get("Contents", ()):
                yield ObjectInfo(o["Key"][len(self.prefix):], o["Size"], o["ETag"].strip('"'), _utc(o["LastModified"]))
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    async def close(self) -> None:
        self._closed = True
        async with self._client_lock:
            self._client = None
            await self._stack.aclose()

    # -- internals --------------------------------------------------------------------------------------------

    async def _get_client(self):
        if self._client is None:
            async with self._client_lock:
                if self._closed:
                    raise ObjectStoreError(f"{self!r} is closed")
                if self._client is None:
                    key_id, secret, token = self._credentials
                    self._client = await self._stack.enter_async_context(get_session().create_client(
                        "s3", region_name=self.region, endpoint_url=self.endpoint_url, aws_access_key_id=key_id,
                        aws_secret_access_key=secret, aws_session_token=token, config=self._config))
        return self._client

    async def _call(self, what: str, fn: Callable[[object], Awaitable], recheck=None):
        """Run one S3 request with the semaphore, error mapping and retries. `recheck` (writes only) is asked,
        after a definitive failure that followed an ambiguous one, whether our earlier attempt landed after all."""
        client = await self._get_client()
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with self._sem:
                    return await fn(client)
            except bce.ClientError as e:
                err, cause = _map_client_error(e, what), e
            except _NETWORK_ERRORS as e:
                err, cause = ObjectStoreError(f"{what}: {type(e).__name__}: {e}", retriable=True), e
            except bce.BotoCoreError as e:  # credentials, parameter validation: retrying cannot help
                err, cause = ObjectStoreError(f"{what}: {e}"), e
            if not err.retriable:
                if attempt > 1 and recheck is not None and (etag := await recheck()):
                    log.info("%s: an earlier ambiguous attempt succeeded (ETag %s)", what, etag)
                    return etag
                raise err from cause
            if attempt == self.max_attempts:
                raise ObjectStoreError(f"{what}: gave up after {attempt} attempts: {err}", retriable=True) from cause
            delay = random.uniform(0, min(self.retry_max_delay, self.retry_base_delay * 2 ** (attempt - 1)))
            log.debug("%s failed (%s); retry %d in %.3fs", what, err, attempt, delay)
            await asyncio.sleep(delay)

    async def _answer(self, request: Awaitable):
        """`request` (one botocore call) within the per-attempt deadline (see the module docstring), past which it
        fails as botocore's read timeout does, so `_call` retries it and a conditional write gets its recheck."""
        try:
            async with asyncio.timeout(self.request_timeout):
                return await request
        except TimeoutError:
            raise bce.ReadTimeoutError(endpoint_url=self.endpoint_url or f"s3://{self.bucket}") from None

    def _recheck(self, key: str, etag: str):
        async def check() -> str | None:
            try:
                info = await self.head(key)
            except ObjectStoreError:
                return None
            return etag if info is not None and info.etag == etag else None
        return check

    async def _put(self, key: str, data: bytes | memoryview, conditions: dict) -> str:
        view = memoryview(data).cast("B")
        if view.nbytes >= self.multipart_threshold:
            return await self._put_multipart(key, view, conditions)
        body = data if isinstance(data, (bytes, bytearray)) else view.tobytes()  # botocore takes no memoryview
        expected = hashlib.md5(body).hexdigest()
        kwargs = {"Bucket": self.bucket, "Key": self.prefix + key, "Body": body, **conditions}

        async def fn(c):
            return (await self._answer(c.put_object(**kwargs)))["ETag"].strip('"')
        return await self._call(f"put {key!r}", fn, self._recheck(key, expected) if conditions else None)

    async def _put_multipart(self, key: str, view: memoryview, conditions: dict) -> str:
        full = self.prefix + key
        part_size = max(self.part_size, math.ceil(len(view) / MAX_PARTS))
        bounds = [(i, min(i + part_size, len(view))) for i in range(0, len(view), part_size)]
        created = await self._call(f"create multipart {key!r}",
                                   lambda c: self._answer(c.create_multipart_upload(Bucket=self.bucket, Key=full)))
        upload_id = created["UploadId"]
        etags: list[str] = [""] * len(bounds)

        async def upload(n: int, lo: int, hi: int) -> None:
            # bytes() copies inside the semaphore, so at most max_concurrency parts are copied at a time
            resp = await self._call(f"upload part {n} of {key!r}", lambda c: self._answer(c.upload_part(
                Bucket=self.bucket, Key=full, UploadId=upload_id, PartNumber=n, Body=bytes(view[lo:hi]))))
            etags[n - 1] = resp["ETag"].strip('"')

        try:
            try:
                async with asyncio.TaskGroup() as tg:
                    for n, (lo, hi) in enumerate(bounds, 1):
                        tg.create_task(upload(n, lo, hi))
            except BaseExceptionGroup as eg:
                raise eg.exceptions[0] from None
            # S3's multipart ETag: md5 of the concatenated part md5s, "-<parts>"
            expected = hashlib.md5(b"".join(bytes.fromhex(e) for e in etags)).hexdigest() + f"-{len(etags)}"
            parts = {"Parts": [{"ETag": f'"{e}"', "PartNumber": n} for n, e in enumerate(etags, 1)]}

            async def complete(c):
                r = await self._answer(c.complete_multipart_upload(
                    Bucket=self.bucket, Key=full, UploadId=upload_id, MultipartUpload=parts, **conditions))
                return r["ETag"].strip('"')
            return await self._call(f"complete multipart {key!r}", complete, self._recheck(key, expected))
        except BaseException:
            await asyncio.shield(self._abort(key, full, upload_id))
            raise

    async def _abort(self, key: str, full: str, upload_id: str) -> None:
        try:  # best effort; a bucket lifecycle rule for incomplete uploads is the backstop (docs/object-store.md)
            await self._call(f"abort multipart {key!r}", lambda c: self._answer(c.abort_multipart_upload(
                Bucket=self.bucket, Key=full, UploadId=upload_id)))
        except ObjectStoreError as e:
            if not isinstance(e, ObjectNotFound):  # NoSuchUpload: it completed or was already aborted
                log.warning("could not abort multipart upload %s of %s: %s", upload_id, key, e)


def _utc(t: datetime) -> datetime:
    return t.astimezone(timezone.utc)


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _ranged(data: bytes, content_range: str | None, start: int, end: int | None) -> bytes:
    """The answer to a ranged GET as [start, end) of the object. S3 ends a range at the object's end (the total in
    Content-Range says where), so only a body shorter than that is truncated: raised as an incomplete read, which
    `_call` retries like a cut body. A server that ignored the Range header sent the whole object (200, no
    Content-Range)."""
    if not content_range:
        return data[start:end]
    return data[:_ranged_length(content_range, start, end, len(data))]


def _ranged_length(content_range: str, start: int, end: int | None, got: int) -> int:
    """How many of the `got` bytes that came with `content_range` are [start, end) of the object (see _ranged)."""
    m = _CONTENT_RANGE.fullmatch(content_range.strip())
    first, last = (int(m[1]), int(m[2])) if m else (-1, -1)
    size = last + 1 if not m or m[3] == "*" else int(m[3])
    need = max(0, (size if end is None else min(end, size)) - start)
    if first != start or got < need:
        raise bce.IncompleteReadError(actual_bytes=got, expected_bytes=need)
    return need


def _code(e: bce.ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _map_client_error(e: bce.ClientError, what: str) -> ObjectStoreError:
    code = _code(e)
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    msg = f"{what}: {code or status}: {e.response.get('Error', {}).get('Message', '')}".rstrip(": ")
    if code in ("NoSuchKey", "NoSuchUpload", "404", "NotFound"):
        return ObjectNotFound(msg)
    if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
        return PreconditionFailed(msg)
    return ObjectStoreError(msg, retriable=status >= 500 or status == 429 or code in _THROTTLE_CODES)
