"""What the DRA health stream tells the kubelet, and the pass that sends it.

`stream_health` turns the health machine's view into Healthy / Unhealthy /
Unknown with the reason; the DRA plugin actuator publishes the complete list of
the plan's devices on its server's feed in the pass that follows a change, and
has nothing to do while the list stands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from foundation.outcome import Change, Key, Kind, Retries
from reconciler.actuators.dra import DraParts, DraSide
from reconciler.actuators.dra_status import report_of, stream_health
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.order import Actuators
from resources.dra_health import NOT_TRACKED, DeviceHealthReport, StreamHealth
from states.health_status import (
    DeviceHealth,
    DeviceHealthStatus,
    HealthView,
    Monitoring,
    MonitoringStatus,
)
from tests.unit.reconciler.test_dra_side import (
    BACKOFF,
    DRIVER,
    NODE,
    Clock,
    Preparer,
    Publisher,
    Server,
    by_key,
    node,
)

SINCE = "2026-06-01T12:00:00Z"
DRA_KEY = Key(Kind.DRA, DRIVER)


def status(
    uuid: str, health: DeviceHealth = DeviceHealth.HEALTHY, **extra: object
) -> DeviceHealthStatus:
    reason = None if health is DeviceHealth.HEALTHY else "xid 79"
    return replace(DeviceHealthStatus(uuid, health, reason, SINCE), **extra)  # type: ignore[arg-type]


def view(*statuses: DeviceHealthStatus, monitoring: MonitoringStatus | None = None) -> HealthView:
    return HealthView(monitoring or MonitoringStatus(), {s.uuid: s for s in statuses})


# -- the view, in the stream's words ---------------------------------------------------------


def test_each_device_is_healthy_unhealthy_with_its_reason_or_unknown_with_why() -> None:
    said = stream_health(
        view(
            status("GPU-0"),
            status("GPU-1", DeviceHealth.UNHEALTHY),
            status("GPU-2", DeviceHealth.RECOVERING),
            status("GPU-3", cordoned=True, reason="cordoned"),
            status("GPU-4", unmonitored="NVML cannot register for events: Not Supported"),
        )
    )
    assert said == {
        "GPU-0": (StreamHealth.HEALTHY, ""),
        "GPU-1": (StreamHealth.UNHEALTHY, "xid 79"),
        "GPU-2": (StreamHealth.UNHEALTHY, "xid 79"),  # still not back
        "GPU-3": (StreamHealth.UNHEALTHY, "cordoned"),
        "GPU-4": (
            StreamHealth.UNKNOWN,
            "unmonitored: NVML cannot register for events: Not Supported",
        ),
    }


@pytest.mark.parametrize(
    ("monitoring", "why"),
    [
        (MonitoringStatus(Monitoring.DISABLED, "health checks are off"),
         "health monitoring disabled: health checks are off"),
        (MonitoringStatus(Monitoring.DEGRADED, "nvml-events crashed: boom"),
         "health monitoring degraded: nvml-events crashed: boom"),
    ],
)  # fmt: skip
def test_without_active_monitoring_a_healthy_device_is_unknown_a_sick_one_stays_unhealthy(
    monitoring: MonitoringStatus, why: str
) -> None:
    said = stream_health(
        view(status("GPU-0"), status("GPU-1", DeviceHealth.UNHEALTHY), monitoring=monitoring)
    )
    assert said == {
        "GPU-0": (StreamHealth.UNKNOWN, why),
        "GPU-1": (StreamHealth.UNHEALTHY, "xid 79"),
    }


def test_without_a_health_view_every_device_is_unknown(tmp_path: Path) -> None:
    plan = node(tmp_path).dra
    assert plan is not None
    report = report_of(plan, None)
    assert [d.device for d in report] == [f"gpu-{i}" for i in range(8)]
    assert {(d.pool, d.health, d.message) for d in report} == {
        (NODE, StreamHealth.UNKNOWN, NOT_TRACKED)
    }


# -- the pass that sends it ----------------------------------------------------------------


@dataclass
class Health:
    """The health monitor as the DRA actuators read it: a view, new when something moved."""

    view: HealthView | None = None

    def status(self) -> HealthView | None:
        return self.view


@dataclass
class Rig:
    actuators: Actuators
    server: Server
    health: Health


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    clock = Clock()
    server, health = Server(), Health()
    side = DraSide(env={}, notify=lambda: None)
    side.parts = DraParts(Preparer(), server, Publisher(clock=clock))  # type: ignore[arg-type]
    fleet = PluginFleet(kubelet_socket=tmp_path / "kubelet.sock", register=False)
    actuators = Actuators(
        fleet=fleet,
        health=health,  # type: ignore[arg-type]
        retries=Retries(BACKOFF, clock=clock),
        dra=side,
    )
    return Rig(actuators, server, health)


async def test_a_pass_publishes_the_list_and_a_change_goes_out_in_the_next(
    rig: Rig, tmp_path: Path
) -> None:
    desired = node(tmp_path)
    plan = desired.dra
    assert plan is not None
    uuids = {device.name: device.uuid for device in plan.devices}
    rig.health.view = view(*(status(uuid) for uuid in uuids.values()))
    (first,) = by_key(await rig.actuators.converge(desired), DRA_KEY)
    assert Change.PUBLISHED not in first.changes  # the first list: nothing was said before
    report = rig.server.health.report
    assert report is not None
    assert [(d.pool, d.device, d.health) for d in report] == [
        (NODE, f"gpu-{i}", StreamHealth.HEALTHY) for i in range(8)
    ]

    assert by_key(await rig.actuators.converge(desired), DRA_KEY) == []  # nothing moved

    sick = status(uuids["gpu-3"], DeviceHealth.UNHEALTHY)
    rig.health.view = view(*(status(u) for u in uuids.values() if u != sick.uuid), sick)
    (sent,) = by_key(await rig.actuators.converge(desired), DRA_KEY)
    assert Change.PUBLISHED in sent.changes
    report = rig.server.health.report
    assert report is not None
    assert report[3] == DeviceHealthReport(NODE, "gpu-3", StreamHealth.UNHEALTHY, "xid 79")

    rig.health.view = view(*(status(uuid) for uuid in uuids.values()))  # recovered
    (healed,) = by_key(await rig.actuators.converge(desired), DRA_KEY)
    assert Change.PUBLISHED in healed.changes
    report = rig.server.health.report
    assert report is not None
    assert report[3].health is StreamHealth.HEALTHY


async def test_an_unmonitored_mark_alone_reaches_the_stream(rig: Rig, tmp_path: Path) -> None:
    desired = node(tmp_path)
    plan = desired.dra
    assert plan is not None
    uuids = [device.uuid for device in plan.devices]
    rig.health.view = view(*(status(uuid) for uuid in uuids))
    await rig.actuators.converge(desired)
    marked = status(uuids[0], unmonitored="events not supported")
    rig.health.view = view(marked, *(status(uuid) for uuid in uuids[1:]))
    await rig.actuators.converge(desired)
    report = rig.server.health.report
    assert report is not None
    assert (report[0].health, report[0].message) == (
        StreamHealth.UNKNOWN,
        "unmonitored: events not supported",
    )
