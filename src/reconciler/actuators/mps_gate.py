"""Which MPS-shared resources may be served now, per resource, and the probes that decide it.

A resource shared through MPS is served only while its own control daemon
answers, with the limits meant for the replicas the plugin advertises.
`MpsGate` remembers, per resource, the key (behaviour and replica count) its
daemon answered for: an edit that changes one MPS resource asks its daemon
again and leaves the others open; a daemon that stops answering withdraws
only its own resource. It turns probe results into `Outcome`s (kind `mps`),
which the loop settles like any other actuator's.

Probing a daemon takes up to `PROBE_TIMEOUT_SECONDS` (it runs the control
program), so the probes never run inside a pass: `MpsProbes` runs all of a
round concurrently in a task of its own, keeps the results, and posts the
`MPS` hint; the loop takes the results when it handles that hint, so a health
event or a stop is never queued behind a slow daemon.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from foundation.outcome import Change, Key, Kind, Outcome, Retries
from mps.errors import MpsNotReady, OtherLimits
from reconciler import on_demand
from reconciler.plan.desired import Desired, ResourceIntent
from states.runnable import Condition, RunState, one_line

PROBE_TIMEOUT_SECONDS = 5.0
# How often a daemon that answered is asked again whether it still does.
CHECK_SECONDS = 5.0


@dataclass(frozen=True)
class Probed:
    """One probe's answer: the key it was made for, and None or why the daemon is not ready."""

    key: str
    problem: MpsNotReady | None
    at: float


class MpsGate:
    """Per MPS resource: the key its daemon answered for, and when it was last probed."""

    def __init__(self) -> None:
        self._admitted: dict[str, str] = {}
        self._probed: dict[str, Probed] = {}

    def admits(self, intent: ResourceIntent) -> bool:
        """True for a resource that needs no daemon, or whose daemon answered for this key."""
        return intent.mps_key is None or self._admitted.get(intent.name) == intent.mps_key

    def admitted(self, name: str) -> bool:
        return name in self._admitted

    def waiting(self, intents: Iterable[ResourceIntent]) -> list[str]:
        """MPS resources among `intents` whose daemon has not answered for their key."""
        return [i.name for i in intents if not self.admits(i)]

    def admitted_names(self) -> tuple[str, ...]:
        """The resources whose daemon answered for what they are served with."""
        return tuple(sorted(self._admitted))

    def last_probe(self, intent: ResourceIntent) -> Probed | None:
        """The last probe made for this resource's current key."""
        probed = self._probed.get(intent.name)
        return probed if probed is not None and probed.key == intent.mps_key else None

    def forget_others(self, names: Iterable[str]) -> None:
        """Drop what is remembered for resources that are no longer wanted."""
        keep = set(names)
        for table in (self._admitted, self._probed):
            for name in set(table) - keep:
                del table[name]

    def apply(
        self, intents: Mapping[str, ResourceIntent], results: Mapping[str, Probed]
    ) -> list[Outcome]:
        """Admit or withdraw each probed resource; one outcome per result still current."""
        outcomes: list[Outcome] = []
        for name, probed in sorted(results.items()):
            intent = intents.get(name)
            if intent is None or intent.mps_key != probed.key:
                continue  # the resource changed while its daemon was probed: probe again
            self._probed[name] = probed
            changes: set[Change] = set()
            if probed.problem is None:
                if not self.admits(intent):
                    self._admitted[name] = probed.key
                    changes.add(Change.ADMITTED)
            else:
                # A daemon still on the limits of what is served (the plugin
                # followed a config change first) keeps that served until it
                # restarts with the new limits.
                keeps_serving = isinstance(probed.problem, OtherLimits) and not self.admits(intent)
                if name in self._admitted and not keeps_serving:
                    # The daemon went away, or applies limits the served list
                    # was not made for: take its resource back rather than let
                    # the kubelet schedule pods that cannot start. Only this one.
                    del self._admitted[name]
                    changes.add(Change.WITHDRAWN)
            outcomes.append(Outcome(Kind.MPS, name, frozenset(changes), probed.problem))
        return outcomes


def probes_due(
    desired: Desired, gate: MpsGate, retries: Retries, now: float
) -> tuple[list[ResourceIntent], float | None]:
    """The MPS resources to probe now, and the seconds until the next one is due.

    A resource is due when it was never probed for its current key, when its
    daemon answered `CHECK_SECONDS` ago (liveness, not a failure), or when
    its failing key is due on its own backoff.
    """
    due: list[ResourceIntent] = []
    waits: list[float] = []
    failing = retries.pending(frozenset({Kind.MPS}))
    for name in desired.mps_resources:
        intent = desired.resources[name]
        key = Key(Kind.MPS, name)
        if key in failing:
            if retries.may_attempt(key, intent.mps_key):
                due.append(intent)
            continue
        last = gate.last_probe(intent)
        wait = 0.0 if last is None else last.at + CHECK_SECONDS - now
        if wait <= 0:
            due.append(intent)
        else:
            waits.append(wait)
    retry = retries.next_due_in(frozenset({Kind.MPS}))
    if retry is not None:
        waits.append(retry)
    return due, min(waits) if waits else None


class MpsProbes:
    """Probes MPS daemons off the loop's way, one round at a time; `take()` hands the results over.

    `notify` is called when a round is over (the loop posts itself the `MPS`
    hint). Only the event loop's thread runs here, and only the loop reads
    the results, through `take()`.
    """

    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._task: asyncio.Task[None] | None = None
        self._results: dict[str, Probed] = {}
        self._stopped = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, root: Path, intents: Iterable[ResourceIntent]) -> bool:
        """Start a round for `intents`; False when one is still running (it is not queued)."""
        if self.running:
            return False
        wanted = list(intents)
        if not wanted:
            return False
        self._task = asyncio.create_task(self._round(root, wanted), name="mps-probes")
        self._task.add_done_callback(_said)
        return True

    def condition(self) -> Condition:
        """What `/state` shows of the probe rounds (`runnables`); the loop starts and stops them."""
        task = self._task
        if self._stopped:
            return Condition(RunState.STOPPED)
        if task is None:
            return Condition(RunState.PENDING, "no MPS daemon probed yet")
        if not task.done():
            return Condition(RunState.RUNNING)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            return Condition(RunState.FAILED, f"the last round failed: {one_line(error)}")
        return Condition(RunState.STOPPED, "between rounds")

    async def _round(self, root: Path, intents: list[ResourceIntent]) -> None:
        problems = await asyncio.gather(*(probe(root, intent) for intent in intents))
        now = time.monotonic()
        for intent, problem in zip(intents, problems, strict=True):
            assert intent.mps_key is not None
            self._results[intent.name] = Probed(intent.mps_key, problem, now)
        self._notify()

    def take(self) -> dict[str, Probed]:
        results, self._results = self._results, {}
        return results

    def next_due_in(
        self, desired: Desired | None, gate: MpsGate, retries: Retries
    ) -> float | None:
        """Seconds until a daemon is due for a probe (None: no timer is needed).

        `desired` is None where nothing is served: no daemon is probed then. A
        round in progress says when it is over (the `MPS` hint) by itself.
        """
        if desired is None or not desired.needs_mps or self.running:
            return None
        due, wait = probes_due(desired, gate, retries, time.monotonic())
        return 0.01 if due else None if wait is None else max(wait, 0.01)

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise


def _said(task: asyncio.Task[None]) -> None:
    """A round that failed (a bug, not a daemon that does not answer) is logged, never lost."""
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.opt(exception=error).error("MPS probe round failed: {}", one_line(error))


async def probe(root: Path, intent: ResourceIntent) -> MpsNotReady | None:
    """None when the daemon of `intent` answers with this intent's limits applied, else why not.

    The MPS side (`mps.probe.daemon_ready`) is loaded on the first probe:
    only a node that shares GPUs through MPS needs it.
    """
    devices = intent.allocator.resource.devices
    return await on_demand.mps_daemon_ready(
        root, intent.name, devices, timeout=PROBE_TIMEOUT_SECONDS
    )


class MpsDaemons:
    """The MPS gate's probes: each MPS-shared resource's daemon asked when it is due.

    A probe runs the control program and can take seconds, so converging
    starts a round in a task of its own (`MpsProbes`) and returns at once;
    the answers come back through the `MPS` hint, which admits or withdraws
    each resource at the gate (`MpsGate`) and settles its key. A resource is
    due when never asked for its current limits, when its daemon answered a
    while ago (liveness), or when its failing key is due on its backoff.
    """

    kind = Kind.MPS

    def __init__(self, retries: Retries, gate: MpsGate, probes: MpsProbes | None) -> None:
        self.retries = retries
        self.gate = gate
        self.probes = probes

    def _due(self, desired: Desired) -> list[ResourceIntent]:
        if self.probes is None or self.probes.running or not desired.needs_mps:
            return []
        return probes_due(desired, self.gate, self.retries, time.monotonic())[0]

    def pending(self, desired: Desired) -> bool:
        return bool(self._due(desired))

    async def converge(self, desired: Desired) -> list[Outcome]:
        due = self._due(desired)
        if due and self.probes is not None:
            self.probes.start(Path(desired.config.flags.mps_container_root), due)
        return []  # the answers are outcomes of the `MPS` hint that brings them

    def serves(self, desired: Desired) -> bool:
        return False

    def holds_nothing(self) -> bool:
        return True

    def status(self) -> object:
        return self.gate.admitted_names()
