"""Keep every control daemon of the node running, and say when they all are.

Each daemon gets its own task: start it, then check it every
``health_interval`` seconds with the same command the plugin's readiness
probe sends. A daemon that fails to start or stops answering is cleaned up
(``quit`` tried, log follower stopped, ``.started`` removed) and started again
after a capped exponential backoff; the backoff resets once a daemon has stayed
healthy for a full backoff cap, so a daemon that dies right after every start
is not restarted in a tight loop.

``<root>/.ready`` exists exactly while every daemon is up. It is written even
when the node has no daemon to run, as the reference does, so a waiting
deployment step does not hang on a node without MPS resources.

`shutdown` stops every daemon (see `ControlDaemon.stop`) after removing
``.ready``, and reports every problem met.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from loguru import logger

from foundation.backoff import Backoff
from foundation.errors import PermanentError
from mps.daemon import ControlDaemon
from mps.errors import MpsCommandError, MpsStartError
from mps.layout import MpsLayout

__all__ = ["ReadyMarkerError", "Supervisor", "SupervisorOptions"]


class ReadyMarkerError(PermanentError):
    """``.ready`` could not be written; the daemon process cannot signal readiness."""


@dataclass(frozen=True, kw_only=True)
class SupervisorOptions:
    health_interval: float = 10.0
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, cap=30.0))


class Supervisor:
    """Runs a fixed set of daemons until cancelled; `shutdown` stops them."""

    def __init__(
        self,
        daemons: Sequence[ControlDaemon],
        *,
        layout: MpsLayout,
        options: SupervisorOptions | None = None,
    ) -> None:
        self.daemons = tuple(daemons)
        self.layout = layout
        self.options = options or SupervisorOptions()
        self._up: set[str] = set()

    @property
    def all_up(self) -> bool:
        return len(self._up) == len(self.daemons)

    async def supervise(self) -> None:
        """Run until cancelled. Raises `ReadyMarkerError` when ``.ready`` cannot be written."""
        if not self.daemons:
            logger.info("no devices are configured for MPS sharing; waiting indefinitely")
            self._write_ready()
            await asyncio.get_running_loop().create_future()
        try:
            async with asyncio.TaskGroup() as group:
                for daemon in self.daemons:
                    group.create_task(self._keep(daemon), name=f"mps {daemon.resource}")
        except BaseExceptionGroup as failed:
            # The tasks are endless, so only an error ends the group: surface
            # it as itself rather than wrapped.
            raise failed.exceptions[0] from None

    async def shutdown(self) -> tuple[str, ...]:
        """Remove ``.ready`` and stop every daemon; the problems met, empty when clean."""
        self._remove_ready()
        up, self._up = self._up, set()
        problems: list[str] = []
        for daemon in self.daemons:
            found = await daemon.stop(running=daemon.resource in up)
            problems.extend(f"{daemon.resource}: {problem}" for problem in found)
        return tuple(problems)

    async def _keep(self, daemon: ControlDaemon) -> None:
        log = logger.bind(resource=daemon.resource)
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            try:
                await daemon.start()
            except MpsStartError as error:
                delay = self.options.backoff.delay(failures)
                failures += 1
                log.error(
                    "failed to start MPS control daemon: {}; retrying in {:g}s (attempt {})",
                    error,
                    delay,
                    failures,
                )
                await daemon.forget()
                await asyncio.sleep(delay)
                continue
            self._mark_up(daemon)
            healthy_since = loop.time()
            problem = await self._watch(daemon)
            self._mark_down(daemon)
            if loop.time() - healthy_since >= self.options.backoff.cap:
                failures = 0
            delay = self.options.backoff.delay(failures)
            failures += 1
            log.error(
                "MPS control daemon stopped answering: {}; restarting in {:g}s (attempt {})",
                problem,
                delay,
                failures,
            )
            await daemon.forget()
            await asyncio.sleep(delay)

    async def _watch(self, daemon: ControlDaemon) -> str:
        """Return why the daemon failed its health check, once it does."""
        while True:
            await asyncio.sleep(self.options.health_interval)
            try:
                await daemon.check()
            except MpsCommandError as error:
                return str(error)

    def _mark_up(self, daemon: ControlDaemon) -> None:
        self._up.add(daemon.resource)
        if self.all_up:
            self._write_ready()
            logger.info("all {} MPS control daemon(s) are ready", len(self.daemons))

    def _mark_down(self, daemon: ControlDaemon) -> None:
        self._up.discard(daemon.resource)
        self._remove_ready()

    def _write_ready(self) -> None:
        try:
            self.layout.root.mkdir(parents=True, exist_ok=True)
            self.layout.ready.touch()
        except OSError as error:
            raise ReadyMarkerError(f"failed to create {self.layout.ready}: {error}") from None

    def _remove_ready(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.layout.ready.unlink()
