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

from collections.abc import Callable

from devices.library import DeviceLibrary
from foundation.outcome import Kind, Outcome, Retries
from reconciler.actuators.cdi import CdiPrune, CdiSpecs, CdiWrite
from reconciler.actuators.dra import DraSide
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.health import HealthFollower, HealthMonitor
from reconciler.actuators.mps_gate import MpsDaemons, MpsGate, MpsProbes
from reconciler.actuators.protocol import Actuator
from reconciler.actuators.servers import ResourceServers
from reconciler.plan.desired import Desired

ORDER: tuple[str, ...] = (
    "health",
    "mps",
    "cdi",
    "resources",
    "dra-plugin",
    "slices",
    "cdi-prune",
)
# step -> the step that must hold nothing before it serves anything.
SERVES_AFTER: dict[str, str] = {"resources": "slices", "slices": "resources"}


class Actuators:
    """Owns the node's actuators and runs them in `ORDER`.

    `retries` is the loop's per-key schedule; each actuator settles the keys
    it attempts. `library` is the device library the health source follows
    (the intake's, as last read).
    """

    def __init__(
        self,
        *,
        fleet: PluginFleet,
        health: HealthMonitor | None,
        retries: Retries,
        dra: DraSide | None = None,
        probes: MpsProbes | None = None,
        library: Callable[[], DeviceLibrary | None] = lambda: None,
    ) -> None:
        self.health = health
        self.retries = retries
        self.cdi = CdiSpecs()
        self.mps = MpsGate()
        self.fleet = fleet
        self.dra = dra
        self.servers = ResourceServers(retries, fleet, health, self.cdi, self.mps)
        steps: dict[str, Actuator] = {
            "health": HealthFollower(retries, health, library),
            "mps": MpsDaemons(retries, self.mps, probes),
            "cdi": CdiWrite(retries, self.cdi, self.servers.names_in_use),
            "resources": self.servers,
            "cdi-prune": CdiPrune(retries, self.cdi, self.servers.names_in_use),
        }
        if dra is not None:
            dra.library = library
            steps["dra-plugin"] = dra.plugin_actuator(retries, health)
            steps["slices"] = dra.slices_actuator(retries, health)
        self.steps = steps

    def mps_waiting(self, desired: Desired | None) -> list[str]:
        """Wanted MPS resources whose daemon has not answered for their current key."""
        if desired is None:
            return []
        return self.mps.waiting(desired.resources[name] for name in desired.mps_resources)

    def _must_wait(self, name: str, desired: Desired) -> bool:
        other = SERVES_AFTER.get(name)
        actuator, blocker = self.steps.get(name), self.steps.get(other or "")
        if actuator is None or blocker is None:
            return False
        return actuator.serves(desired) and not blocker.holds_nothing()

    async def converge(self, desired: Desired) -> list[Outcome]:
        """One pass towards `desired`: every step in `ORDER`; an outcome for each key attempted."""
        self.mps.forget_others(desired.resources)
        mps = set(desired.mps_resources)
        self.retries.retain(lambda key: key.kind is not Kind.MPS or key.name in mps)
        outcomes: list[Outcome] = []
        waiting: list[str] = []
        for name in ORDER:
            if self._must_wait(name, desired):
                waiting.append(name)
            else:
                outcomes += await self._run(name, desired)
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
