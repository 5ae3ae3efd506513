"""The ``mps-control-daemon`` run loop: read the config, start the daemons, supervise.

One pass reads the config (`mps.node_config`), discovers the GPUs, starts one
control daemon per MPS-shared resource and supervises them until something
ends the pass. Events arrive on one queue, from signal handlers and from the
node label watch's thread:

- SIGTERM, SIGINT, SIGQUIT: stop everything and exit (0, or 1 when stopping
  hit a problem).
- SIGHUP: stop the daemons and start a new pass, as the reference does.
- The node's config label changed: the config is selected and read again
  while the daemons keep running; only when it changes what they are built
  from are they stopped and a new pass started. An unreadable or unknown
  config leaves them running.

Devices that cannot be read yet (NVML not loaded) are retried with a capped
backoff; an invalid configuration ends the command with status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from devices.backends import open_library
from devices.compute_mode import ComputeModeControl
from devices.library import DeviceLibrary
from foundation.backoff import Backoff
from foundation.errors import PermanentError, PluginError
from mps.daemon import ControlDaemon, DaemonTools
from mps.endpoint import DaemonTelemetry
from mps.layout import CONTAINER_ROOT, MpsLayout
from mps.limits import DaemonSpec
from mps.node_config import ConfigSource, Loaded, daemon_inputs, follow_label
from mps.plan import gpu_selection, needs_mps, plan_daemons
from mps.supervisor import Supervisor, SupervisorOptions
from settings import ConfigError, EffectiveConfig, SetValue

__all__ = ["LABEL_CHANGED", "LABEL_WAIT_SECONDS", "DaemonArgs", "load_specs", "serve"]

_RESTART_CAP = 30.0
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
# How long start-up waits for the first read of the node label (as the plugin).
LABEL_WAIT_SECONDS = 10.0
LABEL_CHANGED = "node label changed"

Event = signal.Signals | str


@dataclass(frozen=True)
class DaemonArgs:
    """The daemon's own options (the plugin's settings are read separately)."""

    container_root: Path = CONTAINER_ROOT
    set_compute_mode: bool = True
    health_interval: float = 10.0
    restart_backoff: float = 1.0
    command_timeout: float = 10.0
    mount_command: str = "mount"
    umount_command: str = "umount"
    meminfo: Path = Path("/proc/meminfo")
    mountinfo: Path = Path("/proc/self/mountinfo")
    metrics_address: str = ""
    label_wait: float = LABEL_WAIT_SECONDS


def load_specs(config: EffectiveConfig) -> tuple[tuple[DaemonSpec, ...], DeviceLibrary | None]:
    """The daemons this node needs under ``config``, from the devices.

    Also returns the device library, still initialised, when there are
    daemons to run (their GPUs' compute mode is set through it); the caller
    shuts it down once the daemons are stopped.

    Raises:
        ResourceError, MpsConfigError: permanent problems.
        NvmlUnavailable, DiscoveryError: the devices could not be read (yet).
    """
    for warning in config.warnings:
        logger.warning("{}", warning)
    if not needs_mps(config.sharing):
        logger.info(
            "sharing strategy is {}; no MPS control daemon is needed", config.sharing.strategy.value
        )
        return (), None
    library = open_library(
        config.flags.mock_nvml or None,
        driver_root=config.flags.driver_root_ctr_path,
        strategy=config.flags.device_discovery_strategy,
    )
    library.init()
    try:
        inventory = library.inventory()
        for warning in gpu_selection(config, inventory).warnings:
            logger.warning("{}", warning)
        specs = plan_daemons(config, inventory)
    except BaseException:
        library.shutdown()
        raise
    for spec in specs:
        logger.bind(resource=spec.resource).info(
            "MPS control daemon planned for {} GPU(s): {}",
            len(spec.gpu_uuids),
            "; ".join(spec.commands),
        )
    return specs, library


def _daemons(
    specs: Sequence[DaemonSpec], args: DaemonArgs, library: DeviceLibrary | None
) -> list[ControlDaemon]:
    layout = MpsLayout(args.container_root)
    modes = library if isinstance(library, ComputeModeControl) else None
    tools = DaemonTools(
        compute_modes=modes if args.set_compute_mode else None,
        command_timeout=args.command_timeout,
    )
    return [ControlDaemon(spec, layout=layout, tools=tools) for spec in specs]


async def _next_event(queue: asyncio.Queue[Event], delay: float) -> Event | None:
    """The next event within ``delay`` seconds, if any."""
    try:
        async with asyncio.timeout(delay):
            return await queue.get()
    except TimeoutError:
        return None


async def serve(
    given: Mapping[str, SetValue], env: Mapping[str, str], args: DaemonArgs, boot: EffectiveConfig
) -> int:
    """Run the daemons until a stop signal; the process exit status.

    `boot` is the config the entry point read from the flags and the
    environment: it decides whether the node label is followed, and without
    a config directory it is what the first pass runs with.
    """
    try:
        telemetry = DaemonTelemetry(args.metrics_address)
        await telemetry.start()
    except (ValueError, OSError) as error:
        logger.error("--metrics-address {}: {}", args.metrics_address, error)
        return 1
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Event] = asyncio.Queue()
    handled = (signal.SIGHUP, *_STOP_SIGNALS)
    for signum in handled:
        loop.add_signal_handler(signum, queue.put_nowait, signum)
    follower = None
    try:
        source = ConfigSource(given, env, args.container_root, boot)

        def label_seen(_: str | None) -> None:  # from the watch thread
            loop.call_soon_threadsafe(queue.put_nowait, LABEL_CHANGED)

        follower = follow_label(boot, env, label_seen)
        if follower is not None:
            source.label_value = follower.value
            stopped = await _first_label(queue, args.label_wait)
            if stopped is not None:
                logger.info("received {}, stopped", stopped.name)
                return 0
        return await _passes(source, args, queue, telemetry)
    finally:
        if follower is not None:
            await asyncio.to_thread(follower.stop)
        await telemetry.stop()
        for signum in handled:
            loop.remove_signal_handler(signum)


async def _first_label(queue: asyncio.Queue[Event], timeout: float) -> signal.Signals | None:
    """Wait for the label's first read (it posts an event); a stop signal ends the wait.

    Waiting a little avoids starting the default config's daemons for a
    moment and then restarting them, which would cut off their clients.
    """
    if timeout <= 0:
        return None  # --label-wait 0: start with the default at once, follow the label after
    deadline = asyncio.get_running_loop().time() + timeout
    while (remaining := deadline - asyncio.get_running_loop().time()) > 0:
        event = await _next_event(queue, remaining)
        if event == LABEL_CHANGED:
            return None
        if isinstance(event, signal.Signals) and event in _STOP_SIGNALS:
            return event
    logger.warning(
        "no answer from the Kubernetes API within {t:g}s; starting without the node label",
        t=timeout,
    )
    return None


async def _passes(
    source: ConfigSource,
    args: DaemonArgs,
    queue: asyncio.Queue[Event],
    telemetry: DaemonTelemetry,
) -> int:
    backoff = Backoff(initial=args.restart_backoff, cap=_RESTART_CAP)
    failures = 0
    while True:
        try:
            # Reading the config and starting NVML block (NVML for seconds on
            # a busy driver): off the loop that answers /healthz and signals.
            loaded, (specs, library) = await asyncio.to_thread(_load, source)
        except ConfigError as error:
            for line in error.lines():
                logger.error("{}", line)
            return 1
        except PermanentError as error:
            logger.error("{}", error)
            return 1
        except PluginError as error:
            telemetry.load_failed()
            delay = backoff.delay(failures)
            failures += 1
            logger.error("{}; retrying in {:g}s (attempt {})", error, delay, failures)
            if await _next_event(queue, delay) in _STOP_SIGNALS:
                return 0
            continue
        failures = 0
        source.accept(loaded)
        supervisor = Supervisor(
            _daemons(specs, args, library),
            layout=MpsLayout(args.container_root),
            options=SupervisorOptions(
                health_interval=args.health_interval,
                backoff=Backoff(initial=args.restart_backoff, cap=_RESTART_CAP),
            ),
        )
        telemetry.supervising(supervisor)
        received, fatal = await _supervise(supervisor, queue, source, loaded)
        telemetry.supervising(None)
        problems = await supervisor.shutdown()
        if library is not None:
            await asyncio.to_thread(library.shutdown)
        for problem in problems:
            logger.error("stopping: {}", problem)
        if fatal is not None:
            logger.error("{}", fatal)
            return 1
        if received is signal.SIGHUP or received == LABEL_CHANGED:
            continue
        name = received.name if isinstance(received, signal.Signals) else "stop"
        logger.info("received {}, stopped", name)
        return 1 if problems else 0


async def _supervise(
    supervisor: Supervisor, queue: asyncio.Queue[Event], source: ConfigSource, running: Loaded
) -> tuple[Event | None, BaseException | None]:
    """Supervise until an event ends the pass (returned) or supervising fails (the error)."""
    work = asyncio.create_task(supervisor.supervise(), name="mps supervisor")
    waiting: asyncio.Task[Event] | None = None
    try:
        while True:
            waiting = asyncio.create_task(queue.get(), name="mps events")
            await asyncio.wait({work, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                return None, (None if work.cancelled() else work.exception())
            event = waiting.result()
            if event == LABEL_CHANGED:
                restart, running = await _reselect(source, running)
                if not restart:
                    continue
            elif event is signal.SIGHUP:
                logger.info("received SIGHUP, restarting")
            return event, None
    finally:
        # A finished task holds its outcome (returned above); only running ones are ended.
        for task in (work, waiting):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _load(
    source: ConfigSource,
) -> tuple[Loaded, tuple[tuple[DaemonSpec, ...], DeviceLibrary | None]]:
    """The config the source selects now, and the daemons it needs (blocks: in a thread)."""
    loaded = source.load()
    return loaded, load_specs(loaded.config)


async def _reselect(source: ConfigSource, running: Loaded) -> tuple[bool, Loaded]:
    """After a label change: whether the daemons must restart, and the config in use."""
    try:
        candidate = await asyncio.to_thread(source.load)
    except ConfigError as error:
        for line in error.lines():
            logger.error("{}", line)
        logger.error("keeping the running MPS daemons and their config")
        return False, running
    if daemon_inputs(candidate.config) != daemon_inputs(running.config):
        logger.info(
            "config {name} changes the MPS daemons; restarting them",
            name=candidate.name or "(none)",
        )
        return True, running
    if candidate.name != running.name:
        logger.info(
            "config {name} needs the same MPS daemons; they keep running",
            name=candidate.name or "(none)",
        )
    source.accept(candidate)
    return False, candidate
