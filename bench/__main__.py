"""Run every benchmark module of this package and print its tables.

Usage: `python -m bench [module ...]` from the repository root; with no
arguments every module runs.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from collections.abc import Sequence

import bench


def render(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    line = "  ".join("-" * width for width in widths)
    out = [title, line, "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), line]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(out)


def main(argv: Sequence[str]) -> int:
    names = list(argv) or sorted(
        info.name for info in pkgutil.iter_modules(bench.__path__) if not info.name.startswith("_")
    )
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        started = time.perf_counter()
        tables = module.run()
        elapsed = time.perf_counter() - started
        for title, headers, rows in tables:
            print(render(f"{title}  [bench.{name}]", headers, rows))
            print()
        print(f"bench.{name}: {elapsed:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
