"""The per-daemon arithmetic: client cap, pinned memory, thread percentage, daemon specs."""

from __future__ import annotations

import pytest

from devices.model import Gpu, Inventory
from mps.errors import MpsConfigError
from mps.limits import (
    DaemonSpec,
    active_thread_percentage,
    check_replicas,
    client_cap,
    daemon_specs,
    pinned_memory_limits,
)
from resources.builder import ResourceSet, build_resources
from resources.model import PluginDevice
from resources.options import ResourceOptions, ShareRule, SharingOptions, SharingStrategy

GIB_MIB = 1024


def node(*memories_mib: int, cc: str = "8.0") -> Inventory:
    gpus = tuple(
        Gpu(
            index=index,
            minor=index,
            uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000",
            name="NVIDIA GPU",
            memory_mib=memory,
            pci_bus_id=f"00000000:{index + 7:02X}:00.0",
            numa_node=0,
            compute_capability=cc,
        )
        for index, memory in enumerate(memories_mib)
    )
    return Inventory(driver_version="550.54.15", cuda_driver_version="12.4", gpus=gpus)


def shared(inventory: Inventory, replicas: int, *, rename: bool = False) -> tuple[ResourceSet, ...]:
    """The resources the plugin builds for MPS sharing of nvidia.com/gpu."""
    options = ResourceOptions(
        sharing=SharingOptions(
            strategy=SharingStrategy.MPS,
            replicas={"nvidia.com/gpu": replicas},
            rename_by_default=rename,
        ),
        mps_root="/run/nvidia/mps",
    )
    return build_resources(inventory, options)


@pytest.mark.parametrize(
    ("capability", "cap"),
    [
        pytest.param("7.5", 48, id="turing"),
        pytest.param("v7.5", 48, id="v-prefix"),
        pytest.param("8.0", 48, id="ampere"),
        pytest.param("9.0", 48, id="hopper"),
        pytest.param("10.0", 48, id="two-digit-major"),
        pytest.param("7.0", 16, id="volta"),
        pytest.param("v7.2", 16, id="xavier-v-prefix"),
        pytest.param("6.1", 16, id="pascal"),
        pytest.param("", 16, id="unknown"),
        pytest.param("garbage", 16, id="unreadable"),
    ],
)
def test_client_cap(capability: str, cap: int) -> None:
    assert client_cap(capability) == cap


@pytest.mark.parametrize(
    ("memory_mib", "replicas", "limit", "percentage"),
    [
        pytest.param(16 * GIB_MIB, 4, 4096, 25, id="16GiB-4"),
        pytest.param(40 * GIB_MIB, 3, 13653, 33, id="40GiB-3"),
        pytest.param(80 * GIB_MIB, 2, 40960, 50, id="80GiB-2"),
        pytest.param(16 * GIB_MIB, 10, 1638, 10, id="16GiB-10"),
        pytest.param(40960, 10, 4096, 10, id="a100-40GB-10"),
        pytest.param(81559, 2, 40779, 50, id="h100-odd-size-2"),
        pytest.param(15360, 48, 320, 2, id="t4-at-the-cap"),
    ],
)
def test_limits_split_memory_and_threads(
    memory_mib: int, replicas: int, limit: int, percentage: int
) -> None:
    (resource,) = shared(node(memory_mib, memory_mib), replicas)
    assert pinned_memory_limits(resource.devices) == (("0", limit), ("1", limit))
    assert active_thread_percentage(resource.devices) == percentage


def test_limits_follow_each_gpu_memory() -> None:
    (resource,) = shared(node(16 * GIB_MIB, 80 * GIB_MIB, 0), 4)
    # A GPU reporting no memory gets no memory limit at all.
    assert pinned_memory_limits(resource.devices) == (("0", 4096), ("1", 20480))


def test_per_gpu_replica_counts_split_each_gpu_by_its_own_count() -> None:
    # devices: [0, 1] x 4 beside devices: [2, 3] x 2 (two sharing entries).
    rules = (
        ShareRule(name="nvidia.com/gpu", replicas=4, devices=(0, 1)),
        ShareRule(name="nvidia.com/gpu", replicas=2, devices=(2, 3)),
    )
    options = ResourceOptions(
        sharing=SharingOptions(strategy=SharingStrategy.MPS, rules=rules), mps_root="/m"
    )
    (resource,) = build_resources(node(*([40960] * 4)), options)
    (spec,) = daemon_specs([resource])
    assert spec.memory_limits == (("0", 10240), ("1", 10240), ("2", 20480), ("3", 20480))
    # One percentage for the daemon: the GPUs with 4 replicas decide.
    assert spec.thread_percentage == 25


def test_limits_are_sent_in_numeric_index_order() -> None:
    (resource,) = shared(node(*([1024] * 12)), 2)
    indices = [index for index, _ in pinned_memory_limits(resource.devices)]
    assert indices == [str(i) for i in range(12)]


def test_no_devices_means_no_thread_percentage() -> None:
    assert active_thread_percentage(()) is None
    assert pinned_memory_limits(()) == ()


def test_spec_commands_in_the_order_they_are_sent() -> None:
    (resource,) = shared(node(40960, 40960), 10)
    (spec,) = daemon_specs([resource])
    assert spec == DaemonSpec(
        resource="nvidia.com/gpu",
        gpu_uuids=(
            "GPU-00000000-0000-0000-0000-000000000000",
            "GPU-00000001-0000-0000-0000-000000000000",
        ),
        memory_limits=(("0", 4096), ("1", 4096)),
        thread_percentage=10,
    )
    assert spec.commands == (
        "set_default_device_pinned_mem_limit 0 4096M",
        "set_default_device_pinned_mem_limit 1 4096M",
        "set_default_active_thread_percentage 10",
    )


def test_renamed_resource_gets_its_own_daemon_name() -> None:
    (spec,) = daemon_specs(shared(node(40960), 2, rename=True))
    assert spec.resource == "nvidia.com/gpu.shared"


def test_unreplicated_and_empty_resources_get_no_daemon() -> None:
    plain = build_resources(node(40960, 40960))
    assert daemon_specs(plain) == ()
    assert daemon_specs([ResourceSet("nvidia.com/gpu", ())]) == ()


@pytest.mark.parametrize(
    ("capability", "replicas", "message"),
    [
        pytest.param(
            "8.0",
            49,
            "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 49 > 48",
            id="ampere-49",
        ),
        pytest.param(
            "7.0",
            17,
            "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 17 > 16",
            id="volta-17",
        ),
    ],
)
def test_replicas_over_the_client_cap_are_refused(
    capability: str, replicas: int, message: str
) -> None:
    resources = shared(node(16 * GIB_MIB, cc=capability), replicas)
    with pytest.raises(MpsConfigError) as caught:
        daemon_specs(resources)
    assert str(caught.value) == message
    assert caught.value.permanent


@pytest.mark.parametrize(
    ("capability", "replicas"),
    [pytest.param("8.0", 48, id="ampere-48"), pytest.param("7.0", 16, id="volta-16")],
)
def test_replicas_at_the_client_cap_are_accepted(capability: str, replicas: int) -> None:
    (resource,) = shared(node(16 * GIB_MIB, cc=capability), replicas)
    check_replicas(resource.devices)
    assert len(daemon_specs([resource])) == 1


def test_cap_is_checked_per_device() -> None:
    devices = [
        PluginDevice(
            id=f"GPU-a::{n}",
            uuid="GPU-a",
            gpu_uuid="GPU-a",
            index="0",
            paths=(),
            memory_mib=1024,
            compute_capability="v6.0",
            replicas=20,
        )
        for n in range(20)
    ]
    with pytest.raises(MpsConfigError, match=r"exceeded: 20 > 16$"):
        check_replicas(devices)
