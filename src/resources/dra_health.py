"""The node's DRA devices as the kubelet's device-health stream reports them (pure values).

In DRA mode the plugin tells the kubelet the health of each device of its pool
on the `DRAResourceHealth.NodeWatchResources` stream (KEP-4680), and the kubelet
shows it in the status of the pods that were given the device. This module is
the pure half: a `HealthReport` is the complete list, one `DeviceHealthReport`
per device of the pool, named exactly as the node's ResourceSlices name it (the
pool is the node, the device `gpu-0`, `gpu-7-mig-1g5gb-me-20-6`), each
`Healthy`, `Unhealthy` or `Unknown` with a message saying why. Sending it is
`kubelet.dra.health_stream`; what the health machine says of each device is
turned into a `StreamHealth` in `reconciler.actuators.dra_status`.

Timing, chosen together: the stream sends the list at once when it changes
and again every `RESEND_SECONDS` when it does not, and each device says
`HEALTH_CHECK_TIMEOUT_SECONDS`, three resends, as how long the kubelet may
trust it. The kubelet reads a device it has not heard of for that long as
unknown; two lost resends in a row are forgiven, a plugin that stopped
talking is not believed for more than a minute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "HEALTH_CHECK_TIMEOUT_SECONDS",
    "MESSAGE_LIMIT",
    "NOT_TRACKED",
    "RESEND_SECONDS",
    "DeviceHealthReport",
    "HealthReport",
    "StreamHealth",
    "cut",
    "health_report",
]

#: The longest message the kubelet keeps (it cuts a longer one itself).
MESSAGE_LIMIT = 1024
#: How often the complete list is sent again when nothing changed.
RESEND_SECONDS = 20.0
#: How long the kubelet may trust a device's status without hearing of it again.
HEALTH_CHECK_TIMEOUT_SECONDS = 60
#: The message of a device the health machine does not track (yet).
NOT_TRACKED = "not tracked by the plugin's health monitor"
_ELLIPSIS = "..."


class StreamHealth(StrEnum):
    """A device's health on the stream, in the words the pod status uses."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class DeviceHealthReport:
    """One device of the pool: its health and why ("" when healthy)."""

    pool: str
    device: str
    health: StreamHealth
    message: str = ""


HealthReport = tuple[DeviceHealthReport, ...]


def cut(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """`message` in at most `limit` characters: a longer one keeps its start and ends in '...'."""
    if len(message) <= limit:
        return message
    return message[: max(0, limit - len(_ELLIPSIS))] + _ELLIPSIS[:limit]


def health_report(
    pool: str,
    devices: Iterable[tuple[str, str]],
    health: Mapping[str, tuple[StreamHealth, str]],
) -> HealthReport:
    """The complete list for `devices` ((name, uuid), in slice order) of `pool`.

    `health` maps a device UUID to its health and message; a device it does
    not hold is `Unknown` (`NOT_TRACKED`).
    """
    report: list[DeviceHealthReport] = []
    for name, uuid in devices:
        state, message = health.get(uuid, (StreamHealth.UNKNOWN, NOT_TRACKED))
        report.append(DeviceHealthReport(pool, name, state, message))
    return tuple(report)
