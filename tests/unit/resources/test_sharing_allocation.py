"""Allocation of shared resources: distinctDevices, repeated IDs, ties, MPS limits per container.

- `distinctDevices`: preferred allocation spreads a request over as many
  devices as it can, required IDs included, and Allocate refuses two
  replicas of one device in the shape of `failRequestsGreaterThanOne`.
- Repeated IDs count once in `available`, `must_include` and Allocate.
- Ties go to devices with nothing allocated yet (v0.20.0).
- MPS with `failRequestsGreaterThanOne: false`: a container holding several
  replicas of one GPU is told the sum of their limits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.allocation import Allocator
from resources.builder import build_resources
from resources.errors import InvalidRequest
from resources.options import (
    AllocationPolicy,
    MigStrategy,
    ResourceOptions,
    ShareRule,
    SharingOptions,
    SharingStrategy,
)

from .nodes import gpu_uuid, inventory, make_gpu, mig_uuid

GPU = "nvidia.com/gpu"


def allocator(
    counts: Sequence[int],
    *,
    distinct: bool = False,
    policy: AllocationPolicy = AllocationPolicy.DISTRIBUTED,
    strategy: SharingStrategy = SharingStrategy.TIME_SLICING,
    fail: bool | None = None,
    memory_mib: Sequence[int] | None = None,
) -> Allocator:
    """GPU i replicated counts[i] times, one sharing entry per GPU."""
    rules = tuple(
        ShareRule(name=GPU, replicas=count, devices=(i,), distinct_devices=distinct or None)
        for i, count in enumerate(counts)
    )
    options = ResourceOptions(
        sharing=SharingOptions(strategy=strategy, rules=rules, fail_requests_greater_than_one=fail),
        shared_devices_allocation_policy=policy,
        mps_root="/run/nvidia/mps",
    )
    memory = memory_mib or [make_gpu(0).memory_mib] * len(counts)
    node = inventory(replace(make_gpu(i), memory_mib=m) for i, m in enumerate(memory))
    (resource,) = build_resources(node, options)
    return Allocator(resource, options, new_response_id=lambda: "rid")


def rid(gpu: int, replica: int) -> str:
    return f"{gpu_uuid(gpu)}::{replica}"


def every(counts: Sequence[int]) -> list[str]:
    return [rid(g, n) for g, count in enumerate(counts) for n in range(count)]


def gpus_of(ids: Sequence[str]) -> Counter[int]:
    return Counter(int(i[4:12], 16) for i in ids)


# --------------------------------------------------------------------- distinctDevices


def test_distinct_devices_prefers_one_replica_per_gpu_even_under_packed() -> None:
    counts = [4, 4, 4]
    packed = allocator(counts, policy=AllocationPolicy.PACKED)
    assert gpus_of(packed.preferred(every(counts), [], 3)) == {0: 3}
    distinct = allocator(counts, policy=AllocationPolicy.PACKED, distinct=True)
    assert gpus_of(distinct.preferred(every(counts), [], 3)) == {0: 1, 1: 1, 2: 1}


def test_distinct_devices_counts_the_required_replicas() -> None:
    alloc = allocator([2, 2, 2], distinct=True)
    answer = alloc.preferred(every([2, 2, 2]), [rid(1, 0)], 3)
    assert answer[0] == rid(1, 0)
    assert gpus_of(answer) == {0: 1, 1: 1, 2: 1}


def test_distinct_devices_doubles_up_only_when_no_other_gpu_is_on_offer() -> None:
    alloc = allocator([4, 4], distinct=True)
    # GPU 1's replicas are all in use: the request must take two of GPU 0.
    assert gpus_of(alloc.preferred(every([4, 0]), [], 2)) == {0: 2}
    assert gpus_of(alloc.preferred(every([4, 4]), [], 3)) == {0: 2, 1: 1}


@settings(max_examples=80, deadline=None)
@given(
    counts=st.lists(st.integers(2, 4), min_size=1, max_size=5),
    data=st.data(),
)
def test_distinct_devices_answers_hold_as_many_gpus_as_the_offer_allows(
    counts: list[int], data: st.DataObject
) -> None:
    alloc = allocator(counts, distinct=True)
    offered = data.draw(st.lists(st.sampled_from(every(counts)), min_size=1, unique=True))
    size = data.draw(st.integers(1, len(offered)))
    required = data.draw(st.lists(st.sampled_from(offered), max_size=size, unique=True))
    answer = alloc.preferred(offered, required, size)
    assert len(answer) == size
    assert answer[: len(required)] == required
    assert set(answer) <= set(offered)
    # Distinct GPUs: all the required ones, plus as many others as are on offer.
    on_offer = set(gpus_of(offered))
    needed = size - len(required)
    expected = min(len(on_offer), len(set(gpus_of(required))) + needed)
    assert len(gpus_of(answer)) == expected


def test_allocate_refuses_two_replicas_of_one_gpu_with_distinct_devices() -> None:
    alloc = allocator([4, 4], distinct=True)
    with pytest.raises(InvalidRequest) as caught:
        alloc.allocate([rid(0, 0), rid(1, 2), rid(0, 3)])
    assert str(caught.value) == (
        'invalid allocation request for "nvidia.com/gpu": invalid request: maximum number of '
        "replicas of one device for shared resources with distinctDevices is 1; "
        f"found 2 of {gpu_uuid(0)}"
    )
    assert len(str(caught.value).splitlines()) == 1
    edits = alloc.allocate([rid(0, 0), rid(1, 2)])
    assert edits.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpu_uuid(0)},{gpu_uuid(1)}"


def test_without_distinct_devices_two_replicas_of_one_gpu_are_allowed() -> None:
    alloc = allocator([4, 4])
    edits = alloc.allocate([rid(0, 0), rid(0, 1)])
    assert edits.envs["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(0)


def test_distinct_mig_replicas_are_distinct_mig_devices() -> None:
    layout = [(0, "1g.5gb", 4864), (1, "1g.5gb", 4864)]
    sharing = SharingOptions(
        strategy=SharingStrategy.TIME_SLICING,
        rules=(ShareRule(name="nvidia.com/mig-1g.5gb", replicas=2, distinct_devices=True),),
    )
    options = ResourceOptions(mig_strategy=MigStrategy.MIXED, sharing=sharing)
    (resource,) = build_resources(inventory([make_gpu(0, migs=layout)]), options)
    alloc = Allocator(resource, options)
    a, b = mig_uuid(0, 0), mig_uuid(0, 1)
    answer = alloc.preferred([f"{a}::0", f"{a}::1", f"{b}::0", f"{b}::1"], [], 2)
    assert answer == [f"{a}::0", f"{b}::0"]
    alloc.allocate([f"{a}::0", f"{b}::1"])  # two MIG devices of one GPU: distinct devices
    with pytest.raises(InvalidRequest, match=f"found 2 of {a}"):
        alloc.allocate([f"{a}::0", f"{a}::1"])


# ------------------------------------------------------------------------ repeated IDs


def test_a_repeated_id_in_allocate_counts_once() -> None:
    strict = allocator([2, 2], fail=True, distinct=True)
    edits = strict.allocate([rid(0, 1), rid(0, 1)])
    assert edits.envs["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(0)
    with pytest.raises(
        InvalidRequest, match="maximum request size for shared resources is 1; found 2"
    ):
        strict.allocate([rid(0, 1), rid(1, 0), rid(0, 1)])


def test_repeated_ids_in_available_and_must_include_are_removed_before_choosing() -> None:
    alloc = allocator([2, 2])
    offered = [rid(0, 0), rid(0, 0), rid(0, 1), rid(1, 0), rid(1, 0), rid(1, 1)]
    answer = alloc.preferred(offered, [rid(0, 0), rid(0, 0)], 2)
    assert answer == [rid(0, 0), rid(1, 0)]
    # Two distinct IDs on offer: repeats do not make up a request for three.
    assert alloc.preferred([rid(0, 0), rid(0, 0), rid(1, 0)], [], 3) == []


# ------------------------------------------------------------------------------- ties


def test_ties_go_to_the_gpu_with_nothing_allocated_yet() -> None:
    # Per-GPU counts: GPU 0 has 4 replicas, one in use; GPU 1 has 2, none in use.
    # Under distributed, the free GPU comes first.
    alloc = allocator([4, 2])
    offered = [rid(0, 1), rid(0, 2), rid(0, 3), rid(1, 0), rid(1, 1)]
    assert alloc.preferred(offered, [], 1) == [rid(1, 0)]


def test_mig_devices_go_to_a_gpu_none_of_whose_devices_is_in_use() -> None:
    layout = [(0, "1g.5gb", 4864), (1, "1g.5gb", 4864)]
    node = inventory([make_gpu(0, migs=layout), make_gpu(1, migs=layout)])
    options = ResourceOptions(mig_strategy=MigStrategy.MIXED)
    (resource,) = build_resources(node, options)
    alloc = Allocator(resource, options)
    # mig(0, 0) is in use: GPU 1, with nothing allocated, gets the first pick.
    offered = [mig_uuid(0, 1), mig_uuid(1, 0), mig_uuid(1, 1)]
    assert alloc.preferred(offered, [], 1) == [mig_uuid(1, 0)]
    # Then both GPUs have one device busy: the next pick goes back to GPU 0.
    assert alloc.preferred(offered, [], 2) == [mig_uuid(1, 0), mig_uuid(0, 1)]


# --------------------------------------------------------------------------- MPS limits


def mps(counts: Sequence[int], memory_mib: Sequence[int] | None = None) -> Allocator:
    return allocator(counts, strategy=SharingStrategy.MPS, fail=False, memory_mib=memory_mib)


def test_mps_fails_requests_greater_than_one_unless_told_otherwise() -> None:
    strict = allocator([2, 2], strategy=SharingStrategy.MPS)
    with pytest.raises(InvalidRequest, match="maximum request size for shared resources is 1"):
        strict.allocate([rid(0, 0), rid(0, 1)])


def test_mps_container_with_two_replicas_of_one_gpu_gets_their_summed_limits() -> None:
    alloc = mps([4, 4])  # 40 GiB GPUs: 10240M and 25% per replica
    edits = alloc.allocate([rid(0, 0), rid(0, 1)])
    assert list(edits.envs.items()) == [
        ("CUDA_MPS_PIPE_DIRECTORY", "/mps/nvidia.com/gpu/pipe"),
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=20480M"),
        ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"),
        ("NVIDIA_VISIBLE_DEVICES", gpu_uuid(0)),
    ]


def test_mps_limits_are_per_gpu_in_the_containers_index_order() -> None:
    # GPU 0: 4 replicas of 40 GiB; GPU 1: 2 replicas of 80 GiB. One percentage
    # per daemon: 100 / 4 = 25 per replica.
    alloc = mps([4, 2], memory_mib=[40960, 81920])
    edits = alloc.allocate([rid(1, 0), rid(0, 0), rid(0, 1), rid(0, 2)])
    assert edits.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=30720M,1=40960M"
    # The least-held GPU decides: one replica of GPU 1.
    assert edits.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert edits.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpu_uuid(1)},{gpu_uuid(0)}"


def test_mps_thread_percentage_never_exceeds_one_hundred() -> None:
    alloc = mps([3])  # 33% per replica, three replicas: 99
    edits = alloc.allocate([rid(0, 0), rid(0, 1), rid(0, 2)])
    assert edits.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "99"
    assert edits.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40959M"


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param([rid(0, 0)], id="one-replica"),
        pytest.param([rid(0, 0), rid(1, 0)], id="one-replica-of-each-of-two-gpus"),
    ],
)
def test_mps_container_with_one_replica_per_gpu_keeps_the_daemon_defaults(
    ids: list[str],
) -> None:
    edits = mps([2, 2]).allocate(ids)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in edits.envs
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in edits.envs
    assert edits.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"


def test_time_slicing_never_gets_mps_limits() -> None:
    edits = allocator([4]).allocate([rid(0, 0), rid(0, 1)])
    assert not any(key.startswith("CUDA_MPS") for key in edits.envs)
