"""Start-up, kubelet restart and config edit, each timed to what the kubelet sees.

* Start-up: from the exec of the plugin process to its resource registered
  with the simulated kubelet, beside the floor (`floor_plugin.py`: a process
  that imports grpc, serves the same service and registers once). Runs
  alternate plugin and floor, each with a fresh simulator, after one untimed
  run of each so both start with warm file caches. Beside them, the import
  time of each side's modules in a fresh interpreter, and of the Kubernetes
  client alone, which says where start-up time goes.
* Kubelet restart: from `KubeletSimulator.restart()` (sockets wiped, a new
  kubelet.sock) to the plugin's registration with the new kubelet.
* Config edit: time-slicing replicas on `dgx-a100` toggled between 2 and 4 by
  atomically replacing the config file, until the simulator holds the new
  device list (16 or 32 devices).
* Plugin socket repair: the plugin's own socket deleted underneath it, to
  its registration again with the simulated kubelet.
* Stop: SIGTERM to the exit of a plugin serving `dgx-a100`, each run a fresh
  plugin.

Repetitions are spaced by a random pause of 50 to 150 ms, so a plugin that
polls is caught at every phase of its poll and the figures show the average
wait rather than a lucky or unlucky constant one.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from pathlib import Path

from bench.proc import (
    GPU,
    Plugin,
    Process,
    base_env,
    count_is,
    floor_argv,
    pause,
    plugin_args,
    simulator,
)
from bench.report import Goal, Outcome, Row, Stat

SEED = 20240601
RESTART_GOAL = Goal(Stat.P99, 1000.0)
REPAIR_GOAL = Goal(Stat.P99, 1000.0)
STARTUP_GOAL = Goal(Stat.MEDIAN, 2.0, inclusive=True)


async def _startup_once(*, floor: bool) -> float:
    """Seconds from exec to registered, for the plugin or for the floor."""
    async with simulator() as sim:
        if floor:
            sock = sim.directory / "floor.sock"
            process: Process = Process(
                floor_argv("--socket", str(sock), "--kubelet-socket", str(sim.socket_path))
            )
        else:
            process = Plugin(plugin_args(sim.directory, "dgx-a100"))
        async with process:
            try:
                await sim.wait_registered(GPU, timeout=60)
            except TimeoutError:
                raise process.failure("never registered") from None
            return time.monotonic() - process.started_at


# What each side imports before it can do anything, timed inside a fresh interpreter.
IMPORTS = {
    "startup.import_plugin": ("import reconciler.app", "the plugin's modules"),
    "startup.import_floor": (
        "import grpc.aio; from kubelet.api import api_pb2, api_pb2_grpc",
        "the floor's modules",
    ),
    "startup.import_kubernetes": (
        "import kubernetes.client",
        "the Kubernetes client alone (part of the plugin's)",
    ),
}


async def import_ms(statement: str) -> float:
    """Milliseconds `statement` takes in a new interpreter (interpreter start excluded)."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, env=base_env()
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{statement!r} failed in a fresh interpreter")
    return float(out) * 1000


async def run_startup(*, quick: bool) -> Outcome:
    reps = 2 if quick else 8
    await _startup_once(floor=False)
    await _startup_once(floor=True)
    plugin_runs: list[float] = []
    floor_runs: list[float] = []
    imports: dict[str, list[float]] = {name: [] for name in IMPORTS}
    for rep in range(reps):
        plugin_runs.append(await _startup_once(floor=False) * 1000)
        floor_runs.append(await _startup_once(floor=True) * 1000)
        if rep == 0 or not quick:  # context for the ratio, not a figure of its own
            for name, (statement, _) in IMPORTS.items():
                imports[name].append(await import_ms(statement))
    plugin = Row.of(
        "startup",
        "startup.plugin",
        "ms",
        plugin_runs,
        note="exec to nvidia.com/gpu registered, dgx-a100",
    )
    floor = Row.of(
        "startup",
        "startup.floor",
        "ms",
        floor_runs,
        note="exec to registered: grpc import + serve + Register",
    )
    return Outcome(
        rows=[
            plugin,
            floor,
            Row.ratio("startup", "startup.ratio", plugin, floor, goal=STARTUP_GOAL),
            *(
                Row.of("startup", name, "ms", imports[name], note=f"import of {what}")
                for name, (_, what) in IMPORTS.items()
            ),
        ],
        details={"plugin_ms": plugin_runs, "floor_ms": floor_runs, "imports_ms": imports},
    )


async def run_restart(*, quick: bool) -> Outcome:
    reps = 5 if quick else 20
    rng = random.Random(SEED)
    samples: list[float] = []
    own: list[float] = []
    async with (
        simulator(stop_grace=0.1) as sim,
        Plugin(plugin_args(sim.directory, "dgx-a100")) as plugin,
    ):
        try:
            await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
        except TimeoutError:
            raise plugin.failure("never listed its devices") from None
        for _ in range(reps):
            await pause(rng)
            view = sim.snapshot().resource(GPU)
            assert view is not None
            before = view.counters.registrations
            started = time.monotonic()
            await sim.restart()
            restarted = time.monotonic()
            await sim.wait_registered(GPU, min_registrations=before + 1, timeout=10)
            samples.append((time.monotonic() - started) * 1000)
            own.append((restarted - started) * 1000)
            await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=10)
    row = Row.of(
        "restart",
        "kubelet_restart",
        "ms",
        samples,
        goal=RESTART_GOAL,
        note=f"restart() to re-registered; the simulator's own restart: median "
        f"{sorted(own)[len(own) // 2]:.1f} ms",
    )
    return Outcome(rows=[row], details={"ms": samples})


def sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {GPU}\n      replicas: {replicas}\n"
    )


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def run_config_edit(*, quick: bool) -> Outcome:
    reps = 6 if quick else 20
    rng = random.Random(SEED)
    samples: list[float] = []
    async with simulator() as sim:
        config = sim.directory / "config.yaml"
        config.write_text(sliced(2))
        args = plugin_args(sim.directory, "dgx-a100", "--config-file", str(config))
        async with Plugin(args) as plugin:
            try:
                await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=60)
            except TimeoutError:
                raise plugin.failure("never listed 16 replicas") from None
            replicas = 2
            for _ in range(reps):
                await pause(rng)
                replicas = 6 - replicas
                started = time.monotonic()
                write_atomically(config, sliced(replicas))
                want = 8 * replicas
                try:
                    await sim.wait_devices(GPU, count_is(want), timeout=10)
                except TimeoutError:
                    raise plugin.failure(f"never listed {want} replicas") from None
                samples.append((time.monotonic() - started) * 1000)
    row = Row.of(
        "config",
        "config_edit",
        "ms",
        samples,
        note="replace config file (replicas 2<->4) to new list at the kubelet",
    )
    return Outcome(rows=[row], details={"ms": samples})


async def run_socket_repair(*, quick: bool) -> Outcome:
    reps = 5 if quick else 20
    rng = random.Random(SEED)
    samples: list[float] = []
    async with (
        simulator() as sim,
        Plugin(plugin_args(sim.directory, "dgx-a100")) as plugin,
    ):
        try:
            await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
        except TimeoutError:
            raise plugin.failure("never listed its devices") from None
        socket = sim.directory / "nvidia-gpu.sock"
        for _ in range(reps):
            await pause(rng)
            view = sim.snapshot().resource(GPU)
            assert view is not None
            before = view.counters.registrations
            started = time.monotonic()
            socket.unlink()
            try:
                await sim.wait_registered(GPU, min_registrations=before + 1, timeout=10)
            except TimeoutError:
                raise plugin.failure("never registered again") from None
            samples.append((time.monotonic() - started) * 1000)
            await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=10)
    row = Row.of(
        "repair",
        "plugin_socket_repair",
        "ms",
        samples,
        goal=REPAIR_GOAL,
        note="the plugin's socket deleted to registered again",
    )
    return Outcome(rows=[row], details={"ms": samples})


async def run_stop(*, quick: bool) -> Outcome:
    reps = 3 if quick else 10
    samples: list[float] = []
    for _ in range(reps):
        async with (
            simulator() as sim,
            Plugin(plugin_args(sim.directory, "dgx-a100")) as plugin,
        ):
            try:
                await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
            except TimeoutError:
                raise plugin.failure("never listed its devices") from None
            assert plugin.proc is not None
            started = time.monotonic()
            plugin.proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(plugin.proc.wait(), 30)
            samples.append((time.monotonic() - started) * 1000)
            if code != 0:
                raise plugin.failure(f"exited {code} after SIGTERM")
    row = Row.of(
        "stop", "sigterm_to_exit", "ms", samples, note="serving dgx-a100, SIGTERM to exit 0"
    )
    return Outcome(rows=[row], details={"ms": samples})
