"""Object store on a local (or NFS-free, POSIX) filesystem: the embedded default and the test double for S3.

Layout: key `a/b/c` is the file `<root>/a/b/c`, so an operator can inspect it like a bucket. `<root>/.strata/`
holds temp files (`tmp/`) and lock files (`locks/`); it lives under the root so rename()/link() stay on one
filesystem and therefore atomic.

- Writes go to a temp file (fsync), then under the key's lock are published with os.replace (put) or os.link
  (create-only: fails with EEXIST, atomically, even against writers in other processes), then the directory is
  fsynced. Readers never lock: they see the old or the new file, never a torn one.
- Every mutation of a key (put, put_if_absent, put_if_match, delete) holds an exclusive fcntl.flock on one of
  256 lock-stripe files chosen by a hash of the key. flock excludes threads of this process (each opens its own
  file description) and other processes alike, so check-then-replace is atomic. Lock files are striped, not
  per key, so they are never deleted (deleting a lock file someone holds is a classic race) and never pile up.
- The ETag is the MD5 of the content (what S3 returns for single-part uploads), kept in the `user.strata.etag`
  extended attribute of the temp file before it is published, so it is atomic with the content and HEAD/LIST
  need not re-read the object. Filesystems without user xattrs fall back to hashing on HEAD.
- All blocking I/O runs in asyncio.to_thread so the event loop never waits on the disk; ranged reads use pread.

Limitation: a filesystem cannot hold both `a` and `a/b`; S3 can. Strata's key scheme never does that, and
such a put raises ObjectStoreError(retriable=False).
"""
from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import os
import stat
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import AsyncIterator, Callable

from storage.objectstore.object_store import (
    RESERVED_TOP_LEVEL, ObjectInfo, ObjectNotFound, ObjectStoreError, PreconditionFailed, check_range,
    validate_key,
)

ETAG_XATTR = "user.strata.etag"
LOCK_STRIPES = 256
STALE_TMP_SECONDS = 3600  # temp files older than this are leftovers of a crash (no write takes an hour)


class LocalObjectStore:
    """See the module docstring. `fsync=False` skips fsyncs (tests, scratch stores); never for real data."""

    def __init__(self, root: str | os.PathLike, *, fsync: bool = True):
        self.root = Path(root).absolute()
        self.fsync = fsync
        self._tmp = self.root / RESERVED_TOP_LEVEL / "tmp"
        self._locks = self.root / RESERVED_TOP_LEVEL / "locks"
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._locks.mkdir(parents=True, exist_ok=True)
        self._xattrs = True
        self._closed = False
        self._sweep_tmp()

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    # -- public API -------------------------------------------------------------------------------------------

    async def put(self, key: str, data: bytes | memoryview) -> str:
        return await self._run(self._put, validate_key(key), data, None)

    async def put_if_absent(self, key: str, data: bytes | memoryview) -> str:
        return await self._run(self._put, validate_key(key), data, _ABSENT)

    async def put_if_match(self, key: str, data: bytes | memoryview, etag: str) -> str:
        return await self._run(self._put, validate_key(key), data, etag.strip('"'))

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        check_range(start, end)
        return await self._run(self._get, validate_key(key), start, end)

    reads_into = True       # object_store.reads_into

    async def get_into(self, key: str, start: int, view: memoryview) -> memoryview:
        """Bytes [start, start + len(view)) read into `view`; the part of it filled (shorter at the object's end)."""
        check_range(start, start + len(view))
        return await self._run(self._get_into, validate_key(key), start, view)

    async def head(self, key: str) -> ObjectInfo | None:
        return await self._run(self._head, validate_key(key))

    async def delete(self, key: str) -> None:
        await self._run(self._delete, validate_key(key))

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        # One thread hop for the whole walk: the result must be sorted by full key anyway (directory order is
        # not key order: "a-b" < "a/b"), so it cannot be streamed directory by directory.
        for info in await self._run(self._list, prefix):
            yield info

    async def close(self) -> None:
        self._closed = True

    # -- blocking implementations (run in worker threads) -----------------------------------------------------

    async def _run(self, fn: Callable, *args):
        if self._closed:
            raise ObjectStoreError(f"{self!r} is closed")
        try:
            return await asyncio.to_thread(fn, *args)
        except ObjectStoreError:
            raise
        except OSError as e:
            # A full disk or an I/O hiccup may clear up (an operator frees space); permissions or a key that
            # collides with a directory will not.
            retriable = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EAGAIN, errno.EINTR)
            raise ObjectStoreError(f"{fn.__name__.lstrip('_')} failed: {e}", retriable=retriable) from e

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _put(self, key: str, data: bytes | memoryview, condition: str | None) -> str:
        view = memoryview(data).cast("B")
        etag = hashlib.md5(view).hexdigest()
        tmp = self._write_tmp(view, etag)
        try:
            path = self._path(key)
            for _ in range(8):  # a concurrent delete may prune the parent directory between mkdir and publish
                try:
                    self._make_parents(path)
                    with self._lock(key):
                        if condition is _ABSENT:
                            try:
                                os.link(tmp, path)  # atomic create-only, also against other processes
                            except FileExistsError:
                                raise PreconditionFailed(f"{key!r} already exists") from None
                        else:
                            if condition is not None:
                                current = self._etag_of(path)
                                if current != condition:
                                    what = "does not exist" if current is None else f"has ETag {current}"
                                    raise PreconditionFailed(f"{key!r} {what}, expected {condition}")
                            os.replace(tmp, path)
                        self._fsync_dir(path.parent)
                    return etag
                except FileNotFoundError:
                    continue
                except (IsADirectoryError, NotADirectoryError) as e:
                    raise ObjectStoreError(f"{key!r} conflicts with another key's directory: {e}") from e
            raise ObjectStoreError(f"could not create the directory for {key!r}", retriable=True)
        finally:
            try:
                os.unlink(tmp)  # still there after link() or a failure; gone after replace()
            except FileNotFoundError:
                pass

    def _write_tmp(self, view: memoryview, etag: str) -> Path:
        tmp = self._tmp / uuid.uuid4().hex
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            while view:
                view = view[os.write(fd, view):]
            if self._xattrs:
                try:
                    os.setxattr(fd, ETAG_XATTR, etag.encode())
                except OSError as e:
                    if e.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
                        raise
                    self._xattrs = False
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _make_parents(self, path: Path) -> None:
        """mkdir the missing parents top-down, fsyncing each new entry's directory so the path survives a crash."""
        missing = []
        d = path.parent
        while d != self.root and not d.is_dir():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue  # a concurrent writer made it (or it is a file: the publish step reports that)
            self._fsync_dir(d.parent)

    def _fsync_dir(self, d: Path) -> None:
        if self.fsync:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _lock(self, key: str) -> "_FileLock":
        stripe = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big") % LOCK_STRIPES
        return _FileLock(self._locks / f"{stripe:03d}.lock")

    def _etag_of(self, path: Path) -> str | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        try:
            return self._fd_etag(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else None
        finally:
            os.close(fd)

    def _fd_etag(self, fd: int) -> str:
        if self._xattrs:
            try:
                return os.getxattr(fd, ETAG_XATTR).decode()
            except OSError as e:
                if e.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
        h = hashlib.md5()  # no xattr (file copied in by hand, or the filesystem lacks them): hash the content
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            h.update(chunk)
            offset += len(chunk)
        return h.hexdigest()

    def _open_object(self, key: str) -> int:
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(f"{key!r} not found") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # open() of a directory succeeds with O_RDONLY
            os.close(fd)
            raise ObjectNotFound(f"{key!r} not found (it is a prefix of other keys)")
        return fd

    def _get(self, key: str, start: int, end: int | None) -> bytes:
        fd = self._open_object(key)
        try:
            size = os.fstat(fd).st_size
            stop = size if end is None else min(end, size)
            if start >= stop:
                return b""
            data = os.pread(fd, stop - start, start)       # one copy, no zero-filled buffer first
            if len(data) == stop - start:
                return data
            parts, pos = [data], start + len(data)
            while pos < stop:  # pread may return short reads for large ranges
                part = os.pread(fd, stop - pos, pos)
                if not part:  # the file shrank under us: impossible for published objects (they are replaced)
                    raise ObjectStoreError(f"short read on {key!r}", retriable=True)
                parts.append(part)
                pos += len(part)
            return b"".join(parts)
        finally:
            os.close(fd)

    def _get_into(self, key: str, start: int, view: memoryview) -> memoryview:
        fd = self._open_object(key)
        try:
            got = 0
            while got < len(view):           # preadv may return short reads for large ranges
                n = os.preadv(fd, [view[got:]], start + got)
                if not n:
                    break                    # the object's end
                got += n
            return view[:got]
        finally:
            os.close(fd)

    def _head(self, key: str) -> ObjectInfo | None:
        try:
            fd = self._open_object(key)
        except ObjectNotFound:
            return None
        try:  # size, mtime and ETag from the same open file, so they describe one version
            st = os.fstat(fd)
            return ObjectInfo(key, st.st_size, self._fd_etag(fd), _mtime(st))
        finally:
            os.close(fd)

    def _delete(self, key: str) -> None:
        path = self._path(key)
        with self._lock(key):
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError):
                return
            except IsADirectoryError:
                return  # `key` is only a prefix of other keys: no such object
            self._fsync_dir(path.parent)
        # Prune now-empty parent directories (S3 has no directories; empty ones would only slow down LIST).
        # rmdir fails on a non-empty directory, and writers retry if we prune theirs, so this is race-free.
        d = path.parent
        while d != self.root:
            try:
                d.rmdir()
            except OSError:
                break
            d = d.parent

    def _list(self, prefix: str) -> list[ObjectInfo]:
        # Start the walk at the deepest directory the prefix names, then filter on the full key.
        head, _, _ = prefix.rpartition("/")
        dirs = head.split("/") if head else []
        if any(d in ("", ".", "..") for d in dirs) or dirs[:1] == [RESERVED_TOP_LEVEL]:
            return []  # no valid key has such a component (and the walk must never leave the root)
        base = self.root.joinpath(*dirs)
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            if not rel:
                dirnames[:] = [d for d in dirnames if d != RESERVED_TOP_LEVEL]
            # Skip subtrees that cannot contain a match (e.g. prefix "t-0/000" prunes "t-1/").
            dirnames[:] = [d for d in dirnames if _may_match(rel + d + "/", prefix)]
            for name in filenames:
                key = rel + name
                if not key.startswith(prefix):
                    continue
                try:
                    fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # deleted while listing: S3 would not show it either
                try:
                    st = os.fstat(fd)
                    out.append(ObjectInfo(key, st.st_size, self._fd_etag(fd), _mtime(st)))
                finally:
                    os.close(fd)
        out.sort(key=lambda i: i.key)
        return out

    def _sweep_tmp(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for entry in os.scandir(self._tmp):
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
            except FileNotFoundError:
                pass


_ABSENT = "\0absent"  # sentinel condition for put_if_absent (not a possible ETag)


def _may_match(dir_key: str, prefix: str) -> bool:
    return dir_key.startswith(prefix) or prefix.startswith(dir_key)


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime_ns / 1e9, tz=timezone.utc)


class _FileLock:
    """Exclusive flock on a lock-stripe file for the duration of a with-block (held by a worker thread)."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = -1

    def __enter__(self) -> "_FileLock":
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
