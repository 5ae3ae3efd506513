"""Builds the object graph once and runs it until shutdown.

Root tasks: the reconcile loop, the kubelet directory watch, the DRA socket
watch, the config directory watch, the node watch (config label and GPU cordon annotation) and
the inspection endpoint. The endpoint listens first, before the node label is
read and before the first registration attempt, so probes and `/state`
answer during a slow start. The file watches start once the first pass is
over (watchfiles is not on the way to the first registration); each posts one
hint as it starts, so what changed before is read then, level-based. So does
the node watch when no config directory needs the label first (the
Kubernetes client is not on that way either). Shutdown order: stop the
sources, let the loop stop the servers (sockets removed), then close the
endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
from collections.abc import Awaitable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from devices.library import DeviceLibrary, open_library
from inspection.server import (
    InspectionServer,
    ProbeEndpoint,
    Response,
    Route,
    ThreadedEndpoint,
    split_address,
)
from kubelet.fleet import PluginFleet
from reconciler.dra import DraSide
from reconciler.events import NodeEvents, open_node_events
from reconciler.health import HealthMonitor
from reconciler.inputs import ConfigInputs
from reconciler.loop import Inputs, Reconciler
from reconciler.mailbox import Hint, Mailbox
from reconciler.metrics import CONTENT_TYPE, Metrics
from reconciler.snapshot import Snapshot, StateBody, alive, take
from reconciler.sources import signals
from reconciler.sources.node_label import NodeLabelSource
from settings import EffectiveConfig, Readiness
from states.health import HealthChange
from states.machine import Lifecycle

SWITCH_INTERVAL_SECONDS = 0.001
# How long start-up waits for the first read of the node label.
LABEL_WAIT_SECONDS = 10.0


class StartupError(Exception):
    """The process cannot start as configured (the inspection endpoint cannot bind)."""


class Published:
    """The latest snapshot; replaced whole by the loop, read by the endpoint."""

    def __init__(self, reconciler: Reconciler, readiness: Readiness = Readiness.AUTO) -> None:
        self.reconciler = reconciler
        self.readiness = readiness
        self.value: Snapshot = take(reconciler.status(), readiness=readiness)
        self.body = StateBody()  # `/state`, rendered once per change
        self.body.update(self.value)

    def refresh(self, reconciler: Reconciler | None = None) -> None:
        status = (reconciler or self.reconciler).status()
        self.value = take(status, self.value, readiness=self.readiness)
        self.body.update(self.value)


def _routes(published: Published, metrics: Metrics) -> dict[str, Route]:
    text = "text/plain; charset=utf-8"

    def healthz() -> Response:
        ok = alive(published.reconciler.heartbeat)
        return (200 if ok else 503), text, b"ok\n" if ok else b"stale\n"

    def readyz() -> Response:
        # A loop that stopped draining its mailbox is not ready in any mode.
        ok = published.value.ready and alive(published.reconciler.heartbeat)
        return (200 if ok else 503), text, b"ready\n" if ok else b"not ready\n"

    async def state() -> Response:
        return 200, "application/json", await published.body.body()

    def prometheus() -> Response:
        return 200, CONTENT_TYPE, metrics.render()

    return {"/healthz": healthz, "/readyz": readyz, "/state": state, "/metrics": prometheus}


async def serve(
    boot: EffectiveConfig,
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    *,
    fail_on_init_error: bool | None = None,
) -> None:
    """Run the plugin; returns after a clean shutdown.

    `fail_on_init_error` overrides the boot config's value when the config
    file itself could not be read (its value is then known only from the error).

    Raises:
        FatalInitError: start-up failed and fail-on-init-error is set.
    """
    # Several threads share the interpreter (the loop serving the kubelet, the
    # endpoint's two, NVML, the preferred-allocation search): hand the lock on
    # every millisecond rather than every five, so none waits long for a turn.
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    mailbox = Mailbox()
    lifecycle = Lifecycle()
    published: Published | None = None
    metrics = Metrics(lambda: published.value.state if published else {})
    lifecycle.listeners.append(metrics.transition)
    recorder = open_node_events(boot, env if env is not None else {})
    events = None
    if recorder is not None:
        events = NodeEvents(
            recorder.record,
            inventory=lambda: health.inventory,
            # A drain's changes arrive in one go: fold them once it is over.
            defer=asyncio.get_running_loop().call_soon,
        )
        lifecycle.listeners.append(events.transition)

    # `--kubelet-socket` comes from the command line or the environment only,
    # so the fleet (and the watch that tells kubelets apart) lives as long as
    # the process, from before the first config is read.
    fleet = PluginFleet(
        kubelet_socket=Path(boot.flags.kubelet_socket),
        register=bool(boot.flags.kubelet_socket),
        observe=metrics.rpc,
    )

    def library(config: EffectiveConfig) -> DeviceLibrary:
        return open_library(
            config.flags.mock_nvml or None,
            driver_root=config.flags.driver_root_ctr_path,
            strategy=config.flags.device_discovery_strategy,
        )

    def health_changed(change: HealthChange) -> None:
        metrics.health(change)
        if events is not None:
            events.health(change)

    health = HealthMonitor(
        notify=lambda: mailbox.post_threadsafe(Hint.HEALTH),
        on_change=health_changed,
    )
    inputs = Inputs(
        config=ConfigInputs(argv, env),
        open_library=library,
        fleet=fleet,
        health=health,
        dra=DraSide(
            boot=boot,
            env=env if env is not None else {},
            notify=lambda: mailbox.post_threadsafe(Hint.DRA),
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
    published = Published(reconciler, boot.flags.readiness)
    reconciler.on_change = published.refresh
    stop_sources = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    stopping = asyncio.Event()
    signals.install(mailbox, stopping=stopping)
    routes = _routes(published, metrics)
    host, port = split_address(boot.flags.state_address)
    endpoint = ThreadedEndpoint(InspectionServer(host=host, port=port, routes=routes))
    probes: ProbeEndpoint | None = None
    if boot.flags.probe_address:
        probe_host, probe_port = split_address(boot.flags.probe_address)
        probes = ProbeEndpoint(host=probe_host, port=probe_port, routes=routes)
    labels: NodeLabelSource | None = None
    try:
        # Listening first: the probes and /state answer while the Kubernetes
        # client is imported, the node label awaited and the first
        # registration attempted, each of which can take seconds.
        await _listen(
            endpoint.start(),
            f"the inspection endpoint on {boot.flags.state_address}"
            " (--state-address / STATE_ADDRESS)",
        )
        if probes is not None:
            await _listen(
                probes.start(),
                f"the probes on {boot.flags.probe_address} (--probe-address / PROBE_ADDRESS)",
            )
        labels = NodeLabelSource(config=boot, env=env if env is not None else {}, mailbox=mailbox)
        labels.start()
        reconciler.intake.same_label(
            await labels.initial(timeout=LABEL_WAIT_SECONDS, stopping=stopping)
        )
        # What the first list said of the cordon annotation holds from the first pass on.
        health.want_cordon(labels.annotation)
        health.cordon_read(labels.off)
        if not stopping.is_set():
            await reconciler.start()
            gc.enable()  # off during start-up (`reconciler.__main__`)
            tasks += _watch_files(boot, mailbox, stop_sources, inputs.dra)
            tasks.append(
                asyncio.create_task(
                    _watch_node_late(labels, health, published, stop_sources), name="node-watch"
                )
            )
            # Said once start-up is through: a start that exits 1 says one line only.
            logger.info(
                "inspection endpoint on http://{host}:{port}/state", host=host, port=endpoint.port
            )
            if probes is not None:
                logger.info(
                    "probes on http://{host}:{port}/healthz and /readyz",
                    host=probe_host,
                    port=probes.port,
                )
            await reconciler.run()
    finally:
        # Sources first (nothing new comes in), then what serves the kubelet
        # (sockets removed), then the endpoint.
        signals.uninstall()
        stop_sources.set()
        await _finish(tasks, grace=2.0)
        if labels is not None:
            await labels.stop()
        await reconciler.close()
        if recorder is not None:
            # What is queued goes out if the API answers within a second; a
            # slow API server must not hold up the pod's termination.
            await asyncio.to_thread(recorder.stop, 1.0)
        if probes is not None:
            await probes.stop()
        await endpoint.stop()
    logger.info("stopped")


def _watch_files(
    boot: EffectiveConfig, mailbox: Mailbox, stop: asyncio.Event, dra: DraSide | None
) -> list[asyncio.Task[None]]:
    """Start the kubelet directory watch and the config watch (each posts one hint first).

    The DRA socket watch runs on every node (a node can move to DRA at any
    time); it watches nothing until DRA sockets are served.
    """
    from reconciler.sources.config_dir import config_dir_watcher, watch_target
    from reconciler.sources.dra_dir import dra_dir_watcher
    from reconciler.sources.kubelet_dir import kubelet_dir_watcher

    sources: dict[str, Coroutine[Any, Any, None]] = {
        "kubelet-dir-watcher": kubelet_dir_watcher(
            kubelet_socket=Path(boot.flags.kubelet_socket), mailbox=mailbox, stop=stop
        )
    }
    if dra is not None:
        sources["dra-dir-watcher"] = dra_dir_watcher(sockets=dra, mailbox=mailbox, stop=stop)
    watched = watch_target(boot.flags.config_directory, boot.flags.config_file)
    if watched is not None:
        sources["config-dir-watcher"] = config_dir_watcher(
            target=watched, mailbox=mailbox, stop=stop
        )
    return [asyncio.create_task(source, name=name) for name, source in sources.items()]


async def _watch_node_late(
    labels: NodeLabelSource, health: HealthMonitor, published: Published, stop: asyncio.Event
) -> None:
    """Start the node watch that start-up left out (annotation only); say on /state if it runs."""
    await labels.start_late(stop)
    health.cordon_read(labels.off)
    published.refresh()


async def _listen(start: Awaitable[None], what: str) -> None:
    """Await a listener's start; a port in use or a foreign address is one line."""
    try:
        await start
    except OSError as err:
        # asyncio words a bind failure as a sentence about a tuple; the
        # system's reason reads better after our own address and flag.
        reason = os.strerror(err.errno) if err.errno else str(err)
        raise StartupError(f"cannot serve {what}: {reason}") from None


async def _finish(tasks: list[asyncio.Task[None]], *, grace: float) -> None:
    """Let sources notice the stop flag; cancel those that overrun."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
