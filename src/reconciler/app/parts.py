"""The plugin's parts, made once as plain data, wired with bound methods.

`build()` makes every object one run of the plugin needs and returns them
as `Parts`, a frozen dataclass; nothing starts here. The knots that need
tying (the metrics read the published snapshot, the health monitor tells
the metrics and the node's Events, the snapshot reads the loop and the
supervisor) are tied with bound methods and attributes set once, never with
closures over `serve`'s locals. `reconciler.app.serve` declares what runs and runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from devices.backends import open_library
from devices.library import DeviceLibrary
from inspection.server import (
    InspectionServer,
    ProbeEndpoint,
    Response,
    Route,
    ThreadedEndpoint,
    split_address,
)
from kube.events import NodeEventRecorder
from kubelet.servicer import PreferredPool
from reconciler.actuators.dra import DraSide
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.health import HealthMonitor
from reconciler.app.sources.node_label import NodeLabelSource
from reconciler.app.supervisor import Supervisor
from reconciler.core.loop import Inputs, Reconciler
from reconciler.core.mailbox import Hint, Mailbox
from reconciler.observation.events import NodeEvents, open_node_events
from reconciler.observation.metrics import CONTENT_TYPE, Metrics
from reconciler.observation.snapshot import Snapshot, StateBody, alive, take
from reconciler.plan.inputs import ConfigInputs
from settings import EffectiveConfig, Readiness
from states.health import HealthChange
from states.machine import Lifecycle


class Published:
    """The latest snapshot; replaced whole on the loop's thread, read by the endpoint's threads."""

    def __init__(self, readiness: Readiness = Readiness.AUTO) -> None:
        self.readiness = readiness
        self.value = Snapshot(state={}, ready=False)
        self.body = StateBody()  # `/state`, rendered once per change
        self._reconciler: Reconciler | None = None
        self._supervisor: Supervisor | None = None

    def follow(self, reconciler: Reconciler, supervisor: Supervisor) -> None:
        """Publish what these two say from now on; the first snapshot is taken now."""
        self._reconciler, self._supervisor = reconciler, supervisor
        self.refresh()

    def state(self) -> dict[str, object]:
        """The `/state` document last published (the metrics' gauges read it)."""
        return self.value.state

    def refresh(self, _: Reconciler | None = None) -> None:
        """Publish anew (the loop's `on_change` passes itself: the one followed)."""
        reconciler, supervisor = self._reconciler, self._supervisor
        if reconciler is None or supervisor is None:
            return  # not following yet
        status = replace(reconciler.status(), runnables=supervisor.status())
        self.value = take(status, self.value, readiness=self.readiness)
        self.body.update(self.value)


def _routes(published: Published, reconciler: Reconciler, metrics: Metrics) -> dict[str, Route]:
    text = "text/plain; charset=utf-8"

    def healthz() -> Response:
        ok = alive(reconciler.heartbeat)
        return (200 if ok else 503), text, b"ok\n" if ok else b"stale\n"

    def readyz() -> Response:
        # A loop that stopped draining its mailbox is not ready in any mode.
        ok = published.value.ready and alive(reconciler.heartbeat)
        return (200 if ok else 503), text, b"ready\n" if ok else b"not ready\n"

    async def state() -> Response:
        return 200, "application/json", await published.body.body()

    def prometheus() -> Response:
        return 200, CONTENT_TYPE, metrics.render()

    return {"/healthz": healthz, "/readyz": readyz, "/state": state, "/metrics": prometheus}


@dataclass(frozen=True)
class HealthNews:
    """Where a device's health move goes: the metrics, and the node's Events when they are on."""

    metrics: Metrics
    events: NodeEvents | None

    def __call__(self, change: HealthChange) -> None:
        self.metrics.health(change)
        if self.events is not None:
            self.events.health(change)


@dataclass(frozen=True)
class Parts:
    """Everything one run of the plugin is made of, made once by `build()`.

    Nothing here runs yet: `_supervise()` declares what runs, `serve()` runs it.
    """

    boot: EffectiveConfig
    mailbox: Mailbox
    stopping: asyncio.Event  # set by the first SIGTERM/SIGINT
    metrics: Metrics
    health: HealthMonitor
    reconciler: Reconciler
    published: Published
    recorder: NodeEventRecorder | None
    pool: PreferredPool
    endpoint: ThreadedEndpoint
    probes: ProbeEndpoint | None
    labels: NodeLabelSource
    supervisor: Supervisor


def build(
    boot: EffectiveConfig,
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    *,
    fail_on_init_error: bool | None = None,
) -> Parts:
    """Make every part, wired with bound methods; starts nothing (call it on the event loop)."""
    environ = env if env is not None else {}
    mailbox = Mailbox()
    lifecycle = Lifecycle()
    published = Published(boot.flags.readiness)
    metrics = Metrics(published.state)
    lifecycle.listeners.append(metrics.transition)
    health = HealthMonitor(notify=partial(mailbox.post_threadsafe, Hint.HEALTH))
    recorder = open_node_events(boot, environ, start=False)
    events = None
    if recorder is not None:
        events = NodeEvents(
            recorder.record,
            inventory=partial(getattr, health, "inventory"),
            # A drain's changes arrive in one go: fold them once it is over.
            defer=asyncio.get_running_loop().call_soon,
        )
        lifecycle.listeners.append(events.transition)
    health.on_change = HealthNews(metrics, events)
    pool = PreferredPool()
    # `--kubelet-socket` comes from the command line or the environment only,
    # so the fleet (and the watch that tells kubelets apart) lives as long as
    # the process, from before the first config is read.
    fleet = PluginFleet(
        kubelet_socket=Path(boot.flags.kubelet_socket),
        register=bool(boot.flags.kubelet_socket),
        observe=metrics.rpc,
        preferred=pool,
    )
    inputs = Inputs(
        config=ConfigInputs(argv, env),
        open_library=_open_library,
        fleet=fleet,
        health=health,
        dra=DraSide(
            env=environ,
            notify=partial(mailbox.post_threadsafe, Hint.DRA),
            report=(lambda _: None) if events is None else events.claim_checkpoint,
        ),
    )
    reconciler = Reconciler(
        inputs=inputs,
        mailbox=mailbox,
        lifecycle=lifecycle,
        fail_on_init_error=(
            boot.flags.fail_on_init_error if fail_on_init_error is None else fail_on_init_error
        ),
        on_reconcile=metrics.reconcile,
        on_kubelet_restarts=metrics.kubelet_restarted,
    )
    reconciler.on_change = reconciler.on_progress = published.refresh
    supervisor = Supervisor()
    supervisor.on_change = published.refresh
    published.follow(reconciler, supervisor)
    routes = _routes(published, reconciler, metrics)
    host, port = split_address(boot.flags.state_address)
    probes = None
    if boot.flags.probe_address:
        probe_host, probe_port = split_address(boot.flags.probe_address)
        probes = ProbeEndpoint(host=probe_host, port=probe_port, routes=routes)
    return Parts(
        boot=boot,
        mailbox=mailbox,
        stopping=asyncio.Event(),
        metrics=metrics,
        health=health,
        reconciler=reconciler,
        published=published,
        recorder=recorder,
        pool=pool,
        endpoint=ThreadedEndpoint(InspectionServer(host=host, port=port, routes=routes)),
        probes=probes,
        labels=NodeLabelSource(config=boot, env=environ, mailbox=mailbox),
        supervisor=supervisor,
    )


def _open_library(config: EffectiveConfig) -> DeviceLibrary:
    return open_library(
        config.flags.mock_nvml or None,
        driver_root=config.flags.driver_root_ctr_path,
        strategy=config.flags.device_discovery_strategy,
    )
