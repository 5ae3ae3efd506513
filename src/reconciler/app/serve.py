"""Builds the plugin's parts once and runs them, under one supervisor, until shutdown.

`reconciler.app.parts.build()` makes every part as plain data (`Parts`), wired
with bound methods; `_supervise()` declares, in one place and one order,
every thread and long-lived task the process runs (`reconciler.app.supervisor`;
docs/threads.md says what each owns); `serve()` starts them in three stages
and the supervisor stops them in the reverse order, each within its grace
period.

The declared order (the shutdown runs it backwards):

1. `inspection`: the endpoint's two threads. It listens first, before the
   node label is read and before the first registration attempt, so the
   probes and `/state` answer during a slow start; it closes last.
2. `probes`: the probes' own listener (with `--probe-address`).
3. `node-events`: the Event recorder's thread (when Events are on); at the
   stop it gets a second to send what is queued.
4. `preferred-allocation`: the threads GetPreferredAllocation searches in.
5. `actuators`: what the loop drives, closed by `Reconciler.close()`: the
   resource servers (sockets removed), the DRA plugin, the MPS probes, the
   NVML worker. The threads the loop's parts own themselves are shown right
   after it (`nvml-worker`, `health-source`, `mps-probes`, `dra-slice-watch`).
6. `node-watch`: the node label and annotation watch. With a config
   directory it starts here and start-up waits (bounded) for the label.
7. `reconcile-loop`: its start is the first pass; then the task handling hints.
8. `kubelet-dir-watch`, `dra-dir-watch`, `config-dir-watch`: the file
   watches, once the first pass is over; each posts one hint as it starts,
   so what changed before is read then, level-based.
9. `node-watch-late`: without a config directory, the node watch (the
   annotation only) is opened once the first pass is over, the Kubernetes
   client loaded off the loop, so it is not on the way to the first
   registration.

So a stop ends the sources first (nothing new comes in), then the loop, then
the servers (sockets removed), then the endpoint. `log-sink` (JSON mode's
native stderr thread) leads the list: it starts before anything and ends at
exit, after the last line.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Protocol

from loguru import logger

from foundation import logs
from reconciler.actuators.dra import DraSide
from reconciler.actuators.health import HealthMonitor
from reconciler.app.parts import Parts, Published, build
from reconciler.app.sources import signals
from reconciler.app.sources.config_dir import config_dir_watcher, watch_target
from reconciler.app.sources.dra_dir import dra_dir_watcher
from reconciler.app.sources.kubelet_dir import kubelet_dir_watcher
from reconciler.app.sources.node_label import NodeLabelSource
from reconciler.app.supervisor import (
    RUNNING,
    THREAD_ENDED,
    Condition,
    Pool,
    RunState,
    Service,
    Task,
    alive,
)
from reconciler.core.loop import Reconciler
from reconciler.core.mailbox import Hint
from settings import EffectiveConfig

SWITCH_INTERVAL_SECONDS = 0.001
# How long start-up waits for the first read of the node label.
LABEL_WAIT_SECONDS = 10.0

# The runnables `serve` starts through, in stages.
NODE_WATCH = "node-watch"
LOOP = "reconcile-loop"

# How long each stops on its own before it is cut short (seconds).
ENDPOINT_GRACE = 5.0
# What is queued goes out if the API answers within a second; a slow API
# server must not hold up the pod's termination.
EVENTS_GRACE = 1.0
POOL_GRACE = 1.0  # a search is bounded in time by itself
SERVERS_GRACE = 10.0  # every server, the DRA plugin and the NVML library shut down
WATCH_GRACE = 5.0
LOOP_GRACE = 5.0
SOURCE_GRACE = 2.0


class StartupError(Exception):
    """The process cannot start as configured (the inspection endpoint cannot bind)."""


def _supervise(parts: Parts) -> Task:
    """Declare every thread and long-lived task, in order; returns the reconcile loop's task."""
    boot, supervisor, reconciler = parts.boot, parts.supervisor, parts.reconciler
    flags, mailbox, labels = boot.flags, parts.mailbox, parts.labels
    ended = supervisor.changed
    if logs.native_stderr_running() is not None:
        supervisor.watch("log-sink", _log_sink)
    what = f"the inspection endpoint on {flags.state_address} (--state-address / STATE_ADDRESS)"
    supervisor.add(_listener("inspection", parts.endpoint, what), grace=ENDPOINT_GRACE)
    if parts.probes is not None:
        what = f"the probes on {flags.probe_address} (--probe-address / PROBE_ADDRESS)"
        supervisor.add(_listener("probes", parts.probes, what), grace=ENDPOINT_GRACE)
    if parts.recorder is not None:
        supervisor.add(Service.thread("node-events", parts.recorder), grace=EVENTS_GRACE)
    supervisor.add(Pool("preferred-allocation", parts.pool), grace=POOL_GRACE)
    supervisor.add(
        Service("actuators", start=_nothing, stop=partial(_close, reconciler)),
        grace=SERVERS_GRACE,
    )
    supervisor.watch("nvml-worker", reconciler.intake.nvml.condition)
    supervisor.watch("health-source", parts.health.source_condition)
    supervisor.watch("mps-probes", reconciler.probes.condition)
    dra = reconciler.inputs.dra
    if dra is not None:
        supervisor.watch("dra-slice-watch", partial(_slice_watch, dra))
    supervisor.add(
        Service(
            NODE_WATCH, start=partial(_call, labels.start), stop=labels.stop, look=labels.condition
        ),
        grace=WATCH_GRACE,
    )
    loop = Task(
        LOOP,
        partial(_run_loop, reconciler),
        first=reconciler.start,
        ask=partial(mailbox.post, Hint.SHUTDOWN),
        waited=True,  # `serve` waits for it, and raises what it fails with
        on_end=ended,
    )
    supervisor.add(loop, grace=LOOP_GRACE)
    watcher = partial(
        kubelet_dir_watcher, kubelet_socket=Path(flags.kubelet_socket), mailbox=mailbox
    )
    supervisor.add(Task("kubelet-dir-watch", watcher, on_end=ended), grace=SOURCE_GRACE)
    if dra is not None:
        # On every node (a node can move to DRA at any time); it watches
        # nothing until DRA sockets are served.
        watcher = partial(dra_dir_watcher, sockets=dra, mailbox=mailbox)
        supervisor.add(Task("dra-dir-watch", watcher, on_end=ended), grace=SOURCE_GRACE)
    watched = watch_target(flags.config_directory, flags.config_file)
    if watched is not None:
        watcher = partial(config_dir_watcher, target=watched, mailbox=mailbox)
        supervisor.add(Task("config-dir-watch", watcher, on_end=ended), grace=SOURCE_GRACE)
    if not labels.selects_config:
        late = partial(_watch_node_late, labels, parts.health, parts.published)
        supervisor.add(Task("node-watch-late", late, on_end=ended), grace=SOURCE_GRACE)
    return loop


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
        StartupError: the inspection endpoint or the probes cannot listen.
    """
    # Several threads share the interpreter (the loop serving the kubelet, the
    # endpoint's two, NVML, the preferred-allocation search): hand the lock on
    # every millisecond rather than every five, so none waits long for a turn.
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    parts = build(boot, argv, env, fail_on_init_error=fail_on_init_error)
    loop = _supervise(parts)
    supervisor = parts.supervisor
    signals.install(parts.mailbox, stopping=parts.stopping)
    try:
        # Listening first: the probes and /state answer while the Kubernetes
        # client is imported, the node label awaited and the first
        # registration attempted, each of which can take seconds.
        await supervisor.start(through=NODE_WATCH)
        await _read_label(parts)
        if not parts.stopping.is_set():
            await supervisor.start(through=LOOP)
            gc.enable()  # off during start-up (`reconciler.__main__`)
            await supervisor.start()
            _say_where(parts)
            await loop.wait()
    finally:
        signals.uninstall()
        await supervisor.stop()
    logger.info("stopped")


async def _read_label(parts: Parts) -> None:
    """The node label's first value (waited for, bounded), and the cordon annotation with it."""
    labels, health = parts.labels, parts.health
    value = await labels.initial(timeout=LABEL_WAIT_SECONDS, stopping=parts.stopping)
    parts.reconciler.intake.same_label(value)
    # What the first list said of the cordon annotation holds from the first pass on.
    health.want_cordon(labels.annotation)
    health.cordon_read(labels.off)


def _say_where(parts: Parts) -> None:
    """Said once start-up is through: a start that exits 1 says one line only."""
    endpoint = parts.endpoint.server
    logger.info(
        "inspection endpoint on http://{host}:{port}/state", host=endpoint.host, port=endpoint.port
    )
    if parts.probes is not None:
        probes = parts.probes.server
        logger.info(
            "probes on http://{host}:{port}/healthz and /readyz",
            host=probes.host,
            port=probes.port,
        )


async def _run_loop(reconciler: Reconciler, *, stop: asyncio.Event) -> None:
    """Handle hints until shutdown (a stop is asked for through the mailbox)."""
    await reconciler.run()


async def _close(reconciler: Reconciler, grace: float) -> None:
    """Close what the loop drives: servers stopped, sockets removed, NVML shut down."""
    await reconciler.close()


async def _watch_node_late(
    labels: NodeLabelSource, health: HealthMonitor, published: Published, *, stop: asyncio.Event
) -> None:
    """Start the node watch that start-up left out (annotation only); say on /state if it runs."""
    await labels.start_late(stop)
    health.cordon_read(labels.off)
    published.refresh()


class _Listener(Protocol):
    """An endpoint on threads of its own (`ThreadedEndpoint`, `ProbeEndpoint`)."""

    @property
    def running(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self, grace: float = ...) -> bool: ...


def _listener(name: str, endpoint: _Listener, what: str) -> Service:
    """An endpoint as a runnable: a bind failure is one line naming `what`."""
    return Service(
        name,
        start=partial(_listen, endpoint.start, what),
        stop=endpoint.stop,
        look=partial(alive, endpoint),
    )


async def _listen(start: Callable[[], Awaitable[None]], what: str) -> None:
    """Start a listener; a port in use or a foreign address is one line."""
    try:
        await start()
    except OSError as err:
        # asyncio words a bind failure as a sentence about a tuple; the
        # system's reason reads better after our own address and flag.
        reason = os.strerror(err.errno) if err.errno else str(err)
        raise StartupError(f"cannot serve {what}: {reason}") from None


async def _nothing() -> None:
    """A start with nothing to do: the loop's passes start the servers."""


async def _call(work: Callable[[], None]) -> None:
    work()


def _log_sink() -> Condition:
    return RUNNING if logs.native_stderr_running() else THREAD_ENDED


def _slice_watch(dra: DraSide) -> Condition:
    """The DRA slice watch: made on DRA mode's first use (`actuators.dra`), closed with it."""
    parts = dra.parts
    if parts is None:
        return Condition(RunState.PENDING, "started on the first use of DRA mode")
    publisher = parts.publisher
    if publisher.watching:
        return RUNNING
    if publisher.closed:
        return Condition(RunState.STOPPED)
    return THREAD_ENDED
