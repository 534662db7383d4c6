"""Buffers the remote tier's chunk cache reads whole chunks into and reuses (issue 27).

Fresh memory for each GET's answer costs the broker more than the copy into it: a page fault for each of its pages,
and an unmapping once it is freed (broker/cli.py has malloc map each large buffer on its own, so that the broker's
memory stays within remote.fetch.max.memory.bytes). Profiled over a remote read at 30 ms + 80 MB/s, that was a
third of the broker's CPU. Where the store can read into a buffer (object_store.reads_into), ChunkCache gives each
whole chunk's GET a buffer it keeps once nothing refers to it any more, and counts the free ones in its budget.
"""
from __future__ import annotations

import mmap
import sys
import traceback
from typing import Callable


def unreferenced(released: list[tuple]) -> list[bool]:
    """For each (data, ...) tuple of `released`, whether nothing but that tuple refers to its data: no view of it (a
    response being sent, a reader's last chunk), no future holding it as its result (a reader about to get it), no
    thread still writing into it. ONLY_LISTED is what sys.getrefcount reads then, in this very shape."""
    return [sys.getrefcount(d) <= ONLY_LISTED for d, *_ in released]


def new_buffer(size: int) -> mmap.mmap:
    """A chunk buffer of fresh anonymous memory that nothing has touched yet: its pages are faulted in by whoever
    writes it first (the local store's thread that reads into it; on S3 the event loop, piece by piece as it copies).
    bytearray(size) would zero every page on the event loop first: 2.2 ms per 4 MiB on this machine, where the broker
    has malloc map each large buffer on its own (cli.py), which every read of a chunk not yet in the cache waited for.
    Private: a shared anonymous mapping (mmap's default) is shared memory, whose pages cost more to fault in and show
    as RssShmem, not with the broker's own memory."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _probe() -> tuple[int, bool]:
    """(what getrefcount reads for data only a list's tuple refers to, whether one more reference reads higher).
    Measured, not assumed: the interpreter decides (CPython 3.14 borrows references of locals on its stack)."""
    items = [(new_buffer(1), 0)]
    alone = [sys.getrefcount(d) for d, *_ in items][0]
    view = memoryview(items[0][0])
    held = [sys.getrefcount(d) for d, *_ in items][0]
    view.release()
    return alone, held > alone


ONLY_LISTED, REUSE = _probe()    # without a reading that tells a held buffer apart, buffers are never reused


def clear_frames(exc: BaseException | None) -> None:
    """Clear the locals of the finished frames an exception (and those it chains) went through: a failed or
    cancelled GET's frames hold its buffer, and through its chunk its own task, a cycle only the cyclic GC breaks."""
    for _ in range(8):
        if exc is None:
            return
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


class ReadInto:
    """A chunk's GET that reads into a buffer the cache gives it: `fill(offset, view)` reads the chunk's bytes from
    `offset` into `view` (a view of the buffer, or the buffer) and answers it, or the shorter part of it filled at the
    object's end. One chunk may be read as several such ranged GETs at once (ChunkCache._fill)."""
    __slots__ = ("fill",)

    def __init__(self, fill: Callable[[int, memoryview | mmap.mmap], object]):
        self.fill = fill


class FreeBuffers:
    """Buffers of chunks the cache forgot and nothing refers to any more (no response's view, no reader, no GET
    still writing), by size, for the next GETs of chunks of that size. They count in ChunkCache.memory(), and are let
    go before any chunk is evicted."""

    def __init__(self):
        self.by_size: dict[int, list[mmap.mmap]] = {}
        self.bytes = 0
        self.reused = 0             # GETs that took one

    def put(self, buf: mmap.mmap) -> None:
        if REUSE:
            self.by_size.setdefault(len(buf), []).append(buf)
            self.bytes += len(buf)

    def take(self, size: int) -> mmap.mmap:
        """A free buffer of `size` bytes, else a new one (new_buffer)."""
        bufs = self.by_size.get(size)
        if not bufs:
            return new_buffer(size)
        self.bytes -= size
        self.reused += 1
        return bufs.pop()

    def has(self, size: int) -> bool:
        return bool(self.by_size.get(size))

    def trim(self, over: int, keep: int) -> int:
        """Let go of free buffers until `over` bytes are gone (those of other sizes first, the smallest first), but
        one of `keep` bytes (a GET starting now takes it); what is still over."""
        for n in sorted(self.by_size, key=lambda n: (n == keep, n)):
            bufs = self.by_size[n]
            while over > 0 and len(bufs) > (n == keep):
                bufs.pop()
                self.bytes -= n
                over -= n
            if not bufs:
                del self.by_size[n]
        return over
