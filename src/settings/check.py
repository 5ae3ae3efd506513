"""``nvidia-device-plugin check FILE``: validate a config before it reaches a node.

The checker loads the file exactly as the plugin would at start-up (the same
loader, with any plugin flags and the environment on top), so it approves
what the plugin accepts and rejects what the plugin rejects, the ``health``
section included. It is meant for CI on the files of a ConfigMap:

- exit 0 and print nothing on stdout when the config is valid (warnings such
  as unknown keys still go to stderr, one per line, prefixed ``warning:``);
  ``--print`` (or ``-v``) also prints the effective config as JSON;
- exit 1 with every problem on stderr, one per line;
- exit 2 for a command line the checker itself does not understand.

``python -m settings --check FILE`` is the same command.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from settings.capacity import check_replica_counts
from settings.errors import ConfigError, HelpRequested
from settings.loader import load_config

__all__ = ["PRINT_OPTIONS", "run_check", "usage"]

PRINT_OPTIONS = frozenset({"--print", "-v", "--verbose"})


def usage(program: str) -> str:
    return (
        f"usage: {program} [--print|-v] FILE [plugin flags...]\n"
        "  Validate FILE as the plugin would load it (with the plugin flags and the\n"
        "  environment on top). Exit 0 when valid, 1 with every problem on stderr.\n"
        "  --print, -v   also print the effective config as JSON\n"
    )


def run_check(
    argv: Sequence[str],
    *,
    program: str,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the checker on ``argv`` (``[--print] FILE [flags...]``); the exit status."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    arguments = list(argv)
    if any(argument in ("-h", "--help", "-help") for argument in arguments):
        out.write(usage(program))
        return 0
    show = any(argument in PRINT_OPTIONS for argument in arguments)
    arguments = [argument for argument in arguments if argument not in PRINT_OPTIONS]
    if not arguments or arguments[0].startswith("-"):
        err.write(usage(program))
        return 2
    path, flags = arguments[0], arguments[1:]
    return report(path, flags, env=env, show=show, out=out, err=err)


def report(
    path: str | None,
    flags: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    show: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    """Load (``path`` None: the file the flags name) and report; the exit status."""
    try:
        config = load_config(flags, env, config_file=path)
        # Counts no node could serve: refused here as the plugin would refuse them.
        check_replica_counts(config)
    except HelpRequested as request:
        out.write(request.text)
        return 0
    except ConfigError as error:
        for line in error.lines():
            err.write(f"{line}\n")
        return 1
    for warning in config.warnings:
        err.write(f"warning: {warning}\n")
    if show:
        out.write(json.dumps(config.to_json(), indent=2) + "\n")
    return 0
