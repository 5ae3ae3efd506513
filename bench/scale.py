"""A large node: 16 GPUs (`hgx-16`) with 256 time-slicing replicas each, 4096 devices.

* Start-up: exec to registered, and exec to all 4096 devices in the
  simulated kubelet's list.
* ListAndWatch size: the encoded size of the message for the 4096 devices
  the simulator received, computed with `kubelet.translate.list_and_watch_response`
  (only ID, health and NUMA node go on the wire, and the simulator keeps all
  three), against the 4 MiB default receive limit of a gRPC client such as
  the kubelet's. Above it the kubelet would drop the stream.
* Allocate of one random replica, and GetPreferredAllocation of one replica
  out of all 4096 free (the kubelet sends every free ID), over the real
  socket.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable
from pathlib import Path

from grpc import aio

from bench.lifecycle import sliced
from bench.proc import GPU, Plugin, plugin_args, simulator
from bench.report import Goal, Outcome, Row, Stat
from bench.rpc import timed
from kubelet.api import api_pb2, api_pb2_grpc
from kubelet.translate import list_and_watch_response
from kubelet_sim.model import DeviceInfo
from resources.model import Health, PluginDevice

SEED = 20240601
REPLICAS = 256
DEVICES = 16 * REPLICAS
LIMIT = 4 * 1024 * 1024
SIZE_GOAL = Goal(Stat.MEDIAN, LIMIT)
ALLOCATE_GOAL = Goal(Stat.P99, 5.0)


def wire_size(devices: tuple[DeviceInfo, ...]) -> int:
    """Encoded ListAndWatchResponse size, through the plugin's own translation.

    The simulator keeps every field that translation puts on the wire (ID,
    health, NUMA node); the others are required by `PluginDevice` but unused.
    """
    plugin_devices = [
        PluginDevice(
            id=d.id,
            uuid=d.id.split("::")[0],
            gpu_uuid=d.id.split("::")[0],
            index="",
            paths=(),
            numa_node=d.numa_nodes[0] if d.numa_nodes else None,
            health=Health(d.health),
        )
        for d in devices
    ]
    return list_and_watch_response(plugin_devices).ByteSize()


async def calls(
    endpoint: Path, ids: list[str], *, allocations: int, preferences: int
) -> tuple[list[float], list[float]]:
    """Milliseconds of Allocate (one random replica) and GetPreferredAllocation calls."""
    rng = random.Random(SEED)
    preferred = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=1)
        ]
    )
    async with aio.insecure_channel(f"unix://{endpoint}") as channel:
        stub = api_pb2_grpc.DevicePluginStub(channel)

        def allocate() -> Awaitable[object]:
            one = api_pb2.ContainerAllocateRequest(devices_ids=[rng.choice(ids)])
            return stub.Allocate(api_pb2.AllocateRequest(container_requests=[one]))

        await timed(allocate, 20)
        allocate_ms = await timed(allocate, allocations)
        preferred_ms = await timed(lambda: stub.GetPreferredAllocation(preferred), preferences)
    return allocate_ms, preferred_ms


async def run(*, quick: bool) -> Outcome:
    starts, allocations, preferences = (1, 200, 20) if quick else (3, 1000, 100)
    registered: list[float] = []
    listed: list[float] = []
    allocate_ms: list[float] = []
    preferred_ms: list[float] = []
    size = 0
    for run_number in range(starts):
        async with simulator() as sim:
            config = Path(sim.directory / "config.yaml")
            config.write_text(sliced(REPLICAS))
            args = plugin_args(sim.directory, "hgx-16", "--config-file", str(config))
            async with Plugin(args) as plugin:
                try:
                    await sim.wait_registered(GPU, timeout=120)
                    registered.append((time.monotonic() - plugin.started_at) * 1000)
                    view = await sim.wait_devices(GPU, lambda d: len(d) == DEVICES, timeout=120)
                    listed.append((time.monotonic() - plugin.started_at) * 1000)
                except TimeoutError:
                    raise plugin.failure(f"never listed {DEVICES} devices") from None
                if run_number < starts - 1:
                    continue
                size = wire_size(view.devices)
                allocate_ms, preferred_ms = await calls(
                    sim.directory / view.endpoint,
                    [d.id for d in view.devices],
                    allocations=allocations,
                    preferences=preferences,
                )
    note = f"hgx-16 x {REPLICAS} replicas = {DEVICES} devices"
    return Outcome(
        rows=[
            Row.of(
                "scale",
                "scale.startup_registered",
                "ms",
                registered,
                note=f"exec to registered, {note}",
            ),
            Row.of(
                "scale",
                "scale.startup_listed",
                "ms",
                listed,
                note=f"exec to all {DEVICES} devices at the kubelet",
            ),
            Row.single(
                "scale",
                "scale.list_and_watch_size",
                "bytes",
                size,
                goal=SIZE_GOAL,
                note=f"as encoded for the {DEVICES} devices received; {size / LIMIT:.1%} of 4 MiB",
            ),
            Row.of(
                "scale",
                "scale.allocate",
                "ms",
                allocate_ms,
                goal=ALLOCATE_GOAL,
                note=f"Allocate 1 random replica of {DEVICES}",
            ),
            Row.of(
                "scale",
                "scale.preferred",
                "ms",
                preferred_ms,
                note=f"GetPreferredAllocation 1 of {DEVICES} free",
            ),
        ],
        details={
            "startup_registered_ms": registered,
            "startup_listed_ms": listed,
            "list_and_watch_bytes": size,
            "allocate_ms": allocate_ms,
            "preferred_ms": preferred_ms,
        },
    )
