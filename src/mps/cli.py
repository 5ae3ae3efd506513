"""``mps-control-daemon``: run the node's MPS control daemons, or mount their shm.

Two commands, as in the reference image:

- ``mps-control-daemon [flags]`` reads the plugin's settings (the same flags,
  variables and config file), discovers the GPUs, starts one control daemon
  per MPS-shared resource and supervises them until SIGTERM/SIGINT/SIGQUIT
  (stop everything, exit 0, or 1 if stopping hit a problem). SIGHUP stops
  them, re-reads the config and starts again.
- ``mps-control-daemon mount-shm [flags]`` mounts the shared tmpfs and exits.

Besides the plugin's flags, the daemon takes a few of its own (each with a
variable, listed by ``--help``); they exist so the daemon can run outside its
usual container, e.g. under tests. All of them are declared as `FlagSpec`
tables and parsed by the same `settings.FlagSet` as the plugin's.

While the daemons run, the device library stays open: the GPUs of each
shared resource are put in ``EXCLUSIVE_PROCESS`` compute mode through it (and
back to ``DEFAULT`` on stop), which under ``--mock-nvml`` the simulated GPUs
record. ``--set-compute-mode=false`` leaves the compute mode to another
component.

The plugin requires ``--mps-root`` (the host path) whenever MPS is
configured; the daemon never uses the host path, so when it is not given the
container root stands in for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from devices.compute_mode import ComputeModeControl
from devices.library import DeviceLibrary, open_library
from foundation import logs
from foundation.backoff import Backoff
from foundation.errors import PermanentError, PluginError
from foundation.version import version
from mps.daemon import ControlDaemon, DaemonTools
from mps.endpoint import DaemonTelemetry
from mps.layout import CONTAINER_ROOT, MpsLayout
from mps.limits import DaemonSpec
from mps.plan import needs_mps, plan_daemons
from mps.shm import MountError, ShmTools, mount_shm
from mps.supervisor import Supervisor, SupervisorOptions
from settings import (
    ConfigError,
    EffectiveConfig,
    FlagSet,
    SetValue,
    load_config,
    wants_help,
    wants_version,
)
from settings.flag_spec import FlagSpec, Kind
from settings.flag_table import FLAGS, FLAGS_BY_FIELD
from settings.help import default_text

__all__ = ["DAEMON_FLAGS", "MOUNT_FLAGS", "DaemonArgs", "load_specs", "main", "serve"]

PROGRAM = "mps-control-daemon"
_MPS_ROOT_REQUIRED = "using MPS requires --mps-root to be specified"
_RESTART_CAP = 30.0
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)

# fmt: off
_OWN: tuple[FlagSpec, ...] = (
    FlagSpec("health_interval", ("health-interval",), ("MPS_HEALTH_INTERVAL",),
             Kind.POSITIVE_SECONDS, "seconds between checks that each daemon answers",
             reference=False, default=10.0),
    FlagSpec("restart_backoff", ("restart-backoff",), ("MPS_RESTART_BACKOFF",),
             Kind.POSITIVE_SECONDS, "first delay before restarting a daemon, doubling to 30 s",
             reference=False, default=1.0),
    FlagSpec("command_timeout", ("command-timeout",), ("MPS_COMMAND_TIMEOUT",),
             Kind.POSITIVE_SECONDS, "seconds any one control command or mode change may take",
             reference=False, default=10.0),
    FlagSpec("set_compute_mode", ("set-compute-mode",), ("MPS_SET_COMPUTE_MODE",), Kind.BOOL,
             "put the shared GPUs in EXCLUSIVE_PROCESS compute mode while their daemon runs; "
             "false leaves the mode to another component", reference=False, default=True),
    FlagSpec("metrics_address", ("metrics-address",), ("MPS_METRICS_ADDRESS",), Kind.STRING,
             "HOST:PORT of /healthz, /readyz and /metrics; empty serves none",
             reference=False, default=""),
)
_MOUNT: tuple[FlagSpec, ...] = (
    FlagSpec("mount_command", ("mount-command",), ("MPS_MOUNT_COMMAND",), Kind.STRING,
             "mount program", reference=False, default="mount"),
    FlagSpec("umount_command", ("umount-command",), ("MPS_UMOUNT_COMMAND",), Kind.STRING,
             "umount program", reference=False, default="umount"),
    FlagSpec("meminfo", ("meminfo",), ("MPS_MEMINFO",), Kind.STRING,
             "meminfo file (sizes the tmpfs)", reference=False, default="/proc/meminfo"),
    FlagSpec("mountinfo", ("mountinfo",), ("MPS_MOUNTINFO",), Kind.STRING,
             "mountinfo file (finds a previous mount)", reference=False,
             default="/proc/self/mountinfo"),
)
# fmt: on

DAEMON_FLAGS = FlagSet(
    PROGRAM,
    (*FLAGS, *_OWN),
    summary="Run and supervise the MPS control daemons of this node's MPS-shared resources.",
)
MOUNT_FLAGS = FlagSet(
    f"{PROGRAM} mount-shm",
    (FLAGS_BY_FIELD["mps_container_root"], *_MOUNT),
    summary="Mount the tmpfs MPS clients share at <mps-container-root>/shm and exit.",
)
_OWN_FIELDS = frozenset(spec.field for spec in (*_OWN, *_MOUNT)) | {"mps_container_root"}


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


def _daemon_args(values: Mapping[str, SetValue]) -> DaemonArgs:
    own: dict[str, Any] = {
        field: value.value for field, value in values.items() if field in _OWN_FIELDS
    }
    if "mps_container_root" in own:
        own["container_root"] = own.pop("mps_container_root")
    for key in ("container_root", "meminfo", "mountinfo"):
        if key in own:
            own[key] = Path(own[key])
    return DaemonArgs(**own)


def parse_daemon_args(
    argv: Sequence[str], env: Mapping[str, str], flags: FlagSet = DAEMON_FLAGS
) -> tuple[DaemonArgs, dict[str, SetValue]]:
    """The daemon's own options (command line > variable > default), and the plugin's flags.

    The second value holds the plugin flags given on the command line; their
    variables are read by the settings loader from ``env``.

    Raises:
        ConfigError: an unknown flag or a malformed value.
    """
    command_line = flags.parse_command_line(argv)
    own = flags.explicit([], env)
    own.update(command_line)
    plugin = {field: value for field, value in command_line.items() if field not in _OWN_FIELDS}
    return _daemon_args(own), plugin


def _load_config(
    given: Mapping[str, SetValue], env: Mapping[str, str], root: Path
) -> EffectiveConfig:
    try:
        return load_config([], env, given=given)
    except ConfigError as error:
        if error.problem != _MPS_ROOT_REQUIRED or error.more:
            raise
    return load_config([], {**env, "MPS_ROOT": str(root)}, given=given)


def load_specs(
    given: Mapping[str, SetValue],
    env: Mapping[str, str],
    *,
    container_root: Path = CONTAINER_ROOT,
) -> tuple[tuple[DaemonSpec, ...], DeviceLibrary | None]:
    """Read the settings and the devices; the daemons this node needs.

    Also returns the device library, still initialised, when there are
    daemons to run (their GPUs' compute mode is set through it); the caller
    shuts it down once the daemons are stopped.

    Raises:
        ConfigError, ResourceError, MpsConfigError: permanent problems.
        NvmlUnavailable, DiscoveryError: the devices could not be read (yet).
    """
    config = _load_config(given, env, container_root)
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
        specs = plan_daemons(config, library.inventory())
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


async def _next_signal(queue: asyncio.Queue[signal.Signals], delay: float) -> signal.Signals | None:
    """The next signal received within ``delay`` seconds, if any."""
    try:
        async with asyncio.timeout(delay):
            return await queue.get()
    except TimeoutError:
        return None


async def serve(given: Mapping[str, SetValue], env: Mapping[str, str], args: DaemonArgs) -> int:
    """Run the daemons until a stop signal; the process exit status."""
    try:
        telemetry = DaemonTelemetry(args.metrics_address)
        await telemetry.start()
    except (ValueError, OSError) as error:
        logger.error("--metrics-address {}: {}", args.metrics_address, error)
        return 1
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[signal.Signals] = asyncio.Queue()
    handled = (signal.SIGHUP, *_STOP_SIGNALS)
    for signum in handled:
        loop.add_signal_handler(signum, queue.put_nowait, signum)
    backoff = Backoff(initial=args.restart_backoff, cap=_RESTART_CAP)
    failures = 0
    try:
        while True:
            try:
                specs, library = load_specs(given, env, container_root=args.container_root)
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
                received = await _next_signal(queue, delay)
                if received in _STOP_SIGNALS:
                    return 0
                continue
            failures = 0
            supervisor = Supervisor(
                _daemons(specs, args, library),
                layout=MpsLayout(args.container_root),
                options=SupervisorOptions(
                    health_interval=args.health_interval,
                    backoff=Backoff(initial=args.restart_backoff, cap=_RESTART_CAP),
                ),
            )
            telemetry.supervising(supervisor)
            received, fatal = await _run_until_signal(supervisor, queue)
            telemetry.supervising(None)
            problems = await supervisor.shutdown()
            if library is not None:
                library.shutdown()
            for problem in problems:
                logger.error("stopping: {}", problem)
            if fatal is not None:
                logger.error("{}", fatal)
                return 1
            if received is signal.SIGHUP:
                logger.info("received SIGHUP, restarting")
                continue
            logger.info("received {}, stopped", received.name if received else "stop")
            return 1 if problems else 0
    finally:
        await telemetry.stop()
        for signum in handled:
            loop.remove_signal_handler(signum)


async def _run_until_signal(
    supervisor: Supervisor, queue: asyncio.Queue[signal.Signals]
) -> tuple[signal.Signals | None, BaseException | None]:
    """Supervise until a signal arrives (returned) or supervising fails (the error)."""
    work = asyncio.create_task(supervisor.supervise(), name="mps supervisor")
    waiting = asyncio.create_task(queue.get(), name="mps signals")
    try:
        await asyncio.wait({work, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, waiting):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if waiting.done() and not waiting.cancelled():
        return waiting.result(), None
    if work.done() and not work.cancelled():
        return None, work.exception()
    return None, None


def _usage() -> str:
    return DAEMON_FLAGS.help_text(
        default_of=default_text,
        preamble=(
            "Commands:",
            "  (none) [flags]        run the daemons until stopped",
            "  mount-shm [flags]     mount the shared tmpfs and exit (--help lists its flags)",
        ),
    )


def _mount_main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    if wants_help(argv):
        print(MOUNT_FLAGS.help_text())
        return 0
    args, _ = parse_daemon_args(argv, env, MOUNT_FLAGS)
    tools = ShmTools(
        mount_program=args.mount_command,
        umount_program=args.umount_command,
        meminfo=args.meminfo,
        mountinfo=args.mountinfo,
    )
    try:
        mount_shm(MpsLayout(args.container_root), tools=tools)
    except MountError as error:
        logger.error("{}", error)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    if wants_version(arguments):
        print(DAEMON_FLAGS.version_text(version()))
        return 0
    logs.configure(env.get("LOG_FORMAT", "text"))
    try:
        if arguments[:1] == ["mount-shm"]:
            return _mount_main(arguments[1:], env)
        if wants_help(arguments):
            print(_usage())
            return 0
        args, given = parse_daemon_args(arguments, env)
        boot = _load_config(given, env, args.container_root)
    except ConfigError as error:
        for line in error.lines():
            print(f"{PROGRAM}: {line}", file=sys.stderr)
        return 1
    logs.configure(boot.flags.log_format.value)
    logger.info("{} {} starting", PROGRAM, version())
    return asyncio.run(serve(given, env, args))


if __name__ == "__main__":
    sys.exit(main())
