"""DRA mode on `/state` and `/metrics`: each published device with its health, as resources show.

A node in DRA mode has no device-plugin resources, so without this its GPUs
would vanish from the per-device series and `/state` would only count them.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kube.resource_slices import Goal, SliceState
from reconciler.actuators.dra_status import DraStatus
from reconciler.core.status import LoopStatus
from reconciler.observation.metrics import Metrics
from reconciler.observation.snapshot import take
from reconciler.plan.inputs import ConfigChoice
from resources.dra_slices import slice_devices
from resources.options import MigStrategy
from settings.choices import Readiness
from states.health import DeviceHealth
from states.health_status import DeviceHealthStatus, HealthView, MonitoringStatus
from states.names import State
from tests.unit.resources.nodes import gpu_uuid, plain_node

DRIVER = "gpu.nvidia.com"
SINCE = "2026-06-01T12:00:00Z"


def health() -> HealthView:
    sick = DeviceHealthStatus(gpu_uuid(1), DeviceHealth.UNHEALTHY, "xid 79", SINCE)
    well = DeviceHealthStatus(gpu_uuid(0), DeviceHealth.HEALTHY, None, SINCE, unmonitored="no")
    return HealthView(MonitoringStatus(), {gpu_uuid(0): well, gpu_uuid(1): sick})


def status(
    *, registered: bool | None = True, serving: bool = True, landed: bool = True
) -> DraStatus:
    devices = slice_devices(plain_node(2), MigStrategy.NONE, {gpu_uuid(1): ("xid 79", SINCE)})
    slices = SliceState(Goal.PUBLISH, converged=landed, generation=1, slices=1, devices=2)
    return DraStatus(
        serving=serving, driver=DRIVER, registration_socket=None, plugin_socket=None,
        kubelet_registered=registered, kubelet_error="", slices=slices, prepared_claims=0,
        problem=None, devices=tuple(devices),
    )  # fmt: skip


def samples(state: dict[str, Any]) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    text = Metrics(lambda: state).render().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_state_lists_each_published_device_with_its_health_reason_and_taint() -> None:
    devices = status().to_json(health())["devices"]
    assert devices == [
        {"name": "gpu-0", "uuid": gpu_uuid(0), "health": "Healthy", "reason": None,
         "since": SINCE, "unmonitored": "no", "taints": []},
        {"name": "gpu-1", "uuid": gpu_uuid(1), "health": "Unhealthy", "reason": "xid 79",
         "since": SINCE, "unmonitored": None,
         "taints": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule",
                     "timeAdded": SINCE}]},
    ]  # fmt: skip


def test_metrics_count_dra_devices_under_the_driver_as_they_count_a_resource() -> None:
    state = {"resources": [], "dra": status().to_json(health())}
    found = samples(state)
    prefix = "nvidia_device_plugin_"
    assert sorted((s["health"], v) for s, v in found[prefix + "devices"]) == [
        ("Healthy", 1.0),
        ("Unhealthy", 1.0),
    ]
    assert {s["resource"] for s, _ in found[prefix + "devices"]} == {DRIVER}
    assert sorted((s["index"], v) for s, v in found[prefix + "device_healthy"]) == [
        ("gpu-0", 1.0),
        ("gpu-1", 0.0),
    ]
    assert sorted((s["index"], v) for s, v in found[prefix + "device_unmonitored"]) == [
        ("gpu-0", 1.0),
        ("gpu-1", 0.0),
    ]
    assert found[prefix + "resource_registered"] == [({"resource": DRIVER}, 1.0)]


def test_a_driver_the_kubelet_has_not_registered_and_a_withdrawn_side_are_told_apart() -> None:
    waiting = samples({"resources": [], "dra": status(registered=None).to_json()})
    assert waiting["nvidia_device_plugin_resource_registered"] == [({"resource": DRIVER}, 0.0)]
    withdrawn = samples({"resources": [], "dra": status(serving=False).to_json()})
    assert "nvidia_device_plugin_resource_registered" not in withdrawn


def loop_status(dra: DraStatus) -> LoopStatus:
    return LoopStatus(
        state=State.SERVING, since=SINCE, reason=None, history=(), desired=None,
        choice=ConfigChoice(), resources=(), health=None, dra=dra, mailbox_depth=0,
        fail_on_init_error=True,
    )  # fmt: skip


def test_serving_readiness_waits_for_the_kubelet_to_register_the_driver() -> None:
    assert take(loop_status(status(registered=None)), readiness=Readiness.SERVING).ready is False
    assert take(loop_status(status(registered=False)), readiness=Readiness.SERVING).ready is False
    assert take(loop_status(status(registered=True)), readiness=Readiness.SERVING).ready is True
    withdrawn = status(serving=False, registered=None)  # a device-plugin node again
    assert take(loop_status(withdrawn), readiness=Readiness.SERVING).ready is True


def test_serving_readiness_waits_for_the_slices_to_land() -> None:
    unlanded = status(registered=True, landed=False)  # a write failing, or not made yet
    assert take(loop_status(unlanded), readiness=Readiness.SERVING).ready is False
