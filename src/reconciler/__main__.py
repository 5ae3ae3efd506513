"""`nvidia-device-plugin`: parse settings, configure logging, run until stopped.

Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 1 when start-up fails with
`--fail-on-init-error` (the default) or the settings are invalid, with one
line on stderr saying why.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType


def _stop_before_serving(signum: int, frame: FrameType | None) -> None:
    # Nothing is served yet, so there is nothing to clean up: a stop now is a
    # clean stop. The event loop's own handlers replace this one once it runs.
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    # Installed before the heavy imports below, which take a noticeable part of
    # a second: a pod deleted during that time still exits 0.
    signal.signal(signal.SIGTERM, _stop_before_serving)
    signal.signal(signal.SIGINT, _stop_before_serving)

    import asyncio

    from loguru import logger

    from foundation import logs
    from reconciler.app import serve
    from reconciler.loop import FatalInitError
    from settings import ConfigError, cli_help, load_config, wants_help

    args = list(sys.argv[1:] if argv is None else argv)
    if wants_help(args):
        print(cli_help())
        return 0
    env = dict(os.environ)
    fail_on_init_error: bool | None = None
    try:
        boot = load_config(args, env)
    except ConfigError as err:
        if err.fail_on_init_error:
            print(f"nvidia-device-plugin: {err}", file=sys.stderr)
            return 1
        # failOnInitError=false (even if only the broken file says so): stay
        # up, blocked, say why on /state, and wait for the file to be fixed.
        fail_on_init_error = False
        try:
            boot = load_config(args, env, config_file="")
        except ConfigError as flags_err:
            print(f"nvidia-device-plugin: {flags_err}", file=sys.stderr)
            return 1
    logs.configure(boot.flags.log_format)
    try:
        asyncio.run(serve(boot, args, env, fail_on_init_error=fail_on_init_error))
    except FatalInitError as err:
        logger.error("start-up failed: {err}", err=str(err))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
