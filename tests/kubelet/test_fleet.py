"""The product's servers and fleet against the kubelet simulator, in one process.

Real grpc.aio servers on unix sockets in a short temp dir, a real registration
server (the simulator): registration fields, ListAndWatch contents, Allocate,
rejections, diff-based apply and reconnect after a kubelet restart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from devices.model import Gpu, Inventory
from kubelet.fleet import PluginFleet
from kubelet.simulator import KubeletSimulator
from kubelet.simulator.client import PluginCallError
from resources.allocation import Allocator
from resources.builder import build_resources

GPU = "nvidia.com/gpu"


def inventory(count: int = 4) -> Inventory:
    return Inventory(
        driver_version="550.54.15",
        cuda_driver_version="12.4",
        gpus=tuple(
            Gpu(
                index=i,
                minor=i,
                uuid=f"GPU-{i:08x}-0000-4000-8000-000000000000",
                name="NVIDIA A100-SXM4-40GB",
                memory_mib=40960,
                pci_bus_id=f"00000000:{0x07 + i:02X}:00.0",
                numa_node=i // 2,
                compute_capability="8.0",
            )
            for i in range(count)
        ),
    )


def allocators(count: int = 4) -> list[Allocator]:
    return [Allocator(resource) for resource in build_resources(inventory(count))]


@pytest.fixture
async def sim(sock_dir: Path) -> AsyncIterator[KubeletSimulator]:
    async with KubeletSimulator(sock_dir, write_snapshot_file=False) as simulator:
        yield simulator


@pytest.fixture
async def fleet(sim: KubeletSimulator) -> AsyncIterator[PluginFleet]:
    plugins = PluginFleet(kubelet_socket=sim.socket_path, timeout=2.0)
    try:
        yield plugins
    finally:
        await plugins.stop_all(grace=0.1)


async def test_registers_and_lists_devices_with_numa(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    report = await fleet.apply(allocators())
    assert report.started == [GPU]
    view = await sim.wait_devices(GPU, lambda devices: len(devices) == 4)
    assert view.endpoint == "nvidia-gpu.sock"
    assert view.options.get_preferred_allocation_available is True
    assert view.options.pre_start_required is False
    assert [(d.id, d.health, d.numa_nodes) for d in view.devices] == [
        (f"GPU-{i:08x}-0000-4000-8000-000000000000", "Healthy", (i // 2,)) for i in range(4)
    ]
    assert fleet.all_registered
    assert (sim.directory / "nvidia-gpu.sock").exists()


async def test_allocate_and_unknown_ids(sim: KubeletSimulator, fleet: PluginFleet) -> None:
    await fleet.apply(allocators())
    view = await sim.wait_devices(GPU)
    first, second = view.devices[0].id, view.devices[1].id
    response = await sim.allocate(GPU, [[first, second], [second]])
    envs = [dict(c.envs) for c in response.container_responses]
    assert envs == [
        {"NVIDIA_VISIBLE_DEVICES": f"{first},{second}"},
        {"NVIDIA_VISIBLE_DEVICES": second},
    ]
    with pytest.raises(PluginCallError) as caught:
        await sim.allocate(GPU, [[first, "GPU-nope"]])
    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "GPU-nope" in caught.value.details


async def test_preferred_allocation_keeps_required(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await fleet.apply(allocators())
    ids = [d.id for d in (await sim.wait_devices(GPU)).devices]
    answer = await sim.preferred(GPU, ids, [ids[3]], 2)
    chosen = list(answer.container_responses[0].deviceIDs)
    assert len(chosen) == 2
    assert ids[3] in chosen
    assert set(chosen) <= set(ids)


async def test_apply_same_set_touches_nothing(sim: KubeletSimulator, fleet: PluginFleet) -> None:
    await fleet.apply(allocators())
    await sim.wait_devices(GPU)
    report = await fleet.apply(allocators())
    assert report.unchanged == [GPU]
    assert not report.changed
    view = sim.snapshot().resource(GPU)
    assert view is not None
    assert view.counters.registrations == 1
    assert view.counters.streams_opened == 1


async def test_device_list_change_is_published_in_place(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await fleet.apply(allocators(4))
    await sim.wait_devices(GPU, lambda devices: len(devices) == 4)
    report = await fleet.apply(allocators(2))
    assert report.updated == [GPU]
    view = await sim.wait_devices(GPU, lambda devices: len(devices) == 2)
    assert view.counters.registrations == 1  # no re-registration
    assert view.counters.streams_opened == 1  # the same stream carried the new list


async def test_removed_resource_announces_empty_list_and_goes(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await fleet.apply(allocators())
    await sim.wait_devices(GPU)
    report = await fleet.apply([])
    assert report.stopped == [GPU]
    await sim.wait_for(lambda snap: (r := snap.resource(GPU)) is not None and not r.devices)
    assert not (sim.directory / "nvidia-gpu.sock").exists()
    assert fleet.names == []


async def test_changed_behaviour_restarts_only_that_resource(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    current = allocators()
    await fleet.apply(current)
    await sim.wait_devices(GPU)
    renamed = [Allocator(replace(current[0].resource, name="nvidia.com/gpu.shared"))]
    report = await fleet.apply([*current, *renamed])
    assert report.started == ["nvidia.com/gpu.shared"]
    assert report.unchanged == [GPU]
    await sim.wait_registered("nvidia.com/gpu.shared")


async def test_reconnect_after_kubelet_restart(sim: KubeletSimulator, fleet: PluginFleet) -> None:
    await fleet.apply(allocators())
    await sim.wait_devices(GPU)
    for round_ in range(2, 5):
        await sim.restart()
        assert not (sim.directory / "nvidia-gpu.sock").exists()
        await fleet.reconnect()
        view = await sim.wait_registered(GPU, min_registrations=round_)
        assert view.registered
        await sim.wait_devices(GPU, lambda devices: len(devices) == 4)


async def test_registration_failure_is_reported_and_retried(sock_dir: Path) -> None:
    fleet = PluginFleet(kubelet_socket=sock_dir / "kubelet.sock", timeout=1.0)
    try:
        from kubelet.errors import RegistrationError

        with pytest.raises(RegistrationError, match="does not exist"):
            await fleet.apply(allocators())
        (status,) = fleet.status()
        assert status.running
        assert not status.registered
        assert status.last_error is not None
        async with KubeletSimulator(sock_dir, write_snapshot_file=False) as sim:
            report = await fleet.apply(allocators())
            assert report.unchanged == [GPU]
            await sim.wait_registered(GPU)
            assert fleet.all_registered
    finally:
        await fleet.stop_all(grace=0.1)
