"""The lifecycle table: every state, every transition, every deliberate no-op.

Read it as the specification of the plugin's behaviour:

- `init` does discovery and serving in one bounded step and ends in
  `initialized` (to `serving`, or to `mps_starting` when the plan needs the
  MPS daemon) or `failed` (to `blocked_on_error`).
- `blocked_on_error` leaves on `retry` (the backoff timer, for transient
  errors) or on any input change (config, node label, SIGHUP, kubelet restart).
- A reconfiguration that fails goes back to `serving` what was served, unless
  the node's GPUs are in no kubelet API meanwhile (a move between the device
  plugin and DRA whose ResourceSlices could not be written or withdrawn):
  then it is `blocked_on_error` until they land.
- `serving` handles a kubelet restart and a health change in place (internal
  transitions: the state does not change, only sockets or device lists do),
  and goes through `reconfiguring` for any input change and for `retry` (the
  backoff timer of a step that has not landed yet). A step that fails while
  serving is recorded with `failed` in place: the plugin keeps serving what
  it holds, and the reason names what is still pending.
- `mps_starting` serves what does not need MPS and probes the MPS control
  daemon: `mps_ready` opens the shared resources, `retry` records another
  failed probe (the reason says why). A daemon that dies while serving
  (`mps_lost`) takes the shared resources back to `mps_starting`.
- `shutdown` is accepted from every state but `stopped`.

A (state, trigger) pair that is neither a transition nor in `IGNORED` is a
programming error and raises.

Work that moves no state (repairing drift, MPS probe results, the node's
slices or DRA sockets moving, a kubelet seen again) runs only in the states
in `SERVES`, where something is served; in any other state the next start-up
or reconfiguration does the same work, so such a hint is ignored there.
`leads_to` answers, for the loop's pure step planner, where an input
trigger would take the machine.
"""

from __future__ import annotations

from typing import TypedDict

from states.names import State, Trigger


class TransitionSpec(TypedDict, total=False):
    trigger: str
    source: str | list[str]
    dest: str | None  # None: internal transition (no exit/enter)
    conditions: str
    unless: str


STATES: tuple[State, ...] = tuple(State)
FINAL: frozenset[State] = frozenset({State.STOPPED})

_INPUTS = [Trigger.CONFIG_CHANGED, Trigger.NODE_LABEL_CHANGED, Trigger.RELOAD_REQUESTED]
_NOT_FINAL = [
    State.INIT, State.BLOCKED_ON_ERROR, State.MPS_STARTING, State.SERVING, State.RECONFIGURING,
]  # fmt: skip
# The states in which something is served: the only ones where work that
# moves no state (a repair, MPS probe results, a kubelet seen again) is done.
SERVES: frozenset[State] = frozenset({State.SERVING, State.MPS_STARTING})


def _t(
    trigger: Trigger,
    source: State | list[State],
    dest: State | None,
    *,
    conditions: str | None = None,
    unless: str | None = None,
) -> TransitionSpec:
    spec = TransitionSpec(
        trigger=str(trigger),
        source=[str(s) for s in source] if isinstance(source, list) else str(source),
        dest=None if dest is None else str(dest),
    )
    if conditions:
        spec["conditions"] = conditions
    if unless:
        spec["unless"] = unless
    return spec


TRANSITIONS: tuple[TransitionSpec, ...] = (
    # start-up
    _t(Trigger.INITIALIZED, State.INIT, State.MPS_STARTING, conditions="needs_mps"),
    _t(Trigger.INITIALIZED, State.INIT, State.SERVING, unless="needs_mps"),
    # failures: start-up blocks; blocked re-records the newest reason; a step
    # that fails while serving leaves what is served as it is and says why
    _t(Trigger.FAILED, State.INIT, State.BLOCKED_ON_ERROR),
    _t(Trigger.FAILED, [State.BLOCKED_ON_ERROR, State.MPS_STARTING, State.SERVING], None),
    # an invalid new config never replaces a good one: back to serving the old one;
    # but a node whose GPUs are in no kubelet API now (its ResourceSlices not
    # written, or not withdrawn) serves nothing, and is blocked until they land
    _t(Trigger.FAILED, State.RECONFIGURING, State.BLOCKED_ON_ERROR, conditions="serves_nothing"),
    _t(Trigger.FAILED, State.RECONFIGURING, State.SERVING, unless="serves_nothing"),
    # recovery from blocked: the timer, or any change of inputs
    _t(Trigger.RETRY, State.BLOCKED_ON_ERROR, State.INIT),
    *(_t(t, State.BLOCKED_ON_ERROR, State.INIT) for t in _INPUTS),
    _t(Trigger.KUBELET_RESTARTED, State.BLOCKED_ON_ERROR, State.INIT),
    # serving: kubelet restart and health handled in place
    _t(Trigger.KUBELET_RESTARTED, [State.SERVING, State.MPS_STARTING], None),
    _t(Trigger.DEVICE_HEALTH_CHANGED, [State.SERVING, State.MPS_STARTING], None),
    *(_t(t, [State.SERVING, State.MPS_STARTING], State.RECONFIGURING) for t in _INPUTS),
    _t(Trigger.RETRY, State.SERVING, State.RECONFIGURING),
    _t(Trigger.RECONFIGURED, State.RECONFIGURING, State.MPS_STARTING, conditions="needs_mps"),
    _t(Trigger.RECONFIGURED, State.RECONFIGURING, State.SERVING, unless="needs_mps"),
    _t(Trigger.MPS_READY, State.MPS_STARTING, State.SERVING),
    _t(Trigger.RETRY, State.MPS_STARTING, None),
    _t(Trigger.MPS_LOST, State.SERVING, State.MPS_STARTING),
    # the end
    _t(Trigger.SHUTDOWN, _NOT_FINAL, State.STOPPED),
)

# Pairs that are deliberately no-ops. Everything else undeclared is a bug.
IGNORED: frozenset[tuple[State, Trigger]] = frozenset(
    {
        # health events before anything is served, or while blocked, change nothing:
        # the next successful init reads health afresh.
        (State.INIT, Trigger.DEVICE_HEALTH_CHANGED),
        (State.BLOCKED_ON_ERROR, Trigger.DEVICE_HEALTH_CHANGED),
        (State.RECONFIGURING, Trigger.DEVICE_HEALTH_CHANGED),
        # inputs that change while init runs are read by init itself (level-based)
        *((State.INIT, t) for t in _INPUTS),
        (State.INIT, Trigger.KUBELET_RESTARTED),
        (State.INIT, Trigger.RETRY),
        # a stale backoff timer, or a readiness report nobody waits for
        (State.RECONFIGURING, Trigger.RETRY),
        (State.SERVING, Trigger.MPS_READY),
        (State.BLOCKED_ON_ERROR, Trigger.MPS_READY),
        (State.INIT, Trigger.MPS_READY),
        (State.RECONFIGURING, Trigger.MPS_READY),
        # inputs changing during a reconfiguration are read by it (level-based)
        *((State.RECONFIGURING, t) for t in _INPUTS),
        (State.RECONFIGURING, Trigger.KUBELET_RESTARTED),
        # outcome reports that arrive in the wrong state are stale
        (State.SERVING, Trigger.INITIALIZED),
        (State.SERVING, Trigger.RECONFIGURED),
        (State.BLOCKED_ON_ERROR, Trigger.INITIALIZED),
        (State.BLOCKED_ON_ERROR, Trigger.RECONFIGURED),
        (State.MPS_STARTING, Trigger.INITIALIZED),
        (State.MPS_STARTING, Trigger.RECONFIGURED),
        (State.INIT, Trigger.RECONFIGURED),
        (State.RECONFIGURING, Trigger.INITIALIZED),
        # a lost daemon only matters to a plan that is serving through it
        (State.INIT, Trigger.MPS_LOST),
        (State.BLOCKED_ON_ERROR, Trigger.MPS_LOST),
        (State.MPS_STARTING, Trigger.MPS_LOST),
        (State.RECONFIGURING, Trigger.MPS_LOST),
        # after the end, nothing matters
        *((State.STOPPED, t) for t in Trigger),
    }
)


def leads_to(state: State, trigger: Trigger) -> State | None:
    """Where `trigger` takes the machine from `state` (itself for an in-place
    transition); None when the pair is deliberately ignored.

    Only for triggers whose destination has no condition (every input trigger).

    Raises:
        LookupError: the pair is neither a transition nor ignored.
    """
    if (state, trigger) in IGNORED:
        return None
    for spec in TRANSITIONS:
        sources = spec["source"]
        if spec["trigger"] == trigger and str(state) in (
            sources if isinstance(sources, list) else [sources]
        ):
            if "conditions" in spec or "unless" in spec:
                raise LookupError(f"{trigger} from {state} depends on a condition")
            dest = spec["dest"]
            return state if dest is None else State(dest)
    raise LookupError(f"trigger {trigger} is not allowed in state {state}")
