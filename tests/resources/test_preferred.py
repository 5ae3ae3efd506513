"""GetPreferredAllocation: topology-aware for whole GPUs, distributed/packed otherwise.

The aligned tables are the reference allocator's own test vectors (DGX-1
Volta/Pascal, 4x RTX 8000, a 14-GPU node), fed with index-sorted input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import pytest

from devices.model import Inventory
from resources.allocation import Allocator
from resources.builder import build_resources
from resources.errors import InvalidRequest
from resources.options import (
    AllocationPolicy,
    MigStrategy,
    ResourceOptions,
    SharingOptions,
    SharingStrategy,
)

from .nodes import (
    DGX1_PASCAL,
    DGX1_VOLTA,
    RTX8000_X4,
    gpu_uuid,
    inventory,
    make_gpu,
    mig_uuid,
    topology_node,
)


def indices(ids: Sequence[str]) -> list[int]:
    return sorted(int(device_id[4:12], 16) for device_id in ids)


def uuids(positions: Iterable[int]) -> list[str]:
    return [gpu_uuid(i) for i in positions]


def aligned(node: Inventory) -> Allocator:
    (resource,) = build_resources(node)
    allocator = Allocator(resource)
    assert allocator.aligned
    return allocator


# ----------------------------------------------------------------------------- aligned


@pytest.mark.parametrize(
    ("available", "required", "size", "expected"),
    [
        pytest.param([0, 2, 4, 5], [], 2, [4, 5], id="single-nvlink-prefer-same-switch"),
        pytest.param([0, 4, 5, 6], [], 2, [5, 6], id="single-nvlink-prefer-same-socket"),
        pytest.param([0, 1, 3], [], 2, [0, 3], id="prefer-dual-nvlink-same-socket"),
        pytest.param([0, 1, 4], [], 2, [0, 4], id="prefer-dual-nvlink-cross-socket"),
        pytest.param(range(8), [4], 1, [4], id="must-include-size-1"),
        pytest.param(range(8), [4], 2, [4, 7], id="must-include-size-2"),
        pytest.param(range(8), [4], 4, [4, 5, 6, 7], id="must-include-size-4"),
        pytest.param(range(8), [0, 2, 4, 6], 4, [0, 2, 4, 6], id="must-include-full-set"),
    ],
)
def test_dgx1_volta_vectors(
    available: Sequence[int], required: list[int], size: int, expected: list[int]
) -> None:
    answer = aligned(DGX1_VOLTA).preferred(uuids(available), uuids(required), size)
    assert indices(answer) == expected
    assert answer[: len(required)] == uuids(required)


@pytest.mark.parametrize(
    ("node", "size", "rounds"),
    [
        pytest.param(DGX1_VOLTA, 1, [[i] for i in range(8)], id="volta-1"),
        pytest.param(DGX1_VOLTA, 2, [[0, 3], [1, 2], [4, 7], [5, 6]], id="volta-2"),
        pytest.param(DGX1_VOLTA, 4, [[0, 1, 2, 3], [4, 5, 6, 7]], id="volta-4"),
        pytest.param(DGX1_VOLTA, 8, [list(range(8))], id="volta-8"),
        pytest.param(DGX1_PASCAL, 1, [[i] for i in range(8)], id="pascal-1"),
        pytest.param(DGX1_PASCAL, 2, [[0, 2], [1, 3], [4, 6], [5, 7]], id="pascal-2"),
        pytest.param(DGX1_PASCAL, 4, [[0, 1, 2, 3], [4, 5, 6, 7]], id="pascal-4"),
        pytest.param(RTX8000_X4, 1, [[0], [1], [2], [3]], id="rtx8000-1"),
        pytest.param(RTX8000_X4, 2, [[0, 3], [1, 2]], id="rtx8000-2"),
        pytest.param(RTX8000_X4, 4, [[0, 1, 2, 3]], id="rtx8000-4"),
    ],
)
def test_allocating_in_turn_until_the_node_is_full(
    node: Inventory, size: int, rounds: list[list[int]]
) -> None:
    allocator = aligned(node)
    available = uuids(range(len(node.gpus)))
    for expected in rounds:
        answer = allocator.preferred(available, [], size)
        assert indices(answer) == expected
        available = [device for device in available if device not in answer]
    assert available == []
    with pytest.raises(InvalidRequest, match="not enough available devices"):
        allocator.preferred(available, [], 1)


def test_best_pair_is_found_in_the_last_group_of_a_large_tiling() -> None:
    links = {(i, i + 1): 2 for i in range(0, 12, 2)} | {(12, 13): 4}
    allocator = aligned(topology_node(14, links, {}))
    assert indices(allocator.preferred(uuids(range(14)), [], 2)) == [12, 13]


def test_required_gpus_missing_from_available_are_still_on_offer() -> None:
    # The reference answers nothing here; the kubelet only ever requires
    # devices it may hand out, so they are treated as available.
    answer = aligned(DGX1_VOLTA).preferred(uuids(range(4, 8)), uuids([0, 1, 2, 3]), 4)
    assert answer == uuids([0, 1, 2, 3])


def test_kubelet_order_does_not_change_the_answer() -> None:
    allocator = aligned(DGX1_VOLTA)
    forward = allocator.preferred(uuids(range(8)), [], 2)
    backward = allocator.preferred(uuids(reversed(range(8))), [], 2)
    assert forward == backward


# ----------------------------------------------------------------------------- greedy


def replicated(
    gpus: int, replicas: int, policy: AllocationPolicy = AllocationPolicy.DISTRIBUTED
) -> Allocator:
    options = ResourceOptions(
        sharing=SharingOptions(
            strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": replicas}
        ),
        shared_devices_allocation_policy=policy,
    )
    (resource,) = build_resources(inventory(make_gpu(i) for i in range(gpus)), options)
    allocator = Allocator(resource, options)
    assert not allocator.aligned
    return allocator


def per_gpu(ids: Sequence[str]) -> dict[int, int]:
    return dict(Counter(int(device_id[4:12], 16) for device_id in ids))


def replica_ids(gpu: int, numbers: Sequence[int]) -> list[str]:
    return [f"{gpu_uuid(gpu)}::{n}" for n in numbers]


def test_worked_example_distributed_spreads() -> None:
    # A::0 is in use; the other 7 replicas are free; 3 are asked for.
    available = replica_ids(0, [1, 2, 3]) + replica_ids(1, [0, 1, 2, 3])
    answer = replicated(2, 4).preferred(available, [], 3)
    assert per_gpu(answer) == {1: 2, 0: 1}
    assert answer == [f"{gpu_uuid(1)}::0", f"{gpu_uuid(0)}::1", f"{gpu_uuid(1)}::1"]


def test_worked_example_packed_fills_the_busy_gpu() -> None:
    available = replica_ids(0, [1, 2, 3]) + replica_ids(1, [0, 1, 2, 3])
    answer = replicated(2, 4, AllocationPolicy.PACKED).preferred(available, [], 3)
    assert answer == replica_ids(0, [1, 2, 3])


def test_packed_moves_on_when_a_gpu_is_full() -> None:
    available = replica_ids(0, [3]) + replica_ids(1, [0, 1, 2, 3]) + replica_ids(2, [2, 3])
    answer = replicated(3, 4, AllocationPolicy.PACKED).preferred(available, [], 3)
    assert answer == [f"{gpu_uuid(0)}::3", *replica_ids(2, [2, 3])]


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        pytest.param(4, {0: 1, 1: 1, 2: 1, 3: 1}, id="one-per-gpu"),
        pytest.param(6, {0: 2, 1: 2, 2: 1, 3: 1}, id="then-doubling-up"),
    ],
)
def test_distributed_uses_distinct_gpus_first(size: int, expected: dict[int, int]) -> None:
    allocator = replicated(4, 4)
    available = [f"{gpu_uuid(g)}::{n}" for g in range(4) for n in range(4)]
    assert per_gpu(allocator.preferred(available, [], size)) == expected


def test_required_replicas_count_as_allocated_and_come_first() -> None:
    allocator = replicated(2, 4)
    available = replica_ids(0, [0, 1, 2, 3]) + replica_ids(1, [0, 1, 2, 3])
    answer = allocator.preferred(available, [f"{gpu_uuid(0)}::2"], 2)
    assert answer == [f"{gpu_uuid(0)}::2", f"{gpu_uuid(1)}::0"]


def test_mig_devices_spread_over_physical_gpus_on_ties() -> None:
    layout = [(0, "1g.5gb", 4864), (1, "1g.5gb", 4864)]
    node = inventory([make_gpu(0, migs=layout), make_gpu(1, migs=layout)])
    options = ResourceOptions(mig_strategy=MigStrategy.MIXED)
    (resource,) = build_resources(node, options)
    allocator = Allocator(resource, options)
    assert not allocator.aligned
    all_migs = [mig_uuid(g, s) for g in range(2) for s in range(2)]
    assert allocator.preferred(all_migs, [], 2) == [mig_uuid(0, 0), mig_uuid(1, 0)]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("available", "required", "size", "message"),
    [
        pytest.param(["GPU-x"], [], 1, "unknown device in available list: GPU-x", id="unknown"),
        pytest.param(
            [0], ["GPU-y"], 1, "unknown device in required list: GPU-y", id="unknown-required"
        ),
        pytest.param([0, 0], [], 1, "listed more than once in available list", id="dup"),
        pytest.param([0, 1], [1, 1], 2, "listed more than once in required list", id="dup-req"),
        pytest.param(
            [0, 1, 2], [0, 1], 1, "allocation size 1 is smaller than the 2 required", id="small"
        ),
        pytest.param([0, 1], [], 3, "not enough available devices", id="too-big"),
        pytest.param([0, 1], [], 0, "allocation size must be at least 1, got 0", id="zero"),
    ],
)
@pytest.mark.parametrize("kind", ["aligned", "greedy"])
def test_impossible_requests_are_refused(
    kind: str, available: list[object], required: list[object], size: int, message: str
) -> None:
    name: Callable[[int], str]
    if kind == "aligned":
        allocator = aligned(DGX1_VOLTA)
        name = gpu_uuid
    else:
        allocator = replicated(2, 2)

        def name(i: int) -> str:
            return f"{gpu_uuid(i // 2)}::{i % 2}"

    def resolve(items: list[object]) -> list[str]:
        return [name(i) if isinstance(i, int) else str(i) for i in items]

    with pytest.raises(InvalidRequest, match=message):
        allocator.preferred(resolve(available), resolve(required), size)


def test_a_size_equal_to_the_required_count_returns_them_as_given() -> None:
    allocator = aligned(DGX1_VOLTA)
    assert allocator.preferred(uuids(range(8)), uuids([5, 1]), 2) == uuids([5, 1])
