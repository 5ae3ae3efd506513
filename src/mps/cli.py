"""``mps-control-daemon``: run the node's MPS control daemons, or mount their shm.

Two commands, as in the reference image:

- ``mps-control-daemon [flags]`` reads the plugin's settings (the same flags,
  variables and config file, or the file of ``--config-directory`` that the
  node label selects), discovers the GPUs, starts one control daemon per
  MPS-shared resource and supervises them until SIGTERM/SIGINT/SIGQUIT (stop
  everything, exit 0, or 1 if stopping hit a problem). SIGHUP stops them,
  re-reads the config and starts again; so does a change of the node label
  that selects a config with other daemons (`mps.service`, `mps.node_config`).
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
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from foundation import logs
from foundation.version import version
from mps.layout import MpsLayout
from mps.node_config import load_daemon_config
from mps.service import LABEL_WAIT_SECONDS, DaemonArgs, load_specs, serve
from mps.shm import MountError, ShmTools, mount_shm
from settings import ConfigError, FlagSet, SetValue, wants_help, wants_version
from settings.flag_spec import FlagSpec, Kind
from settings.flags import FLAGS, FLAGS_BY_FIELD

__all__ = ["DAEMON_FLAGS", "MOUNT_FLAGS", "DaemonArgs", "load_specs", "main", "serve"]

PROGRAM = "mps-control-daemon"

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
    FlagSpec("label_wait", ("label-wait",), ("MPS_LABEL_WAIT",), Kind.SECONDS,
             "seconds start-up waits for the node's config label (config directory only) "
             "before starting the default config's daemons", reference=False,
             default=LABEL_WAIT_SECONDS),
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


def _usage() -> str:
    return DAEMON_FLAGS.help_text(
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
        boot = load_daemon_config(given, env, args.container_root)
    except ConfigError as error:
        for line in error.lines():
            print(f"{PROGRAM}: {line}", file=sys.stderr)
        return 1
    logs.configure(boot.flags.log_format.value)
    logger.info("{} {} starting", PROGRAM, version())
    return asyncio.run(serve(given, env, args, boot))


if __name__ == "__main__":
    sys.exit(main())
