"""DRA mode as actuators of the same desired state: the kubelet plugin and the node's slices.

With `--kubelet-api dra` (or the per-node config selected by the node label)
the node's GPUs are served through Dynamic Resource Allocation instead of the
device-plugin API, from the same desired state and health:

- the ResourceSlices (`resources.dra_slices`, published by difference by
  `kube.resource_slices.SlicePublisher` in its own thread), with a taint on
  each device the health machine holds unhealthy (cordoned devices too);
- the DRA kubelet plugin (`kubelet.dra.server.DraPluginServer`): its
  registration and DRAPlugin sockets, and the `ClaimPreparer` behind them,
  which reads the `Catalog` this module keeps current.

A GPU is served through one API at a time. Moving to DRA, the device-plugin
servers are stopped (with an empty list announced) before any slice is
published; moving back, the slices are withdrawn, and the device-plugin
servers wait until the API server confirms it. The plugin sockets stay up (and
are served again when deleted) as long as a claim prepared through them has
not been unprepared: the kubelet must be able to unprepare what runs, whatever
the node moved to.

Some of this moves outside a pass: the publisher's thread lands or fails a
wish, a socket is deleted underneath (seen by the DRA socket watch,
`sources.dra_dir`), the kubelet unprepares the last claim. The loop hears of
it through its `DRA` hint and asks `sockets_disturbed()` and `out_of_step()`
whether a pass has something to do or to record, so a landing is recorded
(and the device plugin serves again) when it happens, not when the failing
key's backoff next comes due.

The Kubernetes client, the DRA gRPC services and their stubs, the claim
preparer and the slice builder are imported only once a node is in DRA mode,
so a device-plugin node's start-up never pays for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loguru import logger

from foundation.errors import PluginError, TransientError
from foundation.outcome import Change, Kind, Outcome
from kube.configured import api_configured
from reconciler.desired import Desired
from settings import EffectiveConfig
from states.health_status import HealthView

if TYPE_CHECKING:
    from kube.resource_slices import SlicePublisher, SliceState
    from kubelet.dra.prepare import Catalog, ClaimPreparer
    from kubelet.dra.server import DraPluginServer
    from resources.dra_slices import DeviceHealthView, SliceDevice

# How long a move back to the device-plugin API waits, in a pass, for the API
# server to confirm the slices are gone before it reports the step pending.
WITHDRAW_WAIT_SECONDS = 2.0
CHECKPOINT = "checkpoint.json"
SLICES = "slices"  # the outcome name of the node's ResourceSlices
_NO_API = "DRA mode needs Kubernetes API access (in a cluster, or KUBECONFIG)"


class DraUnavailable(TransientError):
    """DRA mode cannot run here as configured (no node name, no API access)."""


@dataclass(frozen=True)
class DraStatus:
    """What `/state` shows of DRA mode."""

    serving: bool  # the desired state asks for DRA
    driver: str
    registration_socket: str | None
    plugin_socket: str | None
    kubelet_registered: bool | None
    kubelet_error: str
    slices: SliceState | None
    prepared_claims: int
    problem: str | None  # why DRA cannot run, or a checkpoint set aside
    devices: tuple[SliceDevice, ...] = ()  # as published, taints included

    def to_json(self, health: HealthView | None = None) -> dict[str, object]:
        """The `dra` section of `/state`; `health` adds each device's reason, as resources show."""
        slices = self.slices
        return {
            "serving": self.serving,
            "driver": self.driver,
            "registration_socket": self.registration_socket,
            "plugin_socket": self.plugin_socket,
            "kubelet_registered": self.kubelet_registered,
            "kubelet_error": self.kubelet_error or None,
            "slices": None
            if slices is None
            else {
                "goal": slices.goal.name.lower(),
                "converged": slices.converged,
                "generation": slices.generation,
                "count": slices.slices,
                "devices": slices.devices,
                "error": slices.error or None,
            },
            "prepared_claims": self.prepared_claims,
            "problem": self.problem,
            "devices": [_device_json(device, health) for device in self.devices],
        }


def _device_json(device: SliceDevice, health: HealthView | None) -> dict[str, object]:
    reason, since = (None, None) if health is None else health.reason_of(
        device.uuid, device.parent_uuid
    )  # fmt: skip
    return {
        "name": device.name,
        "uuid": device.uuid,
        # A device is offered untainted exactly when the kubelet would see it Healthy.
        "health": "Unhealthy" if device.taints else "Healthy",
        "reason": reason,
        "since": since,
        "unmonitored": None if health is None else health.unmonitored_of(device.uuid),
        "taints": [taint.to_json() for taint in device.taints],
    }


def unhealthy(view: HealthView | None) -> DeviceHealthView:
    """uuid -> (why, since) for every device the kubelet would see Unhealthy."""
    if view is None:
        return {}
    return {
        uuid: (status.reason or "unhealthy", status.since)
        for uuid, status in view.devices.items()
        if str(status.kubelet_health) != "Healthy"
    }


class DraSide:
    """Owns DRA mode's actuators: the kubelet plugin, the node's slices and the claim catalog."""

    def __init__(
        self, *, boot: EffectiveConfig, env: Mapping[str, str], notify: Callable[[], None]
    ) -> None:
        flags = boot.flags
        self._driver = flags.dra_driver_name
        self._node = flags.node_name
        self._registrar = Path(flags.kubelet_registrar_directory_path)
        self._plugins = Path(flags.kubelet_plugins_directory_path)
        self._cdi_dir = Path(flags.cdi_spec_dir)
        self._env = env
        self._notify = notify  # from the publisher's thread: something changed
        self._catalog: Catalog | None = None
        self._serving = False
        self._server: DraPluginServer | None = None
        self._preparer: ClaimPreparer | None = None
        self._publisher: SlicePublisher | None = None
        self._problem: str | None = None
        self._devices: tuple[SliceDevice, ...] = ()

    # -- what the pass calls -----------------------------------------------------

    async def serve(self, desired: Desired, health: HealthView | None) -> list[Outcome]:
        """Publish the node's slices and serve the kubelet plugin (DRA mode)."""
        self._serving = True
        try:
            if self._publisher is not None and self._server is not None:
                publisher, server = self._publisher, self._server
            else:
                # In a thread: importing the client takes a second or more, and
                # the kubeconfig and the checkpoint are read from disk; the loop
                # answers probes and the kubelet meanwhile.
                publisher, server = await asyncio.to_thread(self._open)
        except PluginError as err:
            self._problem = str(err)
            return [Outcome(Kind.DRA, self._driver, error=err)]
        self._problem = self._preparer.problem if self._preparer is not None else None
        from kubelet.dra.prepare import Catalog, DraDevice
        from resources.dra_slices import pack, slice_devices

        view = unhealthy(health)
        devices = slice_devices(desired.inventory, desired.options.mig_strategy, view)
        self._devices = tuple(devices)
        self._catalog = Catalog(
            pool=self._node,
            devices={
                d.name: DraDevice(d.name, d.uuid, view[d.uuid][0] if d.uuid in view else None)
                for d in devices
            },
            inventory=desired.inventory,
            options=desired.options,
        )
        slices = pack(devices, driver=self._driver, node=self._node, pool_generation=0)
        publisher.publish(slices)
        served = await server.converge(self._driver, self._registrar, self._plugins)
        return [served, self._slices_outcome(publisher.state())]

    async def withdraw(self) -> list[Outcome]:
        """Take DRA back (device-plugin mode): the slices first, the sockets once idle.

        The outcome stays pending until the API server confirms the slices are
        gone, and the device-plugin servers wait for it.
        """
        was_serving, self._serving = self._serving, False
        self._catalog = None
        self._devices = ()
        publisher = self._publisher
        outcomes: list[Outcome] = []
        if publisher is not None:
            publisher.withdraw()
            done = await asyncio.to_thread(publisher.wait_converged, WITHDRAW_WAIT_SECONDS)
            if not done:
                error = TransientError(
                    "withdrawing this node's ResourceSlices: "
                    + (publisher.state().error or "the API server has not confirmed it yet")
                )
                outcomes.append(Outcome(Kind.DRA, SLICES, error=error))
            else:
                # Reported even when there was nothing to stop: it settles a
                # withdrawal an earlier pass could not confirm.
                stopped = frozenset({Change.STOPPED}) if was_serving else frozenset()
                outcomes.append(Outcome(Kind.DRA, SLICES, stopped))
        server = self._server
        if server is not None and server.running:
            if self.claims_prepared:
                # Still the kubelet's way to unprepare them: repaired as in DRA mode.
                outcomes.append(await server.converge(self._driver, self._registrar, self._plugins))
            else:
                await server.stop()
                outcomes.append(Outcome(Kind.DRA, self._driver, frozenset({Change.STOPPED})))
        return outcomes

    @property
    def claims_prepared(self) -> int:
        return 0 if self._preparer is None else len(self._preparer.prepared)

    @property
    def withdrawn(self) -> bool:
        """No slice of ours is published (or it is not confirmed yet): device plugin may serve."""
        publisher = self._publisher
        if publisher is None:
            return True
        state = publisher.state()
        return state.converged and state.goal.name == "WITHDRAW"

    # -- what the loop's DRA hint asks ------------------------------------------------

    def served_directories(self) -> tuple[Path, ...]:
        """The directories of the sockets served now (none: nothing to watch)."""
        server = self._server
        if server is None or not server.running:
            return ()
        sockets = (server.registration_socket, server.plugin_socket)
        return tuple(dict.fromkeys(path.parent for path in sockets if path is not None))

    def sockets_disturbed(self) -> bool:
        """A socket served now was deleted or replaced underneath: a pass serves it again."""
        return self._server is not None and self._server.disturbed()

    def out_of_step(self, slices_failing: bool) -> bool:
        """Whether what moved since the last pass calls for one.

        `slices_failing`: the last pass reported the slices failing (their key
        is pending). A pass is due when the publisher now says otherwise (a
        wish landed, a withdrawal was confirmed, or a wish failed), or when
        the sockets kept up for prepared claims serve none any more.
        """
        server = self._server
        if not self._serving and server is not None and server.running and not self.claims_prepared:
            return True
        publisher = self._publisher
        if publisher is None:
            return False
        if not self._serving:
            return self.withdrawn == slices_failing
        state = publisher.state()
        return (bool(state.error) and not state.converged) != slices_failing

    def status(self) -> DraStatus:
        server, publisher = self._server, self._publisher
        return DraStatus(
            serving=self._serving,
            driver=self._driver,
            registration_socket=None if server is None else _str(server.registration_socket),
            plugin_socket=None if server is None else _str(server.plugin_socket),
            kubelet_registered=None if server is None else server.status.registered,
            kubelet_error="" if server is None else server.status.error,
            slices=None if publisher is None else publisher.state(),
            prepared_claims=self.claims_prepared,
            problem=self._problem,
            devices=self._devices,
        )

    async def close(self) -> None:
        """Stop serving (prepared claims stay checkpointed; the slices stay published)."""
        if self._server is not None:
            await self._server.stop()
        if self._publisher is not None:
            await asyncio.to_thread(self._publisher.close)

    # -- internals ----------------------------------------------------------------

    def _open(self) -> tuple[SlicePublisher, DraPluginServer]:
        """The publisher and the server, made on first use (blocking: run in a thread).

        Raises:
            DraUnavailable: no node name or no API access.
        """
        if not self._node:
            raise DraUnavailable("DRA mode needs the node's name: --node-name (NODE_NAME)")
        if not api_configured(self._env):
            raise DraUnavailable(_NO_API)
        from kube.client import api_access
        from kube.resource_claims import ClaimReader
        from kube.resource_slices import SlicePublisher
        from kubelet.dra.prepare import ClaimPreparer
        from kubelet.dra.server import DraPluginServer

        access = api_access(self._env)
        if access is None:
            raise DraUnavailable(_NO_API)
        access = access.named("nvidia-device-plugin")
        reader = ClaimReader(access)
        self._preparer = ClaimPreparer(
            driver=self._driver,
            cdi_dir=self._cdi_dir,
            checkpoint_path=self._plugins / self._driver / CHECKPOINT,
            read_claim=reader.get,
            catalog=lambda: self._catalog,
            on_change=self._notify,
        )
        # What the kubelet says of the registration is on `/state` at once.
        self._server = DraPluginServer(self._preparer, on_status=lambda *_: self._notify())
        self._publisher = SlicePublisher(
            access,
            node_name=self._node,
            driver=self._driver,
            on_error=lambda message: logger.warning("DRA slices: {m}", m=message),
            on_state=lambda state: self._notify(),
        )
        self._publisher.start()
        logger.info(
            "DRA mode: driver {driver}, node {node}, API {source}",
            driver=self._driver,
            node=self._node,
            source=access.source,
        )
        return self._publisher, self._server

    @staticmethod
    def _slices_outcome(state: SliceState) -> Outcome:
        # The publisher retries on its own backoff: a failure is shown, not retried here.
        error = TransientError(f"publishing ResourceSlices: {state.error}") if state.error else None
        return Outcome(Kind.DRA, SLICES, error=error)


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
