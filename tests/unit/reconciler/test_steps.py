"""The input side of the loop as a table: a hint, a state and the facts in, one step out.

`plan_step` is pure, so every row is a value: which input trigger fires (the
lifecycle table says where it leads and whether it is ignored), which pass
follows and whether it reads the inputs afresh. A hint that changes nothing
in a state is a row with `NOTHING`.
"""

from __future__ import annotations

import pytest

from reconciler.core.conclude import Cause
from reconciler.core.mailbox import Hint
from reconciler.core.steps import NOTHING, Facts, Step, plan_step
from states.names import State, Trigger
from states.table import IGNORED, SERVES, STATES, leads_to

S, M, N, B, R = (
    State.SERVING, State.MPS_STARTING, State.INIT, State.BLOCKED_ON_ERROR, State.RECONFIGURING,
)  # fmt: skip
READ = Facts(read=True, changed=True)
SAME = Facts(read=True)
SAID = Facts(read=True, said_already=True, changed=True)

ROWS = [
    # the config file, the node label, SIGHUP
    (Hint.CONFIG, S, READ, Step(Trigger.CONFIG_CHANGED, Cause.INPUT, use_reading=True)),
    (Hint.CONFIG, S, SAME, Step(cause=Cause.DRIFT, use_reading=True)),
    (Hint.CONFIG, S, SAID, NOTHING),
    (Hint.CONFIG, B, Facts(), Step(Trigger.CONFIG_CHANGED, Cause.START, read=True)),
    (Hint.CONFIG, N, Facts(), NOTHING),
    (Hint.CONFIG, R, Facts(), NOTHING),
    (Hint.LABEL, S, Facts(same_label=True), NOTHING),
    (Hint.LABEL, M, READ, Step(Trigger.NODE_LABEL_CHANGED, Cause.INPUT, use_reading=True)),
    (Hint.RELOAD, S, Facts(), Step(Trigger.RELOAD_REQUESTED, Cause.INPUT, read=True)),
    # the kubelet
    (Hint.KUBELET, S, Facts(), NOTHING),
    (Hint.KUBELET, S, Facts(restarts=1),
     Step(Trigger.KUBELET_RESTARTED, Cause.KUBELET, detail={"restarts": 1})),
    (Hint.KUBELET, S, Facts(sockets_lost=("nvidia.com/gpu",)),
     Step(None, Cause.KUBELET, detail={"restarts": 0})),
    (Hint.KUBELET, B, Facts(restarts=2),
     Step(Trigger.KUBELET_RESTARTED, Cause.START, read=True, detail={"restarts": 2})),
    (Hint.KUBELET, N, Facts(restarts=1), NOTHING),
    # the backoff timer
    (Hint.RETRY, S, Facts(), NOTHING),
    (Hint.RETRY, S, Facts(pending=True), Step(Trigger.RETRY, Cause.RETRY)),
    (Hint.RETRY, S, Facts(pending=True, read_again=True),
     Step(Trigger.RETRY, Cause.RETRY, read=True)),
    (Hint.RETRY, M, Facts(reason_pending=True), Step(Trigger.RETRY, Cause.RETRY)),
    (Hint.RETRY, B, Facts(), Step(Trigger.RETRY, Cause.START, read=True)),
    (Hint.RETRY, N, Facts(pending=True), NOTHING),
    # health, MPS, the DRA side
    (Hint.HEALTH, S, Facts(health_changed=True, health_detail={"GPU-0": "moved"}),
     Step(Trigger.DEVICE_HEALTH_CHANGED, Cause.HEALTH, detail={"GPU-0": "moved"})),
    (Hint.HEALTH, S, Facts(), NOTHING),
    # only the view moved (an unmonitored mark, a reason): a pass, for the DRA health stream
    (Hint.HEALTH, S, Facts(health_seen=True), Step(cause=Cause.HEALTH)),
    (Hint.HEALTH, R, Facts(health_seen=True), NOTHING),
    (Hint.CORDON, B, Facts(health_seen=True), NOTHING),
    (Hint.CORDON, B, Facts(health_changed=True), NOTHING),
    (Hint.MPS, M, Facts(mps_results=True), Step(cause=Cause.MPS)),
    (Hint.MPS, N, Facts(mps_results=True), NOTHING),
    (Hint.DRA, S, Facts(), Step(cause=Cause.DRIFT)),
    (Hint.DRA, S, Facts(dra_disturbed=True), Step(cause=Cause.KUBELET)),
    (Hint.DRA, B, Facts(dra_disturbed=True), NOTHING),
    (Hint.DRA, B, Facts(api_back=True), Step(Trigger.RETRY, Cause.START, read=True)),
    (Hint.DRA, N, Facts(api_back=True), NOTHING),
]  # fmt: skip


@pytest.mark.parametrize(("hint", "state", "facts", "step"), ROWS)
def test_plan_step(hint: Hint, state: State, facts: Facts, step: Step) -> None:
    assert plan_step(hint, state, facts) == step


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("hint", [h for h in Hint if h is not Hint.SHUTDOWN])
def test_every_hint_in_every_state_plans_a_step_the_table_allows(hint: Hint, state: State) -> None:
    facts = Facts(
        read=True, changed=True, restarts=1, pending=True, health_changed=True,
        health_seen=True, mps_results=True, dra_disturbed=True,
    )  # fmt: skip
    step = plan_step(hint, state, facts)
    if step.trigger is not None:
        assert (state, step.trigger) not in IGNORED
        assert leads_to(state, step.trigger) is not None
    if step.cause is not None and step.trigger is None:
        assert state in SERVES  # work that moves no state runs only where something is served


def test_leads_to_reads_the_table() -> None:
    assert leads_to(S, Trigger.CONFIG_CHANGED) is R
    assert leads_to(S, Trigger.KUBELET_RESTARTED) is S  # in place
    assert leads_to(R, Trigger.CONFIG_CHANGED) is None  # ignored: the reconfiguration reads it
    with pytest.raises(LookupError):
        leads_to(N, Trigger.INITIALIZED)  # depends on a condition
