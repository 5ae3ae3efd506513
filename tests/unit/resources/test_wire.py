"""Encoded ListAndWatch size, computed by hand from the proto3 wire format,
and the estimate that refuses an oversized replication before building it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resources.builder
from resources.builder import plan_resources
from resources.errors import ResourceError
from resources.model import Health, PluginDevice
from resources.options import ResourceOptions, SharingOptions, SharingStrategy
from resources.replicas import replicate, select
from resources.wire import (
    KUBELET_MAX_MESSAGE,
    check_list_size,
    check_replication_fits,
    device_size,
    list_and_watch_size,
    varint_size,
)

from .nodes import inventory, make_gpu


def device(device_id: str, numa: int | None, health: Health = Health.HEALTHY) -> PluginDevice:
    return PluginDevice(
        id=device_id, uuid=device_id, gpu_uuid=device_id, index="0", paths=(), numa_node=numa,
        health=health,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "size"),
    [(0, 1), (1, 1), (127, 1), (128, 2), (16383, 2), (16384, 3), (2**63 - 1, 9), (-1, 10)],
)
def test_varint_sizes(value: int, size: int) -> None:
    assert varint_size(value) == size


@pytest.mark.parametrize(
    ("dev", "size"),
    [
        # ID: tag + len + 5, health: tag + len + 7, no topology.
        pytest.param(device("GPU-a", None), 2 + 5 + 2 + 7, id="no-numa"),
        # NUMA 0: the node message is empty (ID at default) -> nodes entry 2, topology 4.
        pytest.param(device("GPU-a", 0), 2 + 5 + 2 + 7 + 4, id="numa-0"),
        # NUMA 1: node = tag + varint(1) = 2 -> nodes entry 4 -> topology field 6.
        pytest.param(device("GPU-a", 1), 2 + 5 + 2 + 7 + 6, id="numa-1"),
        pytest.param(device("GPU-a", 300), 2 + 5 + 2 + 7 + 7, id="numa-two-byte-varint"),
        pytest.param(device("GPU-a", 1, Health.UNHEALTHY), 2 + 5 + 2 + 9 + 6, id="unhealthy"),
        pytest.param(device("x" * 200, None), 1 + 2 + 200 + 2 + 7, id="long-id"),
    ],
)
def test_device_sizes(dev: PluginDevice, size: int) -> None:
    assert device_size(dev) == size


def test_list_size_adds_one_length_delimited_entry_per_device() -> None:
    devices = [device("GPU-a", 0), device("x" * 200, None)]
    assert list_and_watch_size(devices) == (2 + 20) + (1 + 2 + 212)
    assert list_and_watch_size([]) == 0


def test_the_guard_counts_every_device_as_unhealthy() -> None:
    devices = [device(f"GPU-{i:04d}", 0) for i in range(100)]
    healthy = list_and_watch_size(devices)
    worst = list_and_watch_size(devices, health=Health.UNHEALTHY)
    assert worst == healthy + 2 * 100
    assert check_list_size("nvidia.com/gpu", devices, limit=worst) == worst
    with pytest.raises(ResourceError) as error:
        check_list_size("nvidia.com/gpu", devices, limit=worst - 1)
    assert "resource 'nvidia.com/gpu' (100 devices) encodes to" in str(error.value)
    assert f"{worst - 1}-byte message limit" in str(error.value)
    assert KUBELET_MAX_MESSAGE == 4194304


# --------------------------------------------------- the estimate before replication


def _tables(count: int, numa: int | None) -> dict[str, tuple[PluginDevice, ...]]:
    gpus = tuple(device(f"GPU-{i:036d}", numa) for i in range(count))
    migs = tuple(device(f"MIG-{i:036d}", None) for i in range(2))
    return {"nvidia.com/gpu": gpus, "nvidia.com/mig-1g.5gb": migs}


def _exact_sizes(
    tables: dict[str, tuple[PluginDevice, ...]], sharing: SharingOptions
) -> dict[str, int]:
    return {
        name: list_and_watch_size(devices, health=Health.UNHEALTHY)
        for name, devices in replicate(tables, select(tables, sharing)).items()
    }


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(1, 8),
    numa=st.sampled_from([None, 0, 1]),
    replicas=st.integers(2, 150),
    rename=st.booleans(),
    mig_replicas=st.sampled_from([None, 3]),
)
def test_the_estimate_is_the_exact_size_of_the_replicated_lists(
    count: int, numa: int | None, replicas: int, rename: bool, mig_replicas: int | None
) -> None:
    counts = {"nvidia.com/gpu": replicas}
    if mig_replicas:
        counts["nvidia.com/mig-1g.5gb"] = mig_replicas
    sharing = SharingOptions(
        strategy=SharingStrategy.TIME_SLICING, replicas=counts, rename_by_default=rename
    )
    tables = _tables(count, numa)
    largest = max(_exact_sizes(tables, sharing).values())
    selected = select(tables, sharing)
    check_replication_fits(tables, selected, limit=largest)  # exactly at the limit: fits
    with pytest.raises(ResourceError):
        check_replication_fits(tables, selected, limit=largest - 1)


def test_a_million_replicas_are_refused_before_any_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = inventory(make_gpu(i, numa=i // 4) for i in range(8))  # like dgx-a100
    options = ResourceOptions(
        sharing=SharingOptions(
            strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": 1_000_000}
        )
    )

    def building(*args: object, **kwargs: object) -> None:
        raise AssertionError("replicas were built")  # building them took 70 s and 2.5 GB

    monkeypatch.setattr(resources.builder, "replicate", building)
    with pytest.raises(ResourceError) as caught:
        plan_resources(node, options)
    message = str(caught.value)
    assert message.startswith(
        "the device list of resource 'nvidia.com/gpu' (8 x 1000000 replicas = 8000000 devices) "
    )
    assert "over the kubelet's 4194304-byte message limit" in message
    assert message.endswith("; at most 7960 replicas fit")
    assert "\n" not in message


def test_the_replicas_said_to_fit_do_fit() -> None:
    node = inventory(make_gpu(i, numa=i // 4) for i in range(8))

    def plan(replicas: int, rename: bool = False) -> None:
        sharing = SharingOptions(
            strategy=SharingStrategy.TIME_SLICING,
            replicas={"nvidia.com/gpu": replicas},
            rename_by_default=rename,
        )
        plan_resources(node, ResourceOptions(sharing=sharing))

    plan(7960)
    with pytest.raises(ResourceError, match="at most 7960 replicas fit"):
        plan(7961)
    with pytest.raises(ResourceError, match=r"resource 'nvidia.com/gpu.shared' .* at most 7960"):
        plan(7961, rename=True)


def test_a_resource_too_large_without_replicas_says_so() -> None:
    tables = {"nvidia.com/gpu": tuple(device(f"GPU-{i:036d}", None) for i in range(3))}
    with pytest.raises(ResourceError, match="it has too many devices to advertise"):
        check_replication_fits(tables, {}, limit=100)
