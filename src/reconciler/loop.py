"""The one consumer task: drain hints, re-read inputs, converge the actuators, report.

Level-based, like a Kubernetes controller: a hint says only that something
*may* have changed. Each hint becomes an input trigger (the lifecycle table
decides whether it counts), the loop converges the actuators towards the
plan (`reconciler.actuators`), and the outcomes become one outcome trigger:

- everything converged: `initialized` / `reconfigured` (to `mps_starting`
  while an MPS daemon has not answered), `mps_ready` when it has;
- the plan could not be read: `failed`; a permanent error (an invalid config)
  waits for an input to change and never replaces what is served;
- some actuator not converged: `failed`, with a reason naming what is
  pending; each pending key is retried on its own backoff (`Retries`), and
  the retry shows as `retry` in the history, never as an input change.

Work that blocks runs off the loop: reading the config and the devices and
building the plan in a single-worker NVML thread with a deadline, CDI file
writes in a worker thread. A stop cuts a reconcile in progress short.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from loguru import logger

from devices.library import DeviceLibrary
from foundation.backoff import Backoff
from foundation.errors import PluginError, TransientError
from foundation.outcome import Outcome, Retries
from kubelet.fleet import PluginFleet
from reconciler.actuators import Actuators
from reconciler.health import HealthMonitor
from reconciler.inputs import ConfigInputs
from reconciler.mailbox import Hint, Mailbox
from reconciler.node import NodeDevices
from reconciler.plan import Plan, build_plan
from reconciler.report import applied_detail
from settings import EffectiveConfig
from settings.announce import announce
from states.machine import Lifecycle
from states.names import State, Trigger

T = TypeVar("T")

HEARTBEAT_SECONDS = 5.0
# How often a serving plan re-checks that its MPS daemons still answer.
MPS_CHECK_SECONDS = 5.0
# Reading the config and the devices and building the plan; NVML can be slow
# on a large node, but a call that never returns must not hold the loop's work.
READ_DEADLINE_SECONDS = 30.0
DEFAULT_BACKOFF = Backoff(initial=1.0, cap=60.0)
FINGERPRINT_LIMIT = 1 << 20
# How long a stop lets the step in progress finish before cutting it short.
STOP_GRACE_SECONDS = 1.0
INPUTS_KEY = "inputs"

_INPUT_TRIGGERS = {
    Hint.RELOAD: Trigger.RELOAD_REQUESTED,
    Hint.CONFIG: Trigger.CONFIG_CHANGED,
    Hint.LABEL: Trigger.NODE_LABEL_CHANGED,
}
_LIVE = (State.SERVING, State.MPS_STARTING)


class FatalInitError(Exception):
    """Start-up failed and `--fail-on-init-error` asks the process to exit 1."""


class ReadTimeout(TransientError):
    """Reading the config and the devices did not finish within the deadline."""


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
        on_kubelet_restarts: Callable[[int], None] = lambda count: None,
        read_deadline: float = READ_DEADLINE_SECONDS,
    ) -> None:
        self.inputs = inputs
        self.mailbox = mailbox
        self.lifecycle = lifecycle
        self.fail_on_init_error = fail_on_init_error
        self.on_change = on_change
        self.on_reconcile = on_reconcile
        # Kubelets restarted and registered with again (the restart metric).
        self.on_kubelet_restarts = on_kubelet_restarts
        # The target: the last plan read from valid inputs. Whether the node
        # holds it is for the actuators to say.
        self.plan: Plan | None = None
        self.config: EffectiveConfig | None = None
        self.heartbeat = time.monotonic()
        self.node = NodeDevices(inputs.open_library)
        self.actuators = Actuators(
            make_fleet=inputs.make_fleet, node=self.node, health=inputs.health
        )
        self.retries = Retries(backoff)
        self._mps_retries = Retries(backoff)
        self._read_deadline = read_deadline
        self._timers: dict[Hint, asyncio.TimerHandle] = {}
        # The standing rejection (message and content), so a touch does not repeat it.
        self._rejected: str | None = None
        self._read_fingerprint: str | None = None
        self._pending_reason = False  # the lifecycle reason names keys still pending
        self._nvml = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")
        self._nvml_busy: Future[object] | None = None
        self._closed = False
        self._kubelets_counted = 0  # kubelet changes already reported

    @property
    def fleet(self) -> PluginFleet | None:
        return self.actuators.fleet

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
                result = await self._handle_unless_stopping(hint, payload)
                if result is not None:
                    self.on_reconcile(result, time.perf_counter() - started)
                self.on_change(self)
                if self.stopped or self.mailbox.waiting(Hint.SHUTDOWN):
                    break

    @property
    def stopped(self) -> bool:
        return self.lifecycle.state is State.STOPPED

    async def _handle_unless_stopping(self, hint: Hint, payload: object) -> str | None:
        """Handle one hint; a stop posted meanwhile cuts it short (the stop is handled next).

        The step in progress gets `STOP_GRACE_SECONDS` to finish, since most
        finish in milliseconds and a server stopped halfway is left in a state
        gRPC cannot shut down cleanly; only what waits longer (a kubelet that
        does not answer a registration, an MPS probe) is cancelled.
        """
        if hint is Hint.SHUTDOWN:
            return await self._handle(hint, payload)
        work = asyncio.create_task(self._handle(hint, payload))
        stop = asyncio.create_task(self.mailbox.stopping.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                await asyncio.wait({work}, timeout=STOP_GRACE_SECONDS)
        finally:
            stop.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            return None
        return work.result()

    async def _handle(self, hint: Hint, payload: object) -> str | None:
        """Act on one hint; returns the reconcile's result, None when nothing ran."""
        if hint is Hint.SHUTDOWN:
            self.lifecycle.fire(Trigger.SHUTDOWN)
            await self.close()
            return None
        if hint is Hint.KUBELET:
            return await self._kubelet_changed()
        if hint is Hint.LABEL:
            value = payload if isinstance(payload, str) else None
            if value == self.inputs.config.label_value and self.plan is not None:
                return None
            self.inputs.config.label_value = value
        if hint in _INPUT_TRIGGERS:
            return await self._input_changed(hint)
        if hint is Hint.RETRY:
            return await self._retry()
        if hint is Hint.HEALTH:
            return await self._health()
        if hint is Hint.MPS:
            return await self._check_mps()
        return None

    # ---- inputs ---------------------------------------------------------

    async def _in_nvml_thread(self, call: Callable[[], T], what: str) -> T:
        """Run `call` on the NVML worker with a deadline; never queue behind a stuck call."""
        busy = self._nvml_busy
        if busy is not None and not busy.done():
            raise ReadTimeout(f"{what}: an earlier NVML call has still not returned")
        future = self._nvml.submit(call)
        self._nvml_busy = future  # type: ignore[assignment]
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(future)), self._read_deadline
            )
        except TimeoutError:
            raise ReadTimeout(f"{what} did not finish within {self._read_deadline:g}s") from None

    def _desired(self) -> Plan:
        """Config, devices and plan, read afresh (runs on the NVML worker).

        Raises:
            PluginError: the config is invalid, the devices cannot be read,
                or they do not make valid resources.
        """
        try:
            config = self.inputs.config.load()
            return build_plan(config, self.node.inventory(config))
        except PluginError as err:
            where = getattr(err, "origin", "") or self.inputs.config.last_path
            self._read_fingerprint = _fingerprint(err, where) if err.permanent else None
            raise

    async def _read(self) -> Plan:
        return await self._in_nvml_thread(self._desired, "reading the config and the devices")

    def _input_differs(self, plan: Plan) -> bool:
        """Whether what was read is an input change worth recording."""
        current = self.plan
        return (
            current is None
            or plan.digest != current.digest
            or plan.config.digest != current.config.digest
            or self._rejected is not None  # a standing rejection needs clearing
        )

    async def _input_changed(self, hint: Hint) -> str | None:
        read: Plan | PluginError | None = None
        if hint is not Hint.RELOAD and self.lifecycle.state in _LIVE:
            # Watches fire for touches that change nothing; level-based means
            # such a hint leaves no trace. SIGHUP is always recorded.
            try:
                read = await self._read()
            except PluginError as err:
                if err.permanent and self._read_fingerprint == self._rejected:
                    return None  # the same rejected content: said once already
                read = err
            else:
                if not self._input_differs(read):
                    # The same plan: a step that already failed is landed by
                    # its own retry; drift nobody knows about yet (a spec file
                    # deleted underneath) is repaired without calling it a change.
                    if self.retries.pending or not self.actuators.pending(read):
                        return None
                    return await self._converge_in_place("repaired")
        if self.lifecycle.fire(_INPUT_TRIGGERS[hint]) is None:
            return None
        if self.lifecycle.state is State.INIT:
            return await self._initialize()
        if self.lifecycle.state is State.RECONFIGURING:
            return await self._reconfigure(read)
        return None

    async def _kubelet_changed(self) -> str | None:
        """The kubelet directory changed: a restarted kubelet, or one of our sockets gone.

        Whether the kubelet restarted is decided where it is certain: when a
        server registers with a kubelet socket other than the last one (see
        `_converge`), so restarts close together, or during start-up, are
        each recorded once.
        """
        fleet = self.fleet
        state = self.lifecycle.state
        if state in _LIVE and fleet is not None:
            lost = fleet.sockets_disturbed()
            if not lost and not fleet.kubelet_replaced():
                return None  # the same kubelet, our own sockets intact: nothing to do
            before = fleet.kubelet_changes
            fleet.observe_kubelet(fleet.kubelet_identity())
            result = await self._converge_in_place("reregistered")
            if lost and fleet.kubelet_changes == before:
                logger.warning(
                    "plugin socket of {resources} deleted underneath the plugin: served again",
                    resources=", ".join(lost),
                )
            return result
        if state is State.BLOCKED_ON_ERROR and fleet is not None and not fleet.kubelet_replaced():
            return None
        if self.lifecycle.fire(Trigger.KUBELET_RESTARTED) is None:
            return None
        if self.lifecycle.state is State.INIT:
            return await self._initialize()
        return None

    async def _retry(self) -> str | None:
        state = self.lifecycle.state
        if state in _LIVE and not self.retries.pending and not self._pending_reason:
            return None  # a stale timer: nothing is waiting for it
        if (
            self.lifecycle.fire(Trigger.RETRY, detail={"pending": list(self.retries.pending)})
            is None
        ):
            return None
        if self.lifecycle.state is State.INIT:
            return await self._initialize()
        if self.lifecycle.state in (State.RECONFIGURING, State.MPS_STARTING):
            return await self._reconfigure()
        return None

    # ---- steps ----------------------------------------------------------

    async def _initialize(self, *, first: bool = False) -> str:
        try:
            plan = await self._read()
        except PluginError as err:
            if first and self.fail_on_init_error:
                raise FatalInitError(str(err)) from err
            self._fail_read(err)
            return "rejected" if err.permanent else "error"
        self._accept(plan)
        outcomes = await self._converge(plan)
        failing = self._settle(outcomes)
        if failing:
            fatal = [o for o in failing if not o.key.startswith("resource:")]
            if first and self.fail_on_init_error and fatal:
                raise FatalInitError(str(fatal[0].error or fatal[0].describe()))
            self._fail_pending(failing)
            return "error"
        waiting = self.actuators.mps_waiting(plan)
        self._pending_reason = False
        self.lifecycle.fire(
            Trigger.INITIALIZED,
            needs_mps=bool(waiting),
            detail={"digest": plan.digest, "resources": plan.resource_names},
        )
        if waiting:
            self.mailbox.post(Hint.MPS)
        return "applied"

    async def _reconfigure(self, read: Plan | PluginError | None = None) -> str:
        previous = self.plan
        if read is None:
            try:
                read = await self._read()
            except PluginError as err:
                read = err
        if isinstance(read, PluginError):
            if self.plan is not None and self.retries.pending:
                # keep converging towards the last good plan: its pending keys
                # must not wait for the bad edit to be fixed
                self._settle(await self._converge(self.plan))
            self._fail_read(read)
            return "rejected" if read.permanent else "error"
        plan = read
        self._accept(plan)
        outcomes = await self._converge(plan)
        failing = self._settle(outcomes)
        if failing:
            self._fail_pending(failing)
            return "error"
        detail = applied_detail(previous, plan, outcomes)
        waiting = self.actuators.mps_waiting(plan)
        self._pending_reason = False
        self.lifecycle.fire(Trigger.RECONFIGURED, needs_mps=bool(waiting), detail=detail)
        if waiting:
            self.mailbox.post(Hint.MPS)
        return "applied" if detail["changed"] else "unchanged"

    async def _converge_in_place(self, result: str) -> str | None:
        """Converge towards the current plan without re-reading inputs (kubelet, health, MPS)."""
        plan = self.plan
        if plan is None:
            return None
        failing = self._settle(await self._converge(plan, read_back=False))
        if failing:
            self._fail_pending(failing)
            return "error"
        if self._pending_reason:
            self.mailbox.post(Hint.RETRY)  # record, through `retry`, that it all landed
        return result

    async def _converge(self, plan: Plan, *, read_back: bool = True) -> list[Outcome]:
        outcomes = await self.actuators.converge(plan, read_back=read_back)
        fleet = self.fleet
        if fleet is not None and fleet.kubelet_changes > self._kubelets_counted:
            restarts = fleet.kubelet_changes - self._kubelets_counted
            self._kubelets_counted = fleet.kubelet_changes
            self.on_kubelet_restarts(restarts)
            # Recorded while serving; a pass that is reconfiguring registers
            # with the new kubelet all the same (the table ignores the pair).
            self.lifecycle.fire(Trigger.KUBELET_RESTARTED, detail={"restarts": restarts})
        return outcomes

    def _accept(self, plan: Plan) -> None:
        """`plan` (read from valid inputs) is the target from now on."""
        previous = self.plan
        announce(plan.config, previous.config if previous is not None else None)
        if not plan.allocators and (previous is None or previous.allocators):
            logger.info("no GPUs found on this node: serving no resources")
        self.plan = plan
        self.config = plan.config
        self.fail_on_init_error = plan.config.flags.fail_on_init_error
        self.inputs.config.accepted()
        self._rejected = None
        self.retries.forget(INPUTS_KEY)

    # ---- health and MPS -------------------------------------------------

    def _schedule_health(self) -> None:
        health = self.inputs.health
        delay = None if health is None else health.next_due_in()
        if delay is not None:
            self._schedule(Hint.HEALTH, delay)

    async def _health(self) -> str | None:
        health = self.inputs.health
        if health is None:
            return None
        changes = health.take_events()
        due = health.probes_due()
        failed = False
        if due.uuids:
            try:
                results = await self._in_nvml_thread(
                    partial(health.probe, due), "checking device health"
                )
            except PluginError as err:
                logger.warning("device health check failed: {err}", err=str(err))
                failed = True
            else:
                changes += health.advance(due, results)
        health.report(changes)
        if failed:
            self._schedule(Hint.HEALTH, HEARTBEAT_SECONDS)
        else:
            self._schedule_health()
        failure = "error" if failed else None
        if not any(change.kubelet_changed for change in changes):
            return failure
        detail = {c.uuid: f"{c.source} -> {c.dest}: {c.reason}" for c in changes}
        if self.lifecycle.fire(Trigger.DEVICE_HEALTH_CHANGED, detail=detail) is None:
            return failure  # not serving: the next plan applies health as it is then
        result = await self._converge_in_place("health")
        return failure or result

    async def _check_mps(self) -> str | None:
        plan, gate = self.plan, self.actuators.mps
        state = self.lifecycle.state
        if plan is None or not plan.needs_mps or state not in _LIVE:
            return None
        root = Path(plan.config.flags.mps_container_root)
        problems: dict[str, str] = {}
        moved = False
        for name in plan.mps_resources:
            intent = plan.resources[name]
            problem = await gate.probe(root, intent)
            if problem is None:
                self._mps_retries.forget(name)
                if not gate.admits(intent):
                    gate.admit(intent)
                    moved = True
                continue
            problems[name] = problem.reason
            # A daemon still on the limits of what is served (the plugin
            # followed a config change first) keeps that served until it
            # restarts with the new limits.
            keeps_serving = problem.other_limits and not gate.admits(intent)
            if gate.admitted(name) and not keeps_serving:
                # The daemon went away, or applies limits the served list was
                # not made for: take its resource back rather than let the
                # kubelet schedule pods that cannot start. Only this one.
                gate.withdraw(name)
                moved = True
        if problems and state is State.SERVING:
            self.lifecycle.fire(Trigger.MPS_LOST, reason="; ".join(problems.values()))
        if moved:
            await self._converge_in_place("mps")
        if problems:
            delay = min(self._mps_retries.failed(name) for name in problems)
            self._schedule(Hint.MPS, delay)
            self.lifecycle.fire(
                Trigger.RETRY,
                reason=f"waiting for the MPS daemon: {'; '.join(problems.values())} "
                f"(retrying in {delay:g}s)",
                detail={"retry_in_seconds": delay, "pending": sorted(problems)},
            )
            return "error"
        self._schedule(Hint.MPS, MPS_CHECK_SECONDS)
        if self.lifecycle.state is State.MPS_STARTING and not self.retries.pending:
            self.lifecycle.fire(Trigger.MPS_READY, detail={"resources": plan.mps_resources})
            return "applied"
        return None

    # ---- outcomes -------------------------------------------------------

    def _settle(self, outcomes: Sequence[Outcome]) -> list[Outcome]:
        """Update the per-key retries; returns the outcomes that are not converged."""
        self.retries.settle(outcomes)
        delay = self.retries.next_due_in()
        if delay is None:
            self._cancel(Hint.RETRY)
        else:
            self._schedule(Hint.RETRY, delay)
        return [outcome for outcome in outcomes if not outcome.converged]

    def _fail_pending(self, failing: Sequence[Outcome]) -> None:
        delay = self.retries.next_due_in() or 0.0
        pending = "; ".join(outcome.describe() for outcome in failing)
        self._pending_reason = True
        self.lifecycle.fire(
            Trigger.FAILED,
            reason=f"not yet applied: {pending} (retrying in {delay:g}s)",
            detail={
                "permanent": False,
                "pending": [outcome.key for outcome in failing],
                "error": type(failing[0].error).__name__ if failing[0].error else None,
                "retry_in_seconds": round(delay, 3),
            },
        )

    def _fail_read(self, err: PluginError) -> None:
        detail: dict[str, object] = {"permanent": err.permanent, "error": type(err).__name__}
        if err.permanent:
            self._rejected = self._read_fingerprint or str(err)
            if self.lifecycle.state is State.RECONFIGURING:
                reason = f"new config rejected, still serving the previous one: {err}"
            else:
                reason = f"{err} (waiting for a config change, a node label change or SIGHUP)"
        else:
            self.retries.failed(INPUTS_KEY)
            self._settle(())
            delay = self.retries.next_due_in() or 0.0
            detail["retry_in_seconds"] = round(delay, 3)
            reason = f"{err} (retrying in {delay:g}s)"
            self._pending_reason = True
        self.lifecycle.fire(Trigger.FAILED, reason=reason, detail=detail)

    def _schedule(self, hint: Hint, delay: float) -> None:
        self._cancel(hint)
        loop = asyncio.get_running_loop()
        self._timers[hint] = loop.call_later(delay, self.mailbox.post, hint)

    def _cancel(self, hint: Hint) -> None:
        old = self._timers.pop(hint, None)
        if old is not None:
            old.cancel()

    async def close(self) -> None:
        """Stop everything the loop started; safe to call more than once."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        await self.actuators.close()
        if self._closed:
            return
        self._closed = True
        busy = self._nvml_busy
        if busy is None or busy.done():
            await _in_thread(self._nvml, self.node.shutdown)
        self._nvml.shutdown(wait=False, cancel_futures=True)


def _fingerprint(err: PluginError, origin: str) -> str:
    """The error and the content it was about: the same bad file is rejected only once.

    Only a regular file is read, and at most 1 MiB of it; anything else (a
    FIFO, a directory) is known by its identity, so this can never block.
    """
    content = b""
    with contextlib.suppress(OSError):
        info = os.stat(origin)
        content = f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}".encode()
        if stat.S_ISREG(info.st_mode) and info.st_size <= FINGERPRINT_LIMIT:
            with open(origin, "rb") as handle:
                content = handle.read(FINGERPRINT_LIMIT)
    return f"{err}\0{hashlib.sha256(content).hexdigest()}"


async def _in_thread(executor: ThreadPoolExecutor, call: Callable[[], T]) -> T:
    result: Awaitable[T] = asyncio.get_running_loop().run_in_executor(executor, call)
    return await result
