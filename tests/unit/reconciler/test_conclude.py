"""`conclude()`: one pass's outcomes in, one lifecycle trigger out, for every path.

Pure and table-driven: each case is the state a pass ran in, what it found,
and the trigger, reason and result it must end with. The loop fires what
this returns and nothing else, so these cases are the lifecycle's whole
reaction to outcomes.
"""

from __future__ import annotations

from typing import Any

import pytest

from foundation.errors import TransientError
from foundation.outcome import Change, Key, Kind, Outcome
from mps.errors import MpsNotReady
from reconciler.core.conclude import Cause, Pass, Result, applied_detail, conclude, pending_reason
from settings import ConfigError
from states.names import State, Trigger

CDI = Key(Kind.CDI)
GPU = "nvidia.com/gpu"
READ_ONLY = TransientError("cannot write CDI specs to /var/run/cdi: Read-only file system")


def resource(*changes: Change, error: Exception | None = None) -> Outcome:
    return Outcome(Kind.RESOURCE, GPU, frozenset(changes), error)  # type: ignore[arg-type]


def mps(*changes: Change, problem: str | None = None) -> Outcome:
    error = None if problem is None else MpsNotReady(problem)
    return Outcome(Kind.MPS, GPU, frozenset(changes), error)


CASES: list[Any] = [
    pytest.param(
        Pass(State.INIT, Cause.START, outcomes=(resource(Change.STARTED, Change.REGISTERED),)),
        Trigger.INITIALIZED, None, Result.APPLIED, id="init-converged",
    ),
    pytest.param(
        Pass(State.INIT, Cause.START, mps_waiting=(GPU,)),
        Trigger.INITIALIZED, None, Result.APPLIED, id="init-waits-for-mps",
    ),
    pytest.param(
        Pass(State.INIT, Cause.START, outcomes=(Outcome(Kind.CDI, error=READ_ONLY),),
             pending={CDI: READ_ONLY}, retry_in=2.0),
        Trigger.FAILED, "not yet applied: cdi: cannot write CDI specs to /var/run/cdi: "
        "Read-only file system (retrying in 2s)", Result.ERROR, id="init-pending",
    ),
    pytest.param(
        Pass(State.INIT, Cause.START, read_error=ConfigError("bad", origin="f.yaml")),
        Trigger.FAILED, "f.yaml: bad (waiting for a config change, a node label change or SIGHUP)",
        Result.REJECTED, id="init-invalid-config",
    ),
    pytest.param(
        Pass(State.INIT, Cause.START, read_error=TransientError("NVML not loaded"), retry_in=4.0),
        Trigger.FAILED, "NVML not loaded (retrying in 4s)", Result.ERROR, id="init-no-driver",
    ),
    pytest.param(
        Pass(State.RECONFIGURING, Cause.INPUT, read_error=ConfigError("bad", origin="f.yaml")),
        Trigger.FAILED, "new config rejected, still serving the previous one: f.yaml: bad",
        Result.REJECTED, id="reconfigure-invalid-config",
    ),
    pytest.param(
        Pass(State.RECONFIGURING, Cause.INPUT, outcomes=(resource(Change.UPDATED),)),
        Trigger.RECONFIGURED, None, Result.APPLIED, id="reconfigure-applied",
    ),
    pytest.param(
        Pass(State.RECONFIGURING, Cause.INPUT),
        Trigger.RECONFIGURED, None, Result.UNCHANGED, id="reconfigure-nothing-to-do",
    ),
    pytest.param(
        # A key failing since an earlier pass and not due yet still holds the
        # reconfiguration back: it is not reported applied.
        Pass(State.RECONFIGURING, Cause.INPUT, outcomes=(resource(Change.UPDATED),),
             pending={CDI: READ_ONLY}, retry_in=8.0),
        Trigger.FAILED, "not yet applied: cdi: cannot write CDI specs to /var/run/cdi: "
        "Read-only file system (retrying in 8s)", Result.ERROR,
        id="reconfigure-earlier-key-pending",
    ),
    pytest.param(
        Pass(State.SERVING, Cause.KUBELET,
             outcomes=(resource(Change.RECREATED, Change.REGISTERED),)),
        None, None, Result.REREGISTERED, id="kubelet-restart-in-place",
    ),
    pytest.param(
        Pass(State.SERVING, Cause.HEALTH,
             outcomes=(resource(error=TransientError("kubelet not listening")),),
             pending={Key(Kind.RESOURCE, GPU): TransientError("kubelet not listening")},
             retry_in=1.0),
        Trigger.FAILED, "not yet applied: resource:nvidia.com/gpu: kubelet not listening "
        "(retrying in 1s)", Result.ERROR, id="health-pass-fails-in-place",
    ),
    pytest.param(
        # Still failing, but this pass did not try it: nothing new to record.
        Pass(State.SERVING, Cause.HEALTH, outcomes=(resource(Change.PUBLISHED),),
             pending={CDI: READ_ONLY}, retry_in=8.0),
        None, None, Result.HEALTH, id="health-pass-beside-a-failing-key",
    ),
    pytest.param(
        Pass(State.SERVING, Cause.MPS, outcomes=(mps(Change.WITHDRAWN, problem="gone"),)),
        Trigger.MPS_LOST, "gone", Result.ERROR, id="mps-daemon-lost",
    ),
    pytest.param(
        Pass(State.MPS_STARTING, Cause.MPS, outcomes=(mps(problem="not started"),),
             mps_waiting=(GPU,), mps_retry_in=2.0),
        Trigger.RETRY, "waiting for the MPS daemon: not started (retrying in 2s)", Result.ERROR,
        id="mps-still-waiting",
    ),
    pytest.param(
        Pass(State.MPS_STARTING, Cause.MPS,
             outcomes=(mps(Change.ADMITTED), resource(Change.STARTED))),
        Trigger.MPS_READY, None, Result.APPLIED, id="mps-ready",
    ),
    pytest.param(
        # Every daemon answers, but a CDI write is still pending: not ready yet.
        Pass(State.MPS_STARTING, Cause.MPS, outcomes=(mps(Change.ADMITTED),),
             pending={CDI: READ_ONLY}, retry_in=3.0),
        None, None, Result.MPS, id="mps-answers-but-a-key-is-pending",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("done", "trigger", "reason", "result"), CASES)
def test_one_trigger_per_pass(
    done: Pass, trigger: Trigger | None, reason: str | None, result: Result
) -> None:
    conclusion = conclude(done)
    assert conclusion.trigger is trigger
    assert conclusion.reason == reason
    assert conclusion.result is result


def test_waiting_for_mps_goes_to_mps_starting() -> None:
    assert conclude(Pass(State.INIT, Cause.START, mps_waiting=(GPU,))).needs_mps
    assert not conclude(Pass(State.INIT, Cause.START)).needs_mps


def test_keys_that_land_in_place_fire_nothing_the_reason_clears_itself() -> None:
    # The reason shown while keys fail is derived from them (`pending_reason`):
    # a landing outside a reconfiguration needs no trigger to clear it.
    landed = conclude(Pass(State.SERVING, Cause.KUBELET, outcomes=(resource(Change.REGISTERED),)))
    assert (landed.trigger, landed.result) == (None, Result.REREGISTERED)


def test_the_pending_reason_names_each_key_its_error_and_the_next_retry() -> None:
    gone = TransientError("kubelet not listening")
    pending = {CDI: READ_ONLY, Key(Kind.RESOURCE, GPU): gone}
    assert pending_reason(pending, 0.5) == (
        f"not yet applied: cdi: {READ_ONLY}; resource:nvidia.com/gpu: kubelet not listening "
        "(retrying in 0.5s)"
    )


def test_slices_not_landed_say_the_node_serves_nothing() -> None:
    slices = Key(Kind.DRA, "slices")
    gone = TransientError("cannot connect to the API server")
    moving = conclude(Pass(State.RECONFIGURING, Cause.INPUT, pending={slices: gone}))
    assert (moving.trigger, moving.serves_nothing) == (Trigger.FAILED, True)
    other = conclude(Pass(State.RECONFIGURING, Cause.INPUT, pending={CDI: READ_ONLY}))
    assert not other.serves_nothing  # the previous config keeps serving


def test_pending_failure_names_every_key_and_says_it_is_not_permanent() -> None:
    gone = TransientError("kubelet not listening")
    conclusion = conclude(
        Pass(State.RECONFIGURING, Cause.RETRY,
             pending={CDI: READ_ONLY, Key(Kind.RESOURCE, GPU): gone}, retry_in=0.5)
    )  # fmt: skip
    assert conclusion.detail == {
        "permanent": False,
        "pending": ["cdi", "resource:nvidia.com/gpu"],
        "error": "TransientError",
        "retry_in_seconds": 0.5,
    }
    assert conclusion.reports_pending


def test_a_reconfiguration_lists_what_really_happened() -> None:
    cdi = Outcome(Kind.CDI, changes=frozenset({Change.WRITTEN}), files=("wrote a.json",))
    outcomes = (
        Outcome(Kind.RESOURCE, "a", frozenset({Change.UPDATED, Change.PUBLISHED})),
        Outcome(Kind.RESOURCE, "b", frozenset({Change.RESTARTED, Change.REGISTERED})),
        Outcome(Kind.RESOURCE, "c", frozenset({Change.RECREATED})),
        Outcome(Kind.RESOURCE, "d"),
        cdi,
    )
    detail = applied_detail(None, None, outcomes)
    assert detail == {
        "changed": True,
        "from": None,
        "to": None,
        "started": [],
        "stopped": [],
        "restarted": ["b"],
        "updated": ["a"],
        "reregistered": ["c"],
        "cdi": ["wrote a.json"],
    }
    assert applied_detail(None, None, (Outcome(Kind.RESOURCE, "d"),))["changed"] is False
