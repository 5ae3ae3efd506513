"""The device-plugin resources as one actuator: each resource's server, on its own key.

The fleet (`actuators.fleet`) starts, stops, restarts and updates servers;
this decides what each should serve now: a resource whose CDI names are not
all on disk yet, or whose MPS daemon has not answered for its current key,
is held (it keeps what it serves; a new one is not started), and a resource
whose daemon never answered, or stopped answering, is not served. Each
resource is attempted only when it has something to do and, if failing,
once it is due on its own backoff.
"""

from __future__ import annotations

from collections.abc import Callable

from foundation.outcome import Key, Kind, Outcome, Retries
from reconciler.actuators.cdi import CdiSpecs
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.health import HealthMonitor
from reconciler.actuators.mps_gate import MpsGate
from reconciler.plan.desired import Desired
from resources.allocation import Allocator
from resources.model import PluginDevice
from resources.responses import referenced_cdi_names


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
