"""A hint and the facts gathered for it in, the input trigger and the pass out.

The input side of the loop, shaped as `conclude()` shapes the outcome side:
small sense functions (`reconciler.core.sense`) gather the facts of a hint (a fresh read
of the inputs, the kubelet's restarts, what the health machine decided,
what is failing), and the pure `plan_step(hint, state, facts)` decides:

- which input trigger to fire, if any (the lifecycle table says where it
  leads, `states.table.leads_to`, and whether the pair is ignored);
- which pass follows (`Cause`), if any, and whether it reads the inputs
  afresh or uses the reading the facts already hold.

Every "this hint changes nothing in that state" is a table fact: an ignored
(state, trigger) pair, or a pass that moves no state outside
`states.table.SERVES`. So the whole input side is tested as a table
(tests/unit/reconciler/test_steps.py) without a loop, a file or a socket.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.core.conclude import Cause
from reconciler.core.mailbox import Hint
from states.names import State, Trigger
from states.table import SERVES, leads_to

INPUT_TRIGGERS = {
    Hint.RELOAD: Trigger.RELOAD_REQUESTED,
    Hint.CONFIG: Trigger.CONFIG_CHANGED,
    Hint.LABEL: Trigger.NODE_LABEL_CHANGED,
}


@dataclass(frozen=True)
class Facts:
    """What the loop's sense functions found for one hint (each only where it applies)."""

    same_label: bool = False  #: the node label still has the value already read
    read: bool = False  #: the inputs were read afresh for this hint
    said_already: bool = False  #: ... and hold the same rejected content as before
    changed: bool = False  #: ... and differ from what is in force (or a rejection stands)
    restarts: int = 0  #: kubelet restarts seen since the last look
    sockets_lost: tuple[str, ...] = ()  #: resources whose socket was deleted underneath
    registered_elsewhere: bool = False  #: a server not registered with this kubelet
    pending: bool = False  #: some key (MPS apart) is failing
    reason_pending: bool = False  #: the lifecycle's reason names failing keys
    read_again: bool = False  #: reading is what fails, or a rejected config stands
    health_changed: bool = False  #: what the kubelet sees of a device changed
    health_detail: Mapping[str, str] = field(default_factory=dict)  #: uuid -> its move
    #: the health machine's view moved (a reason, an unmonitored mark, the monitoring
    #: condition): what the DRA health stream tells the kubelet may have changed
    health_seen: bool = False
    mps_results: bool = False  #: MPS probe results are in (applied at the gate)
    dra_disturbed: bool = False  #: a DRA socket was deleted underneath
    api_back: bool = False  #: the slice watch listed again: the API server answers


@dataclass(frozen=True)
class Step:
    """What a hint does: the input trigger (None: none), then the pass (None: none)."""

    trigger: Trigger | None = None
    cause: Cause | None = None
    read: bool = False  #: the pass reads the inputs afresh
    use_reading: bool = False  #: the pass applies the reading the facts were sensed from
    detail: Mapping[str, object] = field(default_factory=dict)


NOTHING = Step()


def plan_step(hint: Hint, state: State, facts: Facts) -> Step:
    """The trigger and the pass for `hint` in `state`, from `facts` (pure)."""
    if hint in INPUT_TRIGGERS:
        return _input(hint, state, facts)
    if hint is Hint.KUBELET:
        return _kubelet(state, facts)
    if hint is Hint.RETRY:
        return _retry(state, facts)
    if hint in (Hint.HEALTH, Hint.CORDON):
        if facts.health_changed and leads_to(state, Trigger.DEVICE_HEALTH_CHANGED) is not None:
            return Step(Trigger.DEVICE_HEALTH_CHANGED, Cause.HEALTH, detail=facts.health_detail)
        if facts.health_seen and state in SERVES:
            # Nothing moved between Healthy and Unhealthy, but the DRA health stream
            # also says Unknown and why: a pass sends what it says now (no trace).
            return Step(cause=Cause.HEALTH)
        return NOTHING  # not serving: the next pass applies health as it is then
    if hint is Hint.DRA and state is State.BLOCKED_ON_ERROR and facts.api_back:
        # Blocked on the slices: the API server answering again is the input
        # that changed, as a new kubelet is for a node blocked on registration.
        return Step(Trigger.RETRY, Cause.START, read=True)
    if state not in SERVES:
        return NOTHING
    if hint is Hint.MPS:
        return Step(cause=Cause.MPS)  # results to apply, or daemons due for a probe
    if hint is Hint.DRA:
        return Step(cause=Cause.KUBELET if facts.dra_disturbed else Cause.DRIFT)
    return NOTHING


def _input(hint: Hint, state: State, facts: Facts) -> Step:
    if facts.same_label:
        return NOTHING
    if facts.read:
        if facts.said_already:
            return NOTHING  # the same rejected content: said once already
        if not facts.changed:
            # Watches fire for touches that change nothing: no trace, but drift
            # nobody knows about yet (a spec file deleted underneath) is repaired.
            return Step(cause=Cause.DRIFT, use_reading=True)
    trigger = INPUT_TRIGGERS[hint]
    return _then(trigger, leads_to(state, trigger), reading=facts.read)


def _kubelet(state: State, facts: Facts) -> Step:
    if not (facts.restarts or facts.sockets_lost or facts.registered_elsewhere):
        return NOTHING  # the same kubelet, our own sockets intact
    detail = {"restarts": facts.restarts}
    if state is State.BLOCKED_ON_ERROR:
        return _then(Trigger.KUBELET_RESTARTED, State.INIT, detail=detail)
    if state not in SERVES:
        return NOTHING
    trigger = Trigger.KUBELET_RESTARTED if facts.restarts else None
    return Step(trigger, Cause.KUBELET, detail=detail)


def _retry(state: State, facts: Facts) -> Step:
    if state in SERVES and not facts.pending and not facts.reason_pending:
        return NOTHING  # a stale timer: nothing is waiting for it
    dest = leads_to(state, Trigger.RETRY)
    if dest is State.INIT:
        return Step(Trigger.RETRY, Cause.START, read=True)
    if dest in (State.RECONFIGURING, State.MPS_STARTING):
        return Step(Trigger.RETRY, Cause.RETRY, read=facts.read_again)
    return NOTHING


def _then(
    trigger: Trigger,
    dest: State | None,
    *,
    reading: bool = False,
    detail: Mapping[str, object] | None = None,
) -> Step:
    """Fire `trigger`; then the pass its destination calls for."""
    if dest is None:
        return NOTHING
    if dest is State.INIT:
        return Step(trigger, Cause.START, read=True, detail=detail or {})
    if dest is State.RECONFIGURING:
        return Step(trigger, Cause.INPUT, read=not reading, use_reading=reading)
    return Step(trigger, detail=detail or {})
