"""A read_committed Fetch answered from the remote tier (broker/handlers/fetch.py, Kafka's DelayedRemoteFetch): once the
remote reads are in, every partition's aborted transactions are looked up at once. Each lookup may wait for a
transaction index GET (20-50 ms on a real store), so one after another a Fetch of 32 remote partitions waited about a
second (bench/tiered_fetch.py: every consumer's first fetch, confluent-kafka being read_committed by default). A
lookup that fails answers that partition UNKNOWN_SERVER_ERROR and no records, as a failed read; the others are
answered."""
from __future__ import annotations

import asyncio

import pytest

from broker.handlers import fetch
from storage.log.transaction_index import AbortedTxn
from storage.tiered.remote_log_metadata import RemoteStorageException

PARTITIONS = 12


class _Part:
    """A partition whose remote read is done and whose aborted-transaction lookup waits for every other one to have
    started (all at once), or fails."""
    topic = "t"
    remote_fetch_max_wait = 5.0

    def __init__(self, index: int, started: list, everyone: asyncio.Event, fail: bool = False):
        self.index, self.started, self.everyone, self.fail = index, started, everyone, fail

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
