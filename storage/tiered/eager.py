"""Run a coroutine at once, in its caller, until it first has to wait (what Python 3.12's eager tasks do, for 3.11).

A remote read whose chunks are all in the cache, and a lookup of aborted transactions whose indexes are, never wait.
As tasks, each still took turns of the event loop (the task's first step, the waiter's wake-up, the response's) and
their futures' machinery: about 0.13 ms of broker CPU per Fetch above a local read, which the consumer, with one
Fetch in flight, waits for every time. Run eagerly, such a Fetch is answered in the call that received it.
"""
from __future__ import annotations

import asyncio
import types
from typing import Coroutine


def eager(coro: Coroutine) -> asyncio.Future:
    """A future of `coro`'s outcome: done already when it finished (or failed) without waiting, else a task that goes
    on with it from where it waits. Where the step run here takes place, no task is current."""
    loop = asyncio.get_running_loop()
    try:
        first = coro.send(None)
    except StopIteration as e:
        done = loop.create_future()
        done.set_result(e.value)
        return done
    except asyncio.CancelledError:
        done = loop.create_future()
        done.cancel()
        return done
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        done = loop.create_future()
        done.set_exception(exc)
        return done
    return asyncio.ensure_future(_go_on(coro, [first]))


async def _go_on(coro: Coroutine, first: list):
    return await _delegate(coro, first)


@types.coroutine
def _delegate(coro: Coroutine, first: list):
    """What `yield from coro` does, for a coroutine already started: what it yields (the future it waits for) goes to
    the task, and what the task sends or throws in (a cancellation) goes on to it. The future waited for is not kept
    once waited for: a failure's traceback goes through these frames, and must not keep what that future holds (a
    gather's parts, and the buffer they read into: chunk_buffers.py) alive."""
    yielded = first.pop()
    while True:
        try:
            sent = yield yielded
            yielded = None
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            yielded = None
            try:
                yielded = coro.throw(exc)
            except StopIteration as e:
                return e.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as e:
                return e.value
