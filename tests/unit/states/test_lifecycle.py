"""The lifecycle table, walked pair by pair.

Every (state, trigger) pair must be either a declared transition with the
expected destination, or deliberately ignored; nothing is left to chance.
"""

from __future__ import annotations

import itertools

import pytest

from states.machine import IllegalTrigger, Lifecycle
from states.names import State, Trigger
from states.table import IGNORED, TRANSITIONS

# The destinations we expect, written independently of table.py.
# None = internal transition (state unchanged, recorded in history).
EXPECTED: dict[tuple[State, Trigger], State | None] = {
    (State.INIT, Trigger.INITIALIZED): State.SERVING,
    (State.INIT, Trigger.FAILED): State.BLOCKED_ON_ERROR,
    (State.INIT, Trigger.SHUTDOWN): State.STOPPED,
    (State.BLOCKED_ON_ERROR, Trigger.RETRY): State.INIT,
    (State.BLOCKED_ON_ERROR, Trigger.CONFIG_CHANGED): State.INIT,
    (State.BLOCKED_ON_ERROR, Trigger.NODE_LABEL_CHANGED): State.INIT,
    (State.BLOCKED_ON_ERROR, Trigger.RELOAD_REQUESTED): State.INIT,
    (State.BLOCKED_ON_ERROR, Trigger.KUBELET_RESTARTED): State.INIT,
    (State.BLOCKED_ON_ERROR, Trigger.FAILED): None,
    (State.BLOCKED_ON_ERROR, Trigger.SHUTDOWN): State.STOPPED,
    (State.SERVING, Trigger.KUBELET_RESTARTED): None,
    (State.SERVING, Trigger.DEVICE_HEALTH_CHANGED): None,
    (State.SERVING, Trigger.CONFIG_CHANGED): State.RECONFIGURING,
    (State.SERVING, Trigger.NODE_LABEL_CHANGED): State.RECONFIGURING,
    (State.SERVING, Trigger.RELOAD_REQUESTED): State.RECONFIGURING,
    (State.SERVING, Trigger.FAILED): None,
    (State.SERVING, Trigger.RETRY): State.RECONFIGURING,
    (State.SERVING, Trigger.SHUTDOWN): State.STOPPED,
    (State.RECONFIGURING, Trigger.RECONFIGURED): State.SERVING,
    (State.RECONFIGURING, Trigger.FAILED): State.SERVING,
    (State.RECONFIGURING, Trigger.SHUTDOWN): State.STOPPED,
    (State.MPS_STARTING, Trigger.MPS_READY): State.SERVING,
    (State.MPS_STARTING, Trigger.RETRY): None,
    (State.SERVING, Trigger.MPS_LOST): State.MPS_STARTING,
    (State.MPS_STARTING, Trigger.KUBELET_RESTARTED): None,
    (State.MPS_STARTING, Trigger.DEVICE_HEALTH_CHANGED): None,
    (State.MPS_STARTING, Trigger.CONFIG_CHANGED): State.RECONFIGURING,
    (State.MPS_STARTING, Trigger.NODE_LABEL_CHANGED): State.RECONFIGURING,
    (State.MPS_STARTING, Trigger.RELOAD_REQUESTED): State.RECONFIGURING,
    (State.MPS_STARTING, Trigger.FAILED): None,
    (State.MPS_STARTING, Trigger.SHUTDOWN): State.STOPPED,
}

# Shortest trigger paths from init to each state.
PATH_TO: dict[State, list[Trigger]] = {
    State.INIT: [],
    State.SERVING: [Trigger.INITIALIZED],
    State.BLOCKED_ON_ERROR: [Trigger.FAILED],
    State.RECONFIGURING: [Trigger.INITIALIZED, Trigger.RELOAD_REQUESTED],
    State.STOPPED: [Trigger.SHUTDOWN],
}


def machine_in(state: State) -> Lifecycle:
    lifecycle = Lifecycle()
    if state is State.MPS_STARTING:
        lifecycle.fire(Trigger.INITIALIZED, needs_mps=True)
    else:
        for trigger in PATH_TO[state]:
            lifecycle.fire(trigger, reason="test" if trigger is Trigger.FAILED else None)
    assert lifecycle.state is state
    return lifecycle


@pytest.mark.parametrize(
    ("state", "trigger"),
    [pytest.param(s, t, id=f"{s}-{t}") for s, t in itertools.product(State, Trigger)],
)
def test_every_pair_is_declared_or_ignored(state: State, trigger: Trigger) -> None:
    lifecycle = machine_in(state)
    before = len(lifecycle.history.snapshot())
    if (state, trigger) in EXPECTED:
        record = lifecycle.fire(trigger, reason="why" if trigger is Trigger.FAILED else None)
        expected = EXPECTED[(state, trigger)]
        assert lifecycle.state is (state if expected is None else expected)
        assert record is not None
        assert (record.source, record.trigger) == (str(state), str(trigger))
        assert len(lifecycle.history.snapshot()) == before + 1
    else:
        assert (state, trigger) in IGNORED, f"{state}/{trigger} is neither expected nor ignored"
        assert lifecycle.fire(trigger) is None
        assert lifecycle.state is state
        assert len(lifecycle.history.snapshot()) == before


def test_no_pair_is_both_a_transition_and_ignored() -> None:
    declared = set()
    for spec in TRANSITIONS:
        sources = spec["source"] if isinstance(spec["source"], list) else [spec["source"]]
        declared |= {(State(s), Trigger(spec["trigger"])) for s in sources}
    assert declared.isdisjoint(IGNORED)
    assert declared == set(EXPECTED) | {
        (State.INIT, Trigger.INITIALIZED),
        (State.RECONFIGURING, Trigger.RECONFIGURED),
    }


@pytest.mark.parametrize(
    ("source", "trigger"),
    [
        pytest.param(State.INIT, Trigger.INITIALIZED, id="init"),
        pytest.param(State.RECONFIGURING, Trigger.RECONFIGURED, id="reconfiguring"),
    ],
)
def test_mps_plans_go_through_mps_starting(source: State, trigger: Trigger) -> None:
    lifecycle = machine_in(source)
    lifecycle.fire(trigger, needs_mps=True)
    assert lifecycle.state is State.MPS_STARTING
    lifecycle.fire(Trigger.MPS_READY)
    assert lifecycle.state is State.SERVING


LIVE = [state for state in State if state is not State.STOPPED]


@pytest.mark.parametrize("state", [pytest.param(s, id=str(s)) for s in LIVE])
def test_every_live_state_can_fail_and_stop(state: State) -> None:
    # Driven through the real machine: a failure is never ignored and never
    # raises, and shutdown always ends in stopped.
    stopping = machine_in(state)
    assert stopping.fire(Trigger.SHUTDOWN) is not None
    assert stopping.state is State.STOPPED
    failing = machine_in(state)
    record = failing.fire(Trigger.FAILED, reason="boom")
    assert record is not None
    assert failing.reason == "boom"
    # Start-up that fails is blocked; a rejected or unfinished reconfiguration
    # goes back to serving the old config; a step that fails while serving
    # (or while MPS starts) keeps what is served and only records why.
    expected = {
        State.INIT: State.BLOCKED_ON_ERROR,
        State.BLOCKED_ON_ERROR: State.BLOCKED_ON_ERROR,
        State.RECONFIGURING: State.SERVING,
        State.SERVING: State.SERVING,
        State.MPS_STARTING: State.MPS_STARTING,
    }[state]
    assert failing.state is expected


def test_every_state_is_reachable_on_the_machine() -> None:
    """Breadth-first over real firings from init: no state of the table is dead."""
    paths: dict[State, list[tuple[Trigger, bool]]] = {State.INIT: []}
    frontier = [State.INIT]
    while frontier:
        state = frontier.pop(0)
        for trigger, needs_mps in itertools.product(Trigger, (False, True)):
            lifecycle = Lifecycle()
            for step, mps in paths[state]:
                lifecycle.fire(step, needs_mps=mps, reason="r" if step is Trigger.FAILED else None)
            if lifecycle.fire(trigger, needs_mps=needs_mps) is None:
                continue
            if lifecycle.state not in paths:
                paths[lifecycle.state] = [*paths[state], (trigger, needs_mps)]
                frontier.append(lifecycle.state)
    assert set(paths) == set(State)
    # The shortest ways there are the ones `machine_in` relies on.
    assert [t for t, _ in paths[State.SERVING]] == PATH_TO[State.SERVING]
    assert [t for t, _ in paths[State.BLOCKED_ON_ERROR]] == PATH_TO[State.BLOCKED_ON_ERROR]
    assert paths[State.MPS_STARTING] == [(Trigger.INITIALIZED, True)]


def test_reason_follows_failures_and_clears_when_serving_again() -> None:
    lifecycle = Lifecycle()
    lifecycle.fire(Trigger.FAILED, reason="NVML: driver not loaded")
    assert lifecycle.reason == "NVML: driver not loaded"
    lifecycle.fire(Trigger.RETRY)
    lifecycle.fire(Trigger.INITIALIZED)
    assert lifecycle.state is State.SERVING
    assert lifecycle.reason is None
    history = [(r.source, r.trigger, r.dest) for r in lifecycle.history.snapshot()]
    assert history == [
        ("init", "failed", "blocked_on_error"),
        ("blocked_on_error", "retry", "init"),
        ("init", "initialized", "serving"),
    ]


def test_rejected_reconfiguration_keeps_serving_with_a_reason() -> None:
    lifecycle = machine_in(State.RECONFIGURING)
    lifecycle.fire(Trigger.FAILED, reason="config.yaml: sharing: bad")
    assert lifecycle.state is State.SERVING
    assert lifecycle.reason == "config.yaml: sharing: bad"


def test_a_failed_move_that_leaves_the_gpus_in_no_api_blocks() -> None:
    lifecycle = machine_in(State.RECONFIGURING)
    lifecycle.fire(Trigger.FAILED, reason="not yet applied: dra:slices: ...", serves_nothing=True)
    assert lifecycle.state is State.BLOCKED_ON_ERROR
    lifecycle.fire(Trigger.RETRY)
    assert lifecycle.state is State.INIT


def test_stopped_ignores_everything() -> None:
    lifecycle = Lifecycle()
    lifecycle.fire(Trigger.SHUTDOWN)
    for trigger in Trigger:
        assert lifecycle.fire(trigger) is None
        assert lifecycle.state is State.STOPPED


def test_a_pair_missing_from_both_lists_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import states.machine

    monkeypatch.setattr(states.machine, "IGNORED", frozenset())
    lifecycle = machine_in(State.SERVING)
    with pytest.raises(IllegalTrigger, match="mps_ready is not allowed in state serving"):
        lifecycle.fire(Trigger.MPS_READY)
    assert lifecycle.state is State.SERVING
