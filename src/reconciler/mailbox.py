"""A coalescing, keyed mailbox between event sources and the one reconcile task.

Sources only post hints ("the kubelet socket was re-created", "SIGHUP");
posting a key that is already waiting replaces it, so a burst of file events
is one reconcile, never a backlog. The consumer drains everything at once and
handles keys in priority order (shutdown first).
"""

from __future__ import annotations

import asyncio
from enum import IntEnum


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


class Mailbox:
    def __init__(self) -> None:
        self._pending: dict[Hint, object] = {}
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        # Set once SHUTDOWN is posted: a reconcile in progress is cut short
        # rather than making the stop wait behind it.
        self.stopping = asyncio.Event()

    def post(self, hint: Hint, payload: object = None) -> None:
        """Post from the loop's own thread."""
        self._pending[hint] = payload
        self._ready.set()
        if hint is Hint.SHUTDOWN:
            self.stopping.set()

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
