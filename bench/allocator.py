"""GetPreferredAllocation's algorithm in-process, from `bench.preferred_allocation`.

`preferred_allocation` times the allocator's answer for every request size on
8- and 16-GPU nodes and checks each answer against an exhaustive search; this
module runs it with counts that fit the chosen mode and turns its statistics
into rows (latency, with the share of answers as good as the exhaustive one in
the note). Its full quality tables go to the JSON details, and are printed
with `python -m bench --details`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bench import preferred_allocation as pa
from bench.report import Outcome, Row
from devices.model import Inventory

HEADERS = [
    "node",
    "GPUs",
    "cases",
    "median ms",
    "p99 ms",
    "max ms",
    "exact path",
    "same set",
    "same score",
    "optimal tiling",
    "checked against",
]


def _nodes(quick: bool) -> list[tuple[str, Inventory]]:
    nodes: list[tuple[str, Callable[[], tuple[str, Inventory]]]] = [
        ("dgx-a100", lambda: pa.profile("dgx-a100", pa._dgx_a100_in_code)),
        ("dgx1-volta", lambda: ("dgx1-volta", pa.dgx1_volta())),
        ("hgx-16", lambda: pa.profile("hgx-16", pa._hgx_16_in_code)),
        ("mesh-16", lambda: ("mesh-16", pa.mesh_16())),
        ("random-16", lambda: ("random-16", pa.random_16())),
    ]
    wanted = {"dgx-a100", "hgx-16"} if quick else {name for name, _ in nodes}
    return [build() for name, build in nodes if name in wanted]


def _table(rows: Sequence[Sequence[str]], headers: Sequence[str] = HEADERS) -> str:
    widths = [max(len(c) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def measure(quick: bool) -> Outcome:
    repeats = 1 if quick else pa.REPEATS
    rows: list[Row] = []
    detail: list[list[str]] = []
    heuristic: list[list[str]] = []
    for name, inventory in _nodes(quick):
        gpus = len(inventory.gpus)
        stats = pa.measure(inventory, repeats=repeats)
        check = "literal enumeration" if gpus <= 8 else "exact DP, no budget"
        detail.append(stats.row(name, gpus, check))
        cases = len(stats.latencies)
        rows.append(
            Row.of(
                "allocator",
                f"allocator.preferred[{name}]",
                "ms",
                [s * 1000 for s in stats.latencies],
                note=f"in-process, sizes 1..{gpus}; same set {stats.same_set}/{cases}, "
                f"optimal tiling {stats.optimal_tiling}/{cases}",
            )
        )
        if gpus > 8 and not quick:
            heuristic.append(pa.heuristic_quality(inventory).row(name, gpus, "exact DP, no budget"))
    greedy = [s * 1000 for s in pa.greedy_latency(repeats=50 if quick else 200)]
    rows.append(
        Row.of(
            "allocator",
            "allocator.preferred[replicas]",
            "ms",
            greedy,
            note="in-process, dgx1-volta x 10 replicas, distributed policy",
        )
    )
    tables = {"GetPreferredAllocation, whole GPUs (topology-aware)": _table(detail)}
    if heuristic:
        title = "Local search alone (exact path disabled), sizes 2..N-1, >= N-4 GPUs free"
        tables[title] = _table(heuristic)
    return Outcome(
        rows=rows, details={"tables": tables, "whole_gpus": detail, "local_search": heuristic}
    )


async def run(*, quick: bool) -> Outcome:
    # Called on the loop's own thread: nothing else runs meanwhile, and a
    # worker thread would only add GIL hand-offs to the timings.
    return measure(quick)
