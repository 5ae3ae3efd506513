"""Waiting in tests: for a condition, bounded, failing with what was awaited.

A test never sleeps for a fixed time to let something happen: it waits for
the thing itself. When the code under test offers an event (the simulator's
`wait_for`, a mailbox, a recorder's queue), the test awaits that. When the
only way to see a condition is to look again (a file, a metric, a process's
`/state`, a counter kept by another thread), it uses `eventually` (in a
coroutine) or `eventually_sync` (in a plain test): they look at once, then
every `interval` seconds, and fail after `timeout` with

    timed out after 10s waiting for <what>; last: <the last thing seen>

The sleeps inside these two helpers are the only polling sleeps of the suite.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 10.0
INTERVAL = 0.02

__all__ = ["INTERVAL", "TIMEOUT", "TimedOut", "eventually", "eventually_sync"]


class TimedOut(AssertionError):
    """A condition did not hold within its timeout."""


def _message(what: str, timeout: float, last: object, error: BaseException | None) -> str:
    said = f"timed out after {timeout:g}s waiting for {what}"
    if error is not None:
        said += f"; last attempt raised {error!r}"
    elif last is not None:
        said += f"; last: {last!r}"
    return said[:2000]


async def eventually(
    predicate: Callable[[], T | Awaitable[T]],
    *,
    what: str,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    ignoring: tuple[type[Exception], ...] = (),
    detail: Callable[[], object] | None = None,
) -> T:
    """The first truthy result of `predicate` (a function or a coroutine function).

    An exception of a type in `ignoring` counts as "not yet" (a server that is
    not listening yet). `detail`, when given, is what the failure shows as the
    last thing seen instead of the predicate's last result.

    Raises:
        TimedOut: nothing truthy within `timeout` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        error: Exception | None = None
        result: T | None = None
        try:
            value = predicate()
            result = await value if inspect.isawaitable(value) else value
        except ignoring as caught:
            error = caught
        if result:
            return result
        if loop.time() >= deadline:
            last = detail() if detail is not None else result
            raise TimedOut(_message(what, timeout, last, error if detail is None else None))
        await asyncio.sleep(interval)


def eventually_sync(
    predicate: Callable[[], T],
    *,
    what: str,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    ignoring: tuple[type[Exception], ...] = (),
    detail: Callable[[], object] | None = None,
) -> T:
    """`eventually` for a test that is not a coroutine: it blocks this thread.

    Only for tests with no event loop of their own to keep running (a loop
    running in this thread would stall while this waits).
    """
    deadline = time.monotonic() + timeout
    while True:
        error: Exception | None = None
        result: T | None = None
        try:
            result = predicate()
        except ignoring as caught:
            error = caught
        if result:
            return result
        if time.monotonic() >= deadline:
            last = detail() if detail is not None else result
            raise TimedOut(_message(what, timeout, last, error if detail is None else None))
        time.sleep(interval)
