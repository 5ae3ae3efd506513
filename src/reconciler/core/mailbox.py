"""A coalescing, keyed mailbox between event sources and the one reconcile task.

Sources only post hints ("the kubelet socket was re-created", "SIGHUP");
posting a key that is already waiting replaces it, so a burst of file events
is one reconcile, never a backlog. The consumer drains everything at once and
handles keys in priority order (shutdown first).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from enum import IntEnum
from typing import Any, TypeVar

T = TypeVar("T")


class Hint(IntEnum):
    """What happened; lower values are handled first within one drain."""

    SHUTDOWN = 0
    KUBELET = 1
    RELOAD = 2
    CONFIG = 3
    LABEL = 4
    HEALTH = 5
    MPS = 6
    RETRY = 7
    CORDON = 8  # the node's GPU cordon annotation; its payload is the value
    DRA = 9  # the DRA side moved: the API's slices (the slice watch), claims or sockets


class Mailbox:
    def __init__(self) -> None:
        self._pending: dict[Hint, object] = {}
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._timers: dict[Hint, asyncio.TimerHandle] = {}
        # Set once SHUTDOWN is posted: a reconcile in progress is cut short
        # rather than making the stop wait behind it.
        self.stopping = asyncio.Event()

    def post(self, hint: Hint, payload: object = None) -> None:
        """Post from the loop's own thread."""
        self._pending[hint] = payload
        self._ready.set()
        if hint is Hint.SHUTDOWN:
            self.stopping.set()

    def post_later(self, hint: Hint, delay: float | None) -> None:
        """Post `hint` in `delay` seconds, replacing its timer; None only cancels the timer."""
        old = self._timers.pop(hint, None)
        if old is not None:
            old.cancel()
        if delay is not None:
            self._timers[hint] = self._loop.call_later(delay, self.post, hint)

    def cancel_timers(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def waiting(self, hint: Hint) -> bool:
        return hint in self._pending

    def post_threadsafe(self, hint: Hint, payload: object = None) -> None:
        """Post from any other thread (NVML events, the node watch)."""
        self._loop.call_soon_threadsafe(self.post, hint, payload)

    @property
    def depth(self) -> int:
        return len(self._pending)

    async def drain(self, timeout: float | None = None) -> list[tuple[Hint, object]]:
        """Wait for at least one hint (or the timeout), then take them all, in priority order."""
        if not self._pending:
            try:
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
            except TimeoutError:
                return []
        taken = sorted(self._pending.items())
        self._pending.clear()
        self._ready.clear()
        return taken

    async def unless_stopping(self, work: Coroutine[Any, Any, T], grace: float) -> T | None:
        """Await `work`; a stop posted meanwhile cuts it short after `grace` seconds (None).

        Most steps finish in milliseconds, and a server stopped halfway is
        left in a state gRPC cannot shut down cleanly, so the step in progress
        gets the grace period; only what waits longer (a kubelet that does not
        answer a registration) is cancelled.
        """
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await asyncio.wait({task}, timeout=grace)
        finally:
            stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return None
        return task.result()
