"""The one consumer task: a hint in, one pass, one lifecycle trigger out.

Level-based, like a Kubernetes controller: a hint says only that something
*may* have changed. Handling one is three steps, each a table: sense
functions gather the hint's facts and the pure `plan_step()` decides the
input trigger and the pass (`reconciler.core.sense`, `reconciler.core.steps`); the
pass reads where asked and converges the actuators in their declared order,
each key on its own backoff (`reconciler.core.passes`, `reconciler.actuators.order`);
the pure `conclude()` turns what it found into one outcome trigger.

The reason shown while keys fail is derived from them whenever it is shown,
like a status condition, so it clears itself when they land. Nothing here
writes state from another thread, and a stop cuts a pass in progress short.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from foundation.backoff import Backoff
from foundation.outcome import Outcome, Retries
from reconciler.actuators.dra import DraSide
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.health import HealthMonitor
from reconciler.actuators.mps_gate import MpsProbes
from reconciler.actuators.order import Actuators
from reconciler.core.conclude import Cause, Conclusion, Result, pending_reason
from reconciler.core.mailbox import Hint, Mailbox
from reconciler.core.passes import NOT_MPS, PassRunner
from reconciler.core.sense import LoopParts, Senses
from reconciler.core.status import LoopStatus
from reconciler.core.steps import plan_step
from reconciler.plan.desired import Desired
from reconciler.plan.inputs import ConfigInputs
from reconciler.plan.intake import Intake
from reconciler.plan.node import OpenLibrary
from reconciler.plan.reading import READ_DEADLINE_SECONDS, Reading
from states.machine import Lifecycle
from states.names import State, Trigger
from states.table import SERVES

HEARTBEAT_SECONDS = 5.0
DEFAULT_BACKOFF = Backoff(initial=1.0, cap=60.0)
# How long a stop lets the step in progress finish before cutting it short.
STOP_GRACE_SECONDS = 1.0


class FatalInitError(Exception):
    """Start-up failed and `--fail-on-init-error` asks the process to exit 1."""


@dataclass(frozen=True)
class Inputs:
    """Where the loop's inputs come from; replaced by fakes in tests."""

    config: ConfigInputs
    open_library: OpenLibrary
    fleet: PluginFleet
    health: HealthMonitor | None = None
    dra: DraSide | None = None


class Reconciler:
    """Owns the hints, the passes, the per-key retries and the timers; only its task fires
    lifecycle triggers (the inputs as read are the `Intake`'s, the node's the actuators')."""

    def __init__(
        self,
        *,
        inputs: Inputs,
        mailbox: Mailbox,
        lifecycle: Lifecycle,
        backoff: Backoff = DEFAULT_BACKOFF,
        fail_on_init_error: bool = True,
        on_change: Callable[[Reconciler], None] = lambda _: None,
        on_reconcile: Callable[[str, float], None] = lambda result, seconds: None,
        on_kubelet_restarts: Callable[[int], None] = lambda count: None,
        read_deadline: float = READ_DEADLINE_SECONDS,
    ) -> None:
        self.inputs = inputs
        self.mailbox = mailbox
        self.lifecycle = lifecycle
        self._fail_on_init_error = fail_on_init_error  # until a config says otherwise
        self.on_change = on_change
        self.on_reconcile = on_reconcile
        self.retries = Retries(backoff)
        self.probes = MpsProbes(lambda: mailbox.post(Hint.MPS))
        self.intake = Intake(
            config=inputs.config, open_library=inputs.open_library, deadline=read_deadline
        )
        self.actuators = Actuators(
            fleet=inputs.fleet, health=inputs.health, retries=self.retries, dra=inputs.dra,
            probes=self.probes, library=lambda: self.intake.library,
        )  # fmt: skip
        self.passes = PassRunner(self.intake, self.actuators, self.retries)
        self.on_progress: Callable[[Reconciler], None] = lambda _: None  # mid-pass `/state`
        self.actuators.servers.on_first_registration = lambda: self.on_progress(self)
        parts = LoopParts(
            self.intake, lifecycle, self.actuators, self.retries, mailbox, self.probes,
            inputs.health, inputs.dra, lambda: self.reason_pending,
        )  # fmt: skip
        self.senses = Senses(parts, on_kubelet_restarts)
        self.heartbeat = time.monotonic()
        self.reason_pending = False  # the lifecycle's reason names failing keys
        self._closed = False

    @property
    def desired(self) -> Desired | None:
        return self.intake.desired

    @property
    def fail_on_init_error(self) -> bool:
        desired = self.desired
        return (
            self._fail_on_init_error if desired is None else desired.config.flags.fail_on_init_error
        )

    @property
    def stopped(self) -> bool:
        return self.lifecycle.state is State.STOPPED

    def reason(self) -> str | None:
        """The reason shown: the failing keys as they are now, or the lifecycle's own."""
        if self.reason_pending and self.lifecycle.state in SERVES:
            pending = self.retries.pending(NOT_MPS)
            return pending_reason(pending, self.retries.next_due_in(NOT_MPS)) if pending else None
        return self.lifecycle.reason

    def status(self) -> LoopStatus:
        """What `/state` shows of the loop and the parts it drives, as frozen values."""
        lifecycle, fleet, health = self.lifecycle, self.actuators.fleet, self.inputs.health
        dra, desired = self.inputs.dra, self.desired
        return LoopStatus(
            state=lifecycle.state,
            since=lifecycle.since,
            reason=self.reason(),
            history=lifecycle.history.snapshot(),
            desired=desired,
            choice=self.intake.choice,
            resources=fleet.status(),
            health=None if health is None else health.status(),
            dra=None if dra is None else dra.status(None if desired is None else desired.dra),
            mailbox_depth=self.mailbox.depth,
            fail_on_init_error=self.fail_on_init_error,
        )

    # ---- the loop -------------------------------------------------------

    async def start(self) -> None:
        """The first start-up attempt.

        Raises:
            FatalInitError: it failed and fail-on-init-error is set.
        """
        await self._pass(Cause.START, read=True, first=True)
        self._schedule_mps()
        self.on_change(self)

    async def run(self) -> None:
        """Handle hints until shutdown."""
        while not self.stopped:
            hints = await self.mailbox.drain(timeout=HEARTBEAT_SECONDS)
            self.heartbeat = time.monotonic()
            for hint, payload in hints:
                started = time.perf_counter()
                result = await self._handle_unless_stopping(hint, payload)
                if result is not None:
                    self.on_reconcile(str(result), time.perf_counter() - started)
                self.on_change(self)
                if self.stopped or self.mailbox.waiting(Hint.SHUTDOWN):
                    break

    async def _handle_unless_stopping(self, hint: Hint, payload: object) -> Result | None:
        """Handle one hint; a stop posted meanwhile cuts it short (the stop is handled next)."""
        if hint is Hint.SHUTDOWN:
            self.lifecycle.fire(Trigger.SHUTDOWN)
            await self.close()
            return None
        return await self.mailbox.unless_stopping(self._handle(hint, payload), STOP_GRACE_SECONDS)

    async def _handle(self, hint: Hint, payload: object) -> Result | None:
        """Sense, plan the step, fire its input trigger, run its pass."""
        seen = await self.senses.sense(hint, payload)
        step = plan_step(hint, self.lifecycle.state, seen.facts)
        result = None
        if step.trigger is not None:
            detail = dict(step.detail)
            if step.trigger is Trigger.RETRY:
                detail["pending"] = [str(key) for key in self.retries.pending(NOT_MPS)]
            fired = self.lifecycle.fire(step.trigger, detail=detail) is not None
        if step.cause is not None and (step.trigger is None or fired):
            reading = seen.reading if step.use_reading else None
            done = await self._pass(step.cause, read=step.read, reading=reading, probed=seen.probed)
            result = done.result
        self._schedule_mps()
        return result or seen.result

    # ---- one pass -------------------------------------------------------

    async def _pass(
        self,
        cause: Cause,
        *,
        read: bool = False,
        reading: Reading | None = None,
        probed: list[Outcome] | None = None,
        first: bool = False,
    ) -> Conclusion:
        """Step 2 and 3: one pass (`reconciler.core.passes`), then its trigger fired."""
        conclusion = await self.passes.run(
            self.lifecycle.state, cause, read=read, reading=reading, probed=probed or []
        )
        if first and self.fail_on_init_error and conclusion.fatal is not None:
            raise FatalInitError(str(conclusion.fatal))
        if conclusion.trigger is not None:
            fired = self.lifecycle.fire(
                conclusion.trigger,
                reason=conclusion.reason,
                needs_mps=conclusion.needs_mps,
                serves_nothing=conclusion.serves_nothing,
                detail=conclusion.detail,
            )
            if fired is not None:
                self.reason_pending = conclusion.reports_pending
        self.mailbox.post_later(Hint.RETRY, self.retries.next_due_in(NOT_MPS))
        if self.actuators.fleet.kubelet.unrecorded:
            self.mailbox.post(Hint.KUBELET)  # a kubelet that came and went during the pass
        return conclusion

    def _schedule_mps(self) -> None:
        """The timer for the next MPS probe (a pass's `mps` step starts the probes)."""
        serving = self.desired if self.lifecycle.state in SERVES else None
        self.mailbox.post_later(
            Hint.MPS, self.probes.next_due_in(serving, self.actuators.mps, self.retries)
        )

    async def close(self) -> None:
        """Stop everything the loop started; safe to call more than once."""
        self.mailbox.cancel_timers()
        await self.probes.stop()
        await self.actuators.close()
        if self._closed:
            return
        self._closed = True
        await self.intake.close()
