"""The one consumer task: a hint in, one pass, one lifecycle trigger out.

Level-based, like a Kubernetes controller: a hint says only that something
*may* have changed. Handling one has three steps, always the same:

1. the hint becomes an input trigger, which the lifecycle table takes or
   ignores (`config_changed`, `kubelet_restarted`, `retry`, ...); an input
   event that changes nothing leaves no trace;
2. one pass: the inputs are read afresh where the hint asks for it (off the
   loop, on the NVML worker, as a value the loop then applies), and the
   actuators converge towards the desired state, each key attempted only
   when it has something to do and, if failing, once it is due on its own
   backoff (`Retries`);
3. `conclude()` turns what the pass found into one outcome trigger.

Nothing here writes state from another thread: reads return values, MPS
probes run in a task of their own and hand their results over through the
`MPS` hint, and a stop cuts a pass in progress short.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from loguru import logger

from foundation.backoff import Backoff
from foundation.errors import PluginError
from foundation.outcome import Key, Kind, Outcome, Retries
from kubelet.fleet import PluginFleet
from reconciler.actuators import Actuators
from reconciler.conclude import Cause, Conclusion, Pass, Result, conclude
from reconciler.desired import Desired
from reconciler.dra import SLICES, DraSide
from reconciler.health import HealthMonitor
from reconciler.inputs import ConfigInputs
from reconciler.intake import Intake
from reconciler.mailbox import Hint, Mailbox
from reconciler.mps_gate import MpsProbes, probes_due
from reconciler.node import OpenLibrary
from reconciler.reading import READ_DEADLINE_SECONDS, Reading
from reconciler.status import LoopStatus
from settings import EffectiveConfig
from states.machine import Lifecycle
from states.names import State, Trigger

HEARTBEAT_SECONDS = 5.0
DEFAULT_BACKOFF = Backoff(initial=1.0, cap=60.0)
# How long a stop lets the step in progress finish before cutting it short.
STOP_GRACE_SECONDS = 1.0
NOT_MPS = frozenset(Kind) - {Kind.MPS}
MPS = frozenset({Kind.MPS})

_INPUT_TRIGGERS = {
    Hint.RELOAD: Trigger.RELOAD_REQUESTED,
    Hint.CONFIG: Trigger.CONFIG_CHANGED,
    Hint.LABEL: Trigger.NODE_LABEL_CHANGED,
}
_LIVE = (State.SERVING, State.MPS_STARTING)


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
    """Owns the plugin's progress towards its desired state: the hints, the passes, the triggers.

    It holds the per-key retry schedule and its timers; the inputs as last
    read are the `Intake`'s, what the node really has is the actuators'.
    Only this object's task fires lifecycle triggers.
    """

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
        self.on_kubelet_restarts = on_kubelet_restarts  # the restart metric
        self.retries = Retries(backoff)
        self.actuators = Actuators(
            fleet=inputs.fleet, health=inputs.health, retries=self.retries, dra=inputs.dra
        )
        self.intake = Intake(
            config=inputs.config,
            open_library=inputs.open_library,
            deadline=read_deadline,
        )
        self.probes = MpsProbes(lambda: mailbox.post(Hint.MPS))
        self.heartbeat = time.monotonic()
        self._reported_pending = False  # the lifecycle reason names keys still failing
        self._closed = False

    @property
    def desired(self) -> Desired | None:
        return self.intake.desired

    @property
    def config(self) -> EffectiveConfig | None:
        return None if self.desired is None else self.desired.config

    @property
    def fail_on_init_error(self) -> bool:
        config = self.config
        return self._fail_on_init_error if config is None else config.flags.fail_on_init_error

    @property
    def stopped(self) -> bool:
        return self.lifecycle.state is State.STOPPED

    def status(self) -> LoopStatus:
        """What `/state` shows of the loop and the parts it drives, as frozen values."""
        lifecycle, fleet, health = self.lifecycle, self.actuators.fleet, self.inputs.health
        return LoopStatus(
            state=lifecycle.state,
            since=lifecycle.since,
            reason=lifecycle.reason,
            history=lifecycle.history.snapshot(),
            desired=self.desired,
            choice=self.intake.choice,
            resources=fleet.status(),
            health=None if health is None else health.status(),
            dra=None if self.inputs.dra is None else self.inputs.dra.status(),
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
        """Step 1 of handling a hint: the input trigger, and which pass follows."""
        value = payload if isinstance(payload, str) else None
        if hint is Hint.LABEL and self.intake.same_label(value):
            return None
        if hint is Hint.CORDON and self.inputs.health is not None:
            self.inputs.health.want_cordon(value)  # applied by the health step
        handlers = {
            Hint.KUBELET: self._kubelet_changed,
            Hint.RETRY: self._retry,
            Hint.HEALTH: self._health,
            Hint.CORDON: self._health,
            Hint.MPS: self._mps,
            Hint.DRA: self._published,
        }
        handler = handlers.get(hint)
        result = await (handler() if handler else self._input_changed(hint))
        self._schedule_mps()
        return result

    async def _input_changed(self, hint: Hint) -> Result | None:
        reading: Reading | None = None
        if hint is not Hint.RELOAD and self.lifecycle.state in _LIVE:
            # Watches fire for touches that change nothing; level-based means
            # such a hint leaves no trace. SIGHUP is always recorded.
            reading = await self.intake.read()
            if self.intake.said_already(reading):
                return None  # the same rejected content: said once already
            if reading.error is None and not self.intake.differs(reading):
                # Drift nobody knows about yet (a spec file deleted underneath)
                # is repaired without calling it a change.
                return (await self._pass(Cause.DRIFT, reading=reading)).result
        if self.lifecycle.fire(_INPUT_TRIGGERS[hint]) is None:
            return None
        if self.lifecycle.state is State.INIT:
            return (await self._pass(Cause.START, read=True)).result
        if self.lifecycle.state is State.RECONFIGURING:
            return (await self._pass(Cause.INPUT, reading=reading, read=reading is None)).result
        return None

    async def _kubelet_changed(self) -> Result | None:
        """A new kubelet, or one of our sockets gone; restarts are counted by the fleet's watch."""
        fleet, state = self.actuators.fleet, self.lifecycle.state
        kubelet = fleet.kubelet.look()
        restarts = fleet.kubelet.take_restarts()
        if restarts:
            self.on_kubelet_restarts(restarts)
        lost = fleet.sockets_disturbed() if state in _LIVE else []
        if not (restarts or lost or fleet.registered_elsewhere(kubelet)):
            return None  # the same kubelet, our own sockets intact: nothing to do
        if state is State.BLOCKED_ON_ERROR:
            if self.lifecycle.fire(Trigger.KUBELET_RESTARTED, detail={"restarts": restarts}):
                return (await self._pass(Cause.START, read=True)).result
            return None
        if state not in _LIVE:
            return None
        if restarts:
            self.lifecycle.fire(Trigger.KUBELET_RESTARTED, detail={"restarts": restarts})
        done = await self._pass(Cause.KUBELET)
        if lost and not restarts:
            logger.warning(
                "plugin socket of {resources} deleted underneath the plugin: served again",
                resources=", ".join(lost),
            )
        return done.result

    async def _retry(self) -> Result | None:
        if (
            self.lifecycle.state in _LIVE
            and not self.retries.pending(NOT_MPS)
            and not self._reported_pending
        ):
            return None  # a stale timer: nothing is waiting for it
        pending = [str(key) for key in self.retries.pending(NOT_MPS)]
        if self.lifecycle.fire(Trigger.RETRY, detail={"pending": pending}) is None:
            return None
        if self.lifecycle.state is State.INIT:
            return (await self._pass(Cause.START, read=True)).result
        if self.lifecycle.state in (State.RECONFIGURING, State.MPS_STARTING):
            # Read again when the read is what failed, or while a rejected
            # config stands: the pass must not report it applied.
            again = Key(Kind.INPUTS) in self.retries.pending() or self.intake.rejected is not None
            return (await self._pass(Cause.RETRY, read=again)).result
        return None

    async def _health(self) -> Result | None:
        health = self.inputs.health
        if health is None:
            return None
        step = await health.step(self.intake.nvml.call)
        delay = HEARTBEAT_SECONDS if step.failed else health.next_due_in()
        if delay is not None:
            self.mailbox.post_later(Hint.HEALTH, delay)
        failure = Result.ERROR if step.failed else None
        if not any(change.kubelet_changed for change in step.changes):
            return failure
        detail = {c.uuid: f"{c.source} -> {c.dest}: {c.reason}" for c in step.changes}
        if self.lifecycle.fire(Trigger.DEVICE_HEALTH_CHANGED, detail=detail) is None:
            return failure  # not serving: the next pass applies health as it is then
        done = await self._pass(Cause.HEALTH)
        return failure or done.result

    async def _published(self) -> Result | None:
        """The DRA side moved outside a pass; `/state` follows it after every hint.

        A pass follows only when there is something to do or to record: a DRA
        socket deleted underneath (served again, as a device-plugin socket
        is), the slices landing or failing since the last pass said otherwise,
        or the sockets kept for prepared claims serving none any more.
        """
        dra = self.inputs.dra
        if dra is None or self.lifecycle.state not in _LIVE:
            return None
        if dra.sockets_disturbed():
            logger.warning("a DRA socket was deleted underneath the plugin: serving it again")
            return (await self._pass(Cause.KUBELET)).result
        failing = Key(Kind.DRA, SLICES) in self.retries.pending()
        if not dra.out_of_step(failing):
            return None
        if failing:
            return await self._retry()  # landed: recorded as the retry it saves
        return (await self._pass(Cause.DRIFT)).result

    async def _mps(self) -> Result | None:
        """MPS probe results are in: admit or withdraw their resources, then one pass."""
        results, desired = self.probes.take(), self.desired
        if not results or desired is None or self.lifecycle.state not in _LIVE:
            return None
        probed = self.actuators.mps.apply(desired.resources, results)
        for outcome in probed:
            self.retries.settle(outcome, desired.resources[outcome.name].mps_key)
        return (await self._pass(Cause.MPS, probed=probed)).result

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
        """Step 2 and 3: read if asked, converge, conclude."""
        previous = self.desired
        if read:
            reading = await self.intake.read()
        error = None if reading is None else self._apply(reading)
        outcomes = list(probed or ())
        desired = self.desired
        if desired is not None:
            outcomes += await self.actuators.converge(desired, self.intake.library)
        done = Pass(
            state=self.lifecycle.state,
            cause=cause,
            outcomes=tuple(outcomes),
            read_error=error,
            pending=self.retries.pending(NOT_MPS),
            retry_in=self.retries.next_due_in(NOT_MPS),
            mps_waiting=self.actuators.mps_waiting(desired),
            mps_retry_in=self.retries.next_due_in(MPS),
            previous=previous,
            desired=desired,
            reported_pending=self._reported_pending,
        )
        conclusion = conclude(done)
        if first and self.fail_on_init_error and conclusion.trigger is Trigger.FAILED:
            fatal = error or next(
                (e for k, e in done.pending.items() if k.kind is not Kind.RESOURCE), None
            )
            if fatal is not None:
                raise FatalInitError(str(fatal))
        self._apply_conclusion(conclusion)
        if self.actuators.fleet.kubelet.unrecorded:
            self.mailbox.post(Hint.KUBELET)  # a kubelet that came and went during the pass
        if conclusion.trigger is None and not any(o.changes or o.error for o in outcomes):
            return replace(conclusion, result=None)  # nothing was done: not a reconcile
        return conclusion

    def _apply_conclusion(self, conclusion: Conclusion) -> None:
        if conclusion.trigger is not None:
            fired = self.lifecycle.fire(
                conclusion.trigger,
                reason=conclusion.reason,
                needs_mps=conclusion.needs_mps,
                detail=conclusion.detail,
            )
            if fired is not None:
                self._reported_pending = conclusion.reports_pending
        if conclusion.record_landing:
            self.mailbox.post(Hint.RETRY)  # recorded through `retry`, then `reconfigured`
        self.mailbox.post_later(Hint.RETRY, self.retries.next_due_in(NOT_MPS))

    def _apply(self, reading: Reading) -> PluginError | None:
        error = self.intake.apply(reading)
        # A permanent error is not retried on a timer: it waits for an input to change.
        retried = None if error is None or error.permanent else error
        self.retries.settle(Outcome(Kind.INPUTS, error=retried))
        return error

    # ---- timers ---------------------------------------------------------

    def _schedule_mps(self) -> None:
        """Probe the MPS daemons that are due now; set the timer for the next."""
        desired = self.desired
        if desired is None or not desired.needs_mps or self.lifecycle.state not in _LIVE:
            self.mailbox.post_later(Hint.MPS, None)
            return
        due, wait = probes_due(desired, self.actuators.mps, self.retries, time.monotonic())
        if due:
            self.probes.start(Path(desired.config.flags.mps_container_root), due)
        if wait is not None and not self.probes.running:
            self.mailbox.post_later(Hint.MPS, max(wait, 0.01))

    async def close(self) -> None:
        """Stop everything the loop started; safe to call more than once."""
        self.mailbox.cancel_timers()
        await self.probes.stop()
        await self.actuators.close()
        if self._closed:
            return
        self._closed = True
        await self.intake.close()
