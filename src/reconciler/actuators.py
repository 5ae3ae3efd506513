"""The node's actuators, converged in the order that keeps bad states impossible.

One pass, whatever caused it:

1. the health source follows the inventory and policy;
2. CDI specs are written for the desired state, keeping every name a
   published list still uses (names first);
3. each resource server converges on its own: a resource whose CDI names are
   not all on disk yet, or whose MPS daemon has not answered for its current
   key, is held (it keeps what it serves; a new one is not started), and a
   resource whose daemon never answered, or stopped answering, is not served;
4. names no published list uses any more are pruned (unused names last).

Each actuator reports an `Outcome` under its own key, and only when it was
attempted: a key is attempted when what it holds differs from what is wanted
(each actuator's own cheap `pending` check: in memory, a stat per file or
socket) and, if it is failing, once it is due on its own backoff or
something else is wanted of it (`Retries.may_attempt`). So a pass with
nothing to do does nothing, and reports nothing.
"""

from __future__ import annotations

import asyncio

from devices.library import DeviceLibrary
from foundation.errors import PluginError
from foundation.outcome import Change, Key, Kind, Outcome, Retries
from kubelet.fleet import PluginFleet
from reconciler.cdi import CdiSpecs
from reconciler.desired import Desired
from reconciler.dra import DraSide
from reconciler.health import HealthMonitor
from reconciler.mps_gate import MpsGate
from resources.allocation import Allocator
from resources.model import PluginDevice
from resources.responses import referenced_cdi_names
from settings import KubeletApi

HEALTH = Key(Kind.HEALTH)
CDI = Key(Kind.CDI)


class Actuators:
    """Owns the node's actuators: the health source, the CDI spec files, the resource servers.

    Also owns the MPS gate (which resources' daemons answered) that decides
    which resources are served or held. `retries` is the loop's per-key
    schedule; this class settles the keys it attempts.
    """

    def __init__(
        self,
        *,
        fleet: PluginFleet,
        health: HealthMonitor | None,
        retries: Retries,
        dra: DraSide | None = None,
    ) -> None:
        self.health = health
        self.retries = retries
        self.cdi = CdiSpecs()
        self.mps = MpsGate()
        self.fleet = fleet
        self.dra = dra

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
        if _dra_mode(desired) or (self.dra is not None and not self.dra.withdrawn):
            return {}, set()  # one API at a time: DRA's, or its slices are still out
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

    def mps_waiting(self, desired: Desired | None) -> list[str]:
        """Wanted MPS resources whose daemon has not answered for their current key."""
        if desired is None:
            return []
        return self.mps.waiting(desired.resources[name] for name in desired.mps_resources)

    async def converge(self, desired: Desired, library: DeviceLibrary | None) -> list[Outcome]:
        """One pass towards `desired`; an outcome for each key attempted."""
        outcomes = await self._follow_health(desired, library)
        fleet = self.fleet
        directory = desired.config.flags.cdi_spec_dir
        in_use = self.names_in_use()
        written: Outcome | None = None
        wanted = (directory, desired.cdi, in_use)
        if self.cdi.pending(directory, desired.cdi, in_use) and self.retries.may_attempt(
            CDI, wanted
        ):
            written = await asyncio.to_thread(self.cdi.converge, directory, desired.cdi, in_use)
        self.mps.forget_others(desired.resources)
        mps = set(desired.mps_resources)
        self.retries.retain(lambda key: key.kind is not Kind.MPS or key.name in mps)
        # One API at a time: what leaves goes before what comes.
        if not _dra_mode(desired):
            outcomes += await self._converge_dra(desired)
        outcomes += await self._converge_servers(fleet, desired)
        if _dra_mode(desired):
            outcomes += await self._converge_dra(desired)
        # Names the servers no longer use can go now; with the same names in
        # use, a second write would read back what the first just wrote.
        still_in_use = self.names_in_use()
        if still_in_use != in_use and (written is None or written.converged):
            wanted = (directory, desired.cdi, still_in_use)
            if self.retries.may_attempt(CDI, wanted):
                pruned = await asyncio.to_thread(
                    self.cdi.converge, directory, desired.cdi, still_in_use
                )
                written = pruned if written is None else _merged(written, pruned)
        if written is not None:
            self.retries.settle(written, wanted)
            outcomes.append(written)
        return outcomes

    async def _follow_health(
        self, desired: Desired, library: DeviceLibrary | None
    ) -> list[Outcome]:
        health = self.health
        if health is None or library is None:
            return []
        if health.follows(library, desired.inventory, desired.config):
            return []
        wanted = health.source_key(library, desired.inventory, desired.config)
        if not self.retries.may_attempt(HEALTH, wanted):
            return []
        try:
            await health.follow(library, desired.inventory, desired.config)
        except PluginError as err:
            done = Outcome(Kind.HEALTH, error=err)
        else:
            done = Outcome(Kind.HEALTH, changes=frozenset({Change.FOLLOWED}))
        self.retries.settle(done, wanted)
        return [done]

    async def _converge_servers(self, fleet: PluginFleet, desired: Desired) -> list[Outcome]:
        served, hold = self.split(desired)
        targets = fleet.targets(served, hold)
        kubelet = fleet.kubelet.look()
        chosen: dict[str, Allocator | None] = {}
        wanted: dict[str, object] = {}
        for name, target in targets.items():
            want = None
            if target is not None:
                resource = target.resource
                devices = self.view(resource.devices)
                want = (resource.behaviour_digest, resource.devices_digest, devices, kubelet)
            if fleet.pending(name, target, self.view, kubelet) and self.retries.may_attempt(
                Key(Kind.RESOURCE, name), want
            ):
                chosen[name], wanted[name] = target, want
        results = await fleet.converge(chosen, self.view)
        for result in results:
            self.retries.settle(result, wanted.get(result.name))
        self.retries.retain(lambda key: key.kind is not Kind.RESOURCE or key.name in targets)
        return results

    async def _converge_dra(self, desired: Desired) -> list[Outcome]:
        dra = self.dra
        if dra is None:
            return []
        if _dra_mode(desired):
            view = None if self.health is None else self.health.status()
            results = await dra.serve(desired, view)
        else:
            results = await dra.withdraw()
        for result in results:
            self.retries.settle(result)
        return results

    async def close(self) -> None:
        if self.health is not None:
            await self.health.stop()
        await self.fleet.stop_all()
        if self.dra is not None:
            await self.dra.close()


def _dra_mode(desired: Desired) -> bool:
    return desired.config.flags.kubelet_api is KubeletApi.DRA


def _merged(first: Outcome, then: Outcome) -> Outcome:
    """One CDI outcome for a write followed by a prune."""
    return Outcome(Kind.CDI, "", first.changes | then.changes, then.error, first.files + then.files)
