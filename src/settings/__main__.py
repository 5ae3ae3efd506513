"""``python -m settings``: check a config the way the plugin would load it.

    python -m settings --check FILE [plugin flags...]
    python -m settings [plugin flags...]        (uses --config-file / CONFIG_FILE)

Prints the effective configuration as JSON and exits 0, or prints the one
line describing the first problem to stderr and exits 1, also for a replica
count that could not fit on any node (see `settings.capacity`). Warnings (unknown
keys, ignored fields) go to stderr, one per line. Useful in CI for the
files of a ConfigMap before they reach a node.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from settings.capacity import check_replica_counts
from settings.errors import ConfigError, HelpRequested
from settings.loader import load_config

USAGE = "usage: python -m settings [--check FILE] [plugin flags...]\n"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    config_file: str | None = None
    if "--check" in arguments:
        at = arguments.index("--check")
        if at + 1 >= len(arguments):
            sys.stderr.write(USAGE)
            return 2
        config_file = arguments[at + 1]
        del arguments[at : at + 2]
    try:
        config = load_config(arguments, config_file=config_file)
        check_replica_counts(config)
    except HelpRequested as request:
        sys.stdout.write(USAGE + "\n" + request.text)
        return 0
    except ConfigError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    for warning in config.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    sys.stdout.write(json.dumps(config.to_json(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
