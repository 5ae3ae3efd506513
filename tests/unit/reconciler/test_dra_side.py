"""DRA mode's actuators in the loop's order: the kubelet plugin, the slices, one API at a time.

The slice publisher and the kubelet plugin server are stand-ins (the real
ones have their own tests: tests/unit/kube/test_resource_slices.py,
tests/unit/kubelet/test_dra_server.py): the publisher holds what its last
write made the API hold, or fails as the test says; the server records
what it was asked. What is checked is what the actuators promise: the
slices key converges only once a write has landed, a failing write is
retried on its own backoff whatever else happens, sockets kept for prepared
claims are repaired and then stopped once idle, and what DRA mode lacks is
said on the plugin's key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from devices.simulated import SimulatedLibrary
from foundation.backoff import Backoff
from foundation.outcome import Change, Key, Kind, Outcome, Retries
from kubelet.dra.health_stream import HealthFeed
from reconciler.actuators.dra import SLICES, SLICES_KEY, DraParts, DraSide
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.order import Actuators
from reconciler.plan.desired import Desired, build_desired
from settings import load_config

NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"
BACKOFF = Backoff(initial=1.0, cap=8.0)


@dataclass
class Publisher:
    """The API's slices for this node as the last successful write left them."""

    held: list[Any] | None = None
    failing: str = ""
    lists: int = 1  # the watch's lists: one more each time the API server answers again
    writes: list[float] = field(default_factory=list)
    clock: Clock | None = None

    def pending(self, slices: Sequence[Mapping[str, Any]] | None) -> bool:
        return (list(slices) if slices is not None else None) != self.held

    def write(
        self, slices: Sequence[Mapping[str, Any]] | None, *, list_timeout: float | None = None
    ) -> None:
        self.writes.append(0.0 if self.clock is None else self.clock.now)
        if self.failing:
            raise RuntimeError(self.failing)
        self.held = list(slices) if slices is not None else None

    def holds_none(self) -> bool:
        return not self.held

    def state(self) -> None:
        return None

    def close(self) -> None:
        pass


@dataclass
class Server:
    """The kubelet plugin: serving until stopped; `disturbed` as the test says."""

    running: bool = False
    disturbed_now: bool = False
    converged: int = 0
    registration_socket: Path = Path("/reg/gpu.nvidia.com-reg.sock")
    plugin_socket: Path = Path("/plugins/gpu.nvidia.com/dra.sock")
    status: Any = field(default_factory=lambda: SimpleNamespace(registered=None, error=""))
    health: HealthFeed = field(default_factory=HealthFeed)

    def pending(self, driver: str, registrar: Path, plugins: Path) -> bool:
        return not self.running or self.disturbed_now

    async def converge(self, driver: str, registrar: Path, plugins: Path) -> Outcome:
        self.running, self.disturbed_now = True, False
        self.converged += 1
        return Outcome(Kind.DRA, driver)

    async def stop(self) -> None:
        self.running = False

    def disturbed(self) -> bool:
        return self.disturbed_now


@dataclass
class Preparer:
    prepared: dict[str, object] = field(default_factory=dict)
    problem: str | None = None


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def node(tmp_path: Path, api: str = "dra") -> Desired:
    library = SimulatedLibrary.from_argument("dgx-a100")
    library.init()
    config = load_config(
        ["--kubelet-api", api, "--node-name", NODE, "--cdi-spec-dir", str(tmp_path / "cdi")], {}
    )
    return build_desired(config, library.inventory())


@dataclass
class Rig:
    actuators: Actuators
    side: DraSide
    publisher: Publisher
    server: Server
    preparer: Preparer
    clock: Clock

    async def converge(self, desired: Desired) -> list[Outcome]:
        return await self.actuators.converge(desired)


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    clock = Clock()
    publisher, server, preparer = Publisher(clock=clock), Server(), Preparer()
    side = DraSide(env={}, notify=lambda: None)
    side.parts = DraParts(preparer, server, publisher)  # type: ignore[arg-type]
    fleet = PluginFleet(kubelet_socket=tmp_path / "kubelet.sock", register=False)
    actuators = Actuators(fleet=fleet, health=None, retries=Retries(BACKOFF, clock=clock), dra=side)
    return Rig(actuators, side, publisher, server, preparer, clock)


def by_key(outcomes: list[Outcome], key: Key) -> list[Outcome]:
    return [outcome for outcome in outcomes if outcome.key == key]


async def test_the_slices_converge_only_once_they_have_landed(rig: Rig, tmp_path: Path) -> None:
    desired = node(tmp_path)
    rig.publisher.failing = "cannot connect to the API server: connection refused"
    (failed,) = by_key(await rig.converge(desired), SLICES_KEY)
    assert str(failed.error) == (
        "publishing ResourceSlices: "
        "cannot connect to the API server: connection refused"
    )
    assert rig.publisher.held is None
    assert rig.side.status(desired.dra).devices == ()  # nothing shown as published that is not

    rig.publisher.failing = ""
    rig.clock.now += BACKOFF.delay(0)
    (landed,) = by_key(await rig.converge(desired), SLICES_KEY)
    assert (landed.converged, landed.changes) == (True, frozenset({Change.PUBLISHED}))
    assert rig.publisher.held is not None
    assert [d.name for d in rig.side.status(desired.dra).devices] == [f"gpu-{i}" for i in range(8)]
    assert rig.actuators.retries.pending() == {}
    assert by_key(await rig.converge(desired), SLICES_KEY) == []  # nothing to do: nothing done


async def test_a_failing_publish_is_attempted_at_its_backoffs_pace_under_50_hints(
    rig: Rig, tmp_path: Path
) -> None:
    desired = node(tmp_path)
    rig.publisher.failing = "the API server answered 503"
    for _ in range(50):  # 50 passes for unrelated hints, 0.25 s apart
        await rig.converge(desired)
        rig.clock.now += 0.25
    # Attempts at 0, then after 1, 2, 4 and 8 s of backoff (capped at 8): 0, 1, 3, 7.
    assert rig.publisher.writes == [0.0, 1.0, 3.0, 7.0]
    assert rig.actuators.retries.attempts(SLICES_KEY) == 4


async def test_a_failing_publish_is_tried_at_once_when_the_api_server_answers_again(
    rig: Rig, tmp_path: Path
) -> None:
    desired = node(tmp_path)
    rig.publisher.failing = "cannot connect to the API server: connection refused"
    for now in (0.0, 1.0, 3.0):  # each attempt when its backoff is due
        rig.clock.now = now
        await rig.converge(desired)
    assert rig.publisher.writes == [0.0, 1.0, 3.0]
    rig.clock.now = 4.0  # the next attempt is due at 7 s
    rig.publisher.failing = ""
    await rig.converge(desired)
    assert len(rig.publisher.writes) == 3  # waiting out the backoff
    rig.publisher.lists += 1  # the watch listed again: the server answers
    (landed,) = by_key(await rig.converge(desired), SLICES_KEY)
    assert landed.converged
    assert len(rig.publisher.writes) == 4


async def test_a_slice_edited_underneath_is_written_again(rig: Rig, tmp_path: Path) -> None:
    desired = node(tmp_path)
    await rig.converge(desired)
    assert rig.publisher.held is not None
    rig.publisher.held = rig.publisher.held[:0]  # someone deleted them: the watch saw it
    (again,) = by_key(await rig.converge(desired), SLICES_KEY)
    assert again.converged
    assert rig.publisher.pending(rig.publisher.held) is False
    assert len(rig.publisher.writes) == 2


async def test_moving_back_withdraws_the_slices_then_keeps_sockets_for_prepared_claims(
    rig: Rig, tmp_path: Path
) -> None:
    await rig.converge(node(tmp_path))
    rig.preparer.prepared["uid-1"] = object()
    assert rig.side.served_directories() == (Path("/reg"), Path("/plugins/gpu.nvidia.com"))

    device_plugin = node(tmp_path, api="device-plugin")
    outcomes = await rig.converge(device_plugin)
    (withdrawn,) = by_key(outcomes, SLICES_KEY)
    assert (withdrawn.converged, withdrawn.changes) == (True, frozenset({Change.STOPPED}))
    assert rig.publisher.holds_none()
    assert rig.server.running  # the kubelet can still unprepare uid-1
    assert rig.side.catalog is None  # and no new claim is prepared here
    assert rig.actuators.fleet.names == ["nvidia.com/gpu"]  # served once the slices went

    rig.server.disturbed_now = True
    assert rig.side.sockets_disturbed()
    converged = rig.server.converged
    await rig.converge(device_plugin)
    assert rig.server.converged == converged + 1  # served again, as in DRA mode

    rig.preparer.prepared.clear()  # the kubelet unprepared it
    outcomes = await rig.converge(device_plugin)
    assert Outcome(Kind.DRA, DRIVER, frozenset({Change.STOPPED})) in outcomes
    assert not rig.server.running
    assert rig.side.served_directories() == ()
    await rig.actuators.fleet.stop_all()


async def test_device_plugin_servers_wait_until_the_slices_are_withdrawn(
    rig: Rig, tmp_path: Path
) -> None:
    await rig.converge(node(tmp_path))
    rig.publisher.failing = "the API server answered 503"
    outcomes = await rig.converge(node(tmp_path, api="device-plugin"))
    (failing,) = by_key(outcomes, SLICES_KEY)
    assert failing.error is not None
    assert rig.actuators.fleet.names == []  # a GPU is never served through both APIs
    assert [o for o in outcomes if o.kind is Kind.RESOURCE] == []


async def test_slices_wait_until_the_device_plugin_servers_are_gone(
    rig: Rig, tmp_path: Path
) -> None:
    await rig.converge(node(tmp_path, api="device-plugin"))
    assert rig.actuators.fleet.names == ["nvidia.com/gpu"]
    outcomes = await rig.converge(node(tmp_path))
    kinds = [(o.kind, o.name) for o in outcomes if o.kind in (Kind.RESOURCE, Kind.DRA)]
    # In one pass: the resource stops first, then the slices are published.
    assert kinds.index((Kind.RESOURCE, "nvidia.com/gpu")) < kinds.index((Kind.DRA, SLICES))
    assert rig.actuators.fleet.names == []
    assert rig.publisher.held


@pytest.mark.parametrize(
    ("args", "env", "why"),
    [
        ([], {}, "DRA mode needs the node's name: --node-name (NODE_NAME)"),
        (
            ["--node-name", NODE],
            {},
            "DRA mode needs Kubernetes API access (in a cluster, or KUBECONFIG)",
        ),
        (
            ["--node-name", NODE],
            {"KUBECONFIG": "/nonexistent/kubeconfig"},
            "cannot load kubeconfig /nonexistent/kubeconfig: ",
        ),
    ],
    ids=["no-node-name", "no-api-access", "unreadable-kubeconfig"],
)
async def test_what_dra_mode_lacks_is_said_and_nothing_is_served(
    tmp_path: Path, args: list[str], env: dict[str, str], why: str
) -> None:
    library = SimulatedLibrary.from_argument("dgx-a100")
    library.init()
    config = load_config(["--kubelet-api", "dra", "--cdi-spec-dir", str(tmp_path), *args], {})
    side = DraSide(env=env, notify=lambda: None)
    fleet = PluginFleet(kubelet_socket=tmp_path / "kubelet.sock", register=False)
    actuators = Actuators(fleet=fleet, health=None, retries=Retries(BACKOFF), dra=side)
    desired = build_desired(config, library.inventory())
    (outcome,) = await actuators.converge(desired)
    assert outcome.kind is Kind.DRA
    assert str(outcome.error).startswith(why)
    status = side.status(desired.dra)
    assert (status.serving, status.problem, status.slices) == (True, str(outcome.error), None)
    assert status.registration_socket is None  # nothing served
