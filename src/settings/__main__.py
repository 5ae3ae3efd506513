"""``python -m settings``: check a config the way the plugin would load it.

    python -m settings --check FILE [--print] [plugin flags...]
    python -m settings [plugin flags...]        (uses --config-file / CONFIG_FILE)

The first form is ``nvidia-device-plugin check`` (see `settings.check`):
silent and exit 0 for a valid file unless ``--print`` asks for the effective
config, every problem on stderr and exit 1 otherwise. The second form prints
the effective configuration the flags and environment give, as JSON.
Warnings (unknown keys, ignored fields) go to stderr, one per line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from settings.check import report, run_check

USAGE = "usage: python -m settings [--check FILE [--print]] [plugin flags...]\n"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--check" in arguments:
        at = arguments.index("--check")
        return run_check(
            arguments[at + 1 : at + 2] + arguments[:at] + arguments[at + 2 :],
            program="python -m settings --check",
        )
    if any(argument in ("-h", "--help", "-help") for argument in arguments):
        sys.stdout.write(USAGE + "\n")
    return report(None, arguments, env=None, show=True, out=sys.stdout, err=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
