"""The requests random generation rarely reaches: extremes, abuse and non-gRPC bytes.

`hostile_requests` runs them all against every resource of a running plugin
and checks each answer against `rpc_oracle`; the caller then checks that the
plugin is unchanged and holds no extra descriptors. Protobuf that does not
parse is sent here too, for its effect on the plugin; the status it gets is
asserted separately (`test_malformed_protobuf_and_a_very_long_unknown_id_are_invalid_argument`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING

import grpc

from kubelet.api import api_pb2
from tests.reliability import rpc_oracle as oracle
from tests.reliability import wire

if TYPE_CHECKING:
    from tests.reliability.test_rpc_fuzz import Served

MAX_MESSAGE = 4 * 1024 * 1024  # gRPC's default receive limit


def allocate(containers: list[list[str]]) -> api_pb2.AllocateRequest:
    return api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=c) for c in containers]
    )


def preferred(
    available: list[str], required: list[str], size: int
) -> api_pb2.PreferredAllocationRequest:
    return api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=required, allocation_size=size
            )
        ]
    )


async def _allocations(rig: Served, resource: oracle.Resource) -> None:
    ids = list(resource.ids)
    cases: list[list[list[str]]] = [
        [],
        [[]],
        [[ids[0], ids[0]]],
        [ids * 2],
        [[ids[0]]] * 2000,
        [[i] for i in ids],
        [[ids[0], "GPU-does-not-exist"]],
        [["\x00\u202e🙂"]],
        [["y" * 4000]],
    ]
    stub = rig.stubs[resource.name]
    for containers in cases:
        code, answer, details = await rig.call(stub.Allocate, allocate(containers))
        assert code is oracle.allocate_status(resource, containers), details
        if code is oracle.OK:
            oracle.check_allocate_answer(containers, answer)
    # Over gRPC's message limit: refused by the transport, never read by the plugin.
    huge = [ids * (MAX_MESSAGE // sum(len(i) for i in ids) + 1)]
    code, _, _ = await rig.call(stub.Allocate, allocate(huge))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED


async def _preferences(rig: Served, resource: oracle.Resource) -> None:
    ids = list(resource.ids)
    n = len(ids)
    cases = [
        (ids, [], n),
        (ids, [], n + 1),
        (ids, ids, n),
        (ids[1:], ids[:1], n),
        (ids, [], 0),
        (ids, [], -1),
        (ids, [], 2**31 - 1),
        (ids, [], -(2**31)),
        ([], [], 1),
        (ids + ids[:1], [], 1),
        (ids, [ids[0], ids[0]], 2),
        (list(reversed(ids)), [ids[-1]], 1),
    ]
    stub = rig.stubs[resource.name]
    for available, required, size in cases:
        wanted = [(available, required, size)]
        request = preferred(available, required, size)
        code, answer, details = await rig.call(stub.GetPreferredAllocation, request)
        assert code is oracle.preferred_status(resource, wanted), details
        if code is oracle.OK:
            oracle.check_preferred_answer(resource, wanted, answer)
    raw = rig.raw(resource.name, "GetPreferredAllocation")
    for size in wire.OUT_OF_RANGE_SIZES:
        available = [ids[0]]
        body = wire.preferred_request([i.encode() for i in available], [], size)
        code, _, details = await rig.call(raw, body)
        assert code is oracle.preferred_status(resource, [(available, [], oracle.int32(size))])


async def _malformed(rig: Served, resource: oracle.Resource) -> dict[str, grpc.StatusCode]:
    seen: dict[str, grpc.StatusCode] = {}
    for method, bodies in (
        ("Allocate", wire.ALLOCATE_MALFORMED),
        ("GetPreferredAllocation", wire.PREFERRED_MALFORMED),
    ):
        raw = rig.channels[resource.name].unary_unary(f"/v1beta1.DevicePlugin/{method}")
        for label, body in bodies.items():
            try:
                await raw(body, timeout=10)
                seen[f"{method}/{label}"] = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as err:
                seen[f"{method}/{label}"] = err.code()
    return seen


async def _streams(rig: Served, resource: oracle.Resource) -> None:
    """ListAndWatch opened and dropped, over and over: each stream must be let go."""
    stub = rig.stubs[resource.name]
    for _ in range(30):
        call = stub.ListAndWatch(api_pb2.Empty())
        first = await asyncio.wait_for(call.read(), 5)
        assert [d.ID for d in first.devices] == list(resource.ids)
        call.cancel()
    options = await stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
    assert options.get_preferred_allocation_available
    await stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=["junk"]), timeout=5)


def send_garbage(path: str, payload: bytes) -> None:
    """Connect, write `payload`, read whatever comes back briefly, hang up."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
        peer.settimeout(1.0)
        peer.connect(path)
        if payload:
            peer.sendall(payload)
        with contextlib.suppress(TimeoutError, ConnectionError):
            peer.recv(65536)


async def _garbage(rig: Served, resource: oracle.Resource, endpoint: str) -> None:
    path = str(rig.sim.directory / endpoint)
    for payload in wire.GARBAGE.values():
        await asyncio.to_thread(send_garbage, path, payload)
        rig.requests += 1
        # Still serving real requests on the same socket.
        request = allocate([[resource.ids[0]]])
        code, _, _ = await rig.call(rig.stubs[resource.name].Allocate, request)
        assert code is oracle.OK


async def hostile_requests(rig: Served) -> int:
    """Everything above, on every resource; returns how many requests were sent."""
    state = await rig.plugin.state()
    endpoints = {r["name"]: r["endpoint"] for r in state["resources"]}
    before = rig.requests
    for resource in rig.resources.values():
        await _allocations(rig, resource)
        await _preferences(rig, resource)
        rig.requests += len(await _malformed(rig, resource))
        await _streams(rig, resource)
        await _garbage(rig, resource, endpoints[resource.name])
    return rig.requests - before
