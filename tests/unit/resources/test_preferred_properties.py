"""Property tests of preferred allocation.

* The exact solver returns what the reference's literal enumeration returns,
  including its first-found tie-breaks (scores are drawn from a small set so
  ties are common).
* The local search always returns a valid group, never scores a tiling above
  the exact optimum, and is deterministic.
* `Allocator.preferred` keeps its contract for every kind of resource: the
  required IDs first, exactly `size` distinct IDs, all on offer, the same
  answer for the same request in any order; "no preference" (an empty list)
  when the request cannot be met.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devices.model import Inventory, P2PLevel
from resources.aligned import best_effort
from resources.allocation import Allocator
from resources.builder import build_resources
from resources.options import (
    AllocationPolicy,
    MigStrategy,
    ResourceOptions,
    SharingOptions,
    SharingStrategy,
)
from resources.tiling import exact_tiling, pick, set_score
from resources.tiling_search import heuristic_tiling, reference_tiling

from .nodes import inventory, make_gpu, topology_node

SCORES = [0, 10, 20, 50, 60, 100, 110, 200, 250]


@st.composite
def problems(draw: st.DrawFn, max_count: int = 8) -> tuple[list[list[int]], list[int], int]:
    count = draw(st.integers(2, max_count))
    weights = [[0] * count for _ in range(count)]
    for a in range(count):
        for b in range(a + 1, count):
            weights[a][b] = weights[b][a] = draw(st.sampled_from(SCORES))
    size = draw(st.integers(1, count))
    required = draw(st.lists(st.integers(0, count - 1), unique=True, max_size=size))
    return weights, sorted(required), size


def reference_answer(weights: list[list[int]], required: list[int], size: int) -> tuple[int, ...]:
    if size == 1:
        # The reference's candidates are [d] for each d in order; the first eligible wins.
        return (required[0],) if required else (0,)
    return pick(reference_tiling(weights, required, size), required)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_exact_solver_matches_the_reference_enumeration(
    problem: tuple[list[list[int]], list[int], int],
) -> None:
    weights, required, size = problem
    selection = best_effort(weights, required, size)
    assert selection.exact
    assert selection.members == reference_answer(weights, required, size)
    if 1 < size < len(weights) and len(required) < size:
        assert exact_tiling(weights, required, size) == reference_tiling(weights, required, size)


@settings(max_examples=200, deadline=None)
@given(problems(max_count=10))
def test_local_search_returns_valid_groups(
    problem: tuple[list[list[int]], list[int], int],
) -> None:
    weights, required, size = problem
    if size == 1 or size == len(weights):
        return
    forced = best_effort(weights, required, size, budget=0)
    assert len(forced.members) == size
    assert set(required) <= set(forced.members)
    assert len(set(forced.members)) == size
    assert forced == best_effort(weights, required, size, budget=0)
    heuristic = heuristic_tiling(weights, required, size)
    exact = exact_tiling(weights, required, size)
    assert exact is not None
    assert heuristic.score <= exact.score
    assert sorted(p for tile in heuristic.tiles for p in tile.members) == list(range(len(weights)))
    assert set_score(weights, forced.members) >= 0


def _node(count: int, draw: st.DrawFn) -> Inventory:
    levels = list(P2PLevel)
    links = {}
    p2p = {}
    for a in range(count):
        for b in range(a + 1, count):
            lanes = draw(st.sampled_from([0, 0, 1, 2, 4]))
            if lanes:
                links[a, b] = lanes
            p2p[a, b] = draw(st.sampled_from(levels))
    return topology_node(count, links, p2p)


@st.composite
def allocators(draw: st.DrawFn) -> Allocator:
    kind = draw(st.sampled_from(["aligned", "replicas", "mig"]))
    count = draw(st.integers(1, 6))
    if kind == "aligned":
        node = _node(count, draw)
        options = ResourceOptions()
    elif kind == "replicas":
        node = inventory(make_gpu(i) for i in range(count))
        sharing = SharingOptions(
            strategy=SharingStrategy.TIME_SLICING,
            replicas={"nvidia.com/gpu": draw(st.integers(2, 5))},
        )
        policy = draw(st.sampled_from(list(AllocationPolicy)))
        options = ResourceOptions(sharing=sharing, shared_devices_allocation_policy=policy)
    else:
        per_gpu = draw(st.integers(1, 3))
        layout = [(slot, "1g.5gb", 4864) for slot in range(per_gpu)]
        node = inventory(make_gpu(i, migs=layout) for i in range(count))
        options = ResourceOptions(mig_strategy=MigStrategy.SINGLE)
    (resource,) = build_resources(node, options)
    return Allocator(resource, options)


@settings(max_examples=300, deadline=None)
@given(allocators(), st.data())
def test_preferred_allocation_contract(allocator: Allocator, data: st.DataObject) -> None:
    ids = [device.id for device in allocator.resource.devices]
    available = data.draw(st.lists(st.sampled_from(ids), unique=True, min_size=1))
    required = data.draw(st.lists(st.sampled_from(available), unique=True))
    size = data.draw(st.integers(max(1, len(required)), len(available)))
    answer = allocator.preferred(available, required, size)
    assert len(answer) == size
    assert len(set(answer)) == size
    assert set(answer) <= set(available)
    assert answer[: len(required)] == required
    assert allocator.preferred(available, required, size) == answer
    permuted = list(data.draw(st.permutations(available)))
    assert allocator.preferred(permuted, required, size) == answer


@settings(max_examples=200, deadline=None)
@given(allocators(), st.data())
def test_requests_that_cannot_be_met_get_an_empty_answer(
    allocator: Allocator, data: st.DataObject
) -> None:
    ids = [device.id for device in allocator.resource.devices]
    available = data.draw(st.lists(st.sampled_from(ids), unique=True))
    required = data.draw(st.lists(st.sampled_from(ids), unique=True))
    size = data.draw(st.integers(-2, len(ids) + 2))
    answer = allocator.preferred(available, required, size)
    met = 0 < size <= len(available) and len(required) <= size and set(required) <= set(available)
    if not met:
        assert answer == []
    else:
        assert len(answer) == size
        assert set(answer) <= set(available)
