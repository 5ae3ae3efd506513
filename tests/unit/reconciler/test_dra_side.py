"""DraSide between passes: what it reports of the slices, and when the loop's DRA hint needs a pass.

The publisher and the kubelet plugin are stand-ins (the real ones have their
own tests: tests/unit/kube/test_resource_slices.py, tests/unit/kubelet/
test_dra_server.py): the publisher's state is set by the test as its thread
would leave it, the server records what it was asked. What is checked is the
bookkeeping between them: a withdrawal an earlier pass could not confirm is
settled once confirmed, a landing or a failure after the pass is noticed, and
sockets kept for prepared claims are repaired, then stopped once idle.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devices.simulated import SimulatedLibrary
from foundation.outcome import Change, Kind, Outcome
from reconciler.desired import Desired, build_desired
from reconciler.dra import SLICES, DraSide
from settings import EffectiveConfig, load_config

NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"


class Goal(enum.Enum):
    NONE = "none"
    PUBLISH = "publish"
    WITHDRAW = "withdraw"


@dataclass(frozen=True)
class State:
    goal: Goal = Goal.NONE
    converged: bool = False
    error: str = ""


@dataclass
class Publisher:
    """A slice publisher whose thread the test plays: `state` is what it last said."""

    state_now: State = field(default_factory=State)
    confirms: bool = True  # a withdrawal is confirmed within the pass's wait

    def publish(self, slices: Any) -> None:
        self.state_now = State(Goal.PUBLISH, converged=False, error=self.state_now.error)

    def withdraw(self) -> None:
        self.state_now = State(Goal.WITHDRAW, converged=self.confirms, error=self.state_now.error)

    def wait_converged(self, timeout: float) -> bool:
        return self.state_now.converged

    def state(self) -> State:
        return self.state_now

    def land(self) -> None:
        """The thread's next pass succeeded."""
        self.state_now = State(self.state_now.goal, converged=True)

    def fail(self, error: str) -> None:
        self.state_now = State(self.state_now.goal, converged=False, error=error)

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


class Side(DraSide):
    """DraSide on stand-in parts (its own `_open` makes the real ones)."""

    def __init__(self, boot: EffectiveConfig) -> None:
        super().__init__(boot=boot, env={}, notify=lambda: None)
        self.publisher, self.server, self.preparer = Publisher(), Server(), Preparer()

    def _open(self) -> tuple[Any, Any]:
        self._publisher, self._server, self._preparer = (
            self.publisher,  # type: ignore[assignment]
            self.server,  # type: ignore[assignment]
            self.preparer,  # type: ignore[assignment]
        )
        return self.publisher, self.server


@pytest.fixture
def desired(tmp_path: Path) -> Desired:
    library = SimulatedLibrary.from_argument("dgx-a100")
    library.init()
    config = load_config(
        ["--kubelet-api", "dra", "--node-name", NODE, "--cdi-spec-dir", str(tmp_path / "cdi")],
        {},
    )
    return build_desired(config, library.inventory())


@pytest.fixture
def side(desired: Desired) -> Side:
    return Side(desired.config)


def slices(outcomes: list[Outcome]) -> Outcome:
    (found,) = [o for o in outcomes if o.name == SLICES]
    return found


async def test_a_withdrawal_confirmed_after_an_unconfirmed_pass_is_settled(
    side: Side, desired: Desired
) -> None:
    await side.serve(desired, None)
    side.publisher.land()
    side.publisher.confirms = False
    side.publisher.fail("cannot connect to the API server: connection refused")
    unconfirmed = slices(await side.withdraw())
    assert str(unconfirmed.error) == (
        "withdrawing this node's ResourceSlices: "
        "cannot connect to the API server: connection refused"
    )
    assert not side.withdrawn
    assert not side.out_of_step(slices_failing=True)  # still failing, as reported

    side.publisher.land()  # the API server is back and confirmed it
    side.publisher.confirms = True
    assert side.withdrawn
    assert side.out_of_step(slices_failing=True)
    # The next pass settles the key (before, it reported nothing and the key
    # stayed failing, due at once, pass after pass).
    settled = slices(await side.withdraw())
    assert (settled.converged, settled.changes) == (True, frozenset())
    assert not side.out_of_step(slices_failing=False)


async def test_slices_that_land_or_fail_after_the_pass_call_for_one(
    side: Side, desired: Desired
) -> None:
    assert slices(await side.serve(desired, None)).converged
    assert not side.out_of_step(slices_failing=False)  # the wish is on its way

    side.publisher.fail("cannot connect to the API server: connection refused")
    assert side.out_of_step(slices_failing=False)
    failed = slices(await side.serve(desired, None))
    assert str(failed.error) == (
        "publishing ResourceSlices: cannot connect to the API server: connection refused"
    )
    assert not side.out_of_step(slices_failing=True)

    side.publisher.land()
    assert side.out_of_step(slices_failing=True)
    assert slices(await side.serve(desired, None)).converged


async def test_a_watch_error_on_slices_already_held_calls_for_no_pass(
    side: Side, desired: Desired
) -> None:
    await side.serve(desired, None)
    side.publisher.land()
    side.publisher.state_now = State(Goal.PUBLISH, converged=True, error="watch: gone")
    assert not side.out_of_step(slices_failing=False)


async def test_sockets_kept_for_prepared_claims_are_repaired_then_stopped_once_idle(
    side: Side, desired: Desired
) -> None:
    await side.serve(desired, None)
    side.publisher.land()
    side.preparer.prepared["uid-1"] = object()
    assert side.served_directories() == (Path("/reg"), Path("/plugins/gpu.nvidia.com"))

    await side.withdraw()
    assert side.server.running  # the kubelet can still unprepare uid-1
    side.server.disturbed_now = True
    assert side.sockets_disturbed()
    converged = side.server.converged
    await side.withdraw()
    assert side.server.converged == converged + 1  # served again, as in DRA mode
    assert not side.sockets_disturbed()
    assert not side.out_of_step(slices_failing=False)

    side.preparer.prepared.clear()  # the kubelet unprepared it
    assert side.out_of_step(slices_failing=False)
    outcomes = await side.withdraw()
    assert Outcome(Kind.DRA, DRIVER, frozenset({Change.STOPPED})) in outcomes
    assert not side.server.running
    assert side.served_directories() == ()
    assert not side.out_of_step(slices_failing=False)


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
    side = DraSide(boot=config, env=env, notify=lambda: None)
    (outcome,) = await side.serve(build_desired(config, library.inventory()), None)
    assert outcome.kind is Kind.DRA
    assert str(outcome.error).startswith(why)
    status = side.status()
    assert (status.serving, status.problem, status.slices) == (True, str(outcome.error), None)
    assert status.registration_socket is None  # nothing served
