"""storage/tiered/eager.py: a coroutine run at once until it first waits, then by a task (remote reads of cached
chunks answer their Fetch in the call that received it)."""
from __future__ import annotations

import asyncio

import pytest

from storage.tiered.eager import eager


async def test_a_coroutine_that_never_waits_is_done_at_once():
    async def quick():
        return 5

    async def fails():
        raise ValueError("x")

    f = eager(quick())
    assert f.done() and f.result() == 5
    f = eager(fails())
    assert f.done() and isinstance(f.exception(), ValueError)


async def test_a_coroutine_that_waits_goes_on_in_a_task_where_it_waited():
    fut = asyncio.get_running_loop().create_future()
    seen = []

    async def waits():
        try:
            v = await fut
            seen.append(v)
            await asyncio.sleep(0)                # a bare yield too
            if v < 0:
                raise KeyError(v)
            return v * 2
        finally:
            seen.append("finally")

    f = eager(waits())
    assert not f.done() and seen == []
    fut.set_result(21)
    assert await f == 42 and seen == [21, "finally"]
    fut = asyncio.get_running_loop().create_future()
    f = eager(waits())
    fut.set_result(-1)
    with pytest.raises(KeyError):
        await f


async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits():
    loop = asyncio.get_running_loop()
    plain, shared = loop.create_future(), loop.create_future()
    seen = []

    async def waits(fut, shielded):
        try:
            return await (asyncio.shield(fut) if shielded else fut)
        except asyncio.CancelledError:
            seen.append(shielded)
            raise

    for fut, shielded in ((plain, False), (shared, True)):
        f = eager(waits(fut, shielded))
        await asyncio.sleep(0)
        f.cancel()
        with pytest.raises(asyncio.CancelledError):
            await f
    assert seen == [False, True]
    assert plain.cancelled() and not shared.cancelled()      # a shielded future others share goes on
