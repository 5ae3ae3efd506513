"""What `/state` shows of DRA mode: the driver, its sockets, the slices and each device.

A node in DRA mode has no device-plugin resources, so its devices are shown
here, each with the health the kubelet would see and the taint it is
published with, as resources show theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from resources.dra_slices import DeviceHealthView, SliceDevice
from states.health_status import HealthView

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
