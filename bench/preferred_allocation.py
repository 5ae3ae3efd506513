"""Latency and quality of GetPreferredAllocation on 8- and 16-GPU nodes.

For each node, every request size 1..N is asked for with every GPU free and
with several seeded random sets of free GPUs (30% of them with one required
GPU). Each answer
from `Allocator.preferred` is timed, and its group is compared with the
exhaustive answer of the same scoring rule:

* 8-GPU nodes: the reference's own enumeration of every tiling, stated
  literally (`reference_tiling`);
* 16-GPU nodes: the exact dynamic programme without a budget (it visits every
  tiling implicitly; the tests prove it equal to the enumeration on small
  nodes), because the literal enumeration takes minutes there.

Columns: `same set` = the very group the reference returns; `same score` =
a group scoring as high as the reference's (a different group among equals);
`optimal tiling` = the tiling behind the answer scores as high as the best.

Nodes: `dgx-a100` and `hgx-16` are the shipped simulated profiles (NVSwitch
and all-to-all NVLink, so many ties); `dgx1-volta`, `mesh-16` (two DGX-1
meshes joined GPU to GPU) and `random-16` (seeded random links) are irregular
and built here, since uniform links make every tiling of a NUMA node equally
good. A second table runs the local search alone on the 16-GPU nodes, to
measure it where the exact path would normally take over.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from devices.model import Gpu, Inventory, P2PLevel
from resources.aligned import best_effort
from resources.allocation import Allocator
from resources.builder import build_resources
from resources.options import ResourceOptions, SharingOptions, SharingStrategy
from resources.tiling import exact_tiling, pick, set_score
from resources.tiling_search import reference_tiling

SEED = 20240601
REPEATS = 10

Table = tuple[str, list[str], list[list[str]]]

_VOLTA = (
    "0-1:1 0-2:1 0-3:2 0-4:2 1-2:2 1-3:1 1-5:2 2-3:2 "
    "2-6:1 3-7:1 4-5:1 4-6:1 4-7:2 5-6:2 5-7:1 6-7:2"
)


def _gpu(index: int, numa: int, nvlinks: dict[int, int], p2p: dict[int, P2PLevel]) -> Gpu:
    return Gpu(
        index=index,
        minor=index,
        uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000",
        name="NVIDIA A100-SXM4-80GB",
        memory_mib=81920,
        pci_bus_id=f"00000000:{index + 7:02X}:00.0",
        numa_node=numa,
        compute_capability="8.0",
        nvlinks=nvlinks,
        p2p=p2p,
    )


def _node(
    count: int, lanes: dict[tuple[int, int], int], level: Callable[[int, int], P2PLevel]
) -> Inventory:
    links: list[dict[int, int]] = [{} for _ in range(count)]
    for (a, b), n in lanes.items():
        links[a][b] = links[b][a] = n
    gpus = [
        _gpu(i, i * 2 // count, links[i], {j: level(i, j) for j in range(count) if j != i})
        for i in range(count)
    ]
    return Inventory(driver_version="550.54.15", cuda_driver_version="12.4", gpus=tuple(gpus))


def _parse(text: str, offset: int = 0) -> dict[tuple[int, int], int]:
    pairs = {}
    for item in text.split():
        pair, n = item.split(":")
        a, b = pair.split("-")
        pairs[int(a) + offset, int(b) + offset] = int(n)
    return pairs


def _board_level(size: int) -> Callable[[int, int], P2PLevel]:
    def level(a: int, b: int) -> P2PLevel:
        if a // size != b // size:
            return P2PLevel.SYSTEM
        if a // 2 == b // 2:
            return P2PLevel.SINGLE
        return P2PLevel.HOSTBRIDGE if a // 4 == b // 4 else P2PLevel.NODE

    return level


def dgx1_volta() -> Inventory:
    return _node(8, _parse(_VOLTA), _board_level(4))


def mesh_16() -> Inventory:
    lanes = _parse(_VOLTA) | _parse(_VOLTA, offset=8) | {(i, i + 8): 1 for i in range(8)}
    return _node(16, lanes, _board_level(8))


def random_16(seed: int = SEED) -> Inventory:
    """16 GPUs with random lane counts and PCIe levels: no structure to lean on."""
    rng = random.Random(seed)
    lanes = {
        (a, b): n
        for a in range(16)
        for b in range(a + 1, 16)
        if (n := rng.choice([0, 0, 0, 1, 2, 4])) > 0
    }
    levels = {(a, b): rng.choice(list(P2PLevel)) for a in range(16) for b in range(a + 1, 16)}
    return _node(16, lanes, lambda a, b: levels[min(a, b), max(a, b)])


def _dgx_a100_in_code() -> Inventory:
    return _node(8, {(a, b): 12 for a in range(8) for b in range(a + 1, 8)}, _board_level(4))


def _hgx_16_in_code() -> Inventory:
    return _node(16, {(a, b): 18 for a in range(16) for b in range(a + 1, 16)}, _board_level(8))


def profile(name: str, fallback: Callable[[], Inventory]) -> tuple[str, Inventory]:
    """A shipped simulated node profile, or the same shape built here."""
    try:
        from devices.simulated import PROFILES_DIR, build_inventory, load_profile

        return name, build_inventory(load_profile(PROFILES_DIR / f"{name}.yaml"))
    except Exception:
        return f"{name} (in code)", fallback()


@dataclass
class Stats:
    latencies: list[float]
    exact_path: int = 0
    same_set: int = 0
    same_score: int = 0
    optimal_tiling: int = 0

    def row(self, name: str, gpus: int, check: str) -> list[str]:
        cases = len(self.latencies)
        ordered = sorted(self.latencies)
        p99 = ordered[min(cases - 1, round(0.99 * (cases - 1)))]
        return [
            name,
            str(gpus),
            str(cases),
            f"{statistics.median(ordered) * 1000:.2f}",
            f"{p99 * 1000:.2f}",
            f"{ordered[-1] * 1000:.2f}",
            f"{self.exact_path}/{cases}",
            f"{self.same_set}/{cases}",
            f"{self.same_score}/{cases}",
            f"{self.optimal_tiling}/{cases}",
            check,
        ]


def _exhaustive(
    weights: list[list[int]], need: list[int], size: int, literal: bool
) -> tuple[tuple[int, ...], int]:
    """The reference's group and its tiling's score, by exhaustive search."""
    if size == 1:
        return ((need[0] if need else 0),), 0
    if len(need) == size or size == len(weights):
        members = tuple(need) if len(need) == size else tuple(range(len(weights)))
        return members, set_score(weights, members)
    tiling = reference_tiling(weights, need, size) if literal else exact_tiling(weights, need, size)
    assert tiling is not None
    return pick(tiling, need), tiling.score


def measure(inventory: Inventory, *, repeats: int = REPEATS, seed: int = SEED) -> Stats:
    (resource,) = build_resources(inventory)
    allocator = Allocator(resource)
    assert resource.links is not None
    ids = [device.id for device in resource.devices]
    count = len(ids)
    literal = count <= 8
    rng = random.Random(seed)
    stats = Stats([])
    for size in range(1, count + 1):
        for repeat in range(repeats):
            # Every GPU free first (the hardest case), then random subsets, in
            # the resource's (NVML index) order, which the allocator works in.
            free = count if repeat == 0 else rng.randint(size, count)
            available = sorted(rng.sample(ids, free), key=ids.index)
            required = rng.sample(available, 1) if size > 1 and rng.random() < 0.3 else []
            started = time.perf_counter()
            answer = allocator.preferred(available, required, size)
            stats.latencies.append(time.perf_counter() - started)

            weights = resource.links.weights(available)
            need = [available.index(r) for r in required]
            chosen = tuple(sorted(available.index(a) for a in answer))
            selection = best_effort(weights, need, size)
            assert selection.members == chosen, "allocator and solver disagree"
            best_group, best_tiling = _exhaustive(weights, need, size, literal)
            stats.exact_path += selection.exact
            stats.same_set += chosen == best_group
            stats.same_score += set_score(weights, chosen) == set_score(weights, best_group)
            stats.optimal_tiling += selection.tiling_score == best_tiling
    return stats


def heuristic_quality(inventory: Inventory, *, repeats: int = 4, seed: int = SEED) -> Stats:
    """The local search alone (budget 0) against the exact answer, on large requests."""
    (resource,) = build_resources(inventory)
    assert resource.links is not None
    ids = [device.id for device in resource.devices]
    count = len(ids)
    rng = random.Random(seed)
    stats = Stats([])
    for size in range(2, count):
        for repeat in range(repeats):
            free = count if repeat == 0 else rng.randint(max(size + 1, count - 4), count)
            available = sorted(rng.sample(ids, free), key=ids.index)
            need = [0] if repeat % 2 else []
            weights = resource.links.weights(available)
            started = time.perf_counter()
            selection = best_effort(weights, need, size, budget=0)
            stats.latencies.append(time.perf_counter() - started)
            best_group, best_tiling = _exhaustive(weights, need, size, literal=False)
            stats.exact_path += selection.exact
            stats.same_set += selection.members == best_group
            stats.same_score += set_score(weights, selection.members) == set_score(
                weights, best_group
            )
            stats.optimal_tiling += selection.tiling_score == best_tiling
    return stats


def greedy_latency(*, repeats: int = 200, seed: int = SEED) -> list[float]:
    """Latency of the distributed policy on 8 GPUs x 10 replicas."""
    options = ResourceOptions(
        sharing=SharingOptions(
            strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": 10}
        )
    )
    (resource,) = build_resources(dgx1_volta(), options)
    allocator = Allocator(resource, options)
    ids = [device.id for device in resource.devices]
    rng = random.Random(seed)
    latencies = []
    for _ in range(repeats):
        available = rng.sample(ids, rng.randint(8, len(ids)))
        size = rng.randint(1, 8)
        started = time.perf_counter()
        allocator.preferred(available, [], size)
        latencies.append(time.perf_counter() - started)
    return latencies


def run() -> Sequence[Table]:
    nodes = [
        profile("dgx-a100", _dgx_a100_in_code),
        ("dgx1-volta", dgx1_volta()),
        profile("hgx-16", _hgx_16_in_code),
        ("mesh-16", mesh_16()),
        ("random-16", random_16()),
    ]
    headers = [
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
    rows = []
    for name, inventory in nodes:
        stats = measure(inventory)
        check = "literal enumeration" if len(inventory.gpus) <= 8 else "exact DP, no budget"
        rows.append(stats.row(name, len(inventory.gpus), check))
    heuristic_rows = [
        heuristic_quality(inventory).row(name, len(inventory.gpus), "exact DP, no budget")
        for name, inventory in nodes
        if len(inventory.gpus) > 8
    ]
    greedy = sorted(greedy_latency())
    greedy_rows = [
        [
            "dgx1-volta x10 replicas (distributed)",
            str(len(greedy)),
            f"{statistics.median(greedy) * 1000:.3f}",
            f"{greedy[round(0.99 * (len(greedy) - 1))] * 1000:.3f}",
        ]
    ]
    return [
        ("GetPreferredAllocation, whole GPUs (topology-aware)", headers, rows),
        (
            "Local search alone (exact path disabled), sizes 2..N-1, >= N-4 GPUs free",
            headers,
            heuristic_rows,
        ),
        (
            "GetPreferredAllocation, replicas",
            ["resource", "cases", "median ms", "p99 ms"],
            greedy_rows,
        ),
    ]
