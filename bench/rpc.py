"""Allocate and GetPreferredAllocation over the real unix socket, beside the floor.

The kubelet calls Allocate on the pod-admission path, so its latency adds to
every GPU pod's start. The real plugin (simulated `dgx-a100`) and the floor
(`floor_plugin.py`, answering with the very bytes the plugin gave) are timed
from the same client in the same run, in alternating blocks, so background
load on a shared machine hits both alike; the ratio of their medians is the
plugin's own cost over a bare grpc.aio servicer.

Requests are the kubelet's common ones: Allocate of one GPU, and a preferred
allocation of 2 out of all 8 free GPUs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from grpc import aio

from bench.proc import GPU, Plugin, Process, floor_argv, plugin_args, simulator, wait_socket
from bench.report import Goal, Outcome, Row, Stat
from kubelet.api import api_pb2, api_pb2_grpc

ALLOCATE_GOAL = Goal(Stat.MEDIAN, 1.5, inclusive=True)
Call = Callable[[], Awaitable[object]]


async def timed(call: Call, count: int) -> list[float]:
    """Milliseconds of `count` calls made one after another."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def interleaved(
    calls: Mapping[str, Call], *, blocks: int, per_block: int
) -> dict[str, list[float]]:
    """Time every call in turn, block by block, after a short warm-up of each."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        await timed(call, 20)
    for _ in range(blocks):
        for name, call in calls.items():
            samples[name] += await timed(call, per_block)
    return samples


def requests(ids: list[str]) -> tuple[api_pb2.AllocateRequest, api_pb2.PreferredAllocationRequest]:
    allocate = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids[:1])]
    )
    preferred = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2)
        ]
    )
    return allocate, preferred


async def run(*, quick: bool) -> Outcome:
    blocks, per_block = (4, 50) if quick else (20, 100)
    async with simulator() as sim, Plugin(plugin_args(sim.directory, "dgx-a100")) as plugin:
        try:
            view = await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
        except TimeoutError:
            raise plugin.failure("never listed its devices") from None
        allocate, preferred = requests([d.id for d in view.devices])
        async with aio.insecure_channel(f"unix://{sim.directory / view.endpoint}") as channel:
            real = api_pb2_grpc.DevicePluginStub(channel)
            allocated = await real.Allocate(allocate)
            chosen = await real.GetPreferredAllocation(preferred)
            canned = Path(sim.directory / "canned.json")
            canned.write_text(
                json.dumps(
                    {
                        "allocate": allocated.SerializeToString().hex(),
                        "preferred": chosen.SerializeToString().hex(),
                    }
                )
            )
            floor_socket = sim.directory / "floor.sock"
            async with Process(
                floor_argv("--socket", str(floor_socket), "--canned", str(canned))
            ) as floor:
                await wait_socket(floor_socket, floor)
                async with aio.insecure_channel(f"unix://{floor_socket}") as bare:
                    stub = api_pb2_grpc.DevicePluginStub(bare)
                    samples = await interleaved(
                        {
                            "allocate.plugin": lambda: real.Allocate(allocate),
                            "allocate.floor": lambda: stub.Allocate(allocate),
                            "preferred.plugin": lambda: real.GetPreferredAllocation(preferred),
                            "preferred.floor": lambda: stub.GetPreferredAllocation(preferred),
                        },
                        blocks=blocks,
                        per_block=per_block,
                    )
                    # Same bytes on the wire, or the comparison means nothing.
                    assert (await stub.Allocate(allocate)) == allocated
                    assert (await stub.GetPreferredAllocation(preferred)) == chosen
    notes = {
        "allocate": f"Allocate 1 of 8 GPUs, {allocated.ByteSize()} B response",
        "preferred": f"2 of 8 free GPUs, {chosen.ByteSize()} B response",
    }
    rows = {
        name: Row.of("rpc", name, "ms", values, note=notes[name.split(".")[0]])
        for name, values in samples.items()
    }
    return Outcome(
        rows=[
            rows["allocate.plugin"],
            rows["allocate.floor"],
            Row.ratio(
                "rpc",
                "allocate.ratio",
                rows["allocate.plugin"],
                rows["allocate.floor"],
                goal=ALLOCATE_GOAL,
            ),
            rows["preferred.plugin"],
            rows["preferred.floor"],
            Row.ratio("rpc", "preferred.ratio", rows["preferred.plugin"], rows["preferred.floor"]),
        ],
        details={
            "allocate_response_bytes": allocated.ByteSize(),
            "preferred_response_bytes": chosen.ByteSize(),
        },
    )
