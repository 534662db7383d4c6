"""A read_committed Fetch answered from the remote tier (broker/handlers/fetch.py, Kafka's DelayedRemoteFetch): once the
remote reads are in, every partition's aborted transactions are looked up at once. Each lookup may wait for a
transaction index GET (20-50 ms on a real store), so one after another a Fetch of 32 remote partitions waited about a
second (bench/tiered_fetch.py: every consumer's first fetch, confluent-kafka being read_committed by default). A
lookup that fails answers that partition UNKNOWN_SERVER_ERROR and no records, as a failed read; the others are
answered. The lookups share the Fetch's remote.fetch.max.wait.ms with the reads (Kafka makes them in its read task): one
still waiting for the store then answers its partition no records and no error, and the rest of the response goes
out."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from broker.handlers import fetch
from storage.log.transaction_index import AbortedTxn
from storage.tiered.remote_log_metadata import RemoteStorageException

PARTITIONS = 12


class _Expires:
    def __init__(self):
        self.count = 0

    def inc(self):
        self.count += 1


class _Part:
    """A partition whose remote read is done and whose aborted-transaction lookup waits for every other one to have
    started (all at once), or fails."""
    topic = "t"
    remote_fetch_max_wait = 5.0

    def __init__(self, index: int, started: list, everyone: asyncio.Event, fail: bool = False):
        self.index, self.started, self.everyone, self.fail = index, started, everyone, fail
        self.remote = SimpleNamespace(metrics=SimpleNamespace(fetch_expires=_Expires()))

    def remote_read_result(self, offset, task):
        return task.result(), 0

    async def remote_aborted_transactions(self, offset, views):
        self.started.append(self.index)
        if len(self.started) == PARTITIONS:
            self.everyone.set()
        await self.everyone.wait()
        if self.fail:
            raise RemoteStorageException("503 Slow Down on the transaction index")
        return [AbortedTxn(self.index, offset, offset + 1, 0)]


async def _done(views):
    return views


@pytest.fixture
def finish(monkeypatch):
    monkeypatch.setattr(fetch, "_finish", lambda broker, version, sid, wanted, results, *a, **kw: (wanted, results))


async def _fetch(failing=()):
    started, everyone = [], asyncio.Event()
    wanted, results = [], []
    for p in range(PARTITIONS):
        w = fetch._Wanted(("t", p), "t", p, 10 * p, 1 << 20, -1)
        w.part = _Part(p, started, everyone, fail=p in failing)
        w.remote = asyncio.ensure_future(_done([memoryview(b"batches of %d" % p)]))
        wanted.append(w)
        results.append(((), 1 << 20))               # the budget _read_all reserved
    await asyncio.gather(*(w.remote for w in wanted))
    return await asyncio.wait_for(
        fetch._remote_then_finish(None, 12, 0, wanted, results, False, True, False), timeout=10)


async def test_every_partitions_aborted_transactions_are_looked_up_at_once(finish):
    """One after another, the first lookup would wait for the others forever (wait_for fails the test)."""
    wanted, results = await _fetch()
    for p, (w, (views, size)) in enumerate(zip(wanted, results)):
        assert w.error == 0 and [bytes(v) for v in views] == [b"batches of %d" % p] and size == len(views[0])
        assert w.aborted == [AbortedTxn(p, 10 * p, 10 * p + 1, 0)]


async def test_a_failed_lookup_fails_its_partition_only(finish):
    wanted, results = await _fetch(failing={3})
    for p, (w, (views, size)) in enumerate(zip(wanted, results)):
        if p == 3:
            assert (w.error, list(views), size) == (fetch.UNKNOWN_SERVER_ERROR, [], 0)
        else:
            assert w.error == 0 and w.aborted == [AbortedTxn(p, 10 * p, 10 * p + 1, 0)] and size > 0


class _SlowIndexPart(_Part):
    """A partition whose read is done at once, never ("never"), or never but with whole batches read so far
    ("partial"), and whose lookup needs no GET (its indexes are cached: it finishes without waiting) or, `held`, waits
    for a transaction index GET until the event is set, or for `get_time` seconds. Its remote_read_result is Partition's for a stub read."""

    def __init__(self, index: int, held: asyncio.Event | None, max_wait: float, read: str = "done",
                 get_time: float = 0.0):
        super().__init__(index, [], asyncio.Event())
        self.held, self.remote_fetch_max_wait, self.read, self.get_time = held, max_wait, read, get_time
        self.cancelled = False
        self.results_taken = 0

    def start_read(self):
        if self.read == "done":
            return asyncio.ensure_future(_done([memoryview(b"batches of %d" % self.index)]))
        task = asyncio.ensure_future(asyncio.Event().wait())
        task.progress = [memoryview(b"part of %d" % self.index)] if self.read == "partial" else []
        return task

    def remote_read_result(self, offset, task):
        self.results_taken += 1
        if not task.done():
            self.remote.metrics.fetch_expires.inc()
            partial = list(task.progress)
            task.cancel()
            return partial, 0
        return task.result(), 0

    async def remote_aborted_transactions(self, offset, views):
        if self.get_time:
            await asyncio.sleep(self.get_time)      # an index GET, from when the lookup starts
        if self.held is not None:
            try:
                await self.held.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return [AbortedTxn(self.index, offset, offset + 1, 0)]


async def _slow_fetch(parts):
    wanted, results = [], []
    for part in parts:
        w = fetch._Wanted(("t", part.index), "t", part.index, 10 * part.index, 1 << 20, -1)
        w.part = part
        w.remote = part.start_read()
        wanted.append(w)
        results.append(((), 1 << 20))
    t0 = time.monotonic()
    out = await asyncio.wait_for(fetch._remote_then_finish(None, 12, 0, wanted, results, False, True, False),
                                 timeout=10)
    return out, time.monotonic() - t0


def _answered(w, views, p, what=b"batches of %d"):
    return w.error == 0 and [bytes(v) for v in views] == [what % p] and \
        w.aborted == [AbortedTxn(p, 10 * p, 10 * p + 1, 0)]


async def test_a_lookup_waiting_for_the_store_past_the_max_wait_answers_its_partition_nothing(finish):
    """Before, the whole response waited for the slowest transaction index GET (here: for ever, and wait_for fails
    the test); now the Fetch is answered at remote.fetch.max.wait.ms, the slow partition with no records and no
    error (its client asks for the same offset again, and its finished read, left registered, answers it), the others
    with their records and aborted transactions."""
    held = asyncio.Event()
    parts = [_SlowIndexPart(p, held if p == 1 else None, max_wait=0.3) for p in range(3)]
    (wanted, results), took = await _slow_fetch(parts)
    assert took < 5
    for p, (w, (views, size)) in enumerate(zip(wanted, results)):
        if p == 1:
            assert (w.error, list(views), size, w.aborted) == (0, [], 0, None)
            assert w.part.remote.metrics.fetch_expires.count == 1
            assert w.part.results_taken == 0            # the read is not consumed: the retry gets it
        else:
            assert _answered(w, views, p)
    await asyncio.sleep(0)
    assert parts[1].cancelled           # its walk stopped (the shared index GETs it waited for are shielded)


async def test_a_slow_read_of_one_partition_leaves_another_time_for_its_lookup(finish):
    """Partition 0's read is done at once and its lookup needs a 50 ms index GET; partition 1's read never ends.
    Looked up only once every read was done or the max wait had passed, partition 0's lookup had no time left and
    its records were dropped; started as soon as its own read is done (Kafka does it in the read task), it is
    answered."""
    parts = [_SlowIndexPart(0, None, max_wait=0.5, get_time=0.05),
             _SlowIndexPart(1, None, max_wait=0.5, read="never")]
    (wanted, results), _ = await _slow_fetch(parts)
    assert _answered(wanted[0], results[0][0], 0)
    assert (wanted[1].error, list(results[1][0]), wanted[1].aborted) == (0, [], None)


@pytest.mark.parametrize("cached", [True, False])
async def test_a_partial_read_at_the_max_wait_is_answered_if_its_indexes_are_cached(finish, cached):
    """A read still running at the deadline answers the whole batches it has read so far: with no time left, their
    aborted transactions are found if no GET is needed, else the partition answers nothing; it counts as one
    expired read either way."""
    parts = [_SlowIndexPart(0, None if cached else asyncio.Event(), max_wait=0.2, read="partial"),
             _SlowIndexPart(1, None, max_wait=0.2)]
    (wanted, results), took = await _slow_fetch(parts)
    assert took >= 0.2
    if cached:
        assert _answered(wanted[0], results[0][0], 0, b"part of %d")
    else:
        assert (wanted[0].error, list(results[0][0]), wanted[0].aborted) == (0, [], None)
    assert parts[0].remote.metrics.fetch_expires.count == 1
    assert _answered(wanted[1], results[1][0], 1)


class _FailingIndexPart(_SlowIndexPart):
    async def remote_aborted_transactions(self, offset, views):
        raise RemoteStorageException("503 Slow Down on the transaction index")


async def test_a_fetch_cancelled_while_it_waits_stops_its_lookups_and_leaves_no_exception_unretrieved(finish):
    """The client's connection closes while its Fetch waits (the Fetch's task is cancelled): a lookup still waiting
    for an index GET stops, and one that had already failed has its exception taken, so asyncio does not log
    "Task exception was never retrieved" for it when it is collected."""
    import gc
    loop = asyncio.get_running_loop()
    unretrieved: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda lp, context: unretrieved.append(context))
    try:
        parts = [_FailingIndexPart(0, None, max_wait=5.0), _SlowIndexPart(1, asyncio.Event(), max_wait=5.0)]
        wanted, results = [], []
        for part in parts:
            w = fetch._Wanted(("t", part.index), "t", part.index, 10 * part.index, 1 << 20, -1)
            w.part, w.remote = part, part.start_read()
            wanted.append(w)
            results.append(((), 1 << 20))
        task = asyncio.ensure_future(fetch._remote_then_finish(None, 12, 0, wanted, results, False, True, False))
        await asyncio.sleep(0.05)                    # partition 0's lookup has failed, partition 1's waits
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert parts[1].cancelled                    # the waiting lookup stopped
        del task, wanted, results, parts
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
        assert not [c for c in unretrieved if "never retrieved" in c.get("message", "")], unretrieved
    finally:
        loop.set_exception_handler(previous)
