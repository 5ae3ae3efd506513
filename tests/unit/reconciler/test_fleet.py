"""The product's servers and fleet, as actuators, against the kubelet simulator.

Real grpc.aio servers on unix sockets in a short temp dir, a real registration
server (the simulator): registration fields, ListAndWatch contents, Allocate,
rejections, and `converge()` touching only what differs, reporting what it
did, and picking up after a failed step (bind, registration, a socket deleted
underneath it, a kubelet restart).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from devices.model import Gpu, Inventory
from foundation.outcome import Outcome
from kubelet import kubelet_watch
from kubelet.errors import RegistrationError, ServeError
from kubelet_sim import KubeletSimulator
from kubelet_sim.client import PluginCallError
from reconciler.actuators.fleet import PluginFleet
from resources.allocation import Allocator
from resources.builder import build_resources
from resources.options import DeviceIdStrategy, ResourceOptions

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


def allocators(count: int = 4, **options: object) -> dict[str, Allocator]:
    opts = ResourceOptions(**options)  # type: ignore[arg-type]
    return {r.name: Allocator(r, opts) for r in build_resources(inventory(count), opts)}


def changes(outcomes: list[Outcome]) -> dict[str, set[str]]:
    assert all(o.converged for o in outcomes), [o.describe() for o in outcomes]
    return {str(o.key): {str(change) for change in o.changes} for o in outcomes}


async def converge(
    fleet: PluginFleet, desired: dict[str, Allocator], *, hold: Collection[str] = ()
) -> list[Outcome]:
    """Every resource towards `desired` (the loop attempts only those that are due)."""
    return await fleet.converge(fleet.targets(desired, hold))


def pending(
    fleet: PluginFleet, desired: dict[str, Allocator], *, hold: Collection[str] = ()
) -> bool:
    kubelet = fleet.kubelet.look()
    return any(
        fleet.pending(name, target, lambda devices: devices, kubelet)
        for name, target in fleet.targets(desired, hold).items()
    )


@pytest.fixture
async def fleet(sim: KubeletSimulator) -> AsyncIterator[PluginFleet]:
    plugins = PluginFleet(kubelet_socket=sim.socket_path, timeout=2.0)
    try:
        yield plugins
    finally:
        await plugins.stop_all(grace=0.1)


async def test_registers_and_lists_devices_with_their_numa_node(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    assert changes(await converge(fleet, allocators())) == {
        "resource:" + GPU: {"started", "registered"}
    }
    view = await sim.wait_devices(GPU, lambda devices: len(devices) == 4)
    assert view.endpoint == "nvidia-gpu.sock"
    assert view.options.get_preferred_allocation_available is True
    assert view.options.pre_start_required is False
    assert [(d.id, d.health, d.numa_nodes) for d in view.devices] == [
        (f"GPU-{i:08x}-0000-4000-8000-000000000000", "Healthy", (i // 2,)) for i in range(4)
    ]
    assert fleet.all_registered
    assert (sim.directory / "nvidia-gpu.sock").exists()


async def test_allocate_answers_each_container_and_refuses_an_unknown_id(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await converge(fleet, allocators())
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


async def test_preferred_allocation_includes_the_required_device(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await converge(fleet, allocators())
    ids = [d.id for d in (await sim.wait_devices(GPU)).devices]
    answer = await sim.preferred(GPU, ids, [ids[3]], 2)
    chosen = list(answer.container_responses[0].deviceIDs)
    assert len(chosen) == 2
    assert ids[3] in chosen
    assert set(chosen) <= set(ids)


async def test_converging_again_touches_nothing(sim: KubeletSimulator, fleet: PluginFleet) -> None:
    await converge(fleet, allocators())
    await sim.wait_devices(GPU)
    assert not pending(fleet, allocators())
    assert changes(await converge(fleet, allocators())) == {"resource:" + GPU: set()}
    assert fleet.kubelet.restarts == 0
    view = sim.snapshot().resource(GPU)
    assert view is not None
    assert view.counters.registrations == 1
    assert view.counters.streams_opened == 1


async def test_device_list_change_is_published_in_place(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await converge(fleet, allocators(4))
    await sim.wait_devices(GPU, lambda devices: len(devices) == 4)
    assert pending(fleet, allocators(2))
    assert changes(await converge(fleet, allocators(2))) == {"resource:" + GPU: {"updated"}}
    view = await sim.wait_devices(GPU, lambda devices: len(devices) == 2)
    assert view.counters.registrations == 1  # no re-registration
    assert view.counters.streams_opened == 1  # the same stream carried the new list


async def test_removed_resource_announces_empty_list_and_goes(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await converge(fleet, allocators())
    await sim.wait_devices(GPU)
    assert changes(await converge(fleet, {})) == {"resource:" + GPU: {"stopped"}}
    await sim.wait_for(lambda snap: (r := snap.resource(GPU)) is not None and not r.devices)
    assert not (sim.directory / "nvidia-gpu.sock").exists()
    assert fleet.names == []


async def test_changed_behaviour_restarts_only_that_resource(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    shared = "nvidia.com/gpu.other"
    current = allocators()
    other = Allocator(replace(current[GPU].resource, name=shared))
    await converge(fleet, {**current, shared: other})
    await sim.wait_registered(shared)
    by_index = allocators(device_id_strategy=DeviceIdStrategy.INDEX)
    assert by_index[GPU].resource.behaviour_digest != current[GPU].resource.behaviour_digest
    done = changes(await converge(fleet, {**by_index, shared: other}))
    assert done == {"resource:" + GPU: {"restarted", "registered"}, "resource:" + shared: set()}
    await sim.wait_registered(GPU, min_registrations=2)
    response = await sim.allocate(GPU, [[current[GPU].resource.devices[1].id]])
    assert dict(response.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": "1"}
    untouched = sim.snapshot().resource(shared)
    assert untouched is not None
    assert untouched.counters.registrations == 1
    assert untouched.counters.streams_opened == 1


async def test_kubelet_restart_recreates_and_registers_again(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await converge(fleet, allocators())
    await sim.wait_devices(GPU)
    for round_ in range(2, 5):
        await sim.restart()
        assert not (sim.directory / "nvidia-gpu.sock").exists()
        assert fleet.registered_elsewhere(fleet.kubelet.look())
        done = changes(await converge(fleet, allocators()))
        assert done == {"resource:" + GPU: {"recreated", "registered"}}
        view = await sim.wait_registered(GPU, min_registrations=round_)
        assert view.registered
        await sim.wait_devices(GPU, lambda devices: len(devices) == 4)
        assert not fleet.registered_elsewhere(fleet.kubelet.look())
        assert fleet.kubelet.restarts == round_ - 1  # one per kubelet registered with anew


async def test_a_kubelet_that_came_up_during_a_pass_is_counted(
    sim: KubeletSimulator, fleet: PluginFleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No kubelet socket when the pass began, a registration that went through all the same.

    The kubelet it reached is counted at the end of that pass: replaced
    again before any later look, it would otherwise never be.
    """
    await converge(fleet, allocators())
    await sim.wait_devices(GPU)
    await sim.restart()
    real = kubelet_watch.socket_identity
    gap = [None]  # the first look finds no socket, as between a kubelet's delete and create

    def look(path: Path) -> object:
        return gap.pop() if gap else real(path)

    monkeypatch.setattr(kubelet_watch, "socket_identity", look)
    assert changes(await converge(fleet, allocators())) == {
        "resource:" + GPU: {"recreated", "registered"}
    }
    await sim.wait_registered(GPU, min_registrations=2)
    assert fleet.kubelet.restarts == 1
    await sim.restart()
    changes(await converge(fleet, allocators()))
    await sim.wait_registered(GPU, min_registrations=3)
    assert fleet.kubelet.restarts == 2


async def test_socket_deleted_underneath_is_served_again(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await converge(fleet, allocators())
    await sim.wait_devices(GPU)
    (sim.directory / "nvidia-gpu.sock").unlink()
    assert fleet.sockets_disturbed() == [GPU]
    assert pending(fleet, allocators())
    done = changes(await converge(fleet, allocators()))
    assert done == {"resource:" + GPU: {"recreated", "registered"}}
    assert fleet.sockets_disturbed() == []
    await sim.wait_registered(GPU, min_registrations=2)
    response = await sim.allocate(GPU, [[allocators()[GPU].resource.devices[0].id]])
    assert response.container_responses


async def test_registration_failure_is_reported_and_retried(sock_dir: Path) -> None:
    fleet = PluginFleet(kubelet_socket=sock_dir / "kubelet.sock", timeout=1.0)
    try:
        (outcome,) = await converge(fleet, allocators())
        assert not outcome.converged
        assert isinstance(outcome.error, RegistrationError)
        assert "does not exist" in str(outcome.error)
        (status,) = fleet.status()
        assert status.running
        assert not status.registered
        assert status.last_error is not None
        assert pending(fleet, allocators())
        async with KubeletSimulator(sock_dir, write_snapshot_file=False) as sim:
            assert changes(await converge(fleet, allocators())) == {
                "resource:" + GPU: {"registered"}
            }
            await sim.wait_registered(GPU)
            assert fleet.all_registered
            assert fleet.status()[0].last_error is None
    finally:
        await fleet.stop_all(grace=0.1)


async def test_a_server_that_could_not_bind_is_started_on_the_next_pass(sock_dir: Path) -> None:
    directory = sock_dir / "later"
    fleet = PluginFleet(kubelet_socket=directory / "kubelet.sock", timeout=1.0)
    try:
        (outcome,) = await converge(fleet, allocators())
        assert not outcome.converged
        assert isinstance(outcome.error, ServeError)
        assert not fleet.status()[0].running
        async with KubeletSimulator(directory, write_snapshot_file=False) as sim:
            done = changes(await converge(fleet, allocators()))
            assert done == {"resource:" + GPU: {"started", "registered"}}
            await sim.wait_devices(GPU)
    finally:
        await fleet.stop_all(grace=0.1)


async def test_held_resources_keep_what_they_serve_and_new_ones_wait(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    await converge(fleet, allocators(4))
    await sim.wait_devices(GPU, lambda devices: len(devices) == 4)
    extra = "nvidia.com/gpu.later"
    later = Allocator(replace(allocators()[GPU].resource, name=extra))
    held = {GPU, extra}
    done = changes(await converge(fleet, {**allocators(2), extra: later}, hold=held))
    assert done == {"resource:" + GPU: set()}
    assert fleet.names == [GPU]
    assert len(fleet.server(GPU).devices) == 4  # type: ignore[union-attr]
    assert not pending(fleet, {**allocators(2), extra: later}, hold=held)
    done = changes(await converge(fleet, {**allocators(2), extra: later}))
    assert done == {"resource:" + GPU: {"updated"}, "resource:" + extra: {"started", "registered"}}
    await sim.wait_devices(GPU, lambda devices: len(devices) == 2)


async def test_status_lists_a_new_server_before_the_kubelet_can_have_its_list(
    sim: KubeletSimulator, fleet: PluginFleet
) -> None:
    seen: list[tuple[list[str], bool]] = []

    def before() -> None:
        # What `/state` would show now; the kubelet has not been told of the socket yet.
        seen.append(([s.name for s in fleet.status()], sim.snapshot().resource(GPU) is None))

    await fleet.converge(fleet.targets(allocators()), before_first_registration=before)
    assert seen == [([GPU], True)]
    await sim.wait_devices(GPU, lambda devices: len(devices) == 4)
    await fleet.converge(fleet.targets(allocators(3)), before_first_registration=before)
    assert len(seen) == 1  # a new list on a registered server: no second call


async def test_a_kubelet_replaced_between_registration_and_the_next_look_is_counted(
    sim: KubeletSimulator, fleet: PluginFleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart storm: the kubelet the pass started with (A) is gone when the server dials
    (B answers), and B is gone too before the fleet looks again (C). All three count."""
    await converge(fleet, allocators())
    await sim.wait_registered(GPU)
    first = kubelet_watch.socket_identity(sim.socket_path)
    await fleet.stop_all(grace=0.1)
    await sim.restart()  # B is at the path now
    looks = [first, (-1, -1)]  # what the fleet's two looks find: A still, then C

    monkeypatch.setattr(kubelet_watch, "socket_identity", lambda path: looks.pop(0))
    assert changes(await converge(fleet, allocators())) == {
        "resource:" + GPU: {"started", "registered"}
    }
    await sim.wait_registered(GPU)  # B took the registration
    assert looks == []
    assert fleet.kubelet.restarts == 2
