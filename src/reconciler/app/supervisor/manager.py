"""The supervisor: starts runnables in their declared order, stops them in reverse.

Like controller-runtime's Manager: each part that runs on its own is a
`Runnable`, added once with a grace period. `start(through=...)` starts the
next ones in the declared order (start-up is staged: the endpoint listens
before the node label is awaited, the file watches start after the first
pass); a start that fails is recorded and raised, since the process cannot
serve without that part. `stop()` stops every runnable whose start was
attempted, last first: each gets its grace period to stop on its own and
`CUT_SECONDS` more to be cut short; past that the overrun is logged once and
the next one stops. `stop()` raises nothing of a runnable's: a failed stop
is logged and shown. A cancellation of the caller itself is passed on, but
only once every runnable had its turn, so sockets are removed even then.

A failure is reported, never hidden: whatever a runnable says of itself,
a failure the supervisor saw (a start or stop that raised, a stop that
overran) stays on its status. Everything here runs on the event loop's
thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from loguru import logger

from states.history import now_rfc3339
from states.runnable import (
    Clock,
    Condition,
    RunnableStatus,
    RunState,
    StatusCell,
    one_line,
)

# How long past its grace period a runnable's stop may take to be cut short.
CUT_SECONDS = 1.0


class Runnable(Protocol):
    """A thread, pool or task of the process, as the supervisor drives it."""

    @property
    def name(self) -> str: ...

    async def start(self) -> None:
        """Start; returns once it runs. Raises when it cannot (the process then stops)."""
        ...

    async def stop(self, grace: float) -> None:
        """Stop within `grace` seconds if it can; cut short what does not."""
        ...

    def status(self) -> RunnableStatus: ...


class Watched:
    """A part owned by another object (which starts and stops it), only shown here."""

    def __init__(self, name: str, look: Callable[[], Condition], clock: Clock) -> None:
        self._look = look
        self._cell = StatusCell(name, clock)

    @property
    def name(self) -> str:
        return self._cell.value.name

    async def start(self) -> None:
        """Nothing: its owner starts it."""

    async def stop(self, grace: float) -> None:
        """Nothing: its owner stops it."""

    def status(self) -> RunnableStatus:
        return self._cell.show(self._look())


@dataclass
class _Entry:
    runnable: Runnable
    grace: float
    owned: bool
    attempted: bool = False  # its start was called: it is stopped at the end


class Supervisor:
    """Starts and stops the process's runnables in one declared order; shows their status."""

    def __init__(self, *, clock: Clock = now_rfc3339) -> None:
        self._clock = clock
        self._entries: list[_Entry] = []
        self._failures: dict[str, RunnableStatus] = {}
        # Told whenever a status may have moved (the app republishes `/state`).
        self.on_change: Callable[[], None] = lambda: None

    @property
    def names(self) -> list[str]:
        return [entry.runnable.name for entry in self._entries]

    def add(self, runnable: Runnable, *, grace: float) -> None:
        """Declare the next runnable: started after those added before, stopped before them."""
        self._declare(_Entry(runnable, grace, owned=True))

    def watch(self, name: str, look: Callable[[], Condition]) -> None:
        """Show a part another object owns; `look` is asked on the event loop's thread."""
        self._declare(_Entry(Watched(name, look, self._clock), 0.0, owned=False))

    def _declare(self, entry: _Entry) -> None:
        if entry.runnable.name in self.names:
            raise ValueError(f"a runnable named {entry.runnable.name!r} was added already")
        self._entries.append(entry)

    def changed(self) -> None:
        """A runnable's status moved on its own (a task ended): republish."""
        try:
            self.on_change()
        except Exception as err:  # showing the status must not stop a start or a stop
            logger.opt(exception=err).error("publishing the runnables' status failed")

    async def start(self, through: str | None = None) -> None:
        """Start the runnables not started yet, in order, up to `through` (None: all).

        Raises:
            ValueError: no runnable is named `through`.
            Exception: what the failing runnable's start raised (it is recorded first).
        """
        if through is not None and through not in self.names:
            raise ValueError(f"no runnable named {through!r}")
        for entry in self._entries:
            if entry.owned and not entry.attempted:
                entry.attempted = True
                await self._start(entry.runnable)
            if entry.runnable.name == through:
                return

    async def _start(self, runnable: Runnable) -> None:
        self.changed()
        try:
            await runnable.start()
        except Exception as err:
            self._fail(runnable.name, f"start failed: {one_line(err)}")
            raise
        finally:
            self.changed()

    async def stop(self) -> None:
        """Stop, last first, every runnable whose start was attempted; never raises of theirs."""
        interrupted = False
        for entry in reversed(self._entries):
            if not entry.attempted:
                continue
            entry.attempted = False
            if not await self._stop(entry):
                interrupted = True
            self.changed()
        if interrupted:
            raise asyncio.CancelledError

    async def _stop(self, entry: _Entry) -> bool:
        """One bounded stop; False when the caller itself was cancelled meanwhile."""
        runnable, grace = entry.runnable, entry.grace
        task = asyncio.current_task()
        cancelling = task.cancelling() if task is not None else 0
        try:
            async with asyncio.timeout(grace + CUT_SECONDS):
                await runnable.stop(grace)
        except TimeoutError:
            logger.warning("{} did not stop within {:g}s: going on", runnable.name, grace)
            self._fail(runnable.name, f"did not stop within {grace:g}s")
        except asyncio.CancelledError:
            if task is not None and task.cancelling() > cancelling:
                # The caller is cancelled: the others still get their turn.
                self._fail(runnable.name, "its stop was interrupted")
                return False
            self._fail(runnable.name, "its stop was cancelled")
        except Exception as err:
            logger.opt(exception=err).error("{} failed to stop: {}", runnable.name, one_line(err))
            self._fail(runnable.name, f"stop failed: {one_line(err)}")
        return True

    def _fail(self, name: str, reason: str) -> None:
        if name not in self._failures:  # the first failure is the one that explains
            self._failures[name] = RunnableStatus(name, RunState.FAILED, self._clock(), reason)

    def status(self) -> tuple[RunnableStatus, ...]:
        """Every runnable in the declared order, as frozen values (on the event loop's thread)."""
        return tuple(self._status_of(entry.runnable) for entry in self._entries)

    def _status_of(self, runnable: Runnable) -> RunnableStatus:
        failed = self._failures.get(runnable.name)
        if failed is not None:
            return failed
        try:
            return runnable.status()
        except Exception as err:  # a status must never take `/state` down
            return RunnableStatus(
                runnable.name, RunState.FAILED, self._clock(), f"no status: {one_line(err)}"
            )
