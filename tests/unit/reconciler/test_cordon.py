"""Cordoning a GPU through the reconcile loop: hint, health overlay, lists, state, metrics, Events.

The loop tests run the real `Reconciler` with a real kubelet simulator (the
rig) and post the `CORDON` hint as the node watch would; the kubelet must see
the GPU's devices Unhealthy on the open stream, with no re-registration. The
Event and metric tests feed real health and cordon changes to `NodeEvents`
and `Metrics`. The last tests run `NodeLabelSource` against the emulated API
server: an annotation on the node becomes a `CORDON` hint with its value.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devices.health import EventKind, HealthEvent
from devices.library import ProbeResult
from devices.model import Inventory
from devices.simulated import SimulatedLibrary
from kube.event_series import NodeEvent
from reconciler.app.sources.node_label import NodeLabelSource
from reconciler.core.mailbox import Hint, Mailbox
from reconciler.observation.events import NodeEvents
from reconciler.observation.metrics import Metrics
from reconciler.observation.snapshot import take
from settings import load_config
from states.cordon import CORDON_ANNOTATION, CordonBook
from states.health import HealthBook, HealthChange, HealthPolicy
from states.names import State, Trigger
from tests.unit.kube.apiserver import ApiServer, kubeconfig, running_apiserver
from tests.unit.reconciler.rig import Rig, running_plugin
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
GPU0 = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"  # dgx-a100, index 0
GPU3 = "GPU-184b362b-70e2-50de-b227-3a382639ed11"
NODE = "gpu-node-1"
QUIET = 30.0


def unhealthy(rig: Rig, resource: str = GPU) -> list[str]:
    view = rig.sim.snapshot().resource(resource)
    assert view is not None
    return [d.id for d in view.devices if d.health == "Unhealthy"]


async def cordon(rig: Rig, value: str | None) -> None:
    """Post the hint as the node watch does, and wait until the loop has handled it."""
    before = rig.handled
    rig.mailbox.post(Hint.CORDON, value)
    await rig.until(lambda: rig.handled > before)


def counters(rig: Rig, resource: str = GPU) -> tuple[int, int]:
    view = rig.sim.snapshot().resource(resource)
    assert view is not None
    return view.counters.registrations, view.counters.streams_closed


# -- through the loop --------------------------------------------------------------------------


async def test_cordon_withdraws_one_gpu_on_the_open_stream_and_release_brings_it_back(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        view = await rig.sim.wait_devices(GPU, lambda d: len(d) == 8)
        gpu0 = view.devices[0].id
        registered = counters(rig)
        since = len(rig.history)

        await cordon(rig, gpu0)
        await rig.sim.wait_devices(
            GPU, lambda d: [x.id for x in d if x.health == "Unhealthy"] == [gpu0]
        )
        assert counters(rig) == registered, "a new list on the open stream, no re-registration"
        assert rig.triggers(since) == [Trigger.DEVICE_HEALTH_CHANGED]
        assert rig.state is State.SERVING
        state = take(rig.reconciler.status()).state
        (resource,) = state["resources"]
        device = next(d for d in resource["devices"] if d["uuid"] == gpu0)
        assert (device["health"], device["reason"]) == ("Unhealthy", "cordoned")
        health = state["health"]
        assert health["devices"][gpu0]["reason"] == "cordoned"
        assert health["devices"][gpu0]["cordoned"] is True
        assert health["devices"][gpu0]["stage"] == "healthy", "the GPU itself is fine"
        assert health["cordon"]["value"] == gpu0
        assert health["cordon"]["gpus"] == [gpu0]
        metrics = Metrics(lambda: take(rig.reconciler.status()).state).render().decode()
        assert f'nvidia_device_plugin_devices_cordoned{{resource="{GPU}"}} 1.0' in metrics
        assert f'nvidia_device_plugin_devices{{health="Unhealthy",resource="{GPU}"}} 1.0' in metrics

        await cordon(rig, None)
        await rig.sim.wait_devices(GPU, lambda d: all(x.health == "Healthy" for x in d))
        assert counters(rig) == registered
        state = take(rig.reconciler.status()).state
        assert state["health"]["devices"][gpu0]["cordoned"] is False
        assert state["health"]["cordon"]["gpus"] == []


async def test_replicas_follow_their_gpu(tmp_path: Path, sock_dir: Path) -> None:
    config = (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    async with running_plugin(tmp_path, sock_dir, config=config) as rig:
        await rig.sim.wait_devices(GPU, lambda d: len(d) == 32)
        await cordon(rig, "3")
        await rig.sim.wait_devices(GPU, lambda d: sum(x.health == "Unhealthy" for x in d) == 4)
        assert {i.split("::")[0] for i in unhealthy(rig)} == {GPU3}


async def test_mig_devices_follow_their_gpu(tmp_path: Path, sock_dir: Path) -> None:
    flags = ("--mock-nvml", "a100-mig-mixed", "--mig-strategy", "mixed")
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    library.init()
    one = library.inventory().gpus[1]
    library.shutdown()
    migs = {mig.uuid for mig in one.mig_devices}
    async with running_plugin(tmp_path, sock_dir, *flags) as rig:
        desired = rig.reconciler.desired
        assert desired is not None
        resources = set(desired.resources)
        assert len(resources) > 2, "whole GPUs and several MIG profiles"
        for name in resources:
            await rig.sim.wait_devices(name)
        registered = {name: counters(rig, name) for name in resources}
        await cordon(rig, one.uuid)

        def withdrawn() -> set[str]:
            found: set[str] = set()
            for name in resources:
                found |= set(unhealthy(rig, name))
            return found

        await eventually(lambda: withdrawn() == migs, what="the GPU's MIG devices withdrawn")
        assert {name: counters(rig, name) for name in resources} == registered


async def test_an_xid_outlasts_a_cordon_and_a_release_leaves_it_unhealthy(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        await rig.sim.wait_devices(GPU, lambda d: len(d) == 8)
        rig.inject(uuid=GPU0, xid=79)
        await rig.sim.wait_devices(
            GPU, lambda d: [x.id for x in d if x.health == "Unhealthy"] == [GPU0]
        )
        since = len(rig.history)
        await cordon(rig, "0")
        await cordon(rig, None)
        assert rig.triggers(since) == [], "the kubelet's view never moved"
        assert unhealthy(rig) == [GPU0]
        status = take(rig.reconciler.status()).state["health"]["devices"][GPU0]
        assert (status["reason"], status["cordoned"]) == ("xid 79", False)
        await cordon(rig, "0")
        metrics = Metrics(lambda: take(rig.reconciler.status()).state).render().decode()
        # Unhealthy for an error of its own: not counted as merely cordoned.
        assert f'nvidia_device_plugin_devices_cordoned{{resource="{GPU}"}} 0.0' in metrics


async def test_garbage_and_unknown_entries_are_warnings_and_the_good_ones_apply(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        await rig.sim.wait_devices(GPU, lambda d: len(d) == 8)
        await cordon(rig, "oops!, 99, 0")
        await rig.sim.wait_devices(
            GPU, lambda d: [x.id for x in d if x.health == "Unhealthy"] == [GPU0]
        )
        state = take(rig.reconciler.status()).state
        assert state["state"] == "serving"
        origin = f"annotation {CORDON_ANNOTATION}"
        assert state["health"]["cordon"]["warnings"] == [
            f'{origin}: "oops!": not a GPU UUID, index or PCI bus ID',
            f'{origin}: "99": no such GPU on this node',
        ]

        await cordon(rig, "???")
        await rig.sim.wait_devices(GPU, lambda d: all(x.health == "Healthy" for x in d))
        assert take(rig.reconciler.status()).state["state"] == "serving"


async def test_a_cordon_known_before_the_first_pass_is_served_from_the_first_list(
    tmp_path: Path, sock_dir: Path
) -> None:
    # As at start-up with a config directory: the first list of the node came first.
    async with running_plugin(tmp_path, sock_dir, cordon="0") as rig:
        view = await rig.sim.wait_devices(GPU, lambda d: len(d) == 8)
        assert view.counters.lists_received == 1
        assert [d.id for d in view.devices if d.health == "Unhealthy"] == [GPU0]


# -- Events ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inventory() -> Iterator[Inventory]:
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    library.init()
    yield library.inventory()
    library.shutdown()


class Node:
    """A health book with the cordon over it, and the Events and metrics their changes make."""

    def __init__(self, inventory: Inventory) -> None:
        self.book = HealthBook(inventory, HealthPolicy(quiet_period=QUIET, probe_interval=5.0))
        self.cordon = CordonBook()
        self.cordon.follow(inventory)
        self.posted: list[NodeEvent] = []
        self.deferred: list[Callable[[], None]] = []
        self.events = NodeEvents(
            self.posted.append, inventory=lambda: inventory, defer=self.deferred.append
        )
        self.metrics = Metrics(lambda: {})
        self.now = 0.0

    def annotate(self, value: str | None) -> None:
        self.cordon.want(value)
        healthy = {u: s.kubelet_health == "Healthy" for u, s in self.book.statuses().items()}
        self._deliver(self.cordon.settle(lambda uuid: healthy.get(uuid, True)))

    def error(self, uuid: str, xid: int) -> None:
        event = HealthEvent(EventKind.XID, uuid, xid=xid)
        self._deliver(self.cordon.hold(self.book.apply(event, self.now)))

    def after(self, seconds: float) -> None:
        self.now += seconds
        self._deliver(self.cordon.hold(self.book.tick(self.now, lambda u: ProbeResult(ok=True))))

    def _deliver(self, changes: list[HealthChange]) -> None:
        for change in changes:
            self.events.health(change)
            self.metrics.health(change)
        while self.deferred:
            self.deferred.pop()()

    def notes(self) -> list[tuple[str, str, str]]:
        posted = [(str(e.type), e.reason, e.note) for e in self.posted]
        self.posted.clear()
        return posted

    def transitions(self) -> dict[tuple[str, str], float]:
        found: dict[tuple[str, str], float] = {}
        for line in self.metrics.render().decode().splitlines():
            if line.startswith("nvidia_device_plugin_health_transitions_total{"):
                labels, value = line.rsplit(" ", 1)
                health = labels.split('health="')[1].split('"')[0]
                reason = labels.split('reason="')[1].split('"')[0]
                found[(health, reason)] = float(value)
        return found


def test_cordon_and_release_of_a_gpu_are_one_event_each_with_its_mig_devices_folded(
    inventory: Inventory,
) -> None:
    node = Node(inventory)
    gpu = inventory.gpus[0]
    name = f"GPU 0 ({gpu.uuid})"
    by = f"by the node annotation {CORDON_ANNOTATION}"
    node.annotate("0")
    assert node.notes() == [
        ("Warning", "GPUCordoned", f"{name} is cordoned {by}; so are its 7 MIG devices"),
    ]
    node.annotate(None)
    assert node.notes() == [
        ("Normal", "GPUUncordoned", f"{name} is no longer cordoned; so are its 7 MIG devices"),
    ]


def test_a_whole_gpu_cordoned_says_so_alone(inventory: Inventory) -> None:
    node = Node(inventory)
    gpu = inventory.gpus[5]
    node.annotate(gpu.pci_bus_id)
    node.annotate("")
    assert node.notes() == [
        ("Warning", "GPUCordoned",
         f"GPU 5 ({gpu.uuid}) is cordoned by the node annotation {CORDON_ANNOTATION}"),
        ("Normal", "GPUUncordoned", f"GPU 5 ({gpu.uuid}) is no longer cordoned"),
    ]  # fmt: skip


def test_a_release_of_a_gpu_with_an_xid_says_it_stays_unhealthy_and_why(
    inventory: Inventory,
) -> None:
    node = Node(inventory)
    gpu = inventory.gpus[6]
    node.error(gpu.uuid, 79)
    node.notes()
    node.annotate("6")
    node.annotate(None)
    assert node.notes() == [
        ("Warning", "GPUCordoned",
         f"GPU 6 ({gpu.uuid}) is cordoned by the node annotation {CORDON_ANNOTATION}"),
        ("Normal", "GPUUncordoned",
         f"GPU 6 ({gpu.uuid}) is no longer cordoned; it stays unhealthy: xid 79"),
    ]  # fmt: skip


def test_a_recovery_while_cordoned_says_the_gpu_stays_cordoned(inventory: Inventory) -> None:
    node = Node(inventory)
    gpu = inventory.gpus[5]
    node.annotate("5")
    node.error(gpu.uuid, 32)
    node.after(QUIET + 1)
    assert node.notes()[1:] == [
        ("Warning", "GPUUnhealthy", f"GPU 5 ({gpu.uuid}) is unhealthy: xid 32"),
        ("Normal", "GPURecovered",
         f"GPU 5 ({gpu.uuid}) is healthy again after xid 32; it stays cordoned"),
    ]  # fmt: skip


def test_health_transitions_count_what_the_kubelet_sees_with_reason_cordoned(
    inventory: Inventory,
) -> None:
    node = Node(inventory)
    five, six = inventory.gpus[5], inventory.gpus[6]
    node.annotate("5, 6")
    node.error(six.uuid, 32)  # held: the kubelet already sees it Unhealthy
    node.annotate("6")
    node.error(five.uuid, 79)
    node.annotate(None)  # GPU 6 stays Unhealthy for its xid: the kubelet sees no move
    assert node.transitions() == {
        ("Unhealthy", "cordoned"): 2.0,
        ("Healthy", "uncordoned"): 1.0,
        ("Unhealthy", "xid 79"): 1.0,
    }


# -- the node watch as a source of hints ----------------------------------------------------------


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server


async def hints(mailbox: Mailbox, wanted: Hint, timeout: float = 10.0) -> list[Any]:
    """The payloads of `wanted` hints drained until one arrives."""
    async with asyncio.timeout(timeout):
        while True:
            found = [payload for hint, payload in await mailbox.drain() if hint is wanted]
            if found:
                return found


async def test_without_a_config_directory_the_annotation_is_followed_once_started_late(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    await apiserver.add_node(NODE, {}, annotations={CORDON_ANNOTATION: "GPU-1"})
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", apiserver.url))}
    mailbox = Mailbox()
    source = NodeLabelSource(
        config=load_config(["--node-name", NODE], env), env=env, mailbox=mailbox
    )
    assert not source.selects_config
    assert not source.enabled, "nothing is loaded or started before the first pass"
    try:
        await source.start_late(asyncio.Event())
        assert source.enabled
        assert source.off is None
        assert await hints(mailbox, Hint.CORDON) == ["GPU-1"]
        await apiserver.set_annotations(NODE, {CORDON_ANNOTATION: None})
        assert await hints(mailbox, Hint.CORDON) == [None]
        await apiserver.set_labels(NODE, {"nvidia.com/device-plugin.config": "x"})
        await apiserver.set_annotations(NODE, {CORDON_ANNOTATION: "0"})
        drained = await hints(mailbox, Hint.CORDON)
        assert drained == ["0"]
        assert source.annotation == "0"
    finally:
        await source.stop()


async def test_with_a_config_directory_label_and_annotation_come_from_one_watch(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    label = "nvidia.com/device-plugin.config"
    await apiserver.add_node(NODE, {label: "a"}, annotations={CORDON_ANNOTATION: "3"})
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", apiserver.url))}
    (tmp_path / "configs").mkdir()
    argv = ["--node-name", NODE, "--config-directory", str(tmp_path / "configs")]
    mailbox = Mailbox()
    source = NodeLabelSource(config=load_config(argv, env), env=env, mailbox=mailbox)
    source.start()
    try:
        assert await source.initial(10.0, stopping=asyncio.Event()) == "a"
        assert source.annotation == "3", "known once the label is: before the first pass"
        await source.start_late(asyncio.Event())  # a no-op: already watching
        taken = dict(await mailbox.drain())
        assert taken == {Hint.LABEL: "a", Hint.CORDON: "3"}
    finally:
        await source.stop()


@pytest.mark.parametrize(
    ("argv", "env", "off"),
    [
        ([], {"KUBECONFIG": "/nonexistent"}, "no --node-name (NODE_NAME) given"),
        (
            ["--node-name", NODE],
            {},
            "no Kubernetes API access (not in a cluster and no KUBECONFIG)",
        ),
    ],
)
async def test_without_a_node_name_or_api_access_the_annotation_is_not_read_and_state_says_why(
    argv: list[str], env: dict[str, str], off: str
) -> None:
    source = NodeLabelSource(config=load_config(argv, env), env=env, mailbox=Mailbox())
    await source.start_late(asyncio.Event())
    assert not source.enabled
    assert source.off == off


async def test_an_unusable_kubeconfig_is_said_once_and_serving_goes_on(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("not: [a kubeconfig")
    env = {"KUBECONFIG": str(broken)}
    source = NodeLabelSource(
        config=load_config(["--node-name", NODE], env), env=env, mailbox=Mailbox()
    )
    await source.start_late(asyncio.Event())
    assert not source.enabled
    assert source.off is not None
    assert source.off.startswith(f"cannot load kubeconfig {broken}")
