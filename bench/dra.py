"""DRA mode: moving a node between the kubelet APIs, preparing claims, a restart mid-claim.

Everything runs against the real plugin process (`python -m reconciler`), the
kubelet simulator with its DRA side (it registers the plugin from its
plugins_registry directory and makes the kubelet's NodePrepareResources and
NodeUnprepareResources calls) and the emulated API server (kmock, real HTTP,
in this process: no network latency). The node is `dgx-a100`, 8 GPUs.

* **Flip**: the plugin follows the node's `nvidia.com/device-plugin.config`
  label (`--config-directory` with a `default` config on the device-plugin
  API and a `dra` one naming `kubeletApi: dra`). Moving to DRA is done when
  the API server holds the node's slices with its 8 devices *and* the
  simulated kubelet holds an empty `nvidia.com/gpu` list; moving back, when
  the slices are gone *and* `nvidia.com/gpu` is registered again with its 8
  devices. Both are watched without polling (the emulator's write log, the
  simulator's ledger), each from just before the label patch, and the flip
  takes the later of the two. The first move to DRA loads the DRA code and
  starts the slice publisher, as on a node moved once, so it is its own row.
* **Prepare**: a claim of one GPU and a claim of all 8, created allocated as
  the scheduler leaves them, prepared, prepared again (answered from what
  the plugin recorded: the kubelet's retry) and unprepared, in turns, so every
  first prepare is a real one: the claim read from the API, its CDI spec
  written, the checkpoint replaced.
* **Restart**: two claims prepared (GPU 0, and GPUs 1-7), then deleted from
  the API, so only the plugin's checkpoint can answer for them. The plugin
  gets SIGTERM and, once it has exited, is started again; timed from that
  exec to the first successful NodePrepareResources of both, which includes
  the plugin's start-up, its DRA start and the simulated kubelet finding the
  new registration socket (it scans every 50 ms; a kubelet watches with
  inotify). The call itself is the second row.

Repetitions are spaced by a random pause of 50 to 150 ms, as in the other
groups. kmock ships with the development extras; without it the group is
skipped.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.proc import GPU, Plugin, pause, plugin_args, simulator
from bench.report import Goal, Outcome, Row, Stat
from kubelet.dra.types import ClaimRef
from kubelet_sim import DriverNotRegistered, KubeletSimulator, PluginCallError, Snapshot

if TYPE_CHECKING:
    from tests.unit.kube.apiserver import ApiServer

SEED = 20240601
NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"
LABEL = "nvidia.com/device-plugin.config"
NAMESPACE = "default"
GPUS = 8  # dgx-a100
REGISTRY = "reg"  # the simulated kubelet's plugins_registry, under its directory
FLIP_GOAL = Goal(Stat.P99, 2000.0)
PREPARE_GOAL = Goal(Stat.P99, 50.0)
WAIT = 30.0  # bounds every wait: a loaded machine is slow, never stuck
START = 60.0  # a first start imports the Kubernetes client, seconds on a busy machine
# kmock matches each request against all those it recorded; a bounded record
# keeps the API server's answer time from growing along the run.
KEEP_REQUESTS = 8


@dataclass(frozen=True)
class Counts:
    flips: int  # each way, after the first move to DRA
    prepares: int  # per claim size
    restarts: int


QUICK = Counts(flips=1, prepares=3, restarts=1)  # every row, a few times (`make test` runs it)
FULL = Counts(flips=15, prepares=100, restarts=6)


def api_config(api: str) -> str:
    return f"version: v1\nflags:\n  plugin:\n    kubeletApi: {api}\n"


def dra_args(directory: Path, *extra: str) -> list[str]:
    return plugin_args(
        directory,
        "dgx-a100",
        *("--node-name", NODE, "--cdi-spec-dir", str(directory / "cdi")),
        *("--kubelet-registrar-directory-path", str(directory / REGISTRY)),
        *("--kubelet-plugins-directory-path", str(directory / "plugins")),
        *extra,
    )


def published(api: ApiServer) -> int | None:
    """Devices in this node's slices of our driver; None when there is no slice."""
    ours = [
        s
        for s in api.stored_slices()
        if s["spec"].get("nodeName") == NODE and s["spec"].get("driver") == DRIVER
    ]
    return None if not ours else sum(len(s["spec"].get("devices") or ()) for s in ours)


def gpu_withdrawn(snap: Snapshot) -> bool:
    view = snap.resource(GPU)
    return view is not None and view.devices == ()


def gpu_served(registrations: int) -> Callable[[Snapshot], bool]:
    def check(snap: Snapshot) -> bool:
        view = snap.resource(GPU)
        return (
            view is not None
            and view.registered
            and view.counters.registrations > registrations
            and len(view.devices) == GPUS
        )

    return check


def dra_registered(snap: Snapshot) -> bool:
    view = snap.dra_driver(DRIVER)
    return view is not None and view.registered


def dra_registrations(snap: Snapshot) -> int:
    view = snap.dra_driver(DRIVER)
    return 0 if view is None else view.registrations


async def stamped(waits: Sequence[Awaitable[object]]) -> list[float]:
    """The monotonic time each wait ended, waiting for all together; the rest cancelled on error."""

    async def one(wait: Awaitable[object]) -> float:
        await wait
        return time.monotonic()

    tasks = [asyncio.ensure_future(one(wait)) for wait in waits]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


# -- flips ---------------------------------------------------------------------------


@dataclass
class Flips:
    first: float = 0.0  # ms, the first move to DRA
    to_dra: list[float] = field(default_factory=list)
    to_device_plugin: list[float] = field(default_factory=list)
    parts: dict[str, list[float]] = field(default_factory=dict)  # ms to each condition


async def _flip(
    api: ApiServer, sim: KubeletSimulator, plugin: Plugin, value: str
) -> tuple[float, float, float]:
    """Patch the label to `value`; ms until the slices, until the kubelet, and the DRA
    kubelet plugin's registration (moving to DRA; 0 moving back)."""
    to_dra = value == "dra"
    snap = sim.snapshot()
    gpu = snap.resource(GPU)
    registrations = 0 if gpu is None else gpu.counters.registrations
    dra_before = dra_registrations(snap)
    want = GPUS if to_dra else None
    started = time.monotonic()
    await api.set_labels(NODE, {LABEL: value})
    kubelet = sim.wait_for(gpu_withdrawn if to_dra else gpu_served(registrations), timeout=WAIT)
    slices = api.handler.written(lambda: published(api) == want, timeout=WAIT)
    try:
        at_slices, at_kubelet = await stamped([slices, kubelet])
        registered = 0.0
        if to_dra:
            await sim.wait_dra_registered(DRIVER, min_registrations=dra_before + 1, timeout=WAIT)
            registered = (time.monotonic() - started) * 1000
        else:  # settled: the DRA kubelet plugin is gone again
            await sim.wait_for(lambda snap: not dra_registered(snap), timeout=WAIT)
    except TimeoutError as err:
        raise plugin.failure(f"label {value}: {err}") from None
    return (at_slices - started) * 1000, (at_kubelet - started) * 1000, registered


async def _flips(api: ApiServer, counts: Counts, rng: random.Random) -> Flips:
    from tests.unit.kube.apiserver import kubeconfig

    async with simulator(registry=REGISTRY) as sim:
        configs = sim.directory / "configs"
        configs.mkdir()
        (configs / "default").write_text(api_config("device-plugin"))
        (configs / "dra").write_text(api_config("dra"))
        args = dra_args(
            sim.directory, "--config-directory", str(configs), "--default-config", "default"
        )
        env = {"KUBECONFIG": str(kubeconfig(sim.directory / "kubeconfig", api.url))}
        async with Plugin(args, env=env) as plugin:
            try:
                await sim.wait_for(gpu_served(0), timeout=START)
                await plugin.wait_state(
                    lambda s: (s.get("selection") or {}).get("outcome") == "label", timeout=START
                )
            except TimeoutError:
                raise plugin.failure("never served the labelled config") from None
            flips = Flips()
            parts = flips.parts = {
                "to_dra_slices": [],
                "to_dra_kubelet_empty": [],
                "to_dra_kubelet_plugin_registered": [],
                "to_device_plugin_slices_gone": [],
                "to_device_plugin_kubelet_listed": [],
            }
            for round_ in range(counts.flips + 1):
                await pause(rng)
                slices, kubelet, registered = await _flip(api, sim, plugin, "dra")
                if round_ == 0:
                    flips.first = max(slices, kubelet)
                else:
                    flips.to_dra.append(max(slices, kubelet))
                parts["to_dra_slices"].append(slices)
                parts["to_dra_kubelet_empty"].append(kubelet)
                parts["to_dra_kubelet_plugin_registered"].append(registered)
                await pause(rng)
                slices, kubelet, _ = await _flip(api, sim, plugin, "default")
                flips.to_device_plugin.append(max(slices, kubelet))
                parts["to_device_plugin_slices_gone"].append(slices)
                parts["to_device_plugin_kubelet_listed"].append(kubelet)
            return flips


# -- claims --------------------------------------------------------------------------


async def _claim(api: ApiServer, name: str, devices: Sequence[str]) -> ClaimRef:
    from kube.resource_claims import AllocatedDevice

    results = [AllocatedDevice("gpus", DRIVER, NODE, device) for device in devices]
    created = await api.create_claim(NAMESPACE, name, results)
    return ClaimRef(NAMESPACE, created["metadata"]["uid"], name)


async def _prepare(
    sim: KubeletSimulator, plugin: Plugin, claims: Sequence[ClaimRef], sizes: Sequence[int]
) -> tuple[float, dict[str, tuple[str, ...]]]:
    """One NodePrepareResources: ms, and each claim's CDI IDs (errors raise)."""
    started = time.monotonic()
    reply = await sim.prepare(DRIVER, claims)
    elapsed = (time.monotonic() - started) * 1000
    ids: dict[str, tuple[str, ...]] = {}
    for claim, size in zip(claims, sizes, strict=True):
        answer = reply.claims[claim.uid]
        if answer.error or len(answer.devices) != size:
            raise plugin.failure(f"prepare {claim}: {answer.error or list(answer.devices)}")
        ids[claim.uid] = tuple(i for d in answer.devices for i in d.cdi_device_ids)
    return elapsed, ids


async def _unprepare(sim: KubeletSimulator, plugin: Plugin, claims: Sequence[ClaimRef]) -> float:
    started = time.monotonic()
    reply = await sim.unprepare(DRIVER, claims)
    elapsed = (time.monotonic() - started) * 1000
    errors = {c.name: reply.claims[c.uid].error for c in claims if reply.claims[c.uid].error}
    if errors:
        raise plugin.failure(f"unprepare: {errors}")
    return elapsed


@dataclass
class Claims:
    prepare: dict[int, list[float]]  # by claim size
    again: dict[int, list[float]]
    unprepare: dict[int, list[float]]
    restart_to_answer: list[float]
    answer_after_restart: list[float]
    attempts: list[int]


async def _first_answer(
    sim: KubeletSimulator, plugin: Plugin, claims: Sequence[ClaimRef], sizes: Sequence[int]
) -> tuple[float, dict[str, tuple[str, ...]], int]:
    """Prepare until the restarted plugin answers: the call's ms, the IDs, and the tries.

    The first call after the registration is expected to succeed; a failed one
    is retried as the kubelet retries, and counted.
    """
    deadline = time.monotonic() + WAIT
    attempts = 0
    while True:
        attempts += 1
        try:
            elapsed, ids = await _prepare(sim, plugin, claims, sizes)
            return elapsed, ids, attempts
        except (RuntimeError, PluginCallError, DriverNotRegistered):
            if time.monotonic() > deadline or not plugin.alive():
                raise
        await asyncio.sleep(0.01)


async def _claims(api: ApiServer, counts: Counts, rng: random.Random) -> Claims:
    from tests.unit.kube.apiserver import kubeconfig, resource_claims

    sizes = (1, GPUS)
    one = await _claim(api, "one-gpu", ["gpu-0"])
    eight = await _claim(api, "eight-gpus", [f"gpu-{i}" for i in range(GPUS)])
    done = Claims(
        {n: [] for n in sizes}, {n: [] for n in sizes}, {n: [] for n in sizes}, [], [], []
    )
    async with simulator(registry=REGISTRY) as sim:
        args = dra_args(sim.directory, "--kubelet-api", "dra")
        env = {"KUBECONFIG": str(kubeconfig(sim.directory / "kubeconfig", api.url))}
        plugin = Plugin(args, env=env)
        try:
            await plugin.start()
            try:
                await sim.wait_dra_registered(DRIVER, timeout=START)
                await api.handler.written(lambda: published(api) == GPUS, timeout=START)
            except TimeoutError:
                raise plugin.failure("never served DRA") from None
            for _ in range(counts.prepares):
                for claim, size in ((one, 1), (eight, GPUS)):
                    await pause(rng)
                    elapsed, first = await _prepare(sim, plugin, [claim], [size])
                    done.prepare[size].append(elapsed)
                    elapsed, again = await _prepare(sim, plugin, [claim], [size])
                    if again != first:
                        raise plugin.failure(f"prepared again differently: {first} then {again}")
                    done.again[size].append(elapsed)
                    done.unprepare[size].append(await _unprepare(sim, plugin, [claim]))

            # Prepared, then gone from the API: only the checkpoint can answer now.
            rest = await _claim(api, "seven-gpus", [f"gpu-{i}" for i in range(1, GPUS)])
            held, held_sizes = [one, rest], [1, GPUS - 1]
            _, before = await _prepare(sim, plugin, held, held_sizes)
            for claim in held:
                await api.delete(f"{resource_claims(NAMESPACE)}/{claim.name}")
            for _ in range(counts.restarts):
                await pause(rng)
                registrations = dra_registrations(sim.snapshot())
                await plugin.stop()
                plugin.close()
                plugin = Plugin(args, env=env)
                started = await plugin.start()
                try:
                    await sim.wait_dra_registered(
                        DRIVER, min_registrations=registrations + 1, timeout=START
                    )
                except TimeoutError:
                    raise plugin.failure("never registered again after the restart") from None
                elapsed, after, attempts = await _first_answer(sim, plugin, held, held_sizes)
                done.restart_to_answer.append((time.monotonic() - started) * 1000)
                done.answer_after_restart.append(elapsed)
                done.attempts.append(attempts)
                if after != before:
                    raise plugin.failure(f"answered differently after a restart: {after}")
            await _unprepare(sim, plugin, held)
        finally:
            await plugin.stop()
            plugin.close()
    return done


# -- the group -----------------------------------------------------------------------


async def run(*, quick: bool) -> Outcome:
    try:
        import kmock  # noqa: F401
    except ImportError:
        return Outcome(skipped="kmock is not installed (pip install -e '.[dev]')")
    from tests.unit.kube.apiserver import running_apiserver

    counts = QUICK if quick else FULL
    rng = random.Random(SEED)
    # The emulated API server and the simulated kubelet live in this process,
    # beside the Kubernetes client's many modules: a full collection of all
    # that took 150-300 ms here, and stalled a watch event on its way to the
    # plugin. Frozen, the collector leaves what was loaded up to now alone.
    gc.collect()
    gc.freeze()
    try:
        async with running_apiserver() as api:
            api.handler.keep_requests = KEEP_REQUESTS
            await api.add_node(NODE, {LABEL: "default"})
            flips = await _flips(api, counts, rng)
            claims = await _claims(api, counts, rng)
    finally:
        gc.unfreeze()
    tries = max(claims.attempts)
    rows = [
        Row.single(
            "dra", "dra.flip_first", "ms", flips.first, goal=FLIP_GOAL,
            note="first move to DRA of a running plugin: label patch to slices "
            "published and the nvidia.com/gpu list empty",
        ),
        Row.of(
            "dra", "dra.flip_to_dra", "ms", flips.to_dra, goal=FLIP_GOAL,
            note="label to dra: slices published and the nvidia.com/gpu list empty",
        ),
        Row.of(
            "dra", "dra.flip_to_device_plugin", "ms", flips.to_device_plugin, goal=FLIP_GOAL,
            note="label back: slices gone and nvidia.com/gpu listed again (8)",
        ),
        Row.of(
            "dra", "dra.prepare_1gpu", "ms", claims.prepare[1], goal=PREPARE_GOAL,
            note="NodePrepareResources, claim of 1 GPU: read, CDI spec, checkpoint",
        ),
        Row.of(
            "dra", "dra.prepare_8gpu", "ms", claims.prepare[GPUS], goal=PREPARE_GOAL,
            note="the same, a claim of 8 GPUs",
        ),
        Row.of(
            "dra", "dra.prepare_again_8gpu", "ms", claims.again[GPUS],
            note="the same claim prepared again (a kubelet retry): from memory",
        ),
        Row.of(
            "dra", "dra.unprepare_8gpu", "ms", claims.unprepare[GPUS],
            note="NodeUnprepareResources: spec removed, checkpoint replaced",
        ),
        Row.of(
            "dra", "dra.restart_to_reprepare", "ms", claims.restart_to_answer,
            note="exec of a restarted plugin to its first answer for 2 prepared claims "
            f"(checkpoint; {tries} call{'s' if tries > 1 else ''} at most)",
        ),
        Row.of(
            "dra", "dra.reprepare_after_restart", "ms", claims.answer_after_restart,
            note="that NodePrepareResources call (claims deleted from the API)",
        ),
    ]  # fmt: skip
    details = {
        "flip_first_ms": flips.first,
        "flip_to_dra_ms": flips.to_dra,
        "flip_to_device_plugin_ms": flips.to_device_plugin,
        "flip_parts_ms": flips.parts,
        "prepare_ms": {str(n): v for n, v in claims.prepare.items()},
        "prepare_again_ms": {str(n): v for n, v in claims.again.items()},
        "unprepare_ms": {str(n): v for n, v in claims.unprepare.items()},
        "restart_to_reprepare_ms": claims.restart_to_answer,
        "reprepare_after_restart_ms": claims.answer_after_restart,
        "reprepare_attempts": claims.attempts,
    }
    return Outcome(rows=rows, details=details)
