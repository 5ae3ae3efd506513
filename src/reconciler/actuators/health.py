"""Device health, wired into the reconcile loop.

One health source (NVML events, or the simulated backend's events file) runs
in its own thread and only fills a queue and posts a `HEALTH` hint. The loop
drains the queue into the `HealthBook` (the per-device health machines),
has the probes that are due run on its NVML worker, moves the devices on
with their results, and republishes the device lists whose health changed.
Only the loop writes the book, so what `/state` and the servers read of it
is never half-written by a probe still running on the worker. Health is
applied to a plan's devices right before they are served, so a device that
is unhealthy stays so across reconfigurations and kubelet restarts, and the
plan's digest never depends on health.

The GPU cordon annotation (`states.cordon`) is laid over the book here: its
value comes in with a `CORDON` hint (`want_cordon`), and the next health
step, or the next inventory followed, matches it against the devices and
reports the moves like any other health change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from functools import partial

from loguru import logger

from devices.backends import open_health_source
from devices.health import EventQueue, HealthSource, NullSource
from devices.library import DeviceLibrary, ProbeResult
from devices.model import Inventory
from foundation.errors import PluginError
from foundation.outcome import Change, Key, Kind, Outcome, Retries
from reconciler.actuators.protocol import NOTHING, Single
from reconciler.plan.desired import Desired
from resources.model import Health, PluginDevice
from settings import EffectiveConfig
from states.cordon import CordonBook
from states.health import HealthBook, HealthChange, HealthPolicy, run_probe, with_health
from states.health_status import HealthView
from states.runnable import RUNNING, Condition, RunState

NOT_PROBED = ProbeResult(ok=False, detail="not probed yet")


@dataclass(frozen=True)
class HealthStep:
    """What one health step found: the devices that moved, and whether probing failed."""

    changes: list[HealthChange]
    failed: bool


# Runs a blocking call on the NVML worker, with its deadline (`NvmlWorker.call`).
OnWorker = Callable[[Callable[[], dict[str, ProbeResult]], str], Awaitable[dict[str, ProbeResult]]]


@dataclass(frozen=True)
class DueProbes:
    """Devices whose health work is due at `now` (a monotonic time)."""

    now: float
    uuids: tuple[str, ...]


class HealthMonitor:
    """Owns the health source and the health book; every write to the book happens on the loop.

    `status()` is the book as a frozen view, the same object until a device
    moves, so `/state` rebuilds nothing while health stands still.
    """

    def __init__(
        self,
        *,
        notify: Callable[[], None],
        on_change: Callable[[HealthChange], None] = lambda change: None,
    ) -> None:
        self._queue = EventQueue(notify)
        self.on_change = on_change  # metrics and Events; called on the loop's thread
        self._source: HealthSource | None = None
        self._key: tuple[object, ...] | None = None
        self.book: HealthBook | None = None
        self.inventory: Inventory | None = None  # the one followed, to name devices
        self._library: DeviceLibrary | None = None
        self._view: HealthView | None = None
        self.cordon = CordonBook()

    def policy(self, config: EffectiveConfig) -> HealthPolicy:
        """The config's `health` section (the flag and the variables on top, by precedence)."""
        return HealthPolicy.of(config.health)

    def source_key(
        self, library: DeviceLibrary, inventory: Inventory, config: EffectiveConfig
    ) -> tuple[object, ...]:
        """What the health source follows: a new one is started when this changes."""
        return (id(library), inventory, self.policy(config), config.flags.mock_nvml_events)

    def follows(
        self, library: DeviceLibrary, inventory: Inventory, config: EffectiveConfig
    ) -> bool:
        return self._key == self.source_key(library, inventory, config)

    async def follow(
        self, library: DeviceLibrary, inventory: Inventory, config: EffectiveConfig
    ) -> None:
        """Watch this inventory; a new source only when the inventory or the policy changed.

        Raises:
            PluginError: the health source cannot be opened.
        """
        policy = self.policy(config)
        self.inventory = inventory
        key = (id(library), inventory, policy, config.flags.mock_nvml_events)
        if key == self._key:
            return
        await self.stop()
        self._view = None
        if self.book is None or self.book.policy != policy:
            self.book = HealthBook(inventory, policy)
        else:
            self.book.update_inventory(inventory)
        # The pass that follows this inventory publishes what the cordon holds;
        # the listeners hear of it here.
        self.cordon.follow(inventory)
        self.report(self.settle_cordon())
        self._source = open_health_source(
            library,
            inventory,
            events_file=config.flags.mock_nvml_events or None,
            policy=policy.xids,
        )
        self._source.start(self._queue.put)
        self._library = library
        self._key = key
        # "off" is said once, with its reason, by the health book; a real source is news.
        level = "DEBUG" if self._source.name == "health-off" else "INFO"
        logger.log(level, "health monitoring: {source}", source=self._source.name)

    async def step(self, on_worker: OnWorker) -> HealthStep:
        """Apply the queued events, run the probes that are due on the worker, report the moves.

        Only the loop writes the book: the probes run on the worker and
        return results, which `advance` applies here.
        """
        changes = self.settle_cordon() + self.cordon.hold(self.take_events())
        due = self.probes_due()
        failed = False
        if due.uuids:
            try:
                results = await on_worker(partial(self.probe, due), "checking device health")
            except PluginError as err:
                logger.warning("device health check failed: {err}", err=str(err))
                failed = True
            else:
                changes += self.cordon.hold(self.advance(due, results))
        self.report(changes)
        return HealthStep(changes, failed)

    def take_events(self) -> list[HealthChange]:
        """Apply the queued events to the book; returns the devices that moved (on the loop)."""
        if self.book is None:
            self._queue.take()
            return []
        now = time.monotonic()
        changes: list[HealthChange] = []
        events = self._queue.take()
        for event in events:
            changes.extend(self.book.apply(event, now))
        if events:
            self._view = None  # the monitoring condition may have moved without a device
        return changes

    def probes_due(self) -> DueProbes:
        """The devices with work due now, and when "now" is (on the loop)."""
        now = time.monotonic()
        if self.book is None or self._library is None:
            return DueProbes(now, ())
        return DueProbes(now, self.book.due(now))

    def probe(self, due: DueProbes) -> dict[str, ProbeResult]:
        """Look at each due device once (on the NVML worker; it never touches the book).

        Keeping the book on the loop is what lets `/state` and the servers read
        it while a probe is slow, or still running after its deadline passed.
        """
        library = self._library
        if library is None:
            return {}
        return {uuid: run_probe(library.probe, uuid) for uuid in due.uuids}

    def advance(self, due: DueProbes, results: Mapping[str, ProbeResult]) -> list[HealthChange]:
        """Move the due devices on with what their probes found (on the loop)."""
        if self.book is None:
            return []

        def looked(uuid: str) -> ProbeResult:
            # `due` listed every device `tick` moves at `due.now`, and only the
            # loop writes the book, so a missing result is not expected; if
            # one were missing, the device would count as not answering yet.
            return results.get(uuid, NOT_PROBED)

        changes = self.book.tick(due.now, looked)
        if due.uuids:
            self._view = None  # a device's detail or error count may move without a change
        return changes

    def report(self, changes: list[HealthChange]) -> None:
        """Tell the listeners (metrics, Events) and the log; on the loop's thread."""
        for change in changes:
            self.on_change(change)
            logger.debug(  # the health book logs each move (unhealthy at WARNING)
                "device {uuid} {source} -> {dest}: {reason}",
                uuid=change.uuid,
                source=str(change.source),
                dest=str(change.dest),
                reason=change.reason,
            )

    def next_due_in(self) -> float | None:
        """Seconds until a quiet period ends or a probe is due; None when nothing is."""
        if self.book is None:
            return None
        now = time.monotonic()
        due = self.book.next_due(now)
        return None if due is None else max(0.0, due - now)

    def devices(self, devices: tuple[PluginDevice, ...]) -> tuple[PluginDevice, ...]:
        checked = devices if self.book is None else with_health(devices, self.book)
        return self.cordon.devices(checked)

    def status(self) -> HealthView | None:
        """The book as `/state` shows it; None before anything is followed."""
        if self.book is None:
            return None
        if self._view is None:
            statuses = self.cordon.statuses(self.book.statuses())
            self._view = HealthView(self.book.monitoring, statuses, self.cordon.view())
        return self._view

    # -- the cordon annotation ----------------------------------------------------

    def want_cordon(self, value: str | None) -> None:
        """The annotation's value, from its hint; applied at the next step (on the loop)."""
        self.cordon.want(value)

    def cordon_read(self, off: str | None) -> None:
        """Whether the annotation is read at all: None when it is, else why not (for `/state`)."""
        if off != self.cordon.off:
            self.cordon.off = off
            self._view = None

    def settle_cordon(self) -> list[HealthChange]:
        """Match the cordon against the devices if either changed; the moves (on the loop)."""
        book = self.book

        def healthy(uuid: str) -> bool:
            return book is None or book.kubelet_health(uuid) is Health.HEALTHY

        changes = self.cordon.settle(healthy)
        if changes or self.cordon.view() != (self._view.cordon if self._view else None):
            self._view = None
        return changes

    def source_condition(self) -> Condition:
        """What `/state` shows of the health source's thread (`runnables`); it is started here."""
        source = self._source
        if source is None:
            if self._key is None:
                return Condition(RunState.PENDING, "no devices followed yet")
            return Condition(RunState.STOPPED)
        if isinstance(source, NullSource):
            return Condition(RunState.STOPPED, f"health checks are off: {source.reason}")
        if not source.running:
            return Condition(RunState.FAILED, f"{source.name} thread ended")
        return RUNNING

    async def stop(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            await asyncio.to_thread(source.stop, 5.0)


HEALTH = Key(Kind.HEALTH)


class HealthFollower(Single):
    """The health source follows the inventory and the policy the config asks for."""

    key = HEALTH

    def __init__(
        self,
        retries: Retries,
        health: HealthMonitor | None,
        library: Callable[[], DeviceLibrary | None],
    ) -> None:
        super().__init__(retries)
        self.health = health
        self.library = library  # the device library as last read

    def wanted(self, desired: Desired) -> Hashable:
        health, library = self.health, self.library()
        if health is None or library is None:
            return NOTHING
        if health.follows(library, desired.inventory, desired.config):
            return NOTHING
        return health.source_key(library, desired.inventory, desired.config)

    def status(self) -> object:
        return None if self.health is None else self.health.status()

    async def attempt(self, desired: Desired) -> list[Outcome]:
        health, library = self.health, self.library()
        assert health is not None
        assert library is not None
        try:
            await health.follow(library, desired.inventory, desired.config)
        except PluginError as err:
            return [Outcome(Kind.HEALTH, error=err)]
        return [Outcome(Kind.HEALTH, changes=frozenset({Change.FOLLOWED}))]
