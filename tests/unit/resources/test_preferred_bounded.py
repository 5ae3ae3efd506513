"""Preferred allocation answers validly at any node size, even when its search is cut short.

The nodes are synthetic (`bench.preferred_scale`: no inventory, no NVML):
boards of NVLinked GPUs on two sockets, up to 2048 GPUs. The search has
wall-clock budgets (`EXACT_SECONDS`, `SEARCH_SECONDS`); here they are spent
before the search starts, to show that a search cut short still answers
validly. How long the answers take at these sizes is measured by
`make bench` (`preferred_scale`).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.preferred_scale import replicas, whole_gpus
from resources.aligned import best_effort


def assert_valid(answer: list[str], available: list[str], required: list[str], size: int) -> None:
    assert len(answer) == size
    assert len(set(answer)) == size
    assert set(answer) <= set(available)
    assert answer[: len(required)] == required


@settings(max_examples=25, deadline=None)
@given(
    count=st.integers(2, 2048),
    board=st.sampled_from([1, 2, 4, 8]),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_whole_gpus_answer_validly_within_budget_at_any_size(
    count: int, board: int, seed: int, data: st.DataObject
) -> None:
    allocator = whole_gpus(count, board)
    ids = [device.id for device in allocator.resource.devices]
    rng = random.Random(seed)
    offered = rng.sample(ids, data.draw(st.integers(1, count)))
    size = data.draw(st.integers(1, len(offered)))
    required = rng.sample(offered, data.draw(st.integers(0, min(size, 4))))
    answer = allocator.preferred(offered, required, size)
    assert_valid(answer, offered, required, size)


def test_the_sizes_that_used_to_stall_or_overflow() -> None:
    # Whole nodes asked for pairs: 5 s at 256 GPUs, over 30 s at 512 and an
    # OverflowError at about 1500 before the budgets.
    for count in (128, 256, 512, 1500, 2048):
        allocator = whole_gpus(count, 8)
        ids = [device.id for device in allocator.resource.devices]
        answer = allocator.preferred(ids, [], 2)
        assert_valid(answer, ids, [], 2)
        # A pair on one board (NVLink) is found even when the search is cut short.
        assert int(answer[0][4:12], 16) // 8 == int(answer[1][4:12], 16) // 8


def test_a_large_group_with_required_gpus_stays_within_budget() -> None:
    allocator = whole_gpus(2048, 8)
    ids = [device.id for device in allocator.resource.devices]
    offered = ids[1:]
    required = [ids[100], ids[1500]]
    answer = allocator.preferred(offered, required, 1024)
    assert_valid(answer, offered, required, 1024)


def test_small_nodes_still_get_the_exact_answer() -> None:
    # 16 GPUs in boards of 8, asked for 8: the exact programme picks a board.
    allocator = whole_gpus(16, 8)
    ids = [device.id for device in allocator.resource.devices]
    answer = allocator.preferred(ids, [], 8)
    assert sorted(answer) == ids[:8]


def test_thousands_of_replicas_are_spread_two_per_gpu() -> None:
    gpus = 1024
    allocator = replicas(gpus, 16)
    assert not allocator.aligned
    ids = [device.id for device in allocator.resource.devices]
    answer = allocator.preferred(ids, [], 2048)
    # Distributed: two replicas on every GPU before a third on any.
    per_gpu = Counter(device_id.split("::")[0] for device_id in answer)
    assert len(per_gpu) == gpus
    assert set(per_gpu.values()) == {2}


@pytest.mark.parametrize(
    ("count", "size", "required"),
    [
        pytest.param(16, 8, [], id="exact-path-out-of-time"),
        pytest.param(512, 2, [], id="tiling-search-out-of-time"),
        pytest.param(2048, 64, [3, 2000], id="grown-group-out-of-time"),
    ],
)
def test_a_search_with_no_time_left_still_answers_validly(
    count: int, size: int, required: list[int]
) -> None:
    weights = whole_gpus(count, 8).resource.links.matrix
    chosen = best_effort(weights, required, size, exact_seconds=0.0, search_seconds=0.0)
    members = list(chosen.members)
    assert len(members) == len(set(members)) == size
    assert set(required) <= set(members)
    assert all(0 <= m < count for m in members)
