"""The one consumer task: drain hints, re-read inputs, apply the difference, report.

Level-based, like a Kubernetes controller: a hint says only that something
*may* have changed. The loop re-reads the config and the devices, builds the
desired plan, compares its digest with the applied one and applies only the
difference. Outcomes become lifecycle triggers (`initialized`, `failed`,
`reconfigured`) so the lifecycle history explains every step.

Errors are sorted in two: transient ones (NVML not ready, kubelet not
answering) are retried with capped backoff; permanent ones (an invalid config)
wait for an input to change. An invalid config never replaces a good one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from devices.library import DeviceLibrary
from foundation.backoff import Backoff
from foundation.errors import PluginError
from kubelet.errors import RegistrationError, ServeError
from kubelet.fleet import PluginFleet
from reconciler.health import HealthMonitor
from reconciler.inputs import ConfigInputs
from reconciler.mailbox import Hint, Mailbox
from reconciler.mps_gate import MpsGate
from reconciler.node import NodeDevices
from reconciler.plan import Plan, build_plan
from resources.allocation import Allocator
from settings import ConfigError, EffectiveConfig
from settings.announce import announce
from states.health import HealthPolicyError
from states.machine import Lifecycle
from states.names import State, Trigger

HEARTBEAT_SECONDS = 5.0
# How often a serving plan re-checks that its MPS daemons still answer.
MPS_CHECK_SECONDS = 5.0
DEFAULT_BACKOFF = Backoff(initial=1.0, cap=60.0)

_INPUT_TRIGGERS = {
    Hint.RELOAD: Trigger.RELOAD_REQUESTED,
    Hint.CONFIG: Trigger.CONFIG_CHANGED,
    Hint.LABEL: Trigger.NODE_LABEL_CHANGED,
}


class FatalInitError(Exception):
    """Start-up failed and `--fail-on-init-error` asks the process to exit 1."""


@dataclass(frozen=True)
class Inputs:
    """How the loop reads its inputs; replaced by fakes in unit tests."""

    config: ConfigInputs
    open_library: Callable[[EffectiveConfig], DeviceLibrary]
    make_fleet: Callable[[EffectiveConfig], PluginFleet]
    health: HealthMonitor | None = None


class Reconciler:
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
    ) -> None:
        self.inputs = inputs
        self.mailbox = mailbox
        self.lifecycle = lifecycle
        self.backoff = backoff
        self.fail_on_init_error = fail_on_init_error
        self.on_change = on_change
        self.on_reconcile = on_reconcile
        self.plan: Plan | None = None
        self.config: EffectiveConfig | None = None
        self.fleet: PluginFleet | None = None
        self.heartbeat = time.monotonic()
        self.node = NodeDevices(inputs.open_library)
        self._attempt = 0
        self._timers: dict[Hint, asyncio.TimerHandle] = {}
        self._mps = MpsGate()

    # ---- the loop -------------------------------------------------------

    async def start(self) -> None:
        """The first start-up attempt.

        Raises:
            FatalInitError: it failed and fail-on-init-error is set.
        """
        await self._initialize(first=True)
        self.on_change(self)

    async def run(self) -> None:
        """Handle hints until shutdown."""
        while not self.stopped:
            hints = await self.mailbox.drain(timeout=HEARTBEAT_SECONDS)
            self.heartbeat = time.monotonic()
            for hint, payload in hints:
                started = time.perf_counter()
                result = await self._handle(hint, payload)
                if result is not None:
                    self.on_reconcile(result, time.perf_counter() - started)
                self.on_change(self)
                if self.stopped:
                    break

    @property
    def stopped(self) -> bool:
        return self.lifecycle.state is State.STOPPED

    async def _handle(self, hint: Hint, payload: object) -> str | None:
        """Act on one hint; returns the reconcile's result, None when nothing ran."""
        if hint is Hint.SHUTDOWN:
            self.lifecycle.fire(Trigger.SHUTDOWN)
            await self.close()
            return None
        if hint is Hint.KUBELET:
            live = self.lifecycle.state in (State.SERVING, State.MPS_STARTING)
            if live and self.fleet is not None and not self.fleet.kubelet_replaced():
                return None  # the same kubelet we registered with: nothing to do
            if self.lifecycle.fire(Trigger.KUBELET_RESTARTED) is None:
                return None
            if self.lifecycle.state is State.INIT:
                return await self._initialize()
            return await self._reconnect()
        if hint is Hint.LABEL:
            value = payload if isinstance(payload, str) else None
            if value == self.inputs.config.label_value and self.plan is not None:
                return None
            self.inputs.config.label_value = value
        if hint in _INPUT_TRIGGERS:
            desired = None
            if hint is not Hint.RELOAD and self.lifecycle.state is State.SERVING:
                # Watches fire for touches that change nothing; level-based means
                # such a hint leaves no trace. SIGHUP is always recorded.
                desired = self._desired_or_none()
                if desired is not None and self._unchanged(desired) and not self.lifecycle.reason:
                    return None  # (a standing reason, e.g. a rejected edit, needs clearing)
            if self.lifecycle.fire(_INPUT_TRIGGERS[hint]) is None:
                return None
            if self.lifecycle.state is State.INIT:
                return await self._initialize()
            if self.lifecycle.state is State.RECONFIGURING:
                return await self._reconfigure(desired)
            return None
        if hint is Hint.RETRY and self.lifecycle.fire(Trigger.RETRY) is not None:
            return await self._initialize()
        if hint is Hint.HEALTH:
            return await self._health()
        if hint is Hint.MPS:
            return await self._check_mps()
        return None

    # ---- steps ----------------------------------------------------------

    def _fleet_for(self, config: EffectiveConfig) -> PluginFleet:
        fleet = self.fleet
        if fleet is None or str(fleet.kubelet_socket) != config.flags.kubelet_socket:
            fleet = self.inputs.make_fleet(config)
            self.fleet = fleet
        return fleet

    def _desired(self) -> Plan:
        config = self.inputs.config.load()
        self.fail_on_init_error = config.flags.fail_on_init_error
        if self.plan is None:
            self.config = config
        if self.inputs.health is not None:
            try:
                self.inputs.health.policy(config)
            except HealthPolicyError as err:  # the file's `health` section is invalid
                raise ConfigError(str(err), origin=config.config_path or "") from err
        return build_plan(config, self.node.inventory(config))

    async def _initialize(self, *, first: bool = False) -> str:
        try:
            plan = self._desired()
            self.node.write_cdi(plan, self.plan)
            await self._follow_health(plan)
            await self._fleet_for(plan.config).apply(self._served(plan))
        except PluginError as err:
            serving_error = isinstance(err, ServeError | RegistrationError)
            if first and not serving_error and self.fail_on_init_error:
                raise FatalInitError(str(err)) from err
            self._fail(err)
            return "error"
        self._applied(plan)
        self.lifecycle.fire(
            Trigger.INITIALIZED,
            needs_mps=plan.needs_mps,
            detail={"digest": plan.digest, "resources": plan.resource_names},
        )
        if plan.needs_mps:
            self.mailbox.post(Hint.MPS)
        return "applied"

    def _desired_or_none(self) -> Plan | None:
        try:
            return self._desired()
        except PluginError:
            return None  # the full reconcile reports it

    def _unchanged(self, desired: Plan) -> bool:
        return bool(
            self.plan is not None
            and desired.digest == self.plan.digest
            and self.fleet is not None
            and self.fleet.all_registered
        )

    async def _reconfigure(self, desired: Plan | None = None) -> str:
        previous = self.plan
        try:
            plan = desired or self._desired()
        except ConfigError as err:
            self.lifecycle.fire(
                Trigger.FAILED,
                reason=f"new config rejected, still serving the previous one: {err}",
                detail={"permanent": True, "error": type(err).__name__},
            )
            return "rejected"
        except PluginError as err:
            self._fail(err, retry_hint=Hint.CONFIG)
            return "error"
        fleet = self._fleet_for(plan.config)
        try:
            if previous is not None and plan.digest == previous.digest:
                if not fleet.all_registered:
                    await fleet.register_pending()
                detail: dict[str, object] = {"changed": False, "digest": plan.digest}
            else:
                self.node.write_cdi(plan, previous)
                await self._follow_health(plan)
                report = await fleet.apply(self._served(plan))
                detail = {
                    "changed": True,
                    "from": previous.digest if previous else None,
                    "to": plan.digest,
                    "started": report.started,
                    "stopped": report.stopped,
                    "restarted": report.restarted,
                    "updated": report.updated,
                }
        except PluginError as err:
            self._applied(plan)
            self._fail(err, retry_hint=Hint.CONFIG)
            return "error"
        self._applied(plan)
        self.lifecycle.fire(Trigger.RECONFIGURED, needs_mps=plan.needs_mps, detail=detail)
        if plan.needs_mps:
            self.mailbox.post(Hint.MPS)
        return "applied" if detail["changed"] else "unchanged"

    async def _reconnect(self) -> str:
        if self.fleet is None:
            return "unchanged"
        try:
            await self.fleet.reconnect()
        except PluginError as err:
            logger.warning("re-registration after kubelet restart failed: {err}", err=str(err))
            self._schedule(Hint.KUBELET, self.backoff.delay(self._attempt))
            self._attempt += 1
            return "error"
        self._attempt = 0
        return "reregistered"

    async def _follow_health(self, plan: Plan) -> None:
        health = self.inputs.health
        if health is not None and self.node.library is not None:
            await health.follow(self.node.library, plan.inventory, plan.config)
            self._schedule_health()

    def _served(self, plan: Plan) -> tuple[Allocator, ...]:
        """What the kubelet should see now: health applied, MPS resources gated."""
        allocators = self._mps.admitted(plan)
        health = self.inputs.health
        return allocators if health is None else health.decorate(allocators)

    async def _check_mps(self) -> str | None:
        plan, fleet = self.plan, self.fleet
        if plan is None or fleet is None or not plan.needs_mps:
            return None
        state = self.lifecycle.state
        if state not in (State.MPS_STARTING, State.SERVING):
            return None
        problem = await self._mps.probe(plan)
        if problem is None:
            self._schedule(Hint.MPS, MPS_CHECK_SECONDS)
            if state is State.SERVING:
                return None
            self._mps.ready = True
            self._attempt = 0
            try:
                await fleet.apply(self._served(plan))
            except PluginError as err:
                self._mps.ready = False
                return self._mps_retry(str(err))
            self.lifecycle.fire(Trigger.MPS_READY, detail={"resources": plan.mps_resources})
            return "applied"
        if state is State.SERVING:
            # The daemon went away: take its resources back rather than leave
            # the kubelet scheduling pods that cannot start.
            self._mps.ready = False
            self.lifecycle.fire(Trigger.MPS_LOST, reason=problem)
            with contextlib.suppress(PluginError):
                await fleet.apply(self._served(plan))
        return self._mps_retry(problem)

    def _mps_retry(self, problem: str) -> str:
        delay = self.backoff.delay(self._attempt)
        self._attempt += 1
        self.lifecycle.fire(
            Trigger.RETRY,
            reason=f"waiting for the MPS daemon: {problem} (retrying in {delay:g}s)",
            detail={"retry_in_seconds": delay},
        )
        self._schedule(Hint.MPS, delay)
        return "error"

    def _schedule_health(self) -> None:
        health = self.inputs.health
        delay = None if health is None else health.next_due_in()
        if delay is not None:
            self._schedule(Hint.HEALTH, delay)

    async def _health(self) -> str | None:
        health = self.inputs.health
        if health is None:
            return None
        changes = health.drain()
        self._schedule_health()
        if not any(change.kubelet_changed for change in changes):
            return None
        detail = {c.uuid: f"{c.source} -> {c.dest}: {c.reason}" for c in changes}
        if self.lifecycle.fire(Trigger.DEVICE_HEALTH_CHANGED, detail=detail) is None:
            return None  # not serving: the next plan applies health as it is then
        if self.plan is None or self.fleet is None:
            return None
        try:
            await self.fleet.apply(self._served(self.plan))
        except PluginError as err:
            logger.warning("publishing a health change failed: {err}", err=str(err))
            return "error"
        return "health"

    async def close(self) -> None:
        """Stop everything the loop started; safe to call more than once."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self.inputs.health is not None:
            await self.inputs.health.stop()
        if self.fleet is not None:
            await self.fleet.stop_all()
        self.node.shutdown()

    # ---- outcomes -------------------------------------------------------

    def _applied(self, plan: Plan) -> None:
        announce(plan.config, self.plan.config if self.plan is not None else None)
        self.plan = plan
        self.config = plan.config
        self.inputs.config.accepted()
        self._attempt = 0
        if not plan.allocators:
            logger.info("no GPUs found on this node: serving no resources")

    def _fail(self, err: PluginError, *, retry_hint: Hint = Hint.RETRY) -> None:
        detail: dict[str, object] = {"permanent": err.permanent, "error": type(err).__name__}
        if err.permanent:
            reason = f"{err} (waiting for a config change, a node label change or SIGHUP)"
        else:
            delay = self.backoff.delay(self._attempt)
            self._attempt += 1
            detail["retry_in_seconds"] = delay
            self._schedule(retry_hint, delay)
            reason = f"{err} (retrying in {delay:g}s)"
        self.lifecycle.fire(Trigger.FAILED, reason=reason, detail=detail)

    def _schedule(self, hint: Hint, delay: float) -> None:
        old = self._timers.pop(hint, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[hint] = loop.call_later(delay, self.mailbox.post, hint)
