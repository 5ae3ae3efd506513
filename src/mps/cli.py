"""``mps-control-daemon``: run the node's MPS control daemons, or mount their shm.

Two commands, as in the reference image:

- ``mps-control-daemon [flags]`` reads the plugin's settings (the same flags,
  variables and config file), discovers the GPUs, starts one control daemon
  per MPS-shared resource and supervises them until SIGTERM/SIGINT/SIGQUIT
  (stop everything, exit 0, or 1 if stopping hit a problem). SIGHUP stops
  them, re-reads the config and starts again.
- ``mps-control-daemon mount-shm [flags]`` mounts the shared tmpfs and exits.

Besides the plugin's flags, the daemon takes its own (each with a variable);
they exist so the daemon can run outside its usual container, e.g. under
tests with stand-in programs:

  --mps-container-root / MPS_CONTAINER_ROOT    the MPS root as mounted here (/mps)
  --nvidia-smi / MPS_NVIDIA_SMI                compute-mode tool; "" skips that step
  --health-interval / MPS_HEALTH_INTERVAL      seconds between daemon checks (10)
  --restart-backoff / MPS_RESTART_BACKOFF      first restart delay, doubling to 30 s (1)
  --command-timeout / MPS_COMMAND_TIMEOUT      bound on any one external command (10)
  --metrics-address / MPS_METRICS_ADDRESS      HOST:PORT of /healthz, /readyz, /metrics ("": none)
  mount-shm only:
  --mount-command / MPS_MOUNT_COMMAND          mount program (mount)
  --umount-command / MPS_UMOUNT_COMMAND        umount program (umount)
  --meminfo / MPS_MEMINFO                      meminfo file (/proc/meminfo)
  --mountinfo / MPS_MOUNTINFO                  mountinfo file (/proc/self/mountinfo)

The plugin requires ``--mps-root`` (the host path) whenever MPS is
configured; the daemon never uses the host path, so when it is not given the
container root stands in for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from loguru import logger

from devices.library import open_library
from foundation import logs
from foundation.backoff import Backoff
from foundation.errors import PermanentError, PluginError
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
    HelpRequested,
    cli_help,
    load_config,
    wants_help,
)

__all__ = ["DaemonArgs", "load_specs", "main", "serve"]

PROGRAM = "mps-control-daemon"
_MPS_ROOT_REQUIRED = "using MPS requires --mps-root to be specified"
_RESTART_CAP = 30.0
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message, origin="command line")


@dataclass(frozen=True)
class DaemonArgs:
    """The daemon's own options (the plugin's settings are read separately)."""

    container_root: Path = CONTAINER_ROOT
    nvidia_smi: str = "nvidia-smi"
    health_interval: float = 10.0
    restart_backoff: float = 1.0
    command_timeout: float = 10.0
    mount_command: str = "mount"
    umount_command: str = "umount"
    meminfo: Path = Path("/proc/meminfo")
    mountinfo: Path = Path("/proc/self/mountinfo")
    metrics_address: str = ""


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


_OPTIONS: tuple[tuple[str, str, str, Callable[[str], object]], ...] = (
    # (option, variable, field, type)
    ("--mps-container-root", "MPS_CONTAINER_ROOT", "container_root", Path),
    ("--nvidia-smi", "MPS_NVIDIA_SMI", "nvidia_smi", str),
    ("--health-interval", "MPS_HEALTH_INTERVAL", "health_interval", _seconds),
    ("--restart-backoff", "MPS_RESTART_BACKOFF", "restart_backoff", _seconds),
    ("--command-timeout", "MPS_COMMAND_TIMEOUT", "command_timeout", _seconds),
    ("--mount-command", "MPS_MOUNT_COMMAND", "mount_command", str),
    ("--umount-command", "MPS_UMOUNT_COMMAND", "umount_command", str),
    ("--meminfo", "MPS_MEMINFO", "meminfo", Path),
    ("--mountinfo", "MPS_MOUNTINFO", "mountinfo", Path),
    ("--metrics-address", "MPS_METRICS_ADDRESS", "metrics_address", str),
)


def parse_daemon_args(argv: Sequence[str], env: Mapping[str, str]) -> tuple[DaemonArgs, list[str]]:
    """Split off the daemon's own options (command line > variable > default).

    Returns them and the remaining arguments, which are the plugin's flags.
    """
    parser = _Parser(add_help=False, allow_abbrev=False)
    for option, _, dest, _ in _OPTIONS:
        parser.add_argument(option, dest=dest)
    namespace, rest = parser.parse_known_args(list(argv))
    values: dict[str, object] = {}
    for option, variable, dest, kind in _OPTIONS:
        text = getattr(namespace, dest)
        origin, where = ("command line", option)
        if text is None and variable in env:
            text, origin, where = env[variable], "environment", variable
        if text is None:
            continue
        try:
            values[dest] = kind(text)
        except ValueError:
            raise ConfigError(
                f"invalid value {text!r} (expected a number of seconds > 0)",
                origin=origin,
                path=where,
            ) from None
    return DaemonArgs(**values), rest  # type: ignore[arg-type]


def _load_config(argv: Sequence[str], env: Mapping[str, str], root: Path) -> EffectiveConfig:
    try:
        return load_config(argv, env)
    except ConfigError as error:
        if error.problem != _MPS_ROOT_REQUIRED:
            raise
    return load_config(argv, {**env, "MPS_ROOT": str(root)})


def load_specs(
    argv: Sequence[str], env: Mapping[str, str], *, container_root: Path = CONTAINER_ROOT
) -> tuple[DaemonSpec, ...]:
    """Read the settings and the devices; the daemons this node needs.

    Raises:
        ConfigError, ResourceError, MpsConfigError: permanent problems.
        NvmlUnavailable, DiscoveryError: the devices could not be read (yet).
    """
    config = _load_config(argv, env, container_root)
    for warning in config.warnings:
        logger.warning("{}", warning)
    if not needs_mps(config.sharing):
        logger.info(
            "sharing strategy is {}; no MPS control daemon is needed", config.sharing.strategy.value
        )
        return ()
    library = open_library(
        config.flags.mock_nvml or None, driver_root=config.flags.driver_root_ctr_path
    )
    library.init()
    try:
        inventory = library.inventory()
    finally:
        library.shutdown()
    specs = plan_daemons(config, inventory)
    for spec in specs:
        logger.bind(resource=spec.resource).info(
            "MPS control daemon planned for {} GPU(s): {}",
            len(spec.gpu_uuids),
            "; ".join(spec.commands),
        )
    return specs


def _daemons(specs: Sequence[DaemonSpec], args: DaemonArgs) -> list[ControlDaemon]:
    layout = MpsLayout(args.container_root)
    tools = DaemonTools(nvidia_smi=args.nvidia_smi or None, command_timeout=args.command_timeout)
    return [ControlDaemon(spec, layout=layout, tools=tools) for spec in specs]


async def _next_signal(queue: asyncio.Queue[signal.Signals], delay: float) -> signal.Signals | None:
    """The next signal received within ``delay`` seconds, if any."""
    try:
        async with asyncio.timeout(delay):
            return await queue.get()
    except TimeoutError:
        return None


async def serve(argv: Sequence[str], env: Mapping[str, str], args: DaemonArgs) -> int:
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
                specs = load_specs(argv, env, container_root=args.container_root)
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
                _daemons(specs, args),
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
    return (__doc__ or "").strip() + "\n\nPlugin settings accepted:\n\n" + cli_help()


def _mount_main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    args, rest = parse_daemon_args(argv, env)
    if rest:
        raise ConfigError(f"unexpected argument {rest[0]!r}", origin="command line")
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
    logs.configure(env.get("LOG_FORMAT", "text"))
    if wants_help(arguments):
        print(_usage())
        return 0
    try:
        if arguments[:1] == ["mount-shm"]:
            return _mount_main(arguments[1:], env)
        args, rest = parse_daemon_args(arguments, env)
        boot = _load_config(rest, env, args.container_root)
    except HelpRequested:
        print(_usage())
        return 0
    except ConfigError as error:
        print(f"{PROGRAM}: {error}", file=sys.stderr)
        return 1
    logs.configure(boot.flags.log_format.value)
    return asyncio.run(serve(rest, env, args))


if __name__ == "__main__":
    sys.exit(main())
