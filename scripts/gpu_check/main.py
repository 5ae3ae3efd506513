"""`scripts/gpu-check`: the plugin's real GPU backend checked against the driver's own tools.

Runs, in order, each in its own section, and then a summary:

1. discovery through `devices.backends.open_library` (init, inventory);
2. a side-by-side comparison with `nvidia-smi --query-gpu` (MATCH/DIFF per field);
3. the plugin process against the kubelet simulator: registration, `/state`, one Allocate;
4. registration for health events, a few seconds of watching, a clean stop;
5. `gpu-feature-discovery --oneshot`, printing the labels.

Exit status 0 when every step passes, 1 when any fails or any field is a
DIFF, 2 for a usage error. Nothing changes a GPU setting. `--simulated
PROFILE` is the dry run: the mock backend everywhere and a simulated
nvidia-smi table rendered from the profile, so every step runs on a machine
without a GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from loguru import logger

from devices.model import Inventory

from .plugin_step import plugin_step
from .steps import Backend, Emit, StepResult, compare_step, discovery_step, gfd_step, health_step

STEPS = ("discovery", "compare", "plugin", "health", "gfd")
TITLES = {
    "discovery": "discovery (open_library -> init -> inventory)",
    "compare": "discovery vs nvidia-smi",
    "plugin": "plugin against the kubelet simulator",
    "health": "health events (register, watch, stop)",
    "gfd": "gpu-feature-discovery --oneshot",
}


def _steps(value: str) -> tuple[str, ...]:
    chosen = tuple(s.strip() for s in value.split(",") if s.strip())
    unknown = [s for s in chosen if s not in STEPS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"steps are a comma list of: {', '.join(STEPS)}")
    return chosen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-check",
        description=(
            "Check the plugin's real GPU backend on this node against nvidia-smi, the kubelet "
            "simulator, NVML health events and gpu-feature-discovery. Read-only."
        ),
    )
    parser.add_argument(
        "--simulated",
        metavar="PROFILE",
        help="dry run: use the simulated backend with this node profile (e.g. dgx-a100) "
        "everywhere and compare against a table rendered from the profile",
    )
    parser.add_argument(
        "--smi-csv",
        type=Path,
        metavar="FILE",
        help="compare against nvidia-smi output saved in FILE instead of running nvidia-smi",
    )
    parser.add_argument(
        "--steps",
        type=_steps,
        default=STEPS,
        help=f"comma list of steps to run (default: {','.join(STEPS)})",
    )
    parser.add_argument(
        "--health-seconds",
        type=float,
        default=3.0,
        help="how long to watch for health events (default: 3)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="limit for the plugin to register and for gpu-feature-discovery (default: 60)",
    )
    return parser


def _section(emit: Emit, number: int, name: str) -> Emit:
    emit("")
    emit(f"== {number}. {TITLES[name]} ==")
    return lambda line: emit(f"  {line}" if line else "")


def run(argv: Sequence[str] | None = None, *, emit: Emit | None = None) -> int:
    """Run the check; returns the exit status."""
    args = _parser().parse_args(argv)
    out: Emit = emit or (lambda line: print(line, flush=True))
    backend = Backend(args.simulated)
    out(f"gpu-check: backend {backend.describe()}")
    results: list[StepResult] = []
    inventory: Inventory | None = None
    steps: dict[str, Callable[[Emit], StepResult]] = {
        "compare": lambda e: compare_step(backend, inventory, e, smi_csv=args.smi_csv),
        "plugin": lambda e: plugin_step(backend, e, timeout=args.timeout),
        "health": lambda e: health_step(backend, e, seconds=args.health_seconds),
        "gfd": lambda e: gfd_step(backend, inventory, e, timeout=args.timeout),
    }
    # Discovery runs whenever the comparison or GFD's count check needs its inventory.
    for number, name in enumerate(STEPS, start=1):
        wanted = name in args.steps
        if name == "discovery" and (wanted or {"compare", "gfd"} & set(args.steps)):
            result, inventory = discovery_step(backend, _section(out, number, name))
            if wanted:
                results.append(result)
        elif wanted:
            try:
                results.append(steps[name](_section(out, number, name)))
            except Exception as exc:  # a crash of one step is reported, the others still run
                logger.exception("step {} crashed", name)
                results.append(StepResult(name, False, f"crashed: {type(exc).__name__}: {exc}"))
    return _summary(out, results)


def _summary(out: Emit, results: Sequence[StepResult]) -> int:
    out("")
    out("== summary ==")
    width = max(len(r.name) for r in results)
    for r in results:
        out(f"  {r.name:<{width}}  {'PASS' if r.ok else 'FAIL'}  {r.summary}")
    passed = all(r.ok for r in results)
    out(f"gpu-check: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    # Library warnings go to stdout between the lines they explain, without the debug chatter.
    logger.remove()
    logger.add(sys.stdout, level="WARNING", format="  log | {level}: {message}")
    return run(argv)
