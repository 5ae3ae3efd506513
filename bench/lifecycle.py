"""Start-up, kubelet restart and config edit, each timed to what the kubelet sees.

* Start-up: from the exec of the plugin process to its resource registered
  with the simulated kubelet, beside two floors (`floor_plugin.py`: a process
  that imports grpc, serves the same service and registers once; and the same
  reading its two settings through pydantic-settings, the plugin's settings
  mechanism). Runs alternate plugin and floors, each with a fresh simulator,
  after one untimed run of each so all start with warm file caches. Start-up
  is watched, not chased: the goal (at most twice the second floor) is a
  regression guard. One more run, with ``-X importtime``, lists what the
  plugin imports before its first registration, by package, and which of the
  heavy parts a plain node never uses (the Kubernetes client, the DRA side
  and its gRPC stubs, the MPS daemon probe, the CDI spec builder: loaded on
  first use, `reconciler.on_demand`) it loaded, which must be none; and one
  more (`class_count.py`) how many dataclasses and pydantic models it creates
  on that way beyond what the second floor loads, and what creating them
  costs.
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
import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

from bench.class_count import MARKER as CLASS_COUNT_MARKER
from bench.proc import (
    GPU,
    Plugin,
    Process,
    count_is,
    floor_argv,
    pause,
    plugin_args,
    simulator,
)
from bench.report import Goal, Outcome, Row, Stat

CLASS_COUNT_SCRIPT = Path(__file__).with_name("class_count.py")

SEED = 20240601
RESTART_GOAL = Goal(Stat.P99, 1000.0)
REPAIR_GOAL = Goal(Stat.P99, 1000.0)
STARTUP_GOAL = Goal(Stat.MEDIAN, 2.0, inclusive=True)
FLOORS = {"floor": (), "floor_settings": ("--settings",)}
# Heavy parts a plain node never uses (modules, with what is under them): none may
# load before the first registration.
HEAVY = (
    "kubernetes",
    "kube.official",
    "kubelet.dra",
    "kubelet.api.dra",
    "mps.probe",
    "resources.cdi_spec",
)
REGISTERED = f"registered {GPU} with the kubelet"  # the plugin's log line when it is
TOP = 8


async def _startup_once(
    side: str, *, env: dict[str, str] | None = None, script: Path | None = None
) -> tuple[float, str]:
    """Seconds from exec to registered, for the plugin or a floor, and its stderr by then.

    `script` runs the plugin through that script instead of ``-m reconciler``.
    """
    async with simulator() as sim:
        if side == "plugin":
            process: Process = Plugin(plugin_args(sim.directory, "dgx-a100"), env=env)
            if script is not None:
                process.argv[1:3] = [str(script)]
        else:
            sock = sim.directory / "floor.sock"
            process = Process(
                floor_argv(
                    "--socket", str(sock), "--kubelet-socket", str(sim.socket_path), *FLOORS[side]
                )
            )
        async with process:
            try:
                await sim.wait_registered(GPU, timeout=60)
            except TimeoutError:
                raise process.failure("never registered") from None
            elapsed = time.monotonic() - process.started_at
            await process.stop()  # (the registration is logged as it returns)
            return elapsed, process.stderr


def imports_before(stderr: str, marker: str = REGISTERED) -> Counter[str]:
    """Milliseconds of import time by top-level package, up to the line holding `marker`.

    `stderr` is a process's output under ``-X importtime`` (``import time:
    self | cumulative | name`` lines, interleaved with its log).
    """
    spent: Counter[str] = Counter()
    for line in stderr.splitlines():
        if marker in line:
            break
        if not line.startswith("import time:") or "|" not in line:
            continue
        own, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        if own.isdigit():
            spent[name.split(".")[0]] += int(own) / 1000
    return spent


def describe_imports(spent: Counter[str]) -> str:
    """The top packages as a note (``pydantic_core 41, grpc 30, ...``)."""
    top = ", ".join(f"{name} {ms:.0f}" for name, ms in spent.most_common(TOP))
    return f"ms by package: {top}"


def heavy_before(stderr: str, marker: str = REGISTERED) -> list[str]:
    """The `HEAVY` parts of which a module was imported before the line holding `marker`."""
    found: set[str] = set()
    for line in stderr.splitlines():
        if marker in line:
            break
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            found.update(part for part in HEAVY if name == part or name.startswith(part + "."))
    return [part for part in HEAVY if part in found]


async def run_startup(*, quick: bool) -> Outcome:
    reps = 2 if quick else 8
    sides = ("plugin", *FLOORS)
    for side in sides:
        await _startup_once(side)
    runs: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(reps):
        for side in sides:
            runs[side].append((await _startup_once(side))[0] * 1000)
    _, stderr = await _startup_once("plugin", env={"PYTHONPROFILEIMPORTTIME": "1"})
    if REGISTERED not in stderr:
        raise RuntimeError(f"the plugin never logged {REGISTERED!r}:\n{stderr[-3000:]}")
    spent = imports_before(stderr)
    top = describe_imports(spent)
    heavy = heavy_before(stderr)
    classes = await _classes_before_registration()
    plugin = Row.of(
        "startup", "startup.plugin", "ms", runs["plugin"],
        note="exec to nvidia.com/gpu registered, dgx-a100",
    )
    floor = Row.of(
        "startup", "startup.floor", "ms", runs["floor"],
        note="exec to registered: grpc import + serve + Register",
    )
    floor_settings = Row.of(
        "startup", "startup.floor_settings", "ms", runs["floor_settings"],
        note="the floor, plus a two-field pydantic-settings class from argv/env",
    )
    return Outcome(
        rows=[
            plugin,
            floor,
            floor_settings,
            Row.ratio("startup", "startup.ratio_grpc", plugin, floor),
            Row.ratio("startup", "startup.ratio", plugin, floor_settings, goal=STARTUP_GOAL),
            Row.single(
                "startup", "startup.imports", "ms", sum(spent.values()),
                note=f"imported before the first registration; {top}",
            ),
            Row.single(
                "startup", "startup.classes", "ms", classes["dataclass_ms"] + classes["model_ms"],
                note=f"creating {classes['dataclasses']:.0f} dataclasses "
                f"({classes['dataclass_ms']:.0f} ms) and {classes['models']:.0f} pydantic models "
                f"({classes['model_ms']:.0f} ms) before the first registration, beyond the floor's",
            ),
            Row.single(
                "startup", "startup.heavy_imports", "parts", len(heavy),
                goal=Goal(Stat.MEDIAN, 0, inclusive=True),
                note=f"of {', '.join(HEAVY)} before the first registration: "
                + (", ".join(heavy) or "none"),
            ),
        ],
        details={
            **{f"{side}_ms": samples for side, samples in runs.items()},
            "imports_before_registered_ms": dict(spent.most_common()),
            "heavy_before_registered": heavy,
            "classes_before_registered": classes,
        },
    )  # fmt: skip


async def _classes_before_registration() -> dict[str, float]:
    """`class_count.py`'s line from one start of the plugin."""
    _, stderr = await _startup_once("plugin", script=CLASS_COUNT_SCRIPT)
    for line in stderr.splitlines():
        if CLASS_COUNT_MARKER in line:
            counts: dict[str, float] = json.loads(line.split(CLASS_COUNT_MARKER, 1)[1])
            return counts
    raise RuntimeError(f"no {CLASS_COUNT_MARKER!r} line:\n{stderr[-3000:]}")


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
