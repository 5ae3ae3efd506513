"""The loop's sense functions: the facts of one hint, gathered before anything is decided.

One small function per kind of hint reads what that hint may have changed
and returns it as `Facts` (`reconciler.core.steps`), for the pure `plan_step()`
to decide on. Sensing may take a value the loop then owns (a fresh reading
of the inputs, the health machine's next step, MPS probe results applied to
the gate, the kubelet restarts counted by the fleet's watch), but it fires
no trigger and runs no pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loguru import logger

from foundation.outcome import Key, Kind, Outcome, Retries
from reconciler.actuators.dra import DraSide
from reconciler.actuators.health import HealthMonitor
from reconciler.actuators.mps_gate import MpsProbes
from reconciler.actuators.order import Actuators
from reconciler.core.conclude import Result
from reconciler.core.mailbox import Hint, Mailbox
from reconciler.core.steps import INPUT_TRIGGERS, Facts
from reconciler.plan.intake import Intake
from reconciler.plan.reading import Reading
from states.machine import Lifecycle
from states.table import SERVES

# How soon the health step runs again after a failure.
HEALTH_RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class Sensed:
    """The facts of a hint, and what was taken while gathering them."""

    facts: Facts = field(default_factory=Facts)
    reading: Reading | None = None  #: a fresh read of the inputs, for the pass to apply
    probed: list[Outcome] = field(default_factory=list)  #: MPS probe results, as outcomes
    result: Result | None = None  #: a failure to count even when no pass follows


@dataclass(frozen=True)
class LoopParts:
    """The loop's parts the sense functions read and take from, on the loop's thread only."""

    intake: Intake
    lifecycle: Lifecycle
    actuators: Actuators
    retries: Retries
    mailbox: Mailbox
    probes: MpsProbes
    health: HealthMonitor | None
    dra: DraSide | None
    reason_pending: Callable[[], bool]  #: the lifecycle's reason names failing keys


class Senses:
    """One sense function per kind of hint, over the parts the loop drives."""

    def __init__(self, parts: LoopParts, on_kubelet_restarts: Callable[[int], None]) -> None:
        self._loop = parts
        self._on_kubelet_restarts = on_kubelet_restarts  # the restart metric
        self._lists = 0  # the slice watch's lists, as last sensed

    async def sense(self, hint: Hint, payload: object) -> Sensed:
        value = payload if isinstance(payload, str) else None
        if hint in INPUT_TRIGGERS:
            return await self._inputs(hint, value)
        if hint is Hint.KUBELET:
            return self._kubelet()
        if hint is Hint.RETRY:
            return self._retry()
        if hint in (Hint.HEALTH, Hint.CORDON):
            return await self._health(hint, value)
        if hint is Hint.MPS:
            return self._mps()
        if hint is Hint.DRA:
            return self._dra()
        return Sensed()

    async def _inputs(self, hint: Hint, label: str | None) -> Sensed:
        intake, state = self._loop.intake, self._loop.lifecycle.state
        if hint is Hint.LABEL and intake.same_label(label):
            return Sensed(Facts(same_label=True))
        if hint is Hint.RELOAD or state not in SERVES:
            return Sensed()  # SIGHUP is always recorded; elsewhere the pass reads
        reading = await intake.read()
        changed = reading.error is not None or intake.differs(reading)
        facts = Facts(read=True, said_already=intake.said_already(reading), changed=changed)
        return Sensed(facts, reading)

    def _kubelet(self) -> Sensed:
        """A new kubelet, or one of our sockets gone; restarts are counted by the fleet's watch."""
        fleet, state = self._loop.actuators.fleet, self._loop.lifecycle.state
        kubelet = fleet.kubelet.look()
        restarts = fleet.kubelet.take_restarts()
        if restarts:
            self._on_kubelet_restarts(restarts)
        lost = tuple(fleet.sockets_disturbed()) if state in SERVES else ()
        if lost and not restarts:
            logger.warning(
                "plugin socket of {resources} deleted underneath the plugin: served again",
                resources=", ".join(lost),
            )
        facts = Facts(
            restarts=restarts,
            sockets_lost=lost,
            registered_elsewhere=fleet.registered_elsewhere(kubelet),
        )
        return Sensed(facts)

    def _retry(self) -> Sensed:
        loop = self._loop
        pending = loop.retries.pending(frozenset(Kind) - {Kind.MPS})
        read_again = Key(Kind.INPUTS) in pending or loop.intake.rejected is not None
        facts = Facts(
            pending=bool(pending), reason_pending=loop.reason_pending(), read_again=read_again
        )
        return Sensed(facts)

    async def _health(self, hint: Hint, cordon: str | None) -> Sensed:
        loop = self._loop
        health = loop.health
        if health is None:
            return Sensed()
        if hint is Hint.CORDON:
            health.want_cordon(cordon)  # applied by the health step
        before = health.status()
        step = await health.step(loop.intake.nvml.call)
        delay = HEALTH_RETRY_SECONDS if step.failed else health.next_due_in()
        if delay is not None:
            loop.mailbox.post_later(Hint.HEALTH, delay)
        facts = Facts(
            health_changed=any(change.kubelet_changed for change in step.changes),
            health_detail={c.uuid: f"{c.source} -> {c.dest}: {c.reason}" for c in step.changes},
            health_seen=health.status() is not before,
        )
        return Sensed(facts, result=Result.ERROR if step.failed else None)

    def _mps(self) -> Sensed:
        """MPS probe results are in: admitted or withdrawn at the gate, for the pass to follow."""
        loop = self._loop
        results, desired = loop.probes.take(), loop.intake.desired
        if not results or desired is None or loop.lifecycle.state not in SERVES:
            return Sensed()
        probed = loop.actuators.mps.apply(desired.resources, results)
        for outcome in probed:
            loop.retries.settle(outcome, desired.resources[outcome.name].mps_key)
        return Sensed(Facts(mps_results=True), probed=probed)

    def _dra(self) -> Sensed:
        """The API's slices or a DRA socket moved outside a pass."""
        dra, state = self._loop.dra, self._loop.lifecycle.state
        if dra is None:
            return Sensed()
        disturbed = state in SERVES and dra.sockets_disturbed()
        if disturbed:
            logger.warning("a DRA socket was deleted underneath the plugin: serving it again")
        lists = 0 if dra.parts is None else dra.parts.publisher.lists
        back, self._lists = lists > self._lists, lists
        return Sensed(Facts(dra_disturbed=disturbed, api_back=back))
