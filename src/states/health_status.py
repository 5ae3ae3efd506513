"""What the health book reports: per-device status, transitions and the monitoring condition.

Plain frozen values, so `/state`, metrics, node Events and the DRA slices
can hold them without reaching into the book.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from resources.model import Health
from states.history import now_rfc3339

# The node annotation that cordons GPUs (`states.cordon` reads it).
CORDON_ANNOTATION = "nvidia.com/gpu.cordon"


class DeviceHealth(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    RECOVERING = "recovering"


class Monitoring(StrEnum):
    ACTIVE = "active"
    DEGRADED = "degraded"  # the event stream failed; devices keep their last known health
    DISABLED = "disabled"  # nothing is watched


@dataclass(frozen=True)
class HealthTransition:
    source: DeviceHealth
    dest: DeviceHealth
    reason: str
    at: str  # RFC 3339, UTC
    monotonic: float

    def to_json(self) -> dict[str, object]:
        return {
            "from": str(self.source),
            "to": str(self.dest),
            "reason": self.reason,
            "at": self.at,
        }


@dataclass(frozen=True)
class HealthChange:
    """One device moved; returned by `apply` and `tick` so the caller can republish.

    A cordon (`states.cordon`) reports its moves here too, with `cordon` set
    (True: cordoned, False: released) and `source`/`dest` saying what the
    kubelet saw before and sees after. A machine move that a cordon keeps
    from the kubelet (an XID on a cordoned GPU, its recovery) is `held`.
    """

    uuid: str
    source: DeviceHealth
    dest: DeviceHealth
    reason: str
    at: str
    cordon: bool | None = None
    held: bool = False

    @property
    def kubelet_changed(self) -> bool:
        """Whether the kubelet's view (Healthy / Unhealthy) changed."""
        if self.held:
            return False
        return (self.source is DeviceHealth.HEALTHY) != (self.dest is DeviceHealth.HEALTHY)


@dataclass(frozen=True)
class DeviceHealthStatus:
    uuid: str
    health: DeviceHealth
    reason: str | None  # the error that made it unhealthy, e.g. "xid 79"; None when healthy
    since: str  # RFC 3339 time of the last transition (or of tracking start)
    detail: str | None = None  # e.g. "waiting for a reset", the last failed probe
    errors: int = 0  # errors counted since it was last healthy
    history: tuple[HealthTransition, ...] = ()
    cordoned: bool = False  # held Unhealthy by the cordon annotation, whatever `health` says
    unmonitored: str | None = None  # why no health event reaches it; None when watched

    @property
    def kubelet_health(self) -> Health:
        healthy = self.health is DeviceHealth.HEALTHY and not self.cordoned
        return Health.HEALTHY if healthy else Health.UNHEALTHY

    def to_json(self) -> dict[str, object]:
        return {
            "health": str(self.health),
            "reason": self.reason,
            "since": self.since,
            "detail": self.detail,
            "errors": self.errors,
            "cordoned": self.cordoned,
            "history": [t.to_json() for t in self.history],
            "unmonitored": self.unmonitored,
        }


@dataclass(frozen=True)
class MonitoringStatus:
    state: Monitoring = Monitoring.ACTIVE
    reason: str | None = None
    since: str = field(default_factory=now_rfc3339)

    def to_json(self) -> dict[str, object]:
        return {"state": str(self.state), "reason": self.reason, "since": self.since}


@dataclass(frozen=True)
class CordonView:
    """The cordon as `/state` shows it (the `health.cordon` section)."""

    value: str | None = None
    devices: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    off: str | None = None  # why the annotation is not read at all; None when it is

    def to_json(self) -> dict[str, object]:
        return {
            "annotation": CORDON_ANNOTATION,
            "value": self.value,
            "gpus": list(self.gpus),
            "devices": list(self.devices),
            "warnings": list(self.warnings),
            "off": self.off,
        }


@dataclass(frozen=True)
class HealthView:
    """The health of every tracked device at one moment, as `/state` shows it."""

    monitoring: MonitoringStatus
    devices: Mapping[str, DeviceHealthStatus]
    cordon: CordonView | None = None

    def reason_of(self, uuid: str, gpu_uuid: str) -> tuple[str | None, str | None]:
        """Why a served device is unhealthy, and since when: its own error, else its GPU's."""
        for which in (uuid, gpu_uuid):
            status = self.devices.get(which)
            if status is not None and status.reason is not None:
                return status.reason, status.since
        own = self.devices.get(uuid)
        return None, None if own is None else own.since

    def unmonitored_of(self, uuid: str) -> str | None:
        """Why no health event reaches a served device (MIG devices carry their GPU's mark)."""
        status = self.devices.get(uuid)
        return None if status is None else status.unmonitored

    def to_json(self) -> dict[str, object]:
        return {
            "monitoring": self.monitoring.to_json(),
            "cordon": None if self.cordon is None else self.cordon.to_json(),
            "devices": {
                uuid: {
                    "health": str(status.kubelet_health),
                    "stage": str(status.health),
                    "reason": status.reason,
                    "since": status.since,
                    "detail": status.detail,
                    "errors": status.errors,
                    "cordoned": status.cordoned,
                    "history": [t.to_json() for t in status.history],
                    "unmonitored": status.unmonitored,
                }
                for uuid, status in self.devices.items()
            },
        }
