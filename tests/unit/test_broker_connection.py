"""BrokerConnection (protocol/client.py) at shutdown: a request cancelled in the same loop turn as its connection
attempt fails must leave no task whose exception nobody reads (asyncio logs those as ERROR "Task exception was
never retrieved", which a CI run of the cluster tests once caught at a broker's shutdown)."""
from __future__ import annotations

import asyncio
import gc

import pytest

from protocol import client
from protocol.client import BrokerConnection, ConnectionFailed


@pytest.mark.parametrize("cancel_first", [True, False])
def test_a_cancelled_request_leaves_no_unretrieved_connection_error(monkeypatch, cancel_first):
    unretrieved = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx.get("message")))
        refused = loop.create_future()

        async def open_connection(*_a, **_kw):
            await refused                        # the refusal arrives when the test says so
            raise AssertionError("unreachable")

        monkeypatch.setattr(client.asyncio, "open_connection", open_connection)
        conn = BrokerConnection("127.0.0.1", 9, "test")
        request = asyncio.create_task(conn.send_raw(18, 0, b"", timeout=5))
        for _ in range(5):
            await asyncio.sleep(0)               # the request is now waiting for its connection
        # the refusal and the shutdown's cancellation land in the same loop turn
        if cancel_first:
            request.cancel()                     # without a task in between, this cancels `refused` itself
            if not refused.done():
                refused.set_exception(ConnectionRefusedError(111, "Connection refused"))
        else:
            refused.set_exception(ConnectionRefusedError(111, "Connection refused"))
            request.cancel()
        outcome = (await asyncio.gather(request, return_exceptions=True))[0]
        assert isinstance(outcome, (asyncio.CancelledError, ConnectionFailed)), outcome
        for _ in range(5):
            await asyncio.sleep(0)
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(main())
    gc.collect()
    assert unretrieved == []
