"""What `/state` shows of DRA mode: the driver, its sockets, the slices and each device.

A node in DRA mode has no device-plugin resources, so its devices are shown
here, each with the health the kubelet would see and the taint it is
published with, as resources show theirs. `stream_health` is what the
kubelet's device-health stream says of each device (`resources.dra_health`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.plan.desired import DraPlan
from resources.dra_health import HealthReport, StreamHealth, health_report
from resources.dra_slices import DeviceHealthView, SliceDevice
from resources.model import Health
from states.health_status import HealthView, Monitoring

if TYPE_CHECKING:
    from kube.resource_slices import SliceState


@dataclass(frozen=True)
class DraStatus:
    """What `/state` shows of DRA mode."""

    serving: bool  # the desired state asks for DRA
    driver: str
    registration_socket: str | None
    plugin_socket: str | None
    kubelet_registered: bool | None
    kubelet_error: str
    slices: SliceState | None
    prepared_claims: int
    problem: str | None  # why DRA cannot run, or a checkpoint set aside
    devices: tuple[SliceDevice, ...] = ()  # as published, taints included
    health_watchers: int = 0  # the kubelet's device-health streams open now

    def to_json(self, health: HealthView | None = None) -> dict[str, object]:
        """The `dra` section of `/state`; `health` adds each device's reason, as resources show."""
        slices = self.slices
        return {
            "serving": self.serving,
            "driver": self.driver,
            "registration_socket": self.registration_socket,
            "plugin_socket": self.plugin_socket,
            "kubelet_registered": self.kubelet_registered,
            "kubelet_error": self.kubelet_error or None,
            "slices": None
            if slices is None
            else {
                "goal": slices.goal.name.lower(),
                "converged": slices.converged,
                "generation": slices.generation,
                "count": slices.slices,
                "devices": slices.devices,
                "error": slices.error or None,
            },
            "prepared_claims": self.prepared_claims,
            "health_watchers": self.health_watchers,
            "problem": self.problem,
            "devices": [_device_json(device, health) for device in self.devices],
        }


def _device_json(device: SliceDevice, health: HealthView | None) -> dict[str, object]:
    reason, since = (None, None) if health is None else health.reason_of(
        device.uuid, device.parent_uuid
    )  # fmt: skip
    return {
        "name": device.name,
        "uuid": device.uuid,
        # A device is offered untainted exactly when the kubelet would see it Healthy.
        "health": "Unhealthy" if device.taints else "Healthy",
        "reason": reason,
        "since": since,
        "unmonitored": None if health is None else health.unmonitored_of(device.uuid),
        "taints": [taint.to_json() for taint in device.taints],
    }


def unhealthy(view: HealthView | None) -> DeviceHealthView:
    """uuid -> (why, since) for every device the kubelet would see Unhealthy."""
    if view is None:
        return {}
    return {
        uuid: (status.reason or "unhealthy", status.since)
        for uuid, status in view.devices.items()
        if str(status.kubelet_health) != "Healthy"
    }


def stream_health(view: HealthView | None) -> dict[str, tuple[StreamHealth, str]]:
    """uuid -> what the device-health stream tells the kubelet of the device, and why.

    Unhealthy with the reason the taint and `/state` carry (`xid 79`, `lost`,
    `cordoned`); Unknown where the plugin cannot tell: health monitoring not
    active (off, or its event stream failed), or a device no health event can
    reach (unmonitored); Healthy otherwise. No view: nothing is known.
    """
    if view is None:
        return {}
    monitoring = view.monitoring
    blind = None
    if monitoring.state is not Monitoring.ACTIVE:
        blind = f"health monitoring {monitoring.state}"
        if monitoring.reason:
            blind += f": {monitoring.reason}"
    said: dict[str, tuple[StreamHealth, str]] = {}
    for uuid, status in view.devices.items():
        if status.kubelet_health is not Health.HEALTHY:
            said[uuid] = (StreamHealth.UNHEALTHY, status.reason or "unhealthy")
        elif blind is not None:
            said[uuid] = (StreamHealth.UNKNOWN, blind)
        elif status.unmonitored is not None:
            said[uuid] = (StreamHealth.UNKNOWN, f"unmonitored: {status.unmonitored}")
        else:
            said[uuid] = (StreamHealth.HEALTHY, "")
    return said


def report_of(plan: DraPlan, view: HealthView | None) -> HealthReport:
    """What the device-health stream sends for `plan`: its devices, as its slices name them."""
    devices = ((device.name, device.uuid) for device in plan.devices)
    return health_report(plan.node, devices, stream_health(view))
