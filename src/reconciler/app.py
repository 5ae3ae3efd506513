"""Builds the object graph once and runs it until shutdown.

Root tasks: the reconcile loop, the kubelet directory watch, the config
directory watch and the inspection endpoint. Shutdown order: stop the
sources, let the loop stop the servers (sockets removed), then close the
endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from devices.library import DeviceLibrary, open_library
from inspection.server import InspectionServer, Response, Route
from kubelet.fleet import PluginFleet
from reconciler.health import HealthMonitor
from reconciler.inputs import ConfigInputs
from reconciler.loop import Inputs, Reconciler
from reconciler.mailbox import Hint, Mailbox
from reconciler.metrics import CONTENT_TYPE, Metrics
from reconciler.snapshot import Snapshot, alive, take
from reconciler.sources import signals
from reconciler.sources.config_dir import config_dir_watcher, config_directory
from reconciler.sources.kubelet_dir import kubelet_dir_watcher
from reconciler.sources.node_label import NodeLabelSource
from settings import EffectiveConfig
from states.machine import Lifecycle

# How long start-up waits for the first read of the node label.
LABEL_WAIT_SECONDS = 10.0


class StartupError(Exception):
    """The process cannot start as configured (the inspection endpoint cannot bind)."""


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class Published:
    """The latest snapshot; replaced whole by the loop, read by the endpoint."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler
        self.value: Snapshot = take(reconciler)

    def refresh(self, reconciler: Reconciler | None = None) -> None:
        self.value = take(reconciler or self.reconciler)


def _routes(published: Published, metrics: Metrics) -> dict[str, Route]:
    text = "text/plain; charset=utf-8"

    def healthz() -> Response:
        ok = alive(published.reconciler.heartbeat)
        return (200 if ok else 503), text, b"ok\n" if ok else b"stale\n"

    def readyz() -> Response:
        ok = published.value.ready
        return (200 if ok else 503), text, b"ready\n" if ok else b"not ready\n"

    def state() -> Response:
        return 200, "application/json", published.value.state_json()

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
    mailbox = Mailbox()
    lifecycle = Lifecycle()
    published: Published | None = None
    metrics = Metrics(lambda: published.value.state if published else {})
    lifecycle.listeners.append(metrics.transition)

    def make_fleet(config: EffectiveConfig) -> PluginFleet:
        return PluginFleet(
            kubelet_socket=Path(config.flags.kubelet_socket or boot.flags.kubelet_socket),
            register=bool(config.flags.kubelet_socket),
            observe=metrics.rpc,
        )

    def library(config: EffectiveConfig) -> DeviceLibrary:
        return open_library(
            config.flags.mock_nvml or None,
            driver_root=config.flags.driver_root_ctr_path,
            strategy=config.flags.device_discovery_strategy,
        )

    health = HealthMonitor(
        env=env if env is not None else {},
        notify=lambda: mailbox.post_threadsafe(Hint.HEALTH),
        on_change=metrics.health,
    )
    inputs = Inputs(
        config=ConfigInputs(argv, env),
        open_library=library,
        make_fleet=make_fleet,
        health=health,
    )
    reconciler = Reconciler(
        inputs=inputs,
        mailbox=mailbox,
        lifecycle=lifecycle,
        fail_on_init_error=(
            boot.flags.fail_on_init_error if fail_on_init_error is None else fail_on_init_error
        ),
        on_reconcile=metrics.reconcile,
    )
    published = Published(reconciler)
    reconciler.on_change = published.refresh
    stop_sources = asyncio.Event()
    sources: dict[str, Coroutine[Any, Any, None]] = {
        "kubelet-dir-watcher": kubelet_dir_watcher(
            kubelet_socket=Path(boot.flags.kubelet_socket), mailbox=mailbox, stop=stop_sources
        )
    }
    watched = config_directory(boot.flags.config_directory, boot.flags.config_file)
    if watched is not None:
        sources["config-dir-watcher"] = config_dir_watcher(
            directory=watched, mailbox=mailbox, stop=stop_sources
        )
    # Sources start before the first reconcile: what changes meanwhile is a
    # hint waiting in the mailbox, not a missed event.
    tasks = [asyncio.create_task(source, name=name) for name, source in sources.items()]
    stopping = asyncio.Event()
    signals.install(mailbox, stopping=stopping)
    labels = NodeLabelSource(config=boot, env=env if env is not None else {}, mailbox=mailbox)
    labels.start()
    host, port = split_address(boot.flags.state_address)
    endpoint = InspectionServer(host=host, port=port, routes=_routes(published, metrics))
    try:
        inputs.config.label_value = await labels.initial(
            timeout=LABEL_WAIT_SECONDS, stopping=stopping
        )
        try:
            await endpoint.start()
        except OSError as err:
            raise StartupError(
                f"cannot serve the inspection endpoint on {boot.flags.state_address} "
                f"(--state-address / STATE_ADDRESS): {err.strerror or err}"
            ) from None
        if not stopping.is_set():
            await reconciler.start()
            logger.info(
                "inspection endpoint on http://{host}:{port}/state",
                host=host,
                port=endpoint.port,
            )
            await reconciler.run()
    finally:
        # Sources first (nothing new comes in), then what serves the kubelet
        # (sockets removed), then the endpoint.
        signals.uninstall()
        stop_sources.set()
        await labels.stop()
        await _finish(tasks, grace=2.0)
        await reconciler.close()
        await endpoint.stop()
    logger.info("stopped")


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
