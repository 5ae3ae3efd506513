"""The simulator's mutable record: per-resource state, counters and the event log.

Every change goes through one method here, which bumps the version, rebuilds the
immutable `Snapshot`, wakes whoever waits on a condition and hands the snapshot to
an optional observer (the JSON file writer). Waiting is therefore event-driven:
`wait_for` re-checks its predicate only when something actually changed.

Updates about a stream carry the registration id they belong to and are dropped if
that registration has since been replaced, so a late message from a superseded
stream can never overwrite the state of the current one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kubelet_sim.model import (
    Counters,
    DeviceInfo,
    DraDeviceHealth,
    DraDriverView,
    Event,
    EventKind,
    PluginOptions,
    ResourceView,
    Snapshot,
)

Predicate = Callable[[Snapshot], bool]


@dataclass(slots=True)
class _Resource:
    name: str
    endpoint: str
    options: PluginOptions
    registration: int
    devices: tuple[DeviceInfo, ...] = ()
    registered: bool = True
    streaming: bool = False
    counters: Counters = field(default_factory=Counters)

    def view(self) -> ResourceView:
        return ResourceView(
            name=self.name,
            endpoint=self.endpoint,
            options=self.options,
            devices=self.devices,
            registered=self.registered,
            streaming=self.streaming,
            counters=self.counters,
        )


@dataclass(slots=True)
class _Driver:
    name: str
    endpoint: str
    versions: tuple[str, ...]
    service: str
    socket: str
    registered: bool = True
    registrations: int = 1
    health_service: str = ""
    health: tuple[DraDeviceHealth, ...] = ()
    health_lists: int = 0
    health_note: str = ""

    def forget_health(self) -> None:
        """The stream is gone: the kubelet forgets what it said."""
        self.health_service = ""
        self.health = ()

    def view(self) -> DraDriverView:
        return DraDriverView(
            name=self.name,
            endpoint=self.endpoint,
            versions=self.versions,
            service=self.service,
            socket=self.socket,
            registered=self.registered,
            registrations=self.registrations,
            health_service=self.health_service,
            health=self.health,
            health_lists=self.health_lists,
            health_note=self.health_note,
        )


class Ledger:
    """Single-threaded (event-loop) record of what the simulated kubelet has seen."""

    def __init__(
        self,
        directory: str,
        *,
        registry: str = "",
        max_events: int = 2000,
        on_event: Callable[[Event], None] | None = None,
        on_change: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self._directory = directory
        self._events: deque[Event] = deque(maxlen=max_events)
        self._resources: dict[str, _Resource] = {}
        self._registry = registry
        self._drivers: dict[str, _Driver] = {}
        self._on_event = on_event
        self._on_change = on_change
        self._serving = False
        self._restarts = 0
        self._version = 0
        self._seq = 0
        self._changed = asyncio.Event()
        self._snapshot = self._build()

    # -- reading -------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def is_current(self, resource: str, registration: int) -> bool:
        state = self._resources.get(resource)
        return state is not None and state.registration == registration and state.registered

    async def wait_for(self, predicate: Predicate, *, within: float) -> Snapshot:
        """Return the first snapshot (current or future) that satisfies `predicate`."""
        try:
            async with asyncio.timeout(within):
                while True:
                    snap = self._snapshot
                    if predicate(snap):
                        return snap
                    # Read together with the snapshot, with no await in between, so a
                    # change between the check and the wait cannot be missed.
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(
                f"condition not met within {within}s; last snapshot: {self._snapshot!r}"
            ) from None

    # -- changes -------------------------------------------------------------

    def serving(self, detail: str) -> None:
        self._serving = True
        self._commit(EventKind.SERVING, detail=detail)

    def stopped(self) -> None:
        self._serving = False
        for state in self._resources.values():
            state.registered = False
            state.streaming = False
        for driver in self._drivers.values():
            driver.registered = False
            driver.forget_health()
        self._commit(EventKind.STOPPED)

    def restarted(self) -> None:
        """The kubelet came back: every registration is forgotten until renewed."""
        self._restarts += 1
        for state in self._resources.values():
            state.registered = False
            state.streaming = False
            state.devices = ()
        for driver in self._drivers.values():
            driver.registered = False
            driver.forget_health()
        self._commit(EventKind.RESTARTED, detail=f"restart #{self._restarts}")

    def rejected(self, resource: str, reason: str) -> None:
        self._commit(EventKind.REJECTED, resource=resource, detail=reason)

    def registered(
        self, resource: str, *, endpoint: str, options: PluginOptions, registration: int
    ) -> None:
        previous = self._resources.get(resource)
        counters = previous.counters if previous is not None else Counters()
        self._resources[resource] = _Resource(
            name=resource,
            endpoint=endpoint,
            options=options,
            registration=registration,
            # The kubelet keeps serving the last known devices until the new stream
            # sends its first list.
            devices=previous.devices if previous is not None else (),
            counters=replace(counters, registrations=counters.registrations + 1),
        )
        self._commit(EventKind.REGISTERED, resource=resource, detail=f"endpoint={endpoint}")

    def stream_opened(self, resource: str, registration: int) -> None:
        state = self._current(resource, registration)
        if state is None:
            return
        state.streaming = True
        state.counters = replace(state.counters, streams_opened=state.counters.streams_opened + 1)
        self._commit(EventKind.STREAM_OPENED, resource=resource)

    def list_received(
        self, resource: str, registration: int, devices: tuple[DeviceInfo, ...]
    ) -> None:
        state = self._current(resource, registration)
        if state is None:
            return
        state.devices = devices
        state.counters = replace(state.counters, lists_received=state.counters.lists_received + 1)
        healthy = sum(1 for d in devices if d.health == "Healthy")
        self._commit(
            EventKind.LIST_RECEIVED,
            resource=resource,
            detail=f"healthy={healthy}",
            device_count=len(devices),
        )

    def stream_ended(self, resource: str, registration: int, *, error: bool, detail: str) -> None:
        """Record the end of a stream; counted even if it belonged to a replaced one."""
        state = self._resources.get(resource)
        if state is None:
            return
        if state.registration == registration:
            state.streaming = False
        counter = "stream_errors" if error else "streams_closed"
        state.counters = replace(state.counters, **{counter: getattr(state.counters, counter) + 1})
        kind = EventKind.STREAM_ERROR if error else EventKind.STREAM_CLOSED
        self._commit(kind, resource=resource, detail=detail)

    # -- the DRA side ----------------------------------------------------------

    def dra_registered(
        self, driver: str, *, endpoint: str, versions: tuple[str, ...], service: str, socket: str
    ) -> int:
        """Record a registration; returns its number, which later health updates carry."""
        previous = self._drivers.get(driver)
        state = self._drivers[driver] = _Driver(
            name=driver,
            endpoint=endpoint,
            versions=versions,
            service=service,
            socket=socket,
            registrations=1 if previous is None else previous.registrations + 1,
        )
        self._commit(
            EventKind.DRA_REGISTERED,
            resource=driver,
            detail=f"endpoint={endpoint} service={service}",
        )
        return state.registrations

    def dra_rejected(self, name: str, reason: str) -> None:
        self._commit(EventKind.DRA_REJECTED, resource=name, detail=reason)

    def dra_deregistered(self, driver: str, reason: str) -> None:
        state = self._drivers.get(driver)
        if state is None or not state.registered:
            return
        state.registered = False
        state.forget_health()
        self._commit(EventKind.DRA_DEREGISTERED, resource=driver, detail=reason)

    def dra_health_received(
        self,
        driver: str,
        registration: int,
        *,
        service: str,
        devices: tuple[DraDeviceHealth, ...],
    ) -> None:
        """A complete list on the driver's health stream (dropped if from a replaced one)."""
        state = self._live_driver(driver, registration)
        if state is None:
            return
        state.health_service, state.health, state.health_note = service, devices, ""
        state.health_lists += 1
        unhealthy = sum(1 for d in devices if d.health == "Unhealthy")
        unknown = sum(1 for d in devices if d.health == "Unknown")
        self._commit(
            EventKind.DRA_HEALTH_RECEIVED,
            resource=driver,
            detail=f"unhealthy={unhealthy} unknown={unknown} service={service}",
            device_count=len(devices),
        )

    def dra_health_ended(self, driver: str, registration: int, note: str) -> None:
        """The driver's health stream is over, or was never served; `note` says which."""
        state = self._live_driver(driver, registration)
        if state is None:
            return
        state.forget_health()
        state.health_note = note
        self._commit(EventKind.DRA_HEALTH_ENDED, resource=driver, detail=note)

    # -- internals -----------------------------------------------------------

    def _live_driver(self, driver: str, registration: int) -> _Driver | None:
        state = self._drivers.get(driver)
        if state is None or state.registrations != registration or not state.registered:
            return None
        return state

    def _current(self, resource: str, registration: int) -> _Resource | None:
        state = self._resources.get(resource)
        if state is None or state.registration != registration:
            return None
        return state

    def _commit(
        self,
        kind: EventKind,
        *,
        resource: str = "",
        detail: str = "",
        device_count: int | None = None,
    ) -> None:
        self._seq += 1
        event = Event(
            seq=self._seq,
            at=time.monotonic(),
            wall=time.time(),
            kind=kind,
            resource=resource,
            detail=detail,
            device_count=device_count,
        )
        self._events.append(event)
        self._version += 1
        self._snapshot = self._build()
        # Swap the event so that waiters woken now and waiters arriving later
        # each block on a fresh "next change".
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self._on_event is not None:
            self._on_event(event)
        if self._on_change is not None:
            self._on_change(self._snapshot)

    def _build(self) -> Snapshot:
        return Snapshot(
            directory=self._directory,
            serving=self._serving,
            restarts=self._restarts,
            version=self._version,
            resources=tuple(self._resources[n].view() for n in sorted(self._resources)),
            events=tuple(self._events),
            registry=self._registry,
            dra_drivers=tuple(self._drivers[n].view() for n in sorted(self._drivers)),
        )
