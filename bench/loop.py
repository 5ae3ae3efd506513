"""Allocate and /healthz while the plugin is under load that used to stall its event loop.

The plugin serves the kubelet, the probes and its own reconciles from one
asyncio loop. Each scenario puts one kind of pressure on it and meanwhile
times what a kubelet needs most, back to back every few milliseconds: an
Allocate of one device over the resource's socket, and a GET /healthz on a
fresh connection, as a liveness probe makes it, on the probes' own listener
(`--probe-address`, where the chart points the probes). Goal: p99 under
20 ms for each, under each pressure. A `healthz_shared` row times the same
probe on the inspection endpoint (`--state-address`), which also serves
`/state`, for comparison.

* `state_flood`: 300 concurrent GET /state on a 4096-device node (hgx-16 x
  256 replicas), from another process (`bench.pressure`). Before this was
  bounded, it delayed Allocate by 3.6 s. A `quiet` pair of rows times the
  same node with no pressure, for comparison.
* `busy_node`: the same node with every CPU taken by a busy process (as
  training jobs take a GPU node's CPUs) and 4 clients reading `/state`: what
  the kubelet's calls wait for when the plugin competes for CPU time.
* `preferred_512`: GetPreferredAllocation of 8 out of 512 free GPUs, back
  to back, from another process, on a generated 512-GPU node (boards of 8
  NVLinked GPUs, two NUMA nodes). It used to take over 30 s per call on the
  loop itself.
* `oversized_config`: the config file rewritten again and again with
  `replicas: 1000000` (and up), each edit rejected from the size estimate;
  `rejected` is the time from each write to the rejection on `/state`. Each
  such edit used to block the loop for about 70 s.

The machine running the benchmark also runs the pressure, so the figures
include the competition for its CPUs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from grpc import aio

from bench.proc import GPU, REPO, Plugin, base_env, plugin_args, simulator
from bench.report import Goal, Outcome, Row, Stat
from kubelet.api import api_pb2, api_pb2_grpc
from kubelet_sim import KubeletSimulator
from tests.e2e.harness import http_get

GOAL = Goal(Stat.P99, 20.0)
PROBE_GAP = 0.005  # seconds between two probe rounds
STATE_CLIENTS = 300
BUSY_CLIENTS = 4
REPLICAS = 256  # hgx-16 x 256 = 4096 devices
BIG_NODE = 512
PREFERRED_SIZE = 8
OVERSIZED = 1_000_000


def sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {GPU}\n      replicas: {replicas}\n"
    )


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def node_profile(gpus: int, *, board: int = 8) -> str:
    """A simulated node of `gpus` GPUs: NVLink (12 lanes) inside boards of `board`."""
    lines = ['driverVersion: "550.54.15"', 'cudaDriverVersion: "12.4"', "gpus:"]
    for index in range(gpus):
        first = index // board * board
        peers = ", ".join(f"{p}: 12" for p in range(first, first + board) if p != index)
        lines += [
            f"  - uuid: GPU-{index:08x}-0000-4000-8000-{index:012x}",
            '    name: "NVIDIA A100-SXM4-80GB"',
            "    memoryMiB: 81920",
            f'    pciBusID: "{index // 256:08X}:{index % 256:02X}:00.0"',
            f"    numaNode: {index * 2 // gpus}",
            '    computeCapability: "8.0"',
            f"    nvlinks: {{{peers}}}",
        ]
    return "\n".join(lines) + "\n"


class Prober:
    """Times Allocate and /healthz, one after the other, until stopped."""

    def __init__(self, plugin: Plugin, stub: api_pb2_grpc.DevicePluginStub, device: str) -> None:
        self.plugin = plugin
        self.stub = stub
        self.request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[device])]
        )
        self.allocate_ms: list[float] = []
        self.healthz_ms: list[float] = []
        self.shared_healthz_ms: list[float] = []

    async def run(self, done: Callable[[], bool]) -> None:
        while not done():
            started = time.perf_counter()
            await self.stub.Allocate(self.request, timeout=60)
            self.allocate_ms.append((time.perf_counter() - started) * 1000)
            await self._healthz(self.plugin.probe_port, self.healthz_ms)
            await self._healthz(self.plugin.port, self.shared_healthz_ms)
            await asyncio.sleep(PROBE_GAP)

    async def _healthz(self, port: int, into: list[float]) -> None:
        started = time.perf_counter()
        reply = await http_get(port, "/healthz")
        into.append((time.perf_counter() - started) * 1000)
        if reply.status != 200:
            raise self.plugin.failure(f"/healthz on port {port} answered {reply.status}")

    async def during(self, work: Awaitable[Any]) -> Any:
        """Probe until `work` finishes; returns its result."""
        task = asyncio.ensure_future(work)
        await self.run(task.done)
        return await task

    def rows(self, scenario: str, note: str) -> list[Row]:
        return [
            Row.of(
                "loop", f"loop.{scenario}.allocate", "ms", self.allocate_ms, goal=GOAL, note=note
            ),
            Row.of("loop", f"loop.{scenario}.healthz", "ms", self.healthz_ms, goal=GOAL, note=note),
            Row.of(
                "loop",
                f"loop.{scenario}.healthz_shared",
                "ms",
                self.shared_healthz_ms,
                note="the same probe on the inspection endpoint (--state-address)",
            ),
        ]


@asynccontextmanager
async def serving(
    sim: KubeletSimulator, args: list[str], devices: int
) -> AsyncIterator[tuple[Plugin, api_pb2_grpc.DevicePluginStub, list[str]]]:
    """The plugin, serving `devices` devices, with a stub on its socket and their IDs."""
    async with Plugin(args) as plugin:
        try:
            view = await sim.wait_devices(GPU, lambda d: len(d) == devices, timeout=300)
        except TimeoutError:
            raise plugin.failure(f"never listed {devices} devices") from None
        async with aio.insecure_channel(f"unix://{sim.directory / view.endpoint}") as channel:
            yield plugin, api_pb2_grpc.DevicePluginStub(channel), [d.id for d in view.devices]


async def pressure(*args: str) -> dict[str, Any]:
    """Run `bench.pressure` with `args` to its end; its JSON summary."""
    env = base_env() | {"PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.pressure",
        *args,
        env=env,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"bench.pressure {args[0]} failed: {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    return result


async def state_flood(seconds: float) -> tuple[list[Row], dict[str, Any]]:
    devices = 16 * REPLICAS
    async with simulator() as sim:
        config = sim.directory / "config.yaml"
        config.write_text(sliced(REPLICAS))
        args = plugin_args(sim.directory, "hgx-16", "--config-file", str(config))
        async with serving(sim, args, devices) as (plugin, stub, ids):
            quiet = Prober(plugin, stub, ids[0])
            await quiet.during(asyncio.sleep(seconds))
            flooded = Prober(plugin, stub, ids[-1])
            load = pressure(
                "state", "--port", str(plugin.port), "--clients", str(STATE_CLIENTS),
                "--seconds", str(seconds),
            )  # fmt: skip
            result = await flooded.during(load)
    node = f"hgx-16 x {REPLICAS} replicas = {devices} devices"
    state_ms = result["ms"] or [0.0]
    rows = [
        *quiet.rows("quiet", f"{node}, no load"),
        *flooded.rows("state_flood", f"{node}, {STATE_CLIENTS} concurrent GET /state"),
        Row.of(
            "loop",
            "loop.state_flood.state",
            "ms",
            state_ms,
            note=f"GET /state under the flood; {result['calls']} answered, "
            f"{result['refused']} refused with 503",
        ),
    ]
    return rows, {"state_calls": result["calls"], "state_refused": result["refused"]}


async def busy_node(seconds: float) -> tuple[list[Row], dict[str, Any]]:
    """A node whose CPUs are all taken by workloads, while a few clients read `/state`."""
    devices = 16 * REPLICAS
    hogs = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        async with simulator() as sim:
            config = sim.directory / "config.yaml"
            config.write_text(sliced(REPLICAS))
            args = plugin_args(sim.directory, "hgx-16", "--config-file", str(config))
            async with serving(sim, args, devices) as (plugin, stub, ids):
                prober = Prober(plugin, stub, ids[-1])
                load = pressure(
                    "state", "--port", str(plugin.port), "--clients", str(BUSY_CLIENTS),
                    "--seconds", str(seconds), "--nice", "0",
                )  # fmt: skip
                result = await prober.during(load)
    finally:
        for hog in hogs:
            hog.kill()
            await hog.wait()
    note = f"every CPU busy with another process, {BUSY_CLIENTS} clients reading /state"
    # No goal: here the tail is the kernel's scheduler sharing CPUs between
    # equals, which the plugin cannot shorten (a CPU request can).
    rows = [replace(row, goal=None) for row in prober.rows("busy_node", note)]
    return rows, {"state_calls": result["calls"]}


async def preferred_512(seconds: float) -> tuple[list[Row], dict[str, Any]]:
    async with simulator() as sim:
        profile = sim.directory / "node-512.yaml"
        profile.write_text(node_profile(BIG_NODE))
        args = plugin_args(sim.directory, str(profile))
        async with serving(sim, args, BIG_NODE) as (plugin, stub, ids):
            id_file = sim.directory / "ids.txt"
            id_file.write_text("\n".join(ids))
            prober = Prober(plugin, stub, ids[0])
            load = pressure(
                "preferred", "--socket", str(sim.directory / "nvidia-gpu.sock"),
                "--ids-file", str(id_file), "--size", str(PREFERRED_SIZE),
                "--seconds", str(seconds),
            )  # fmt: skip
            result = await prober.during(load)
    note = f"{BIG_NODE} GPUs, GetPreferredAllocation of {PREFERRED_SIZE} back to back"
    rows = [
        *prober.rows("preferred_512", note),
        Row.of(
            "loop",
            "loop.preferred_512.preferred",
            "ms",
            result["ms"],
            note=f"GetPreferredAllocation {PREFERRED_SIZE} of {BIG_NODE} free",
        ),
    ]
    return rows, {"preferred_calls": result["calls"]}


def rejection_of(replicas: int) -> Callable[[dict[str, Any]], bool]:
    """A /state predicate: the edit asking for `replicas` was rejected."""
    mark = f"x {replicas} replicas"
    return lambda state: mark in (state["reason"] or "")


async def oversized_config(seconds: float) -> tuple[list[Row], dict[str, Any]]:
    rejected_ms: list[float] = []
    async with simulator() as sim:
        config = sim.directory / "config.yaml"
        config.write_text(sliced(2))
        args = plugin_args(sim.directory, "dgx-a100", "--config-file", str(config))
        async with serving(sim, args, 16) as (plugin, stub, ids):

            async def edits() -> None:
                deadline = time.monotonic() + seconds
                replicas = OVERSIZED
                while time.monotonic() < deadline:
                    started = time.perf_counter()
                    write_atomically(config, sliced(replicas))
                    await plugin.wait_state(rejection_of(replicas), timeout=60)
                    rejected_ms.append((time.perf_counter() - started) * 1000)
                    replicas += 1

            prober = Prober(plugin, stub, ids[0])
            await prober.during(edits())
            view = sim.snapshot().resource(GPU)
            if view is None or len(view.devices) != 16:
                raise plugin.failure("the rejected edits changed the device list")
    note = f"dgx-a100, config rewritten with replicas >= {OVERSIZED}, each rejected"
    rows = [
        *prober.rows("oversized_config", note),
        Row.of(
            "loop",
            "loop.oversized_config.rejected",
            "ms",
            rejected_ms,
            note="config written to rejection shown on /state",
        ),
    ]
    return rows, {"edits": len(rejected_ms)}


async def run(*, quick: bool) -> Outcome:
    seconds = 2.0 if quick else 6.0
    rows: list[Row] = []
    details: dict[str, Any] = {}
    for scenario in (state_flood, busy_node, preferred_512, oversized_config):
        found, more = await scenario(seconds)
        rows += found
        details[scenario.__name__] = more
    return Outcome(rows=rows, details=details)
