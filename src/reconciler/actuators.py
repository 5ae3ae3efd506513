"""The node's actuators, converged towards a plan in the order that keeps bad states impossible.

One pass, whatever caused it:

1. the health source follows the plan's inventory and policy;
2. CDI specs are written for the plan, keeping every name a published list
   still uses (names first);
3. each resource server converges on its own: a resource whose CDI names are
   not all on disk yet, or whose MPS daemon has not answered for its current
   key, is held (it keeps what it serves; a new one is not started), and a
   resource whose daemon never answered, or stopped answering, is not served;
4. names no published list uses any more are pruned (unused names last).

Each step reports `Outcome`s under its own key; none is assumed to have
worked. `pending()` is the cheap "would a pass do anything?" used to ignore
watch events that change nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from foundation.errors import PluginError
from foundation.outcome import Outcome
from kubelet.fleet import PluginFleet
from reconciler.cdi import KEY as CDI_KEY
from reconciler.cdi import CdiSpecs
from reconciler.health import HealthMonitor
from reconciler.mps_gate import MpsGate
from reconciler.node import NodeDevices
from reconciler.plan import Plan
from resources.allocation import Allocator
from resources.model import PluginDevice
from resources.responses import referenced_cdi_names
from settings import EffectiveConfig

HEALTH_KEY = "health"


class Actuators:
    def __init__(
        self,
        *,
        make_fleet: Callable[[EffectiveConfig], PluginFleet],
        node: NodeDevices,
        health: HealthMonitor | None,
    ) -> None:
        self._make_fleet = make_fleet
        self._node = node
        self.health = health
        self.cdi = CdiSpecs()
        self.mps = MpsGate()
        self.fleet: PluginFleet | None = None

    def view(self, devices: tuple[PluginDevice, ...]) -> tuple[PluginDevice, ...]:
        """A device list as the kubelet should see it now: with current health."""
        return devices if self.health is None else self.health.devices(devices)

    def names_in_use(self) -> frozenset[str]:
        """CDI names that the servers' current answers can contain."""
        if self.fleet is None:
            return frozenset()
        return frozenset().union(
            *(
                referenced_cdi_names(a.resource.devices, a.resource.behaviour)
                for a in self.fleet.allocators().values()
            )
        )

    def split(self, plan: Plan) -> tuple[dict[str, Allocator], set[str]]:
        """What to serve, and which of those to hold as they are for now."""
        on_disk = self.cdi.names()
        served: dict[str, Allocator] = {}
        hold: set[str] = set()
        for name, intent in plan.resources.items():
            if intent.mps_key is not None and not self.mps.admitted(name):
                continue  # served only once its own daemon has answered
            if not intent.cdi_names <= on_disk or not self.mps.admits(intent):
                hold.add(name)
            served[name] = intent.allocator
        return served, hold

    def mps_waiting(self, plan: Plan) -> list[str]:
        """MPS resources whose daemon has not answered for their current key."""
        return [n for n, i in plan.resources.items() if i.mps_key and not self.mps.admits(i)]

    def pending(self, plan: Plan) -> bool:
        """Whether a pass towards `plan` would change anything (in memory, a stat per socket)."""
        fleet = self.fleet
        if fleet is None or str(fleet.kubelet_socket) != plan.config.flags.kubelet_socket:
            return True
        directory = plan.config.flags.cdi_spec_dir
        if self.cdi.pending(directory, plan.cdi, self.names_in_use()):
            return True
        served, hold = self.split(plan)
        return fleet.pending(served, self.view, hold=hold)

    async def _fleet_for(self, config: EffectiveConfig) -> PluginFleet:
        fleet = self.fleet
        if fleet is None or str(fleet.kubelet_socket) != config.flags.kubelet_socket:
            if fleet is not None:
                await fleet.stop_all()  # its sockets live in a directory we no longer serve
            fleet = self.fleet = self._make_fleet(config)
        return fleet

    async def _follow_health(self, plan: Plan) -> Outcome:
        health, library = self.health, self._node.library
        if health is None or library is None:
            return Outcome.done(HEALTH_KEY)
        try:
            await health.follow(library, plan.inventory, plan.config)
        except PluginError as err:
            return Outcome.failed(HEALTH_KEY, err)
        return Outcome.done(HEALTH_KEY)

    async def converge(self, plan: Plan, *, read_back: bool = True) -> list[Outcome]:
        """One pass towards `plan`.

        `read_back=False` (health and kubelet passes, which do not change the
        plan) skips reading the CDI files back when nothing about them is
        pending in memory: a health event must not cost file I/O.
        """
        outcomes = [await self._follow_health(plan)]
        fleet = await self._fleet_for(plan.config)
        directory = plan.config.flags.cdi_spec_dir
        in_use = self.names_in_use()
        if read_back or self.cdi.pending(directory, plan.cdi, in_use):
            written = await asyncio.to_thread(self.cdi.converge, directory, plan.cdi, in_use)
        else:
            written = Outcome.done(CDI_KEY)
        self.mps.forget_others(set(plan.resources))
        served, hold = self.split(plan)
        outcomes += await fleet.converge(served, self.view, hold=hold)
        # Names the servers no longer use can go now; with the same names in
        # use, a second pass would read back what the first just wrote.
        still_in_use = self.names_in_use()
        if written.converged and still_in_use != in_use:
            pruned = await asyncio.to_thread(
                self.cdi.converge, directory, plan.cdi, still_in_use
            )
            written = Outcome(
                written.key, pruned.converged, pruned.error, written.changed + pruned.changed
            )
        outcomes.append(written)
        return outcomes

    async def close(self) -> None:
        if self.health is not None:
            await self.health.stop()
        if self.fleet is not None:
            await self.fleet.stop_all()
