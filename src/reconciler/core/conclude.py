"""One pass's outcomes in, one lifecycle trigger out.

The loop turns a hint into an input trigger (the lifecycle table decides
whether it counts), runs one pass, and hands what the pass found to
`conclude()`, the only place where outcomes become a lifecycle fact, like
controller-runtime's `Result` or kopf's per-handler outcomes:

- the inputs could not be read: `failed`; a permanent error (an invalid
  config) waits for an input to change and never replaces what is served,
  a transient one is retried on the inputs' own backoff;
- some key is failing: `failed`, with a reason naming every failing key and
  when the next is due; in `init` and `reconfiguring` this is the pass's
  end, elsewhere only a pass that attempted a key and saw it fail says so;
- everything converged: `initialized` / `reconfigured` (to `mps_starting`
  while an MPS daemon has not answered for its resource), `mps_ready` once
  every daemon has, `mps_lost` when a served resource's daemon went away,
  and `retry` with the reason while `mps_starting` keeps waiting.

Pure: it reads a `Pass` and returns a `Conclusion`; the loop fires it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from foundation.errors import PluginError
from foundation.outcome import Change, Key, Kind, Outcome
from reconciler.actuators.dra import SLICES_KEY
from reconciler.plan.desired import Desired
from states.names import State, Trigger


class Cause(StrEnum):
    """Why a pass ran."""

    START = "start"  #: the first pass, or one after `blocked_on_error`
    INPUT = "input"  #: the config, the node label or SIGHUP
    RETRY = "retry"  #: a failing key became due
    KUBELET = "kubelet"  #: a new kubelet, or a plugin socket deleted underneath
    HEALTH = "health"  #: a device's health changed what the kubelet sees
    MPS = "mps"  #: MPS probe results
    DRIFT = "drift"  #: an input event that changed nothing, and an actuator off course


class Result(StrEnum):
    """How a pass ended, as the `reconciles` metric counts it."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    REJECTED = "rejected"
    ERROR = "error"
    REPAIRED = "repaired"
    REREGISTERED = "reregistered"
    HEALTH = "health"
    MPS = "mps"


_IN_PLACE = {
    Cause.KUBELET: Result.REREGISTERED,
    Cause.HEALTH: Result.HEALTH,
    Cause.MPS: Result.MPS,
    Cause.DRIFT: Result.REPAIRED,
    Cause.RETRY: Result.APPLIED,
    Cause.INPUT: Result.APPLIED,
    Cause.START: Result.APPLIED,
}

# Which resources a reconfiguration lists under which word, from what really happened.
_LISTED = {
    Change.STARTED: "started",
    Change.STOPPED: "stopped",
    Change.RESTARTED: "restarted",
    Change.UPDATED: "updated",
    Change.PUBLISHED: "updated",
    Change.RECREATED: "reregistered",
}


@dataclass(frozen=True)
class Pass:
    """What one pass found and did, and what stands after it.

    `state` is the lifecycle state the pass ran in (after its input
    trigger). `pending` maps every key still failing after the pass (MPS
    keys apart) to its last error, `retry_in` is when the next is due;
    `mps_waiting` names the wanted MPS resources whose daemon has not
    answered for them, `mps_retry_in` when they are probed next.
    """

    state: State
    cause: Cause
    outcomes: Sequence[Outcome] = ()
    read_error: PluginError | None = None
    pending: Mapping[Key, PluginError | None] = field(default_factory=dict)
    retry_in: float | None = None
    mps_waiting: Sequence[str] = ()
    mps_retry_in: float | None = None
    previous: Desired | None = None
    desired: Desired | None = None


@dataclass(frozen=True)
class Conclusion:
    """The trigger to fire (None: nothing to record), and what the loop does next.

    `result` is None for a pass that did nothing (not counted as a reconcile).
    """

    result: Result | None
    trigger: Trigger | None = None
    reason: str | None = None
    detail: Mapping[str, object] = field(default_factory=dict)
    needs_mps: bool = False
    # The node's GPUs are in no kubelet API now: a failed reconfiguration blocks.
    serves_nothing: bool = False
    # A failure that `--fail-on-init-error` exits on at start-up: any but a
    # peer not answering yet (the kubelet, the API server), which is retried.
    fatal: PluginError | None = None

    @property
    def reports_pending(self) -> bool:
        """Whether the reason this fires names keys that are still failing."""
        return self.trigger is Trigger.FAILED and not self.detail.get("permanent", False)


def conclude(done: Pass) -> Conclusion:
    if done.read_error is not None:
        return replace(_unreadable(done, done.read_error), fatal=done.read_error)
    failed_now = [o for o in done.outcomes if not o.converged and o.kind is not Kind.MPS]
    probed = [o for o in done.outcomes if o.kind is Kind.MPS]
    needs_mps = bool(done.mps_waiting)
    match done.state:
        case State.INIT | State.RECONFIGURING if done.pending:
            return _not_applied(done)
        case State.INIT:
            desired = done.desired
            return Conclusion(
                Result.APPLIED,
                Trigger.INITIALIZED,
                detail={
                    "digest": None if desired is None else desired.digest,
                    "resources": [] if desired is None else desired.resource_names,
                    **_warnings(done),
                },
                needs_mps=needs_mps,
            )
        case State.RECONFIGURING:
            detail = {
                **applied_detail(done.previous, done.desired, done.outcomes),
                **_warnings(done),
            }
            result = Result.APPLIED if detail["changed"] else Result.UNCHANGED
            return Conclusion(result, Trigger.RECONFIGURED, detail=detail, needs_mps=needs_mps)
    if failed_now:
        return _not_applied(done)
    result = _IN_PLACE[done.cause]
    lost = [o for o in probed if Change.WITHDRAWN in o.changes]
    problems = [str(o.error) for o in probed if o.error is not None]
    if done.state is State.SERVING and (lost or problems):
        return Conclusion(Result.ERROR, Trigger.MPS_LOST, reason="; ".join(problems))
    if done.state is State.MPS_STARTING and problems:
        delay = done.mps_retry_in or 0.0
        waiting = sorted(o.name for o in probed if o.error)
        return Conclusion(
            Result.ERROR,
            Trigger.RETRY,
            reason=f"waiting for the MPS daemon: {'; '.join(problems)} (retrying in {delay:g}s)",
            detail={"retry_in_seconds": delay, "pending": waiting},
        )
    if done.state is State.MPS_STARTING and not needs_mps and not done.pending:
        names = [] if done.desired is None else done.desired.mps_resources
        return Conclusion(Result.APPLIED, Trigger.MPS_READY, detail={"resources": names})
    return Conclusion(result)


def _warnings(done: Pass) -> dict[str, object]:
    """The plan's new warnings, for the history and the node's Events (absent when none)."""
    desired = done.desired
    new = [] if desired is None else desired.new_plan_warnings(done.previous)
    return {"warnings": new} if new else {}


def _unreadable(done: Pass, err: PluginError) -> Conclusion:
    detail: dict[str, object] = {"permanent": err.permanent, "error": type(err).__name__}
    if err.permanent:
        if done.state is State.RECONFIGURING:
            reason = f"new config rejected, still serving the previous one: {err}"
        else:
            reason = f"{err} (waiting for a config change, a node label change or SIGHUP)"
        return Conclusion(Result.REJECTED, Trigger.FAILED, reason=reason, detail=detail)
    delay = done.retry_in or 0.0
    detail["retry_in_seconds"] = round(delay, 3)
    return Conclusion(
        Result.ERROR, Trigger.FAILED, reason=f"{err} (retrying in {delay:g}s)", detail=detail
    )


def pending_reason(pending: Mapping[Key, PluginError | None], retry_in: float | None) -> str:
    """The reason a node gives while keys are failing: each key, its error, the next retry.

    Derived afresh whenever it is shown, like a status condition: it names
    what is failing now, and is gone once nothing is.
    """
    described = "; ".join(
        f"{key}: {error}" if error else f"{key}: pending" for key, error in pending.items()
    )
    return f"not yet applied: {described} (retrying in {retry_in or 0.0:g}s)"


def _not_applied(done: Pass) -> Conclusion:
    delay = done.retry_in or 0.0
    first = next(iter(done.pending.values()), None)
    fatal = next((e for k, e in done.pending.items() if not _peer(k)), None)
    return Conclusion(
        Result.ERROR,
        Trigger.FAILED,
        reason=pending_reason(done.pending, done.retry_in),
        detail={
            "permanent": False,
            "pending": [str(key) for key in done.pending],
            "error": None if first is None else type(first).__name__,
            "retry_in_seconds": round(delay, 3),
        },
        fatal=fatal,
        # The slices not written on a DRA node, or not withdrawn before the
        # device plugin may serve again: no GPU is offered through either API.
        serves_nothing=SLICES_KEY in done.pending,
    )


def _peer(key: Key) -> bool:
    """A key whose failure is a peer not answering yet: the kubelet, or the API server."""
    return key.kind is Kind.RESOURCE or key == SLICES_KEY


def applied_detail(
    previous: Desired | None, desired: Desired | None, outcomes: Sequence[Outcome]
) -> dict[str, object]:
    """What a reconfiguration did, from what the actuators report.

    A resource is listed under `restarted` only if its server really was
    restarted, under `updated` only if a new device list really went out on
    its open stream; `changed` says whether anything at all was done.
    """
    lists: dict[str, list[str]] = {
        "started": [],
        "stopped": [],
        "restarted": [],
        "updated": [],
        "reregistered": [],
    }
    files: list[str] = []
    for outcome in outcomes:
        if outcome.kind is Kind.CDI:
            files.extend(outcome.files)
        elif outcome.kind is Kind.RESOURCE:
            for change in outcome.changes:
                listed = _LISTED.get(change)
                if listed is not None and outcome.name not in lists[listed]:
                    lists[listed].append(outcome.name)
    detail: dict[str, object] = {
        "changed": any(lists.values()) or bool(files),
        "from": None if previous is None else previous.digest,
        "to": None if desired is None else desired.digest,
    }
    detail.update(
        {word: sorted(names) for word, names in lists.items() if names or word != "reregistered"}
    )
    if files:
        detail["cdi"] = files
    return detail
