"""Per-device health: healthy -> unhealthy(reason) -> recovering -> healthy, with reasons.

The reference plugin keeps one boolean per device that never returns to
healthy. Here each GPU and MIG device has a small machine whose moves are
the table `MOVES` below (plain data, no library: the machine is three states
and four moves, and the interesting part is the conditions):

- healthy or recovering --error--> unhealthy. The reason is the error
  (`xid 79`); `HealthPolicy` decides its class: ignored errors change nothing;
  transient errors recover after the quiet period; sticky ones also need a
  probe showing a reset; a lost device needs a probe that succeeds.
  Further errors while unhealthy restart the quiet period and may raise the
  class (sticky beats lost beats transient), never lower it.
- unhealthy --cleared--> recovering, once the quiet period has passed and the
  class's condition holds.
- recovering --probe passed--> healthy; a failed probe keeps the device
  recovering and it is probed again every `probe_interval`.

Fan-out (the semantics of the reference's upstream fix #1930): an event on a
GPU UUID concerns the GPU itself (which also covers every replica of it) and,
when it names no GPU/compute instance, every MIG device of the GPU; an event
naming both instance ids concerns only the matching MIG devices, and one
naming an unknown instance concerns none of them. An event on a MIG UUID
concerns that MIG device only.

Time never comes from a clock here: `apply(event, now)` and `tick(now,
probe)` take the loop's monotonic time, and `next_due(now)` says when the
next `tick` has work, so tests drive the machine without sleeping. The book is
used only from the reconcile loop's thread; events reach it through the
thread-safe `devices.health.EventQueue`.

Losing the event stream is a book-wide condition (`monitoring`), never a
reason to mark devices unhealthy.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from loguru import logger

from devices.health import EventKind, HealthEvent
from devices.library import ProbeResult
from devices.model import Inventory
from resources.model import Health, PluginDevice
from states.health_policy import ErrorClass, HealthPolicy
from states.health_status import (
    DeviceHealth,
    DeviceHealthStatus,
    HealthChange,
    HealthTransition,
    Monitoring,
    MonitoringStatus,
)
from states.health_watch import WATCH_KINDS, Unwatched
from states.history import now_rfc3339

__all__ = [
    "MOVES",
    "DeviceHealth",
    "DeviceHealthStatus",
    "ErrorClass",
    "HealthBook",
    "HealthChange",
    "HealthPolicy",
    "HealthTransition",
    "Monitoring",
    "MonitoringStatus",
    "health_of",
    "with_health",
]

Probe = Callable[[str], ProbeResult]


class Step(StrEnum):
    ERROR = "error"
    CLEARED = "cleared"
    PROBE_PASSED = "probe_passed"


MOVES: Mapping[tuple[DeviceHealth, Step], DeviceHealth] = {
    (DeviceHealth.HEALTHY, Step.ERROR): DeviceHealth.UNHEALTHY,
    (DeviceHealth.RECOVERING, Step.ERROR): DeviceHealth.UNHEALTHY,
    (DeviceHealth.UNHEALTHY, Step.CLEARED): DeviceHealth.RECOVERING,
    (DeviceHealth.RECOVERING, Step.PROBE_PASSED): DeviceHealth.HEALTHY,
}


class _Rule(StrEnum):
    """What clears an error, in rising severity."""

    QUIET = "quiet"  # transient: the quiet period alone
    ANSWERS = "answers"  # lost: a probe succeeds again
    RESET = "reset"  # sticky: a probe shows a reset since the error


_SEVERITY = {_Rule.QUIET: 0, _Rule.ANSWERS: 1, _Rule.RESET: 2}
_CLEARED_BY = {
    _Rule.QUIET: "quiet period over",
    _Rule.ANSWERS: "device answers again",
    _Rule.RESET: "reset detected",
}


@dataclass
class _Device:
    uuid: str
    gpu_uuid: str  # itself for a GPU
    gi: int | None = None
    ci: int | None = None
    history: deque[HealthTransition] = field(default_factory=deque)
    state: DeviceHealth = DeviceHealth.HEALTHY
    since: str = field(default_factory=now_rfc3339)
    reason: str | None = None
    rule: _Rule | None = None
    last_error: float = 0.0
    baseline: int | None = None  # generation when a sticky error arrived
    due: float | None = None  # next time `tick` has work for this device
    detail: str | None = None
    errors: int = 0

    @property
    def is_mig(self) -> bool:
        return self.uuid != self.gpu_uuid


def _devices_of(inventory: Inventory, limit: int) -> dict[str, _Device]:
    devices: dict[str, _Device] = {}
    for gpu in inventory.gpus:
        devices[gpu.uuid] = _Device(gpu.uuid, gpu.uuid, history=deque(maxlen=limit))
        for mig in gpu.mig_devices:
            devices[mig.uuid] = _Device(
                mig.uuid, gpu.uuid, gi=mig.gi, ci=mig.ci, history=deque(maxlen=limit)
            )
    return devices


class HealthBook:
    """The health of every GPU and MIG device of one inventory."""

    def __init__(self, inventory: Inventory, policy: HealthPolicy | None = None) -> None:
        self.policy = policy if policy is not None else HealthPolicy()
        self._devices = _devices_of(inventory, self.policy.history_limit)
        self.monitoring = MonitoringStatus()
        self.transitions: Counter[tuple[str, str, str]] = Counter()  # (from, to, reason)
        self.unwatched = Unwatched()  # devices no event can reach (`states.health_watch`)

    # -- inputs -----------------------------------------------------------------

    def update_inventory(self, inventory: Inventory) -> None:
        """Follow a new inventory: devices that remain keep their health and history."""
        fresh = _devices_of(inventory, self.policy.history_limit)
        for uuid, device in fresh.items():
            old = self._devices.get(uuid)
            if old is not None and (old.gpu_uuid, old.gi, old.ci) == (
                device.gpu_uuid,
                device.gi,
                device.ci,
            ):
                fresh[uuid] = old
        self._devices = fresh
        # The book follows a new inventory when a new health source starts, and a
        # new source reports afresh which GPUs it cannot watch.
        self.unwatched.clear()

    def apply(self, event: HealthEvent, now: float) -> list[HealthChange]:
        """Take one event into account; returns the devices that moved."""
        if event.kind in (EventKind.DEGRADED, EventKind.RESTORED, EventKind.DISABLED):
            self._monitoring(event)
            return []
        targets = self._targets(event)
        if not targets:
            logger.debug("health event for no known device: {}", event.describe())
            return []
        if event.kind in WATCH_KINDS:  # a mark beside the health machine, never a move
            self.unwatched.apply(event.kind, (d.uuid for d in targets), event.detail)
            return []
        if event.kind in (EventKind.FOUND, EventKind.RESET):
            for device in targets:  # worth a look now rather than at the next probe time
                if device.due is not None:
                    device.due = min(device.due, now)
            return []
        rule = self._rule(event)
        if rule is None:
            return []
        changes: list[HealthChange] = []
        for device in targets:
            changes.extend(self._error(device, rule, event, now))
        return changes

    def tick(self, now: float, probe: Probe) -> list[HealthChange]:
        """Do the work that is due: quiet periods that ended, probes to run."""
        changes: list[HealthChange] = []
        for device in self._devices.values():
            if device.due is not None and device.due <= now:
                changes.extend(self._advance(device, now, probe))
        return changes

    def due(self, now: float) -> tuple[str, ...]:
        """The devices `tick(now)` has work for: quiet periods that ended, probes to run."""
        return tuple(d.uuid for d in self._devices.values() if d.due is not None and d.due <= now)

    def next_due(self, now: float) -> float | None:
        """When `tick` next has work (possibly `now` or earlier); None when nothing is pending."""
        dues = [d.due for d in self._devices.values() if d.due is not None]
        return min(dues) if dues else None

    # -- outputs ------------------------------------------------------------------

    def status(self, uuid: str) -> DeviceHealthStatus | None:
        device = self._devices.get(uuid)
        if device is None:
            return None
        return DeviceHealthStatus(
            uuid=uuid,
            health=device.state,
            reason=device.reason,
            since=device.since,
            detail=device.detail,
            errors=device.errors,
            history=tuple(device.history),
            unmonitored=self.unwatched.reason(uuid),
        )

    def statuses(self) -> dict[str, DeviceHealthStatus]:
        return {uuid: status for uuid in self._devices if (status := self.status(uuid))}

    def kubelet_health(self, uuid: str) -> Health:
        """Healthy for a device this book does not track (it cannot have reported anything)."""
        device = self._devices.get(uuid)
        healthy = device is None or device.state is DeviceHealth.HEALTHY
        return Health.HEALTHY if healthy else Health.UNHEALTHY

    def to_json(self) -> dict[str, object]:
        return {
            "monitoring": self.monitoring.to_json(),
            "devices": {uuid: s.to_json() for uuid, s in self.statuses().items()},
        }

    # -- internals ----------------------------------------------------------------

    def _monitoring(self, event: HealthEvent) -> None:
        state = {
            EventKind.DEGRADED: Monitoring.DEGRADED,
            EventKind.RESTORED: Monitoring.ACTIVE,
            EventKind.DISABLED: Monitoring.DISABLED,
        }[event.kind]
        reason = None if state is Monitoring.ACTIVE else (event.detail or None)
        if (state, reason) == (self.monitoring.state, self.monitoring.reason):
            return
        log = logger.warning if state is Monitoring.DEGRADED else logger.info
        log("health monitoring {}{}", state, f": {reason}" if reason else "")
        self.monitoring = MonitoringStatus(state=state, reason=reason)

    def _targets(self, event: HealthEvent) -> list[_Device]:
        device = self._devices.get(event.uuid)
        if device is None:
            return []
        if device.is_mig:
            return [device]
        whole = event.gi is None or event.ci is None
        migs = [
            d
            for d in self._devices.values()
            if d.is_mig
            and d.gpu_uuid == device.uuid
            and (whole or (d.gi, d.ci) == (event.gi, event.ci))
        ]
        return [device, *migs]

    def _rule(self, event: HealthEvent) -> _Rule | None:
        if event.kind is EventKind.LOST:
            return _Rule.ANSWERS
        if event.kind is EventKind.XID and event.xid is not None:
            error_class = self.policy.classify_xid(event.xid)
        elif event.kind is EventKind.ECC:
            error_class = self.policy.double_bit_ecc
        else:
            return None
        return {
            ErrorClass.IGNORED: None,
            ErrorClass.TRANSIENT: _Rule.QUIET,
            ErrorClass.STICKY: _Rule.RESET,
        }[error_class]

    def _error(
        self, device: _Device, rule: _Rule, event: HealthEvent, now: float
    ) -> list[HealthChange]:
        device.errors += 1
        device.last_error = now
        detail = event.detail or None
        if device.state is not DeviceHealth.UNHEALTHY:
            change = self._move(device, Step.ERROR, event.reason, now, detail=detail)
            device.reason, device.rule, device.baseline = event.reason, rule, None
            device.due = now if rule is _Rule.RESET else now + self.policy.quiet_period
            return [change]
        assert device.rule is not None
        if _SEVERITY[rule] >= _SEVERITY[device.rule]:
            device.reason, device.rule, device.detail = event.reason, rule, detail
        if rule is _Rule.RESET:
            device.baseline = None  # only a reset after the latest sticky error counts
        logger.debug("{} still unhealthy, again: {}", device.uuid, event.describe())
        quiet_until = now + self.policy.quiet_period
        device.due = now if device.rule is _Rule.RESET and device.baseline is None else quiet_until
        return []

    def _advance(self, device: _Device, now: float, probe: Probe) -> list[HealthChange]:
        changes: list[HealthChange] = []
        result: ProbeResult | None = None
        if device.state is DeviceHealth.UNHEALTHY:
            if device.rule is _Rule.RESET and device.baseline is None:
                baseline = run_probe(probe, device.uuid)
                device.baseline = baseline.generation
                device.detail = None if baseline.ok else f"probe failed: {baseline.detail}"
            quiet_until = device.last_error + self.policy.quiet_period
            if now < quiet_until:
                device.due = quiet_until
                return changes
            if device.rule is not _Rule.QUIET:
                result = run_probe(probe, device.uuid)
                if not self._cleared(device, result):
                    device.due = now + self.policy.probe_interval
                    return changes
            assert device.rule is not None
            changes.append(self._move(device, Step.CLEARED, _CLEARED_BY[device.rule], now))
        if device.state is DeviceHealth.RECOVERING:
            if result is None or not result.ok:
                result = run_probe(probe, device.uuid)
            if not result.ok:
                device.detail = f"probe failed: {result.detail}"
                device.due = now + self.policy.probe_interval
                return changes
            changes.append(self._move(device, Step.PROBE_PASSED, "probe passed", now))
            device.reason = device.rule = device.baseline = device.due = None
            device.detail, device.errors = None, 0
        return changes

    def _cleared(self, device: _Device, result: ProbeResult) -> bool:
        if not result.ok:
            device.detail = f"probe failed: {result.detail}"
            return False
        baseline = device.baseline
        if device.rule is _Rule.RESET and baseline is not None and result.generation <= baseline:
            device.detail = "waiting for a reset"
            return False
        return True

    def _move(
        self, device: _Device, step: Step, reason: str, now: float, *, detail: str | None = None
    ) -> HealthChange:
        source = device.state
        dest = MOVES[(source, step)]
        at = now_rfc3339()
        device.state, device.since, device.detail = dest, at, detail
        device.history.append(HealthTransition(source, dest, reason, at, now))
        self.transitions[(str(source), str(dest), reason)] += 1
        log = logger.warning if dest is DeviceHealth.UNHEALTHY else logger.info
        log(
            "health {}: {} -> {} ({}{})",
            device.uuid,
            source,
            dest,
            reason,
            f": {detail}" if detail else "",
        )
        return HealthChange(device.uuid, source, dest, reason, at)


def run_probe(probe: Probe, uuid: str) -> ProbeResult:
    try:
        return probe(uuid)
    except Exception as exc:  # a probe must never take the loop down
        return ProbeResult(ok=False, detail=f"probe raised {type(exc).__name__}: {exc}")


def health_of(device: PluginDevice, book: HealthBook) -> Health:
    """What the kubelet should see for one advertised device (a GPU, replica or MIG device).

    Replicas carry their GPU's UUID and MIG devices their own; the book has
    already fanned GPU-wide events out to the MIG devices.
    """
    return book.kubelet_health(device.uuid)


def with_health(devices: Iterable[PluginDevice], book: HealthBook) -> tuple[PluginDevice, ...]:
    """The devices with their health taken from the book."""
    return tuple(d.with_health(health_of(d, book)) for d in devices)
