"""Encoded ListAndWatch size, computed by hand from the proto3 wire format."""

from __future__ import annotations

import pytest

from resources.errors import ResourceError
from resources.model import Health, PluginDevice
from resources.wire import (
    KUBELET_MAX_MESSAGE,
    check_list_size,
    device_size,
    list_and_watch_size,
    varint_size,
)


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
