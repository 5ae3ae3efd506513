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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from loguru import logger

from devices.health import EventQueue, HealthSource, open_health_source
from devices.library import DeviceLibrary, ProbeResult
from devices.model import Inventory
from resources.allocation import Allocator
from resources.model import PluginDevice
from settings import EffectiveConfig
from states.health import HealthBook, HealthChange, HealthPolicy, run_probe, with_health

NOT_PROBED = ProbeResult(ok=False, detail="not probed yet")


@dataclass(frozen=True)
class DueProbes:
    """Devices whose health work is due at `now` (a monotonic time)."""

    now: float
    uuids: tuple[str, ...]


class HealthMonitor:
    def __init__(
        self,
        *,
        notify: Callable[[], None],
        on_change: Callable[[HealthChange], None] = lambda change: None,
    ) -> None:
        self._queue = EventQueue(notify)
        self._on_change = on_change
        self._source: HealthSource | None = None
        self._key: tuple[object, ...] | None = None
        self.book: HealthBook | None = None
        self.inventory: Inventory | None = None  # the one followed, to name devices
        self._library: DeviceLibrary | None = None

    def policy(self, config: EffectiveConfig) -> HealthPolicy:
        """The config's `health` section (the flag and the variables on top, by precedence)."""
        return HealthPolicy.of(config.health)

    async def follow(
        self, library: DeviceLibrary, inventory: Inventory, config: EffectiveConfig
    ) -> None:
        """Watch this inventory; a new source only when the inventory or the policy changed."""
        policy = self.policy(config)
        self.inventory = inventory
        key = (id(library), inventory, policy, config.flags.mock_nvml_events)
        if key == self._key:
            return
        await self.stop()
        if self.book is None or self.book.policy != policy:
            self.book = HealthBook(inventory, policy)
        else:
            self.book.update_inventory(inventory)
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

    def take_events(self) -> list[HealthChange]:
        """Apply the queued events to the book; returns the devices that moved (on the loop)."""
        if self.book is None:
            self._queue.take()
            return []
        now = time.monotonic()
        changes: list[HealthChange] = []
        for event in self._queue.take():
            changes.extend(self.book.apply(event, now))
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

        return self.book.tick(due.now, looked)

    def report(self, changes: list[HealthChange]) -> None:
        """Tell the listeners (metrics, Events) and the log; on the loop's thread."""
        for change in changes:
            self._on_change(change)
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
        return devices if self.book is None else with_health(devices, self.book)

    def decorate(self, allocators: tuple[Allocator, ...]) -> tuple[Allocator, ...]:
        """The plan's allocators with the current health applied to their devices."""
        out: list[Allocator] = []
        for allocator in allocators:
            devices = self.devices(allocator.resource.devices)
            if devices == allocator.resource.devices:
                out.append(allocator)
            else:
                out.append(
                    Allocator(replace(allocator.resource, devices=devices), allocator.options)
                )
        return tuple(out)

    def reason(self, device: PluginDevice) -> dict[str, object]:
        """Health details of one advertised device for /state."""
        if self.book is None:
            return {"reason": None, "since": None}
        for uuid in (device.uuid, device.gpu_uuid):
            status = self.book.status(uuid)
            if status is not None and status.reason is not None:
                return {"reason": status.reason, "since": status.since}
        status = self.book.status(device.uuid)
        return {"reason": None, "since": None if status is None else status.since}

    async def stop(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            await asyncio.to_thread(source.stop, 5.0)
