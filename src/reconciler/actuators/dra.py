"""DRA mode's actuators: the kubelet plugin and the node's ResourceSlices.

With `--kubelet-api dra` (or the per-node config selected by the node label)
the desired state carries a `DraPlan` instead of a device-plugin plan, and
two actuators serve it, in the loop's order (`reconciler.actuators.order`):

- `DraPlugin` (key `dra:<driver>`): the DRA kubelet plugin
  (`kubelet.dra.server.DraPluginServer`), its registration and DRAPlugin
  sockets, the `Catalog` the claim preparer reads (the plan's devices with
  their health now) and the list its device-health stream sends the kubelet
  (`resources.dra_health`: every device Healthy, Unhealthy or Unknown, with
  the reason), published in the pass that follows the health machine's
  decision, before the slices are written. The sockets stay up (and are served again when
  deleted) as long as a claim prepared through them has not been
  unprepared, whatever the node moved to: the kubelet must be able to
  unprepare what runs.
- `Slices` (key `dra:slices`): the node's ResourceSlices, each unhealthy
  device tainted (cordoned devices too). The write runs in a thread and
  returns only once the API server has answered, so the key converges only
  when the slices have landed, and a failing write is retried on the key's
  own backoff like any other. What the API holds is an input: the slice
  watch posts the `DRA` hint when it changes, and `pending()` compares.

A GPU is served through one API at a time: the slices are published only
once no device-plugin resource is served, and withdrawn before one is
(`actuators.order.SERVES_AFTER`).

The Kubernetes client, the DRA gRPC services and the claim preparer are
loaded (`reconciler.on_demand`) and made on first use, in a thread, and
handed to the loop as one value (`DraParts`), so a device-plugin node's
start-up never pays for them and no field is written from another thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from foundation.errors import PluginError, TransientError
from foundation.kill_points import KillPoints
from foundation.outcome import Change, Key, Kind, Outcome, Retries
from kube.configured import api_configured
from kubelet.dra.checkpoint import checkpoint_path
from reconciler import on_demand
from reconciler.actuators.dra_status import DraStatus, report_of, unhealthy
from reconciler.actuators.health import HealthMonitor
from reconciler.plan.desired import Desired, DraPlan
from resources.claim_catalog import Catalog, CatalogDevice
from resources.dra_health import HealthReport
from resources.dra_slices import DeviceHealthView, SliceDevice, counters_apart

if TYPE_CHECKING:
    from devices.library import DeviceLibrary
    from kube.resource_slices import SlicePublisher
    from kubelet.dra.prepare import ClaimPreparer
    from kubelet.dra.server import DraPluginServer

# How long the first slice write waits for the slice watch's first list.
FIRST_LIST_SECONDS = 2.0
SLICES = "slices"  # the outcome name of the node's ResourceSlices
_NO_API = "DRA mode needs Kubernetes API access (in a cluster, or KUBECONFIG)"
Report = HealthReport | None  # what the health stream should send; None: no plan to report on


class DraUnavailable(TransientError):
    """DRA mode cannot run here as configured (no node name, no API access)."""


@dataclass(frozen=True)
class DraParts:
    """What DRA mode runs with, made once, on first use, in a thread."""

    preparer: ClaimPreparer
    server: DraPluginServer
    publisher: SlicePublisher


class DraSide:
    """Owns DRA mode's parts and the two actuators that drive them."""

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        notify: Callable[[], None],
        report: Callable[[str], object] = lambda _: None,
    ) -> None:
        self._env = env
        # From any thread: the API's slices, the prepared claims or the registration moved.
        self.notify = notify
        self._report = report  # on the loop: a problem an operator must hear of (an Event)
        # The device library now (the loop's): dynamic MIG creates its instances through it.
        self.library: Callable[[], DeviceLibrary | None] = lambda: None
        self.parts: DraParts | None = None
        self.catalog: Catalog | None = None  # what the claim preparer reads
        self.served: DraPlan | None = None  # the last plan served: its sockets outlive it
        self.problem: str | None = None
        self.devices: tuple[SliceDevice, ...] = ()  # as published, taints included

    def plugin_actuator(self, retries: Retries, health: HealthMonitor | None) -> DraPlugin:
        return DraPlugin(retries, self, health)

    def slices_actuator(self, retries: Retries, health: HealthMonitor | None) -> Slices:
        return Slices(retries, self, health)

    async def open(self, plan: DraPlan) -> DraParts:
        """The parts, made on first use (in a thread: importing the client takes a second).

        Raises:
            DraUnavailable: no node name or no API access.
        """
        if self.parts is None:
            self.parts = await asyncio.to_thread(_open_parts, plan, self._env, self)
            if self.parts.preparer.problem is not None:
                self._report(self.parts.preparer.problem)
        return self.parts

    @property
    def claims_prepared(self) -> int:
        return 0 if self.parts is None else len(self.parts.preparer.prepared)

    # -- what the DRA socket watch asks ------------------------------------------------

    def served_directories(self) -> tuple[Path, ...]:
        """The directories of the sockets served now (none: nothing to watch)."""
        server = None if self.parts is None else self.parts.server
        if server is None or not server.running:
            return ()
        sockets = (server.registration_socket, server.plugin_socket)
        return tuple(dict.fromkeys(path.parent for path in sockets if path is not None))

    def sockets_disturbed(self) -> bool:
        """A socket served now was deleted or replaced underneath: a pass serves it again."""
        return self.parts is not None and self.parts.server.disturbed()

    def status(self, plan: DraPlan | None) -> DraStatus:
        """What `/state` shows of DRA mode; `plan` is the DRA plan wanted now (None: none)."""
        serving = plan is not None
        parts, plan = self.parts, plan or self.served
        server = None if parts is None else parts.server
        return DraStatus(
            serving=serving,
            driver="" if plan is None else plan.driver,
            registration_socket=None if server is None else _str(server.registration_socket),
            plugin_socket=None if server is None else _str(server.plugin_socket),
            kubelet_registered=None if server is None else server.status.registered,
            kubelet_error="" if server is None else server.status.error,
            slices=None if parts is None else parts.publisher.state(),
            prepared_claims=self.claims_prepared,
            problem=self.problem,
            devices=self.devices,
            health_watchers=0 if server is None else server.health.watchers,
        )

    async def close(self) -> None:
        """Stop serving (prepared claims stay checkpointed; the slices stay published)."""
        if self.parts is not None:
            await self.parts.server.stop()
            await asyncio.to_thread(self.parts.publisher.close)


def _open_parts(plan: DraPlan, env: Mapping[str, str], side: DraSide) -> DraParts:
    """Make the publisher, the claim preparer and the server (blocking: run in a thread).

    Returns a value; the loop installs it. The preparer reads the catalog and
    the watch posts its hint through `side`, both at call time.

    Raises:
        DraUnavailable: no node name or no API access.
    """
    if not plan.node:
        raise DraUnavailable("DRA mode needs the node's name: --node-name (NODE_NAME)")
    if not api_configured(env):
        raise DraUnavailable(_NO_API)
    access = on_demand.api_access(env)
    if access is None:
        raise DraUnavailable(_NO_API)
    access = access.named("nvidia-device-plugin")
    preparer = on_demand.claim_preparer()(
        driver=plan.driver,
        cdi_dir=plan.cdi_dir,
        checkpoint_path=checkpoint_path(plan.plugins, plan.driver),
        read_claim=on_demand.claim_reader()(access).get,
        catalog=lambda: side.catalog,
        on_change=side.notify,
        kill=KillPoints.from_env(env),
        mig=side.library,
    )
    # What the kubelet says of the registration is on `/state` at once.
    server = on_demand.dra_plugin_server()(preparer, on_status=lambda *_: side.notify())
    publisher = on_demand.slice_publisher()(
        access, node_name=plan.node, driver=plan.driver, on_change=side.notify
    )
    publisher.start()
    logger.info(
        "DRA mode: driver {driver}, node {node}, API {source}",
        driver=plan.driver,
        node=plan.node,
        source=access.source,
    )
    return DraParts(preparer, server, publisher)


class _Cached:
    """A value derived from the plan and the health view, made again only when either is new."""

    def __init__(self) -> None:
        self._key: tuple[object, object] | None = None
        self._extra: object = None
        self._value: Any = None
        self.generation = 0  # moves with every value made: what a retry schedule compares

    def get(self, plan: object, view: object, make: Callable[[], Any], extra: object = None) -> Any:
        """`make()`, again only for another plan or view (by identity) or another `extra`."""
        key = self._key
        if key is None or key[0] is not plan or key[1] is not view or self._extra != extra:
            self._value, self._key, self._extra = make(), (plan, view), extra
            self.generation += 1
        return self._value


class DraPlugin:
    """The DRA kubelet plugin: its sockets and the catalog its claim preparer reads."""

    kind = Kind.DRA

    def __init__(self, retries: Retries, side: DraSide, health: HealthMonitor | None) -> None:
        self.retries = retries
        self.side = side
        self.health = health
        self._catalog = _Cached()
        self._report = _Cached()

    def _target(self, desired: Desired) -> DraPlan | None:
        """The plan whose sockets to serve: the node's, or the last one's while claims remain."""
        plan = desired.dra
        if plan is not None:
            return plan
        return self.side.served if self.side.claims_prepared else None

    def _wanted(self, desired: Desired) -> tuple[DraPlan | None, Catalog | None, Report]:
        """The plan to serve, the catalog for new claims, the list the health stream sends.

        Off DRA mode, the sockets kept for prepared claims still stream the health
        of the last plan's devices: those claims' pods run on them.
        """
        plan, target = desired.dra, self._target(desired)
        view = None if self.health is None else self.health.status()
        report: Report = None
        if target is not None:
            report = self._report.get(target, view, lambda: report_of(target, view))
        if plan is None:
            return target, None, report
        catalog: Catalog = self._catalog.get(
            plan, view, lambda: catalog_of(plan, desired, unhealthy(view))
        )
        return plan, catalog, report

    def key(self, desired: Desired) -> Key:
        target = self._target(desired) or self.side.served
        return Key(Kind.DRA, "" if target is None else target.driver)

    def pending(self, desired: Desired) -> bool:
        target, catalog, report = wanted = self._wanted(desired)
        side, parts = self.side, self.side.parts
        if target is None:
            todo = parts is not None and parts.server.running
        else:
            todo = (
                parts is None
                or catalog != side.catalog  # None off DRA mode: no new claim is prepared
                or report != parts.server.health.report
                or parts.server.pending(target.driver, target.registrar, target.plugins)
            )
        return todo and self.retries.may_attempt(self.key(desired), wanted)

    async def converge(self, desired: Desired) -> list[Outcome]:
        target, catalog, report = wanted = self._wanted(desired)
        key = self.key(desired)
        if target is None:
            outcome = await self._stop(key)
        else:
            outcome = await self._serve(key, target, catalog, report)
        self.retries.settle(outcome, wanted)
        return [outcome]

    async def _serve(
        self, key: Key, target: DraPlan, catalog: Catalog | None, report: Report
    ) -> Outcome:
        side = self.side
        try:
            parts = await side.open(target)
        except PluginError as err:
            side.problem = str(err)
            return Outcome(key.kind, key.name, error=err)
        side.problem = parts.preparer.problem
        side.catalog = catalog
        if catalog is not None:
            side.served = target
        # Before the sockets: a stream opened by this pass's registration starts
        # from this list, and a changed one reaches the open streams at once.
        health = parts.server.health
        again = health.report is not None
        sent = report is not None and await health.publish(report)
        outcome = await parts.server.converge(target.driver, target.registrar, target.plugins)
        if sent and again:
            outcome = replace(outcome, changes=outcome.changes | {Change.PUBLISHED})
        return outcome

    async def _stop(self, key: Key) -> Outcome:
        side = self.side
        side.catalog = None
        if side.parts is not None:
            await side.parts.server.stop()
        return Outcome(key.kind, key.name, frozenset({Change.STOPPED}))

    def serves(self, desired: Desired) -> bool:
        return False  # its sockets serve claims already prepared, whatever the API

    def holds_nothing(self) -> bool:
        return True

    def status(self) -> object:
        parts = self.side.parts
        return None if parts is None else parts.server.status


class Slices:
    """The node's ResourceSlices: published from the DRA plan with health, withdrawn otherwise."""

    kind = Kind.DRA

    def __init__(self, retries: Retries, side: DraSide, health: HealthMonitor | None) -> None:
        self.retries = retries
        self.side = side
        self.health = health
        self._slices = _Cached()
        self._said: str | None = None
        self._first = True
        self._version_said: str | None = None
        self._apart_said: bool | None = None

    def _wanted(
        self, desired: Desired
    ) -> tuple[tuple[SliceDevice, ...], list[dict[str, Any]]] | None:
        plan = desired.dra
        if plan is None:
            return None
        view = None if self.health is None else self.health.status()
        apart = self._counters_apart(plan)

        def make() -> tuple[tuple[SliceDevice, ...], list[dict[str, Any]]]:
            devices = plan.slice_devices(unhealthy(view))
            return devices, plan.slices(devices, counters_apart=apart)

        made: tuple[tuple[SliceDevice, ...], list[dict[str, Any]]] = self._slices.get(
            plan, view, make, apart
        )
        return made

    def _counters_apart(self, plan: DraPlan) -> bool:
        """Whether the API server takes counter sets in slices of their own (>= 1.35).

        Read once per API connection (`_read_version`); unread or unreadable is
        the older layout. Without counter sets the layout is the same either way.
        """
        parts = self.side.parts
        if not plan.counter_sets or parts is None:
            return False
        version = parts.publisher.server_version
        return counters_apart(None if version is None else version.release)

    def _counters_unsure(self, desired: Desired) -> bool:
        """Counter sets laid out for a server whose version could not be read."""
        plan, parts = desired.dra, self.side.parts
        return (
            plan is not None
            and bool(plan.counter_sets)
            and parts is not None
            and parts.publisher.server_version is None
        )

    def _version_due(self, desired: Desired) -> bool:
        plan, parts = desired.dra, self.side.parts
        return (
            plan is not None
            and bool(plan.counter_sets)
            and parts is not None
            and parts.publisher.version_due()
        )

    def _read_version(self, publisher: SlicePublisher) -> None:
        """Read the server's version (in a thread); a failure is said once and means < 1.35."""
        try:
            version = publisher.read_version()
        except Exception as err:  # KubeError: the older layout until the next connection
            if str(err) != self._version_said:
                self._version_said = str(err)
                logger.warning(
                    "DRA slices: {m}; counter sets go with their devices, as before "
                    "Kubernetes 1.35",
                    m=str(err),
                )
            return
        self._version_said = None
        apart = counters_apart(version.release)
        if apart != self._apart_said:
            self._apart_said = apart
            logger.info(
                "DRA slices: Kubernetes {v}: counter sets {how}",
                v=str(version),
                how="in slices of their own" if apart else "with their devices",
            )

    def pending(self, desired: Desired) -> bool:
        parts = self.side.parts
        if parts is None:
            return False  # nothing opened: nothing published (the plugin's key says why)
        wanted = self._wanted(desired)
        slices = None if wanted is None else wanted[1]
        if self._version_due(desired):
            return self.retries.may_attempt(SLICES_KEY, self._asked(slices))
        if not parts.publisher.pending(slices):
            # The API holds them already (a restart finds its slices): that is
            # what `/state` shows as published, though nothing is written.
            if wanted is not None:
                self.side.devices = wanted[0]
            return False
        return self.retries.may_attempt(SLICES_KEY, self._asked(slices))

    async def converge(self, desired: Desired) -> list[Outcome]:
        parts = self.side.parts
        assert parts is not None
        due = self._version_due(desired)
        if due:
            await asyncio.to_thread(self._read_version, parts.publisher)
        wanted = self._wanted(desired)
        slices = None if wanted is None else wanted[1]
        if due and wanted is not None and not parts.publisher.pending(slices):
            # Only the version was due, and the API holds the slices of its layout already.
            self.side.devices = wanted[0]
            outcome = Outcome(Kind.DRA, SLICES)
            self.retries.settle(outcome, self._asked(slices))
            return [outcome]
        # Only the first write waits a little for the watch's first list: after
        # that a write that finds no list fails at once, and the list, when it
        # comes, starts the next attempt (`_asked`).
        wait, self._first = (FIRST_LIST_SECONDS if self._first else 0.0), False
        try:
            await asyncio.to_thread(parts.publisher.write, slices, list_timeout=wait)
        except Exception as err:  # KubeError, or slices the API would refuse (ValueError)
            if self._counters_unsure(desired):
                parts.publisher.forget_version()  # the layout may be why: read it at the retry
            what = "publishing" if slices is not None else "withdrawing this node's"
            error = TransientError(f"{what} ResourceSlices: {err}")
            if str(err) != self._said:
                self._said = str(err)
                logger.warning("DRA slices: {m}", m=str(err))
            outcome = Outcome(Kind.DRA, SLICES, error=error)
        else:
            self._said = None
            self.side.devices = () if wanted is None else wanted[0]
            change = Change.PUBLISHED if slices is not None else Change.STOPPED
            outcome = Outcome(Kind.DRA, SLICES, frozenset({change}))
        self.retries.settle(outcome, self._asked(slices))
        return [outcome]

    def _asked(self, slices: Sequence[Mapping[str, Any]] | None) -> Hashable:
        """What a slice write was asked for, as the retry schedule compares it.

        The watch's list count is part of it: the watch lists again once the
        API server answers after an outage, and a failing write is then tried
        at once rather than when its backoff comes due.
        """
        parts = self.side.parts
        lists = 0 if parts is None else parts.publisher.lists
        return (None if slices is None else self._slices.generation, lists)

    def serves(self, desired: Desired) -> bool:
        return desired.dra is not None

    def holds_nothing(self) -> bool:
        parts = self.side.parts
        return parts is None or parts.publisher.holds_none()

    def status(self) -> object:
        parts = self.side.parts
        return None if parts is None else parts.publisher.state()


SLICES_KEY = Key(Kind.DRA, SLICES)


def catalog_of(plan: DraPlan, desired: Desired, view: DeviceHealthView) -> Catalog:
    """What the claim preparer reads: the plan's devices with their health now."""
    return Catalog(
        driver=plan.driver,
        pool=plan.node,
        devices={
            d.name: CatalogDevice(
                d.name, d.uuid, view[d.uuid][0] if d.uuid in view else None, d.placement
            )
            for d in plan.devices
        },
        inventory=desired.inventory,
        options=desired.options,
        check_device_nodes=plan.check_device_nodes,
    )


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
