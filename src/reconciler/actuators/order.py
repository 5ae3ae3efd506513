"""The node's actuators: one protocol, converged in a declared order.

Every actuator owns one piece of the node and knows what it really holds:

| step          | actuator          | key                | holds                             |
|---------------|-------------------|--------------------|-----------------------------------|
| `health`      | `HealthFollower`  | `health`           | the health source's inventory     |
| `mps`         | `MpsDaemons`      | `mps:<name>`       | each MPS daemon's last answer     |
| `cdi`         | `CdiWrite`        | `cdi`              | the node's CDI spec files         |
| `resources`   | `ResourceServers` | `resource:<name>`  | each device-plugin server         |
| `dra-plugin`  | `DraPlugin`       | `dra:<driver>`     | the DRA kubelet plugin's sockets  |
| `slices`      | `Slices`          | `dra:slices`       | the node's ResourceSlices         |
| `cdi-prune`   | `CdiPrune`        | `cdi`              | names no published list uses      |

Each implements `Actuator`: `pending(desired)` is a cheap, in-memory "what I
hold differs from what is wanted", `converge(desired)` does the work and
returns an `Outcome` per key it attempted, `status()` is what `/state` shows.
A key is attempted only when it is pending and, if failing, once it is due
on its own backoff or something else is wanted of it (`Retries.may_attempt`),
so a pass with nothing to do does nothing and reports nothing, and one
failing key never sets the pace of another's retries.

Order is data. `ORDER` lists the steps; names go on disk before a list that
uses them is published, and come off only after (CDI first, prune last).
`SERVES_AFTER` says which step serves only once another holds nothing: a GPU
is served through one kubelet API at a time, so the device-plugin servers
wait until the node's slices are withdrawn, and the slices wait until no
device-plugin resource is served. A step that must wait is run again at the
end of the same pass, once the step it waits for has converged, so a node
moving between the two APIs moves in one pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from devices.library import DeviceLibrary
from foundation.errors import PluginError
from foundation.outcome import Change, Key, Kind, Outcome, Retries
from reconciler.actuators.cdi import CdiSpecs
from reconciler.actuators.dra import DraSide
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.health import HealthMonitor
from reconciler.actuators.mps_gate import MpsGate, MpsProbes, probes_due
from reconciler.plan.desired import Desired, ResourceIntent
from resources.allocation import Allocator
from resources.model import PluginDevice
from resources.responses import referenced_cdi_names

HEALTH = Key(Kind.HEALTH)
CDI = Key(Kind.CDI)


class Actuator(Protocol):
    """One piece of the node, converged towards the desired state by difference.

    `kind` is the kind of the keys it settles (one key, or one per resource).
    """

    @property
    def kind(self) -> Kind: ...

    def pending(self, desired: Desired) -> bool:
        """Whether what it holds differs from what `desired` asks (cheap, in memory)."""
        ...

    async def converge(self, desired: Desired) -> list[Outcome]:
        """Do what is pending and due; an outcome per key attempted."""
        ...

    def serves(self, desired: Desired) -> bool:
        """Whether `desired` asks it to serve anything (for `SERVES_AFTER`)."""
        ...

    def holds_nothing(self) -> bool:
        """Whether it serves nothing now (for `SERVES_AFTER`)."""
        ...

    def status(self) -> object:
        """What it holds now, as a frozen value."""
        ...


@dataclass(frozen=True)
class Step:
    name: str


ORDER: tuple[Step, ...] = (
    Step("health"),
    Step("mps"),
    Step("cdi"),
    Step("resources"),
    Step("dra-plugin"),
    Step("slices"),
    Step("cdi-prune"),
)
# step -> the step that must hold nothing before it serves anything.
SERVES_AFTER: dict[str, str] = {"resources": "slices", "slices": "resources"}


class Single:
    """An actuator with one key: attempted when pending and due on that key's backoff."""

    key: Key

    def __init__(self, retries: Retries) -> None:
        self.retries = retries

    @property
    def kind(self) -> Kind:
        return self.key.kind

    def pending(self, desired: Desired) -> bool:
        return self.wanted(desired) is not _NOTHING and self.retries.may_attempt(
            self.key, self.wanted(desired)
        )

    def wanted(self, desired: Desired) -> Hashable:
        """What is wanted of the key now, or `_NOTHING` when it holds that already."""
        raise NotImplementedError

    async def converge(self, desired: Desired) -> list[Outcome]:
        wanted = self.wanted(desired)
        done = await self.attempt(desired)
        for outcome in done:
            self.retries.settle(outcome, wanted)
        return done

    async def attempt(self, desired: Desired) -> list[Outcome]:
        raise NotImplementedError

    def serves(self, desired: Desired) -> bool:
        return False

    def holds_nothing(self) -> bool:
        return True


_NOTHING: Hashable = object()


class HealthFollower(Single):
    """The health source follows the inventory and the policy the config asks for."""

    key = HEALTH

    def __init__(self, retries: Retries, health: HealthMonitor | None, library: LibraryRef) -> None:
        super().__init__(retries)
        self.health = health
        self.library = library

    def wanted(self, desired: Desired) -> Hashable:
        health, library = self.health, self.library.current
        if health is None or library is None:
            return _NOTHING
        if health.follows(library, desired.inventory, desired.config):
            return _NOTHING
        return health.source_key(library, desired.inventory, desired.config)

    def status(self) -> object:
        return None if self.health is None else self.health.status()

    async def attempt(self, desired: Desired) -> list[Outcome]:
        health, library = self.health, self.library.current
        assert health is not None
        assert library is not None
        try:
            await health.follow(library, desired.inventory, desired.config)
        except PluginError as err:
            return [Outcome(Kind.HEALTH, error=err)]
        return [Outcome(Kind.HEALTH, changes=frozenset({Change.FOLLOWED}))]


class MpsDaemons:
    """The MPS gate's probes: each MPS-shared resource's daemon asked when it is due.

    A probe runs the control program and can take seconds, so converging
    starts a round in a task of its own (`MpsProbes`) and returns at once;
    the answers come back through the `MPS` hint, which admits or withdraws
    each resource at the gate (`MpsGate`) and settles its key. A resource is
    due when never asked for its current limits, when its daemon answered a
    while ago (liveness), or when its failing key is due on its backoff.
    """

    kind = Kind.MPS

    def __init__(self, retries: Retries, gate: MpsGate, probes: MpsProbes | None) -> None:
        self.retries = retries
        self.gate = gate
        self.probes = probes

    def _due(self, desired: Desired) -> list[ResourceIntent]:
        if self.probes is None or self.probes.running or not desired.needs_mps:
            return []
        return probes_due(desired, self.gate, self.retries, time.monotonic())[0]

    def pending(self, desired: Desired) -> bool:
        return bool(self._due(desired))

    async def converge(self, desired: Desired) -> list[Outcome]:
        due = self._due(desired)
        if due and self.probes is not None:
            self.probes.start(Path(desired.config.flags.mps_container_root), due)
        return []  # the answers are outcomes of the `MPS` hint that brings them

    def serves(self, desired: Desired) -> bool:
        return False

    def holds_nothing(self) -> bool:
        return True

    def status(self) -> object:
        return self.gate.admitted_names()


class LibraryRef:
    """The device library the intake holds now (read at each pass)."""

    def __init__(self) -> None:
        self.current: DeviceLibrary | None = None


class ResourceServers:
    """Each device-plugin resource's server, converged on its own key (`resource:<name>`).

    A resource whose CDI names are not all on disk yet, or whose MPS daemon
    has not answered for its current key, is held (it keeps what it serves;
    a new one is not started), and a resource whose daemon never answered,
    or stopped answering, is not served.
    """

    kind = Kind.RESOURCE

    def __init__(
        self,
        retries: Retries,
        fleet: PluginFleet,
        health: HealthMonitor | None,
        cdi: CdiSpecs,
        mps: MpsGate,
    ) -> None:
        self.retries = retries
        self.fleet = fleet
        self.health = health
        self.cdi = cdi
        self.mps = mps
        # Shows the servers on `/state` before a kubelet can have their first list.
        self.on_first_registration: Callable[[], None] = lambda: None

    def view(self, devices: tuple[PluginDevice, ...]) -> tuple[PluginDevice, ...]:
        """A device list as the kubelet should see it now: with current health."""
        return devices if self.health is None else self.health.devices(devices)

    def names_in_use(self) -> frozenset[str]:
        """CDI names that the servers' current answers can contain."""
        return frozenset().union(
            *(
                referenced_cdi_names(a.resource.devices, a.resource.behaviour)
                for a in self.fleet.allocators().values()
            )
        )

    def split(self, desired: Desired) -> tuple[dict[str, Allocator], set[str]]:
        """What to serve, and which of those to hold as they are for now."""
        on_disk = self.cdi.names()
        served: dict[str, Allocator] = {}
        hold: set[str] = set()
        for name, intent in desired.resources.items():
            if intent.mps_key is not None and not self.mps.admitted(name):
                continue  # served only once its own daemon has answered
            if not intent.cdi_names <= on_disk or not self.mps.admits(intent):
                hold.add(name)
            served[name] = intent.allocator
        return served, hold

    def _due(self, desired: Desired) -> tuple[dict[str, Allocator | None], dict[str, object]]:
        served, hold = self.split(desired)
        targets = self.fleet.targets(served, hold)
        kubelet = self.fleet.kubelet.look()
        chosen: dict[str, Allocator | None] = {}
        wanted: dict[str, object] = {}
        for name, target in targets.items():
            want = None
            if target is not None:
                resource = target.resource
                devices = self.view(resource.devices)
                want = (resource.behaviour_digest, resource.devices_digest, devices, kubelet)
            if self.fleet.pending(name, target, self.view, kubelet) and self.retries.may_attempt(
                Key(Kind.RESOURCE, name), want
            ):
                chosen[name], wanted[name] = target, want
        self.retries.retain(lambda key: key.kind is not Kind.RESOURCE or key.name in targets)
        return chosen, wanted

    def pending(self, desired: Desired) -> bool:
        return bool(self._due(desired)[0])

    async def converge(self, desired: Desired) -> list[Outcome]:
        chosen, wanted = self._due(desired)
        results = await self.fleet.converge(chosen, self.view, self.on_first_registration)
        for result in results:
            self.retries.settle(result, wanted.get(result.name))
        return results

    def serves(self, desired: Desired) -> bool:
        return bool(desired.resources)

    def holds_nothing(self) -> bool:
        return not self.fleet.names

    def status(self) -> object:
        return self.fleet.status()


class CdiWrite(Single):
    """The desired specs on disk, keeping every name a published list still uses (names first)."""

    key = CDI

    def __init__(self, retries: Retries, cdi: CdiSpecs, servers: ResourceServers) -> None:
        super().__init__(retries)
        self.cdi = cdi
        self.servers = servers

    def wanted(self, desired: Desired) -> Hashable:
        directory = desired.config.flags.cdi_spec_dir
        in_use = self.servers.names_in_use()
        if not self.cdi.pending(directory, desired.cdi, in_use):
            return _NOTHING
        return (directory, desired.cdi, in_use)

    def status(self) -> object:
        return self.cdi.held()

    async def attempt(self, desired: Desired) -> list[Outcome]:
        directory = desired.config.flags.cdi_spec_dir
        in_use = self.servers.names_in_use()
        # The files are written in a thread; what was written is applied here, on the loop.
        written = await asyncio.to_thread(self.cdi.write, directory, desired.cdi, in_use)
        return [self.cdi.apply(written)]


class CdiPrune(CdiWrite):
    """Names the servers no longer use come off disk, once no published list refers to them.

    Not after a failed write this pass: the write is retried first, on its backoff.
    """

    def wanted(self, desired: Desired) -> Hashable:
        if self.retries.attempts(CDI):
            return _NOTHING
        return super().wanted(desired)


class Actuators:
    """Owns the node's actuators and runs them in `ORDER`.

    `retries` is the loop's per-key schedule; each actuator settles the keys
    it attempts.
    """

    def __init__(
        self,
        *,
        fleet: PluginFleet,
        health: HealthMonitor | None,
        retries: Retries,
        dra: DraSide | None = None,
        probes: MpsProbes | None = None,
    ) -> None:
        self.health = health
        self.retries = retries
        self.cdi = CdiSpecs()
        self.mps = MpsGate()
        self.fleet = fleet
        self.dra = dra
        self.library = LibraryRef()
        self.servers = ResourceServers(retries, fleet, health, self.cdi, self.mps)
        steps: dict[str, Actuator] = {
            "health": HealthFollower(retries, health, self.library),
            "mps": MpsDaemons(retries, self.mps, probes),
            "cdi": CdiWrite(retries, self.cdi, self.servers),
            "resources": self.servers,
            "cdi-prune": CdiPrune(retries, self.cdi, self.servers),
        }
        if dra is not None:
            steps["dra-plugin"] = dra.plugin_actuator(retries, health)
            steps["slices"] = dra.slices_actuator(retries, health)
        self.steps = steps

    def view(self, devices: tuple[PluginDevice, ...]) -> tuple[PluginDevice, ...]:
        return self.servers.view(devices)

    def names_in_use(self) -> frozenset[str]:
        return self.servers.names_in_use()

    def split(self, desired: Desired) -> tuple[dict[str, Allocator], set[str]]:
        return self.servers.split(desired)

    def mps_waiting(self, desired: Desired | None) -> list[str]:
        """Wanted MPS resources whose daemon has not answered for their current key."""
        if desired is None:
            return []
        return self.mps.waiting(desired.resources[name] for name in desired.mps_resources)

    def pending(self, desired: Desired) -> list[str]:
        """The steps with something to do now (for tests and `/state`)."""
        return [step.name for step in ORDER if self._pending(step.name, desired)]

    def _pending(self, name: str, desired: Desired) -> bool:
        actuator = self.steps.get(name)
        return actuator is not None and actuator.pending(desired)

    def _must_wait(self, name: str, desired: Desired) -> bool:
        other = SERVES_AFTER.get(name)
        actuator, blocker = self.steps.get(name), self.steps.get(other or "")
        if actuator is None or blocker is None:
            return False
        return actuator.serves(desired) and not blocker.holds_nothing()

    async def converge(self, desired: Desired, library: DeviceLibrary | None) -> list[Outcome]:
        """One pass towards `desired`: every step in `ORDER`; an outcome for each key attempted."""
        self.library.current = library
        if self.dra is not None:
            self.dra.plan = desired.dra
        self.mps.forget_others(desired.resources)
        mps = set(desired.mps_resources)
        self.retries.retain(lambda key: key.kind is not Kind.MPS or key.name in mps)
        outcomes: list[Outcome] = []
        waiting: list[str] = []
        for step in ORDER:
            if self._must_wait(step.name, desired):
                waiting.append(step.name)
            else:
                outcomes += await self._run(step.name, desired)
        for name in waiting:  # the step it waited for has had its turn: once more
            if not self._must_wait(name, desired):
                outcomes += await self._run(name, desired)
        return outcomes

    async def _run(self, name: str, desired: Desired) -> list[Outcome]:
        actuator = self.steps.get(name)
        if actuator is None or not actuator.pending(desired):
            return []
        return await actuator.converge(desired)

    async def close(self) -> None:
        if self.health is not None:
            await self.health.stop()
        await self.fleet.stop_all()
        if self.dra is not None:
            await self.dra.close()
