"""`nvidia-device-plugin`: parse settings, configure logging, run until stopped.

    nvidia-device-plugin [flags]                 run the plugin
    nvidia-device-plugin check [--print] FILE    validate a config file (`settings.check`)
    nvidia-device-plugin --version | --help

Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 1 when start-up fails with
`--fail-on-init-error` (the default) or the settings are invalid, with one
line per problem on stderr.

The SIGTERM handler is installed before the imports below, which take a
noticeable part of a second: a pod deleted meanwhile still exits 0, as the
kubelet API asks of a stop. The cyclic garbage collector is off from then
until the first pass is over (`reconciler.app.serve.serve` turns it back on, or
`main` as it returns): importing makes many objects and no garbage worth a
collection, and collecting through it costs about a tenth of start-up
(`python -m bench --only startup`). This is the one module where statements
come before imports (ruff's E402 is off for it).
"""

from __future__ import annotations

import gc
import signal
from types import FrameType


def _stop_before_serving(signum: int, frame: FrameType | None) -> None:
    # Nothing is served yet, so there is nothing to clean up: a stop now is a
    # clean stop. The event loop's own handlers replace this one once it runs.
    raise SystemExit(0)


signal.signal(signal.SIGTERM, _stop_before_serving)
signal.signal(signal.SIGINT, _stop_before_serving)
gc.disable()

import asyncio
import os
import sys
from collections.abc import Sequence

from loguru import logger

from foundation import logs
from foundation.version import version
from reconciler.app.serve import StartupError, serve
from reconciler.core.loop import FatalInitError
from settings import (
    ConfigError,
    EffectiveConfig,
    cli_help,
    load_config,
    wants_help,
    wants_version,
)
from settings.check import run_check
from settings.flags import PLUGIN_FLAGS

PROGRAM = "nvidia-device-plugin"


def _fail(lines: Sequence[str]) -> int:
    for line in lines:
        print(f"{PROGRAM}: {line}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        gc.enable()


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["check"]:
        return run_check(args[1:], program=f"{PROGRAM} check")
    if wants_help(args):
        print(cli_help())
        return 0
    if wants_version(args):
        print(PLUGIN_FLAGS.version_text(version()))
        return 0
    env = dict(os.environ)
    fail_on_init_error: bool | None = None
    try:
        boot = load_config(args, env)
    except ConfigError as err:
        if err.fail_on_init_error:
            return _fail(err.lines())
        # failOnInitError=false (even if only the broken file says so): stay
        # up, blocked, say why on /state, and wait for the file to be fixed.
        fail_on_init_error = False
        try:
            boot = load_config(args, env, config_file="")
        except ConfigError as flags_err:
            return _fail(flags_err.lines())
    return _run(boot, args, env, fail_on_init_error)


def _run(boot: EffectiveConfig, args: list[str], env: dict[str, str], fail: bool | None) -> int:
    logs.configure(boot.flags.log_format, route_native_stderr=True)
    log = logger.bind(logger=PROGRAM)
    log.info("{} {} starting", PROGRAM, version())
    try:
        asyncio.run(serve(boot, args, env, fail_on_init_error=fail))
    except (FatalInitError, StartupError) as err:
        log.error("start-up failed: {}", str(err))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
