"""One pass: read the inputs if asked, converge the actuators in order, conclude.

Whatever caused it, a pass is the same: a reading (fresh, or the one the
hint's facts were sensed from) is applied on the loop's thread, every
actuator converges what is pending and due (`reconciler.actuators.order`), and the
pure `conclude()` turns what the pass found into one outcome trigger, which
the loop fires. Reading failures are settled on the inputs' own key: a
permanent one (an invalid config) waits for an input to change instead of
a timer.
"""

from __future__ import annotations

from dataclasses import replace

from foundation.errors import PluginError
from foundation.outcome import Kind, Outcome, Retries
from reconciler.actuators.order import Actuators
from reconciler.core.conclude import Cause, Conclusion, Pass, conclude
from reconciler.plan.intake import Intake
from reconciler.plan.reading import Reading
from states.names import State

NOT_MPS = frozenset(Kind) - {Kind.MPS}
MPS = frozenset({Kind.MPS})


class PassRunner:
    """Runs passes over the loop's intake, actuators and retry schedule."""

    def __init__(self, intake: Intake, actuators: Actuators, retries: Retries) -> None:
        self.intake = intake
        self.actuators = actuators
        self.retries = retries

    async def run(
        self,
        state: State,
        cause: Cause,
        *,
        read: bool = False,
        reading: Reading | None = None,
        probed: list[Outcome],
    ) -> Conclusion:
        previous = self.intake.desired
        if read:
            reading = await self.intake.read()
        error = None if reading is None else self._apply(reading)
        outcomes = list(probed)
        desired = self.intake.desired
        if desired is not None:
            outcomes += await self.actuators.converge(desired)
        done = Pass(
            state=state,
            cause=cause,
            outcomes=tuple(outcomes),
            read_error=error,
            pending=self.retries.pending(NOT_MPS),
            retry_in=self.retries.next_due_in(NOT_MPS),
            mps_waiting=self.actuators.mps_waiting(desired),
            mps_retry_in=self.retries.next_due_in(MPS),
            previous=previous,
            desired=desired,
        )
        conclusion = conclude(done)
        if conclusion.trigger is None and not any(o.changes or o.error for o in outcomes):
            return replace(conclusion, result=None)  # nothing was done: not a reconcile
        return conclusion

    def _apply(self, reading: Reading) -> PluginError | None:
        error = self.intake.apply(reading)
        # A permanent error is not retried on a timer: it waits for an input to change.
        retried = None if error is None or error.permanent else error
        self.retries.settle(Outcome(Kind.INPUTS, error=retried))
        return error
