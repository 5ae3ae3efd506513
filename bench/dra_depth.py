"""DRA in depth: preparing a dynamic MIG placement, and an XID on the device-health stream.

Measured as the `dra` group measures: the real plugin process (`python -m
reconciler --kubelet-api dra`), the kubelet simulator's DRA side (it registers
the plugin from its plugins_registry directory, makes the kubelet's
NodePrepareResources and NodeUnprepareResources calls and watches the
`DRAResourceHealth.NodeWatchResources` stream) and the emulated API server
(kmock, real HTTP, in this process).

* **Dynamic MIG prepare**: the plugin runs `--dra-dynamic-mig` on the
  simulated `a100-mig-dynamic` node (8 A100-40GB in MIG mode, no instances),
  its MIG instances in a state file (`MOCK_NVML_STATE`), as the e2e test
  runs it. A claim is created allocated to each of the seven non-overlapping
  `1g.5gb` placements of every GPU (`gpu-<n>-mig-1g5gb-19-<start>`, start 0
  to 6: 56 claims). A round prepares every claim, one NodePrepareResources
  call each, then unprepares every one, one call each. A prepare reads the
  claim from the API, creates the MIG instance (the simulated driver's state
  file replaced, with an fsync), writes the claim's CDI spec and replaces the
  checkpoint three times (PrepareStarted, the instance's ids, then
  PrepareCompleted): five durable writes, a GPU claim's three; an unprepare
  destroys the instance (the state file again), removes the spec and
  replaces the checkpoint. Through a round the GPUs fill up to 56 instances
  and empty again, so the samples cover an empty node to a full one.
* **XID to the health stream**: the plugin serves `dgx-a100` (8 GPUs) in DRA
  mode with `--mock-nvml-events` and a quiet period of 0.2 s. Each round
  takes the next GPU in turn, appends an XID 79 line (sticky: it waits for
  a reset) and times until the simulated kubelet holds a health list saying
  that GPU `Unhealthy`; then, once the quiet period is over, appends a reset
  line and times until a list says it `Healthy`. The time a list arrived is
  the simulator's own stamp (`Event.at`) on the ledger change it made from
  that message: the same monotonic clock, in the same process, as the
  append's start, and no polling, so the resolution is the clock's (the
  wait itself is woken by the ledger's change event). The plugin follows the events file by
  polling it every 50 ms (`devices.simulated_events.POLL_SECONDS`), which is
  in both figures (a real node's NVML event wait has no such step). A reset
  makes the device due at once: the figure is the reset's detection, the
  re-probe, the recovering -> healthy move and the message.

Full: 4 rounds of the 56 claims (224 prepares, 224 unprepares) and 104
health rounds, the two plugins one after the other. `--quick`: 2 claims
and 1 health round, the two at once so their starts overlap (`make test`
runs it; its figures are not for reading). Repetitions are spaced by a
random 50 to 150 ms pause, as in the other groups. Without kmock (the
development extras) or the simulated profiles the group is skipped.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from bench.proc import Plugin, pause, plugin_args, short_dir, simulator
from bench.report import Outcome, Row
from kubelet.dra.types import ClaimRef
from kubelet_sim import KubeletSimulator
from kubelet_sim.model import Event, EventKind

if TYPE_CHECKING:
    from tests.unit.kube.apiserver import ApiServer

GROUP = "dra_depth"
SEED = 20240601
NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"
NAMESPACE = "default"
REGISTRY = "reg"  # the simulated kubelet's plugins_registry, under its directory
MIG_PROFILE = "a100-mig-dynamic"
MIG_GPUS = 8
MIG_DEVICES = MIG_GPUS * 26  # per GPU: the whole GPU and each of its placements
PLACEMENT = "mig-1g5gb-19"  # profile id 19: seven placements per GPU, starts 0..6
STARTS = 7
HEALTH_PROFILE = "dgx-a100"
HEALTH_GPUS = 8
QUIET_PERIOD = 0.2  # seconds; as the `health` group
STICKY_XID = 79
WAIT = 30.0  # bounds every wait: a loaded machine is slow, never stuck
START = 60.0  # a first start imports the Kubernetes client, seconds on a busy machine
KEEP_REQUESTS = 8  # as the `dra` group: kmock's request record stays small

T = TypeVar("T")


@dataclass(frozen=True)
class Counts:
    mig_claims: int  # 1g.5gb placements claimed, GPU by GPU (56 at most)
    mig_rounds: int  # each prepares and unprepares every claim once
    health_rounds: int  # one XID and one reset each


# Quick: every row, as little as gives it (the plugin's two starts are most of it).
QUICK = Counts(mig_claims=2, mig_rounds=1, health_rounds=1)
FULL = Counts(mig_claims=MIG_GPUS * STARTS, mig_rounds=4, health_rounds=104)


def dra_args(directory: Path, profile: str, *extra: str) -> list[str]:
    return plugin_args(
        directory,
        profile,
        *("--kubelet-api", "dra", "--node-name", NODE),
        *("--cdi-spec-dir", str(directory / "cdi")),
        *("--kubelet-registrar-directory-path", str(directory / REGISTRY)),
        *("--kubelet-plugins-directory-path", str(directory / "plugins")),
        *extra,
    )


def slice_devices(api: ApiServer) -> list[dict[str, object]]:
    """The devices in this node's slices of our driver (counter sets have none)."""
    return [
        device
        for s in api.stored_slices()
        if s["spec"].get("nodeName") == NODE and s["spec"].get("driver") == DRIVER
        for device in s["spec"].get("devices") or ()
    ]


def gpu_uuids(api: ApiServer) -> dict[str, str]:
    """Device name -> GPU UUID, for the whole-GPU devices of the slices."""
    found: dict[str, str] = {}
    for device in slice_devices(api):
        attributes = device.get("attributes")
        if isinstance(attributes, dict) and "uuid" in attributes:
            found[str(device["name"])] = str(attributes["uuid"]["string"])
    return found


async def serving(api: ApiServer, sim: KubeletSimulator, plugin: Plugin, devices: int) -> None:
    try:
        await sim.wait_dra_registered(DRIVER, timeout=START)
        await api.handler.written(lambda: len(slice_devices(api)) == devices, timeout=START)
    except TimeoutError:
        raise plugin.failure(f"never served DRA with {devices} devices") from None


async def create_claim(api: ApiServer, name: str, device: str) -> ClaimRef:
    from kube.resource_claims import AllocatedDevice

    created = await api.create_claim(
        NAMESPACE, name, [AllocatedDevice("gpu", DRIVER, NODE, device)]
    )
    return ClaimRef(NAMESPACE, created["metadata"]["uid"], name)


# -- dynamic MIG ---------------------------------------------------------------------


@dataclass
class Mig:
    prepare: list[float] = field(default_factory=list)
    unprepare: list[float] = field(default_factory=list)
    most_instances: int = 0


def instances(state: Path) -> int:
    """MIG instances in the simulated driver's state file."""
    if not state.exists():
        return 0
    gpus = json.loads(state.read_text())["gpus"]
    return sum(len(gpu["instances"]) for gpu in gpus.values())


async def _mig(api: ApiServer, counts: Counts, rng: random.Random) -> Mig:
    from devices.backends import MIG_STATE_ENV
    from tests.unit.kube.apiserver import kubeconfig

    placements = [
        f"gpu-{gpu}-{PLACEMENT}-{start}" for gpu in range(MIG_GPUS) for start in range(STARTS)
    ][: counts.mig_claims]
    claims = [await create_claim(api, f"mig-{n}", device) for n, device in enumerate(placements)]
    done = Mig()
    state_dir = short_dir("dpb-mig-")
    state = state_dir / "mig-state.json"
    try:
        async with simulator(registry=REGISTRY) as sim:
            args = dra_args(sim.directory, MIG_PROFILE, "--dra-dynamic-mig")
            env = {
                "KUBECONFIG": str(kubeconfig(sim.directory / "kubeconfig", api.url)),
                MIG_STATE_ENV: str(state),
            }
            async with Plugin(args, env=env) as plugin:
                await serving(api, sim, plugin, MIG_DEVICES)
                for _ in range(counts.mig_rounds):
                    for claim in claims:
                        await pause(rng)
                        started = time.monotonic()
                        reply = await sim.prepare(DRIVER, [claim])
                        elapsed = (time.monotonic() - started) * 1000
                        answer = reply.claims[claim.uid]
                        if answer.error or len(answer.devices) != 1:
                            raise plugin.failure(f"prepare {claim}: {answer.error}")
                        done.prepare.append(elapsed)
                    done.most_instances = max(done.most_instances, instances(state))
                    if done.most_instances != len(claims):
                        raise plugin.failure(f"{done.most_instances} MIG instances made")
                    for claim in claims:
                        await pause(rng)
                        started = time.monotonic()
                        unprepared = await sim.unprepare(DRIVER, [claim])
                        elapsed = (time.monotonic() - started) * 1000
                        if error := unprepared.claims[claim.uid].error:
                            raise plugin.failure(f"unprepare {claim}: {error}")
                        done.unprepare.append(elapsed)
                    if left := instances(state):
                        raise plugin.failure(f"{left} MIG instances left after unprepare")
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    return done


# -- health --------------------------------------------------------------------------


class HealthLists:
    """Every health list the simulated kubelet took in: its stamp, and each device's health."""

    def __init__(self) -> None:
        self.sim: KubeletSimulator | None = None
        self.lists: list[tuple[float, dict[str, str]]] = []

    def on_event(self, event: Event) -> None:
        # Called by the ledger as it commits, its snapshot already the new one.
        if event.kind is not EventKind.DRA_HEALTH_RECEIVED or self.sim is None:
            return
        view = self.sim.snapshot().dra_driver(DRIVER)
        if view is not None:
            self.lists.append((event.at, {d.device: d.health for d in view.health}))

    def first(self, device: str, health: str, since: float) -> float:
        """The stamp of the first list from `since` on that says `health` of `device`."""
        for at, devices in self.lists:
            if at >= since and devices.get(device) == health:
                return at
        raise LookupError(f"no list says {device} {health}")


@dataclass
class Health:
    unhealthy: list[float] = field(default_factory=list)
    healthy: list[float] = field(default_factory=list)


def inject(events: Path, **event: object) -> None:
    with events.open("a") as out:
        out.write(json.dumps(event) + "\n")


async def _said(sim: KubeletSimulator, plugin: Plugin, device: str, health: str, what: str) -> None:
    try:
        await sim.wait_dra_health(DRIVER, device, health, timeout=WAIT)
    except TimeoutError:
        raise plugin.failure(f"{what}: the kubelet never heard {device} {health}") from None


async def _health(api: ApiServer, counts: Counts, rng: random.Random) -> Health:
    from tests.unit.kube.apiserver import kubeconfig

    lists = HealthLists()
    done = Health()
    async with simulator(registry=REGISTRY, on_event=lists.on_event) as sim:
        lists.sim = sim
        events = sim.directory / "events.jsonl"
        events.touch()
        args = dra_args(
            sim.directory,
            HEALTH_PROFILE,
            *("--mock-nvml-events", str(events), "--health-quiet-period", str(QUIET_PERIOD)),
        )
        env = {"KUBECONFIG": str(kubeconfig(sim.directory / "kubeconfig", api.url))}
        async with Plugin(args, env=env) as plugin:
            await serving(api, sim, plugin, HEALTH_GPUS)
            names = [f"gpu-{i}" for i in range(HEALTH_GPUS)]
            await _said(sim, plugin, names[-1], "Healthy", "the first list")
            # Injected lines count only once the follower is watching the file.
            await plugin.wait_state(
                lambda s: (
                    ((s.get("health") or {}).get("monitoring") or {}).get("state") == "active"
                ),
                timeout=START,
            )
            uuids = gpu_uuids(api)
            for n in range(counts.health_rounds):
                name = names[n % HEALTH_GPUS]
                await _said(sim, plugin, name, "Healthy", "before the XID")
                await pause(rng)
                started = time.monotonic()
                inject(events, uuid=uuids[name], xid=STICKY_XID)
                await _said(sim, plugin, name, "Unhealthy", f"XID {STICKY_XID}")
                seen = lists.first(name, "Unhealthy", started)
                done.unhealthy.append((seen - started) * 1000)
                # The quiet period runs from the plugin's own sight of the XID,
                # before the kubelet's; a reset after it is looked at once.
                await asyncio.sleep(max(0.0, seen + QUIET_PERIOD - time.monotonic()))
                await pause(rng)
                started = time.monotonic()
                inject(events, uuid=uuids[name], reset=True)
                await _said(sim, plugin, name, "Healthy", "the reset")
                done.healthy.append((lists.first(name, "Healthy", started) - started) * 1000)
    return done


# -- the group -----------------------------------------------------------------------


def _rows(mig: Mig, health: Health) -> Iterable[Row]:
    yield Row.of(
        GROUP, "dra.mig_prepare", "ms", mig.prepare,
        note="NodePrepareResources, claim of one 1g.5gb placement: MIG instance made "
        "(simulated), CDI spec, checkpoint 3x; cf. dra.prepare_1gpu (a GPU: no instance, 2x)",
    )  # fmt: skip
    yield Row.of(
        GROUP, "dra.mig_unprepare", "ms", mig.unprepare,
        note="NodeUnprepareResources of it: instance destroyed, spec removed, checkpoint",
    )  # fmt: skip
    yield Row.of(
        GROUP, "dra.health_xid_to_unhealthy", "ms", health.unhealthy,
        note=f"append XID {STICKY_XID} to the kubelet's health list saying Unhealthy "
        "(8 GPUs in turn; the events file is polled every 50 ms)",
    )  # fmt: skip
    yield Row.of(
        GROUP, "dra.health_reset_to_healthy", "ms", health.healthy,
        note="append of the reset (quiet period over) to a list saying Healthy: re-probe included",
    )  # fmt: skip


async def _on_node(
    part: Callable[[ApiServer, Counts, random.Random], Awaitable[T]], counts: Counts
) -> T:
    """`part` against an emulated API server of its own, holding the node."""
    from tests.unit.kube.apiserver import running_apiserver

    async with running_apiserver() as api:
        api.handler.keep_requests = KEEP_REQUESTS
        await api.add_node(NODE)
        return await part(api, counts, random.Random(SEED))


async def run(*, quick: bool) -> Outcome:
    try:
        import kmock  # noqa: F401
    except ImportError:
        return Outcome(skipped="kmock is not installed (pip install -e '.[dev]')")
    from devices.simulated import available_profiles

    missing = [p for p in (MIG_PROFILE, HEALTH_PROFILE) if p not in available_profiles()]
    if missing:
        return Outcome(skipped=f"the simulated profile(s) {', '.join(missing)} not in config/nodes")
    counts = QUICK if quick else FULL
    gc.collect()
    gc.freeze()  # as the `dra` group: no full collection stalls the emulator mid-figure
    try:
        if quick:  # both at once: the rows' figures are not read, and the starts overlap
            async with asyncio.TaskGroup() as both:
                mig_task = both.create_task(_on_node(_mig, counts))
                health_task = both.create_task(_on_node(_health, counts))
            mig, health = mig_task.result(), health_task.result()
        else:  # one after the other, so neither plugin measures the other
            mig = await _on_node(_mig, counts)
            health = await _on_node(_health, counts)
    finally:
        gc.unfreeze()
    details = {
        "mig_prepare_ms": mig.prepare,
        "mig_unprepare_ms": mig.unprepare,
        "mig_most_instances": mig.most_instances,
        "health_xid_to_unhealthy_ms": health.unhealthy,
        "health_reset_to_healthy_ms": health.healthy,
    }
    return Outcome(rows=list(_rows(mig, health)), details=details)
