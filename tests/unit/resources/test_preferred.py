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
    assert allocator.preferred(available, [], 1) == []  # full: no preference


def test_best_pair_is_found_in_the_last_group_of_a_large_tiling() -> None:
    links = {(i, i + 1): 2 for i in range(0, 12, 2)} | {(12, 13): 4}
    allocator = aligned(topology_node(14, links, {}))
    assert indices(allocator.preferred(uuids(range(14)), [], 2)) == [12, 13]


def test_required_gpus_missing_from_available_get_no_preference() -> None:
    # As from the reference: a required GPU that is not on offer makes every
    # group ineligible. (The kubelet always offers the devices it requires.)
    answer = aligned(DGX1_VOLTA).preferred(uuids(range(4, 8)), uuids([0, 1, 2, 3]), 4)
    assert answer == []


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


# ------------------------------------------------------------------- no preference


def _allocator_and_names(kind: str) -> tuple[Allocator, Callable[[int], str]]:
    if kind == "aligned":
        return aligned(DGX1_VOLTA), gpu_uuid

    def replica(i: int) -> str:
        return f"{gpu_uuid(i // 2)}::{i % 2}"

    return replicated(2, 2), replica


@pytest.mark.parametrize(
    ("available", "required", "size"),
    [
        pytest.param([0, 1, 2], [0, 1], 1, id="more-required-than-size"),
        pytest.param([0, 1], [], 3, id="fewer-available-than-size"),
        pytest.param([0, 1], [], 0, id="size-zero"),
        pytest.param([0, 1], [], -1, id="size-negative"),
        pytest.param([0, 1], [2], 2, id="required-not-available"),
        pytest.param([], [], 1, id="nothing-available"),
    ],
)
@pytest.mark.parametrize("kind", ["aligned", "greedy"])
def test_requests_that_cannot_be_met_get_no_preference(
    kind: str, available: list[int], required: list[int], size: int
) -> None:
    allocator, name = _allocator_and_names(kind)
    answer = allocator.preferred([name(i) for i in available], [name(i) for i in required], size)
    assert answer == []


@pytest.mark.parametrize("kind", ["aligned", "greedy"])
def test_repeated_ids_count_once(kind: str) -> None:
    allocator, name = _allocator_and_names(kind)
    answer = allocator.preferred([name(0), name(0), name(1)], [name(1), name(1)], 2)
    assert sorted(answer) == sorted([name(0), name(1)])
    assert answer[0] == name(1)
    # Two distinct IDs on offer, three asked for: repeats do not make up the count.
    assert allocator.preferred([name(0), name(0), name(1)], [], 3) == []


NO_DEVICE = "unable to retrieve list of {} devices: no device with uuid: {}"


@pytest.mark.parametrize(
    ("available", "required", "message"),
    [
        pytest.param(["GPU-x"], [], NO_DEVICE.format("available", "GPU-x"), id="available"),
        pytest.param([0], ["GPU-y"], NO_DEVICE.format("required", "GPU-y"), id="required"),
    ],
)
def test_unknown_gpus_are_refused_as_by_the_reference(
    available: list[object], required: list[object], message: str
) -> None:
    def resolve(items: list[object]) -> list[str]:
        return [gpu_uuid(i) if isinstance(i, int) else str(i) for i in items]

    with pytest.raises(InvalidRequest, match=message):
        aligned(DGX1_VOLTA).preferred(resolve(available), resolve(required), 1)


def test_unknown_ids_are_ignored_by_the_greedy_policy() -> None:
    allocator = replicated(2, 2)
    ours = replica_ids(0, [0, 1])
    answer = allocator.preferred(["GPU-stranger::0", *ours, "nonsense"], [], 2)
    assert answer == ours
    # Only two known IDs are on offer, so three cannot be met.
    assert allocator.preferred(["GPU-stranger::0", *ours], [], 3) == []


def test_replica_ids_on_offer_switch_whole_gpus_to_the_greedy_policy() -> None:
    # As in the reference: any annotated ID on offer means greedy, where IDs
    # the resource does not have are dropped rather than refused.
    allocator = aligned(DGX1_VOLTA)
    answer = allocator.preferred([f"{gpu_uuid(0)}::0", *uuids([3, 5])], [], 2)
    assert answer == uuids([3, 5])


def test_the_answer_never_holds_an_id_not_on_offer() -> None:
    allocator = aligned(DGX1_VOLTA)
    offered = uuids([1, 4, 6])
    answer = allocator.preferred(offered, [gpu_uuid(4)], 2)
    assert answer[0] == gpu_uuid(4)
    assert set(answer) <= set(offered)


def test_a_size_equal_to_the_required_count_returns_them_as_given() -> None:
    allocator = aligned(DGX1_VOLTA)
    assert allocator.preferred(uuids(range(8)), uuids([5, 1]), 2) == uuids([5, 1])
