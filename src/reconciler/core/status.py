"""The loop and the parts it drives, as one frozen value for `/state`.

Each part keeps its own status as a frozen value that is replaced, never
changed, when the part changes: the fleet's `ResourceStatus` tuple, the
health monitor's `HealthView`, the lifecycle's history, the supervisor's
`RunnableStatus` tuple. `LoopStatus` only
gathers them, so `reconciler.observation.snapshot` can compose `/state` from values, and
reuse what it rendered for a part that is the same object as last time.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.actuators.dra_status import DraStatus
from reconciler.actuators.fleet import ResourceStatus
from reconciler.plan.desired import Desired
from reconciler.plan.inputs import ConfigChoice
from states.health_status import HealthView
from states.history import TransitionRecord
from states.names import State
from states.runnable import RunnableStatus


@dataclass(frozen=True)
class LoopStatus:
    state: State
    since: str
    reason: str | None
    history: tuple[TransitionRecord, ...]
    desired: Desired | None
    choice: ConfigChoice
    resources: tuple[ResourceStatus, ...]
    health: HealthView | None
    dra: DraStatus | None
    mailbox_depth: int
    fail_on_init_error: bool
    # Every thread and long-lived task, from the supervisor (`reconciler.app.serve` adds them).
    runnables: tuple[RunnableStatus, ...] = ()
