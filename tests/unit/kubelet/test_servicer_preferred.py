"""GetPreferredAllocation over a real grpc.aio socket: off the event loop, and its answers.

The preferred search runs in the servicer's own thread pool, so Allocate
keeps answering while it works. To show that without timing guesses, the
allocator used here holds its preferred search until the test has seen an
Allocate complete; everything else (server, socket, stubs) is the real thing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest

from devices.model import Gpu, Inventory
from foundation.latest import LatestValue
from kubelet.api import api_pb2, api_pb2_grpc
from kubelet.handlers import device_plugin_handler
from kubelet.servicer import DevicePluginServicer, ResourceState
from resources.allocation import Allocator
from resources.builder import build_resources

WAIT = 10.0
Stub = api_pb2_grpc.DevicePluginStub


def node(count: int = 4) -> Inventory:
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


class HeldAllocator(Allocator):
    """An allocator whose preferred search waits for `release` (and says when it started)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.started = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []

    def preferred(self, available: Sequence[str], required: Sequence[str], size: int) -> list[str]:
        self.threads.append(threading.current_thread().name)
        self.started.set()
        if not self.release.wait(WAIT):
            raise AssertionError("never released")
        return super().preferred(available, required, size)


async def serve(
    sock_dir: Path, allocator: Allocator
) -> tuple[grpc.aio.Server, api_pb2_grpc.DevicePluginStub, grpc.aio.Channel]:
    state = ResourceState(allocator=allocator, devices=LatestValue(allocator.resource.devices))
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((device_plugin_handler(DevicePluginServicer(state)),))
    address = f"unix://{sock_dir / 'plugin.sock'}"
    server.add_insecure_port(address)
    await server.start()
    channel = grpc.aio.insecure_channel(address)
    return server, api_pb2_grpc.DevicePluginStub(channel), channel


@pytest.fixture
async def held(
    sock_dir: Path,
) -> AsyncIterator[tuple[HeldAllocator, api_pb2_grpc.DevicePluginStub]]:
    (resource,) = build_resources(node())
    allocator = HeldAllocator(resource)
    server, stub, channel = await serve(sock_dir, allocator)
    try:
        yield allocator, stub
    finally:
        allocator.release.set()
        await channel.close()
        await server.stop(grace=None)


@pytest.fixture
async def plain(sock_dir: Path) -> AsyncIterator[api_pb2_grpc.DevicePluginStub]:
    (resource,) = build_resources(node())
    server, stub, channel = await serve(sock_dir, Allocator(resource))
    try:
        yield stub
    finally:
        await channel.close()
        await server.stop(grace=None)


def ids(count: int = 4) -> list[str]:
    return [f"GPU-{i:08x}-0000-4000-8000-000000000000" for i in range(count)]


def preferred_request(available: list[str], required: list[str], size: int) -> object:
    return api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=available,
                must_include_deviceIDs=required,
                allocation_size=size,
            )
        ]
    )


async def test_allocate_answers_while_a_preferred_search_runs(
    held: tuple[HeldAllocator, Stub],
) -> None:
    allocator, stub = held
    search = asyncio.ensure_future(
        stub.GetPreferredAllocation(preferred_request(ids(), [], 2), timeout=WAIT)
    )
    assert await asyncio.to_thread(allocator.started.wait, WAIT)
    # The search is held in its thread; the loop still serves Allocate and the options.
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids()[:1])]
    )
    response = await stub.Allocate(request, timeout=WAIT)
    assert response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == ids()[0]
    options = await stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=WAIT)
    assert options.get_preferred_allocation_available
    assert not search.done()
    allocator.release.set()
    answer = await search
    assert len(answer.container_responses[0].deviceIDs) == 2
    assert allocator.threads
    assert all(name.startswith("preferred") for name in allocator.threads)
    assert threading.main_thread().name not in allocator.threads


async def test_a_request_that_cannot_be_met_is_answered_with_no_preference(
    plain: api_pb2_grpc.DevicePluginStub,
) -> None:
    request = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=ids()[:2], allocation_size=3
            ),
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=ids(), must_include_deviceIDs=ids()[:3], allocation_size=2
            ),
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=ids(), allocation_size=2
            ),
        ]
    )
    response = await plain.GetPreferredAllocation(request, timeout=WAIT)
    answers = [list(c.deviceIDs) for c in response.container_responses]
    assert answers[:2] == [[], []]
    assert len(answers[2]) == 2
    assert set(answers[2]) <= set(ids())


async def test_an_unknown_gpu_is_refused_with_the_reference_text(
    plain: api_pb2_grpc.DevicePluginStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await plain.GetPreferredAllocation(
            preferred_request([*ids(), "GPU-nope"], [], 1), timeout=WAIT
        )
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        "error getting list of preferred allocation devices: "
        "unable to retrieve list of available devices: no device with uuid: GPU-nope"
    )
