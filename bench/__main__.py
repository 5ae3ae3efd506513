"""`python -m bench`: run the benchmark groups, print one table, write JSON.

    python -m bench                      every group, full counts (a few minutes)
    python -m bench --quick              smaller counts, under a minute
    python -m bench --only rpc,restart   just these groups
    python -m bench --output FILE        JSON somewhere other than bench/results/latest.json
    python -m bench --details            also print the GetPreferredAllocation quality tables

Groups run one after another, never in parallel: on a small machine two
groups would measure each other. A group that cannot run here (for example
without a Kubernetes API to watch) says why, and the other rows still come out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench import (
    allocator,
    api_economy,
    capacity,
    dra,
    dra_depth,
    dra_slices,
    health,
    idle,
    labels,
    lifecycle,
    loop,
    preferred_scale,
    rpc,
    scale,
)
from bench.report import Outcome, Row, render

Group = Callable[..., Awaitable[Outcome]]

GROUPS: dict[str, Group] = {
    "rpc": rpc.run,
    "startup": lifecycle.run_startup,
    "restart": lifecycle.run_restart,
    "config": lifecycle.run_config_edit,
    "repair": lifecycle.run_socket_repair,
    "stop": lifecycle.run_stop,
    "capacity": capacity.run,
    "label": labels.run,
    "api": api_economy.run,
    "dra": dra.run,
    "dra_slices": dra_slices.run,
    "dra_depth": dra_depth.run,
    "health": health.run,
    "idle": idle.run,
    "scale": scale.run,
    "allocator": allocator.run,
    "preferred_scale": preferred_scale.run,
    "loop": loop.run,
}
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (< 60 s in all)")
    parser.add_argument(
        "--only",
        type=lambda text: [name for name in text.split(",") if name],
        default=list(GROUPS),
        help=f"comma list of groups: {','.join(GROUPS)}",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--details", action="store_true", help="print per-group detail tables")
    args = parser.parse_args(argv)
    unknown = [name for name in args.only if name not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    return args


async def run_groups(names: Sequence[str], *, quick: bool) -> dict[str, tuple[Outcome, float]]:
    done: dict[str, tuple[Outcome, float]] = {}
    for name in names:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        outcome = await GROUPS[name](quick=quick)
        elapsed = time.monotonic() - started
        print(f"bench: {name} done in {elapsed:.1f} s", file=sys.stderr, flush=True)
        done[name] = (outcome, elapsed)
    return done


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    started = time.time()
    done = asyncio.run(run_groups(args.only, quick=args.quick))
    rows: list[Row] = [row for outcome, _ in done.values() for row in outcome.rows]

    mode = "quick" if args.quick else "full"
    print(f"\nBenchmarks ({mode}, {os.cpu_count()} CPUs, Python {platform.python_version()})")
    print(render(rows))
    skipped = {name: o.skipped for name, (o, _) in done.items() if o.skipped}
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    misses = [line for row in rows if (line := row.miss()) is not None]
    print("\nGoals: " + ("all met" if not misses else f"{len(misses)} missed"))
    for line in misses:
        print(f"  MISSED {line}")
    if args.details:
        for name, (outcome, _) in done.items():
            for title, table in outcome.details.get("tables", {}).items():
                print(f"\n{title}  [{name}]\n{table}")

    document: dict[str, Any] = {
        "mode": mode,
        "started": started,
        "seconds": time.time() - started,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "groups": {
            name: {"seconds": elapsed, "skipped": outcome.skipped, "details": outcome.details}
            for name, (outcome, elapsed) in done.items()
        },
        "rows": [row.to_dict() for row in rows],
        "missed": misses,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nJSON: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
