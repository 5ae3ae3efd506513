"""What runs on its own, made a `Runnable`: a part with its own start and stop, a pool, a task.

- `Service`: a part that starts and stops itself (a listener on threads of
  its own, a watch thread); `Service.thread` adapts the usual thread owner
  (`start()`, `stop(timeout) -> bool`, `running`). While it runs, `look`
  says whether it still does: a thread that ended without being asked to
  shows as failed (`alive`, for any owner with a `running`).
- `Pool`: threads made on demand (a `concurrent.futures` executor). Its stop
  drops the queued work and waits, within the grace period, for the work
  in progress.
- `Task`: an asyncio task, `main(stop=event)`, optionally after a `first`
  step that is part of its start (the reconcile loop's first pass). Its
  stop sets the event (or `ask`s it to stop some other way), waits the
  grace period, then cancels it. An error it ends with is logged once and
  shown, unless it is `waited` for, when the waiter gets it instead.

Blocking stops (joining a thread) run in a daemon thread of their own
(`off_loop`), not in the default executor: a join that never returns must
not hold up the process's exit, which waits for that executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Protocol, TypeVar

from loguru import logger

from states.runnable import (
    RUNNING,
    THREAD_ENDED,
    Condition,
    RunnableStatus,
    RunState,
    StatusCell,
    one_line,
)

T = TypeVar("T")


async def off_loop(work: Callable[[], T]) -> T:
    """Run blocking `work` in a daemon thread; cancelling the wait leaves the thread behind."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return  # the wait was given up
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = work()
        except BaseException as err:  # handed to the loop, raised there
            error = err
        with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="stopping", daemon=True).start()
    return await done


class Runs(Protocol):
    """An object whose thread(s) may have ended: `running` says whether they still run."""

    @property
    def running(self) -> bool: ...


def alive(owner: Runs) -> Condition:
    """Running while the owner's thread runs; failed once it ended (it was not stopped yet)."""
    return RUNNING if owner.running else THREAD_ENDED


class ThreadOwner(Runs, Protocol):
    """An object that runs one thread of its own (a watch, a recorder)."""

    def start(self) -> None: ...

    def stop(self, timeout: float | None = ...) -> bool: ...


class Service:
    """A part with its own start and stop, and a `look` at whether it still runs."""

    def __init__(
        self,
        name: str,
        *,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[float], Awaitable[bool | None]],
        look: Callable[[], Condition] = lambda: RUNNING,
    ) -> None:
        self._start, self._stop, self._look = start, stop, look
        self._cell = StatusCell(name)
        self._running = False

    @classmethod
    def thread(cls, name: str, owner: ThreadOwner) -> Service:
        calls = _ThreadCalls(owner)
        return cls(name, start=calls.start, stop=calls.stop, look=partial(alive, owner))

    @property
    def name(self) -> str:
        return self._cell.value.name

    async def start(self) -> None:
        self._cell.set(RunState.STARTING)
        try:
            await self._start()
        except Exception as err:
            self._cell.set(RunState.FAILED, f"start failed: {one_line(err)}")
            raise
        self._running = True
        self._cell.show(self._look())

    async def stop(self, grace: float) -> None:
        self._running = False
        failed = self._cell.state is RunState.FAILED  # its failure stays what it shows
        if not failed:
            self._cell.set(RunState.STOPPING)
        ended = await self._stop(grace)
        if ended is False:
            self._cell.set(RunState.FAILED, f"did not stop within {grace:g}s")
        elif not failed:
            self._cell.set(RunState.STOPPED)

    def status(self) -> RunnableStatus:
        if self._running:
            return self._cell.show(self._look())
        return self._cell.value


class _ThreadCalls:
    """A thread owner's calls, as `Service` makes them."""

    def __init__(self, owner: ThreadOwner) -> None:
        self.owner = owner

    async def start(self) -> None:
        self.owner.start()

    async def stop(self, grace: float) -> bool:
        return await off_loop(partial(self.owner.stop, grace))


class Shuts(Protocol):
    """An executor's shutdown, as `concurrent.futures` spells it."""

    def shutdown(self, wait: bool = ..., *, cancel_futures: bool = ...) -> None: ...


class Pool:
    """Threads made on demand: running from the start, their queued work dropped at the stop."""

    def __init__(self, name: str, executor: Shuts) -> None:
        self._executor = executor
        self._cell = StatusCell(name)

    @property
    def name(self) -> str:
        return self._cell.value.name

    async def start(self) -> None:
        self._cell.set(RunState.RUNNING)  # its threads come with the first piece of work

    async def stop(self, grace: float) -> None:
        self._cell.set(RunState.STOPPING)
        self._executor.shutdown(wait=False, cancel_futures=True)
        try:
            async with asyncio.timeout(grace):
                await off_loop(partial(self._executor.shutdown, wait=True))
        except TimeoutError:
            self._cell.set(RunState.FAILED, f"work still ran after {grace:g}s")
        else:
            self._cell.set(RunState.STOPPED)

    def status(self) -> RunnableStatus:
        return self._cell.value


class Main(Protocol):
    """A task's coroutine: runs until `stop` is set (or ends by itself)."""

    def __call__(self, *, stop: asyncio.Event) -> Coroutine[Any, Any, None]: ...


class Task:
    """An asyncio task, stopped by its event (or `ask`), then cancelled after the grace period."""

    def __init__(
        self,
        name: str,
        main: Main,
        *,
        first: Callable[[], Awaitable[None]] | None = None,
        ask: Callable[[], None] | None = None,
        waited: bool = False,
        on_end: Callable[[], None] = lambda: None,
    ) -> None:
        self._main, self._first, self._ask = main, first, ask
        self._waited = waited
        self._on_end = on_end
        self._cell = StatusCell(name)
        self._stop_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._cut = False  # cancelled by `stop` once the grace period was over

    @property
    def name(self) -> str:
        return self._cell.value.name

    async def start(self) -> None:
        self._cell.set(RunState.STARTING)
        if self._first is not None:
            try:
                await self._first()
            except Exception as err:
                self._cell.set(RunState.FAILED, f"start failed: {one_line(err)}")
                raise
        self._task = asyncio.create_task(self._main(stop=self._stop_event), name=self.name)
        self._task.add_done_callback(self._ended)
        self._cell.set(RunState.RUNNING)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            self._cell.set(RunState.STOPPED, "cut short" if self._cut else "cancelled")
        elif (error := task.exception()) is not None:
            reason = one_line(error)
            self._cell.set(RunState.FAILED, reason)
            if not self._waited:
                logger.opt(exception=error).error("{} failed: {}", self.name, reason)
        else:
            self._cell.set(RunState.STOPPED)
        self._on_end()

    async def stop(self, grace: float) -> None:
        task = self._task
        if task is None:
            if self._cell.state is not RunState.FAILED:
                self._cell.set(RunState.STOPPED)
            return
        if task.done():
            return  # it ended by itself: its status says how
        self._cell.set(RunState.STOPPING)
        self._stop_event.set()
        if self._ask is not None:
            self._ask()
        await asyncio.wait({task}, timeout=grace)
        if not task.done():
            self._cut = True
            task.cancel()
            await asyncio.wait({task})

    async def wait(self) -> None:
        """Until the task ends; the error it failed with is raised here (a stop is not waited)."""
        task = self._task
        if task is None:
            return
        await asyncio.wait({task})
        if not task.cancelled():
            task.result()

    def status(self) -> RunnableStatus:
        return self._cell.value
