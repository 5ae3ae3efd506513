"""Reading the inputs off the loop: config, devices, desired state, as one value.

`read()` is what a pass starts from: the config (with the node label's
selection), the devices, and the `Desired` built from them, or the error
that stops them. It blocks (files, NVML), so it runs on the `NvmlWorker`, a
single thread with a deadline on each call; and it writes nothing that
anything else reads. Its answer is a `Reading` that the loop applies, so a
read abandoned after its deadline can finish later without touching the
state `/state` shows: its answer is dropped, and a library it opened is shut
down on the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from foundation.errors import PluginError, TransientError
from reconciler.plan.desired import Desired, build_desired
from reconciler.plan.inputs import ConfigChoice, ConfigInputs, Loaded
from reconciler.plan.node import DiscoveryFailed, NodeLibrary, OpenLibrary, discover
from states.runnable import RUNNING, Condition, RunState

T = TypeVar("T")

# Reading the config and the devices and building the desired state; NVML can
# be slow on a large node, but a call that never returns must not hold the loop.
READ_DEADLINE_SECONDS = 30.0
FINGERPRINT_LIMIT = 1 << 20


class ReadTimeout(TransientError):
    """A call on the NVML worker did not finish within the deadline."""


@dataclass(frozen=True)
class Reading:
    """One read of the inputs.

    `node` is the library to use from now on (None when none could be
    opened); `rejected` identifies the content a permanent error was about,
    so the same bad file is reported once.
    """

    loaded: Loaded
    node: NodeLibrary | None
    desired: Desired | None = None
    error: PluginError | None = None
    rejected: str | None = None


def read(
    *,
    inputs: ConfigInputs,
    choice: ConfigChoice,
    held: NodeLibrary | None,
    open_library: OpenLibrary,
) -> Reading:
    """Config, devices and desired state, read afresh (blocking; touches nothing shared)."""
    loaded = inputs.load(choice.label, choice.current)
    if loaded.config is None:
        assert loaded.error is not None
        return _failed(loaded, held, loaded.error)
    config = loaded.config
    try:
        node, inventory = discover(held, config, open_library)
    except DiscoveryFailed as failed:
        error = failed.error
        if not isinstance(error, PluginError):
            raise error from None
        return _failed(loaded, failed.node, error)
    try:
        desired = build_desired(config, inventory)
    except PluginError as err:
        return _failed(loaded, node, err)
    return Reading(loaded, node, desired)


def _failed(loaded: Loaded, node: NodeLibrary | None, error: PluginError) -> Reading:
    where = getattr(error, "origin", "") or loaded.path
    rejected = _fingerprint(error, where) if error.permanent else None
    return Reading(loaded, node, error=error, rejected=rejected)


def _fingerprint(err: PluginError, origin: str) -> str:
    """The error and the content it was about: the same bad file is rejected only once.

    Only a regular file is read, and at most 1 MiB of it; anything else (a
    FIFO, a directory) is known by its identity, so this can never block.
    """
    content = b""
    with contextlib.suppress(OSError):
        info = os.stat(origin)
        content = f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}".encode()
        if stat.S_ISREG(info.st_mode) and info.st_size <= FINGERPRINT_LIMIT:
            with open(origin, "rb") as handle:
                content = handle.read(FINGERPRINT_LIMIT)
    return f"{err}\0{hashlib.sha256(content).hexdigest()}"


class NvmlWorker:
    """One thread for blocking reads (config files, NVML), with a deadline on each call.

    Nothing is queued behind a call that overran its deadline: until it
    returns, every new call fails at once with `ReadTimeout`.
    """

    def __init__(self, deadline: float = READ_DEADLINE_SECONDS) -> None:
        self.deadline = deadline
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")
        self.busy: Future[object] | None = None
        self._closed = False

    @property
    def stuck(self) -> bool:
        return self.busy is not None and not self.busy.done()

    async def call(
        self, work: Callable[[], T], what: str, *, dropped: Callable[[T], None] | None = None
    ) -> T:
        """Run `work` on the worker; `dropped` gets a result that came after the deadline.

        Raises:
            ReadTimeout: the worker is still busy with an earlier call, or
                this one did not finish within the deadline.
        """
        if self.stuck:
            raise ReadTimeout(f"{what}: an earlier NVML call has still not returned")
        future = self._executor.submit(work)
        self.busy = future  # type: ignore[assignment]
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(future)), self.deadline
            )
        except TimeoutError:
            if dropped is not None:
                loop = asyncio.get_running_loop()

                def hand_back(done: Future[T]) -> None:
                    with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                        loop.call_soon_threadsafe(_late, done, dropped)

                future.add_done_callback(hand_back)
            raise ReadTimeout(f"{what} did not finish within {self.deadline:g}s") from None

    def condition(self) -> Condition:
        """What `/state` shows of the worker (`runnables`); its owner, `Intake`, stops it."""
        if self._closed:
            return Condition(RunState.STOPPED)
        if self.stuck:
            return Condition(
                RunState.FAILED, f"a call has not returned within its {self.deadline:g}s deadline"
            )
        return RUNNING

    def submit(self, work: Callable[[], T]) -> Future[T]:
        """Queue `work` without waiting for it (shutting a dropped library down)."""
        return self._executor.submit(work)

    async def close(self, last: Callable[[], None]) -> None:
        """Run `last` (shutting the library down) unless a call is stuck, then stop the thread."""
        self._closed = True
        if not self.stuck:
            await asyncio.get_running_loop().run_in_executor(self._executor, last)
        self._executor.shutdown(wait=False, cancel_futures=True)


def _late(future: Future[T], dropped: Callable[[T], None]) -> None:
    if not future.cancelled() and future.exception() is None:
        dropped(future.result())
