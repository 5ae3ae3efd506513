"""Lifecycle records and health changes, as the node events an operator would read.

The inputs are real: a `Lifecycle` fired through its table, and a `HealthBook`
moved by health events on a simulated node with MIG devices. Only the
recorder is replaced by a list, except in the last tests, which post through
the real recorder to the emulated API server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from loguru import logger

from devices.health import EventKind, HealthEvent
from devices.library import ProbeResult
from devices.model import Inventory
from devices.simulated import SimulatedLibrary
from kube.event_series import EventType, NodeEvent
from reconciler.observation.events import NodeEvents, open_node_events
from settings import load_config
from states.health import HealthBook, HealthChange, HealthPolicy
from states.machine import Lifecycle
from states.names import Trigger
from tests.unit.kube.apiserver import kubeconfig
from tests.unit.kube.events_api import EventsApi, running_events_api
from tests.waiting import eventually

NODE = "gpu-node-1"
QUIET = 30.0


@pytest.fixture(scope="module")
def inventory() -> Iterator[Inventory]:
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    library.init()
    yield library.inventory()
    library.shutdown()


@pytest.fixture
def logs() -> Iterator[list[tuple[str, str]]]:
    records: list[tuple[str, str]] = []
    handler = logger.add(
        lambda m: records.append((m.record["level"].name, m.record["message"])), level="INFO"
    )
    try:
        yield records
    finally:
        logger.remove(handler)


class Node:
    """A health book and the events its changes make."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.book = HealthBook(inventory, HealthPolicy(quiet_period=QUIET, probe_interval=5.0))
        self.posted: list[NodeEvent] = []
        self.deferred: list[Callable[[], None]] = []
        self.events = NodeEvents(
            self.posted.append, inventory=lambda: inventory, defer=self.deferred.append
        )
        self.now = 0.0

    def error(self, uuid: str, xid: int, **where: int) -> None:
        event = HealthEvent(EventKind.XID, uuid, xid=xid, **where)
        self._deliver(self.book.apply(event, self.now))

    def after(self, seconds: float) -> None:
        self.now += seconds
        self._deliver(self.book.tick(self.now, lambda uuid: _ok()))

    def _deliver(self, changes: list[HealthChange]) -> None:
        """As the health monitor does in one drain, then the loop moves on."""
        for change in changes:
            self.events.health(change)
        assert len(self.deferred) <= 1, "one flush per batch"
        while self.deferred:
            self.deferred.pop()()


def _ok() -> ProbeResult:
    return ProbeResult(ok=True)


def notes(events: list[NodeEvent]) -> list[tuple[str, str, str]]:
    return [(str(e.type), e.reason, e.note) for e in events]


def test_a_gpu_wide_error_is_one_event_for_the_gpu_and_its_mig_devices(
    inventory: Inventory,
) -> None:
    node = Node(inventory)
    gpu = inventory.gpus[0]
    assert len(gpu.mig_devices) == 7, "the profile's first GPU has seven MIG devices"
    node.error(gpu.uuid, 94)  # transient: recovers after the quiet period
    node.after(QUIET + 1)
    name = f"GPU {gpu.index} ({gpu.uuid})"
    assert notes(node.posted) == [
        ("Warning", "GPUUnhealthy", f"{name} is unhealthy: xid 94; so are its 7 MIG devices"),
        (
            "Normal",
            "GPURecovered",
            f"{name} is healthy again after xid 94; so are its 7 MIG devices",
        ),
    ]
    assert {e.action for e in node.posted} == {"HealthCheck"}


def test_an_error_on_one_instance_names_the_mig_device_it_hit(inventory: Inventory) -> None:
    node = Node(inventory)
    gpu = inventory.gpus[0]
    mig = gpu.mig_devices[1]
    node.error(gpu.uuid, 94, gi=mig.gi, ci=mig.ci)
    assert notes(node.posted) == [
        (
            "Warning",
            "GPUUnhealthy",
            f"GPU {gpu.index} ({gpu.uuid}) is unhealthy: xid 94; so is its MIG device {mig.index}",
        )
    ]


def test_an_error_on_a_mig_device_alone_names_it_and_its_gpu(inventory: Inventory) -> None:
    node = Node(inventory)
    gpu = inventory.gpus[1]
    mig = gpu.mig_devices[0]
    node.error(mig.uuid, 94)
    assert notes(node.posted) == [
        (
            "Warning",
            "GPUUnhealthy",
            f"MIG device {mig.index} ({mig.uuid}) of GPU {gpu.index} is unhealthy: xid 94",
        )
    ]


def test_a_flapping_gpu_repeats_the_same_two_events(inventory: Inventory) -> None:
    # Identical events are what the recorder folds into one series each.
    node = Node(inventory)
    plain = next(g for g in inventory.gpus if not g.mig_devices)
    for _ in range(3):
        node.error(plain.uuid, 94)
        node.after(QUIET + 1)
    assert len(node.posted) == 6
    assert len(set(node.posted)) == 2


def test_a_device_is_named_by_uuid_before_the_inventory_is_known(inventory: Inventory) -> None:
    posted: list[NodeEvent] = []
    events = NodeEvents(posted.append)  # nothing followed yet
    gpu = inventory.gpus[-1]
    for change in HealthBook(inventory).apply(HealthEvent(EventKind.XID, gpu.uuid, xid=79), 0.0):
        events.health(change)
    assert notes(posted)[0] == (
        "Warning",
        "GPUUnhealthy",
        f"device {gpu.uuid} is unhealthy: xid 79",
    )


def lifecycle_with(post: Callable[[NodeEvent], object]) -> Lifecycle:
    lifecycle = Lifecycle()
    lifecycle.listeners.append(NodeEvents(post).transition)
    return lifecycle


def test_blocked_and_unblocked() -> None:
    posted: list[NodeEvent] = []
    lifecycle = lifecycle_with(posted.append)
    lifecycle.fire(
        Trigger.FAILED, reason="NVML is not available: driver not loaded (retrying in 1s)"
    )
    lifecycle.fire(Trigger.RETRY)
    lifecycle.fire(
        Trigger.FAILED, reason="NVML is not available: driver not loaded (retrying in 2s)"
    )
    lifecycle.fire(Trigger.RETRY)
    lifecycle.fire(Trigger.INITIALIZED, detail={"resources": ["nvidia.com/gpu"]})
    assert notes(posted) == [
        ("Warning", "PluginBlocked", "NVML is not available: driver not loaded"),
        ("Warning", "PluginBlocked", "NVML is not available: driver not loaded"),
        ("Normal", "PluginUnblocked", "serving again: nvidia.com/gpu"),
    ]
    assert posted[0] == posted[1], "retries are one series, whatever their delay"


def test_a_first_start_that_works_says_nothing() -> None:
    posted: list[NodeEvent] = []
    lifecycle_with(posted.append).fire(
        Trigger.INITIALIZED, detail={"resources": ["nvidia.com/gpu"]}
    )
    assert posted == []


def test_config_rejected_and_reconfigured() -> None:
    posted: list[NodeEvent] = []
    lifecycle = lifecycle_with(posted.append)
    lifecycle.fire(Trigger.INITIALIZED)
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(
        Trigger.FAILED,
        reason="new config rejected, still serving the previous one: unknown MIG strategy: bogus",
        detail={"permanent": True, "error": "ConfigError"},
    )
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(
        Trigger.FAILED,
        reason="cannot write CDI specs to /var/run/cdi: Read-only file system (retrying in 4s)",
        detail={"permanent": False, "retry_in_seconds": 4.0},
    )
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(
        Trigger.RECONFIGURED,
        detail={
            "changed": True,
            "from": "1a2b",
            "to": "3c4d",
            "started": ["nvidia.com/gpu.shared"],
            "stopped": [],
            "restarted": ["nvidia.com/gpu"],
            "updated": [],
        },
    )
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(Trigger.RECONFIGURED, detail={"changed": False, "digest": "3c4d"})
    assert notes(posted) == [
        (
            "Warning",
            "ConfigRejected",
            "new config rejected, still serving the previous one: unknown MIG strategy: bogus",
        ),
        (
            "Warning",
            "ReconfigureFailed",
            "cannot write CDI specs to /var/run/cdi: Read-only file system",
        ),
        (
            "Normal",
            "Reconfigured",
            "started: nvidia.com/gpu.shared; restarted: nvidia.com/gpu",
        ),
    ]
    assert {e.action for e in posted} == {"Reconfigure"}


def test_reconfiguration_detail_is_rendered_whatever_its_keys() -> None:
    # The reconcile core may report other keys; they are shown, not lost.
    posted: list[NodeEvent] = []
    lifecycle = lifecycle_with(posted.append)
    lifecycle.fire(Trigger.INITIALIZED)
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(
        Trigger.RECONFIGURED,
        detail={"converged": ["cdi", "resource:nvidia.com/gpu"], "held": {"nvidia.com/gpu": 8}},
    )
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(Trigger.RECONFIGURED, detail={"started": [], "restarted": []})
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(Trigger.RECONFIGURED, detail={"changed": True})
    assert [e.note for e in posted] == [
        "converged: cdi, resource:nvidia.com/gpu; held: nvidia.com/gpu=8",
        "applied a new configuration",
    ]


def test_a_new_plan_warning_is_one_warning_event_when_it_appears() -> None:
    # Node-wide sharing on a DRA node is served without it: said on the Node, once.
    warning = (
        "sharing.mps is ignored on a node served through DRA (--kubelet-api dra): GPUs are "
        "shared per claim, through the claim's opaque GpuConfig"
    )
    posted: list[NodeEvent] = []
    lifecycle = lifecycle_with(posted.append)
    lifecycle.fire(Trigger.INITIALIZED, detail={"resources": [], "warnings": [warning]})
    lifecycle.fire(Trigger.CONFIG_CHANGED)
    lifecycle.fire(Trigger.RECONFIGURED, detail={"changed": False})  # no new warning: no event
    assert notes(posted) == [("Warning", "ConfigWarning", warning)]
    assert posted[0].action == "Reconfigure"


def test_mps_daemon_lost_and_back() -> None:
    posted: list[NodeEvent] = []
    lifecycle = lifecycle_with(posted.append)
    lifecycle.fire(Trigger.INITIALIZED, needs_mps=True)
    lifecycle.fire(Trigger.MPS_READY, detail={"resources": ["nvidia.com/gpu"]})
    lifecycle.fire(Trigger.MPS_LOST, reason="MPS control daemon for nvidia.com/gpu not answering")
    lifecycle.fire(Trigger.MPS_READY, detail={"resources": ["nvidia.com/gpu"]})
    assert notes(posted) == [
        ("Warning", "MPSDaemonLost", "MPS control daemon for nvidia.com/gpu not answering"),
        ("Normal", "MPSDaemonReady", "MPS daemon answers again: nvidia.com/gpu"),
    ]


def test_a_failing_recorder_never_reaches_the_loop(logs: list[tuple[str, str]]) -> None:
    def broken(event: NodeEvent) -> None:
        raise RuntimeError("boom")

    lifecycle = Lifecycle()
    lifecycle.listeners.append(NodeEvents(broken).transition)
    lifecycle.fire(Trigger.FAILED, reason="no driver")  # must not raise
    assert str(lifecycle.state) == "blocked_on_error"
    assert any("no node event for failed" in message for _, message in logs)
    events = NodeEvents(broken)
    [change] = HealthBook(_t4()).apply(HealthEvent(EventKind.XID, _t4().gpus[0].uuid, xid=79), 0)
    events.health(change)  # must not raise either
    assert any("no node event for a health change" in message for _, message in logs)


def _t4() -> Inventory:
    library = SimulatedLibrary.from_argument("t4x4")
    library.init()
    return library.inventory()


# -- turning events on or off, and the whole path to the API server -------------------


@pytest.fixture
async def api() -> AsyncIterator[EventsApi]:
    async with running_events_api() as server:
        yield server


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        pytest.param(["--events=false", "--node-name", NODE], {"KUBECONFIG": "/k"}, None, id="off"),
        pytest.param([], {"KUBECONFIG": "/k"}, None, id="no-node-name"),
        pytest.param(["--node-name", NODE], {}, None, id="no-api"),
        pytest.param(["--events"], {"KUBECONFIG": "/k"}, "no --node-name", id="asked-no-node-name"),
        pytest.param(
            ["--node-name", NODE], {"EVENTS": "true"}, "no Kubernetes API access",
            id="asked-no-api",
        ),
    ],
)  # fmt: skip
def test_off_is_said_only_to_whoever_asked_for_events(
    argv: list[str], env: dict[str, str], said: str | None, logs: list[tuple[str, str]]
) -> None:
    assert open_node_events(load_config(argv, env), env) is None
    told = [message for level, message in logs if level != "DEBUG" and "node events" in message]
    if said is None:
        assert told == []
    else:
        assert len(told) == 1
        assert said in told[0]


async def test_an_unusable_kubeconfig_turns_events_off_at_the_first_one(
    logs: list[tuple[str, str]],
) -> None:
    env = {"KUBECONFIG": "/nonexistent/kubeconfig"}
    recorder = open_node_events(load_config(["--node-name", NODE], env), env)
    assert recorder is not None, "nothing is loaded before an event needs it"
    blocked = NodeEvent(EventType.WARNING, "PluginBlocked", "Serve", "no driver")
    assert recorder.record(blocked)
    await asyncio.to_thread(recorder.stop, 10.0)
    said = [message for level, message in logs if level == "WARNING"]
    assert any("node events are off: cannot load kubeconfig" in m for m in said), said
    assert not recorder.record(blocked)


async def test_events_flow_from_the_lifecycle_to_the_api_server(
    api: EventsApi, tmp_path: Path, logs: list[tuple[str, str]]
) -> None:
    await api.add_node_with_uid(NODE, "uid-1")
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url)), "POD_NAME": "dp-x1"}
    recorder = open_node_events(load_config(["--node-name", NODE], env), env)
    assert recorder is not None
    try:
        lifecycle = lifecycle_with(recorder.record)
        lifecycle.fire(Trigger.FAILED, reason="no driver (retrying in 1s)")
        lifecycle.fire(Trigger.RETRY)
        lifecycle.fire(Trigger.FAILED, reason="no driver (retrying in 2s)")
        await eventually(
            lambda: api.events() and (api.events()[0].get("series") or {}).get("count") == 2,
            what="one event with a series of 2",
            detail=api.events,
        )
    finally:
        assert await asyncio.to_thread(recorder.stop, 5.0)
    [event] = api.events()
    assert (event["reason"], event["note"], event["reportingInstance"]) == (
        "PluginBlocked",
        "no driver",
        "dp-x1",
    )
    assert event["regarding"]["uid"] == "uid-1"
    assert any("posting events about node gpu-node-1" in message for _, message in logs)
