"""Prometheus metrics on `/metrics`; the plugin's own are prefixed `nvidia_device_plugin_`.

Counters are fed by the loop and the gRPC handlers as things happen; gauges
that describe the current state (lifecycle state, readiness, devices and
their health, the applied config) are read from the published snapshot at
scrape time, so they can never drift from what `/state` shows.

The registry comes from `inspection.telemetry`: it also carries the standard
``process_*`` series (memory, descriptors, CPU, start time) and
``nvidia_device_plugin_build_info``, and no ``*_created`` series.

Health values are spelt as the kubelet spells them, ``Healthy`` and
``Unhealthy``, in every label that carries one.

The series are made with `Metrics`, on the loop's thread, before the
endpoint's threads can scrape them: no object here is made by one thread and
read half-made by another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from inspection import CONTENT_TYPE, telemetry
from resources.model import Health
from states.cordon import CORDONED
from states.health import DeviceHealth, HealthChange
from states.history import TransitionRecord
from states.names import State

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "PREFIX", "Metrics"]

PREFIX = "nvidia_device_plugin_"

# RPCs are answered from memory: most take well under a millisecond.
RPC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0)


def _unix(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _served(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The device-plugin resources, and in DRA mode the driver's devices as one more.

    A DRA device is counted like a resource's device, under the driver's name,
    with its name in the slice (`gpu-0`) as its index.
    """
    resources = state.get("resources")
    served = list(resources) if isinstance(resources, list) else []
    dra = state.get("dra")
    if isinstance(dra, dict) and dra.get("serving"):
        served.append({
            "name": dra["driver"],
            "registered": dra.get("kubelet_registered") is True,
            "devices": [{**device, "index": device["name"]} for device in dra["devices"]],
        })  # fmt: skip
    return served


class _StateCollector:
    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._read()
        lifecycle = GaugeMetricFamily(
            PREFIX + "lifecycle_state",
            "1 for the lifecycle state the plugin is in (blocked_on_error: it cannot "
            "serve and says why on /state), 0 for the others.",
            labels=["state"],
        )
        for name in State:
            lifecycle.add_metric([str(name)], 1.0 if state.get("state") == str(name) else 0.0)
        yield lifecycle
        if "ready" in state:
            ready = GaugeMetricFamily(
                PREFIX + "ready",
                "1 while /readyz answers 200, by readiness mode (serving or running).",
                labels=["readiness"],
            )
            ready.add_metric([str(state.get("readiness"))], 1.0 if state["ready"] else 0.0)
            yield ready
        yield from self._config(state.get("config"))
        yield from self._resources(_served(state))

    def _config(self, config: object) -> Iterator[GaugeMetricFamily]:
        applied = config.get("applied_at") if isinstance(config, dict) else None
        if not isinstance(config, dict) or not isinstance(applied, str):
            return  # nothing applied yet: no sample rather than a made-up one
        family = GaugeMetricFamily(
            PREFIX + "config_applied_timestamp_seconds",
            "Unix time at which the config in force was applied; the label is its digest.",
            labels=["digest"],
        )
        family.add_metric([str(config["digest"])], _unix(applied))
        yield family

    def _resources(self, resources: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
        devices = GaugeMetricFamily(
            PREFIX + "devices",
            "Devices advertised to the kubelet, by resource and health (DRA mode: the "
            "driver's published devices, under the driver's name).",
            labels=["resource", "health"],
        )
        per_device = GaugeMetricFamily(
            PREFIX + "device_healthy",
            "1 when the GPU or MIG device is Healthy, 0 when Unhealthy, per resource "
            "(replicas of one device share its sample; a DRA device's index is its name).",
            labels=["resource", "uuid", "index"],
        )
        cordoned = GaugeMetricFamily(
            PREFIX + "devices_cordoned",
            "Devices advertised Unhealthy only because the node's nvidia.com/gpu.cordon "
            "annotation holds them, by resource.",
            labels=["resource"],
        )
        unmonitored = GaugeMetricFamily(
            PREFIX + "device_unmonitored",
            "1 when no health event can reach the GPU or MIG device (its GPU cannot be "
            "registered for events; it stays Healthy), 0 when it is watched, per resource.",
            labels=["resource", "uuid", "index"],
        )
        registered = GaugeMetricFamily(
            PREFIX + "resource_registered",
            "1 when the kubelet has accepted the resource's (or the DRA driver's) registration.",
            labels=["resource"],
        )
        for resource in resources:
            name = resource["name"]
            counts = {str(Health.HEALTHY): 0, str(Health.UNHEALTHY): 0}
            held = 0
            seen: set[str] = set()
            for device in resource["devices"]:
                counts[device["health"]] = counts.get(device["health"], 0) + 1
                held += device.get("reason") == CORDONED
                if device["uuid"] in seen:
                    continue
                seen.add(device["uuid"])
                healthy = device["health"] == str(Health.HEALTHY)
                per_device.add_metric(
                    [name, device["uuid"], device["index"]], 1.0 if healthy else 0.0
                )
                unmonitored.add_metric(
                    [name, device["uuid"], device["index"]],
                    1.0 if device.get("unmonitored") else 0.0,
                )
            for health, count in sorted(counts.items()):
                devices.add_metric([name, health], float(count))
            cordoned.add_metric([name], float(held))
            registered.add_metric([name], 1.0 if resource["registered"] else 0.0)
        yield devices
        yield per_device
        yield cordoned
        yield unmonitored
        yield registered


class Metrics:
    """The plugin's series, recorded from the loop's thread and rendered on a scrape."""

    def __init__(self, read_state: Callable[[], dict[str, Any]]) -> None:
        self._registry = telemetry.program_registry(PREFIX)
        self._transitions = self._counter(
            "lifecycle_transitions",
            "Lifecycle transitions, by trigger and destination state.",
            ("trigger", "source", "dest"),
        )
        self._reconciles = self._counter(
            "reconciles",
            "Reconcile passes that did something, by result (applied, unchanged, "
            "rejected, error, repaired, reregistered, health, mps).",
            ("result",),
        )
        self._reconcile_seconds = Histogram(
            PREFIX + "reconcile_duration_seconds",
            "Time from a hint to the applied (or rejected) plan.",
            registry=self._registry,
        )
        self._config_errors = self._counter(
            "config_load_errors", "Config files rejected (start-up or reconfiguration)."
        )
        self._kubelet_restarts = self._counter(
            "kubelet_restarts", "Kubelet restarts seen (the kubelet socket was re-created)."
        )
        self._rpcs = self._counter(
            "rpc_requests",
            "DevicePlugin RPCs answered, by resource, method and gRPC status code.",
            ("resource", "method", "code"),
        )
        self._rpc_seconds = Histogram(
            PREFIX + "rpc_duration_seconds",
            "Time to answer a DevicePlugin RPC, by resource and method.",
            ["resource", "method"],
            buckets=RPC_BUCKETS,
            registry=self._registry,
        )
        self._health_transitions = self._counter(
            "health_transitions",
            "Device health changes the kubelet sees, by new health (Healthy or Unhealthy) "
            "and reason.",
            ("health", "reason"),
        )
        self._registry.register(cast("Collector", _StateCollector(read_state)))

    def _counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(PREFIX + name, help_text, labels, registry=self._registry)

    def transition(self, record: TransitionRecord) -> None:
        self._transitions.labels(record.trigger, record.source, record.dest).inc()
        # Every rejected config, at start-up or later, is a `failed` transition
        # that names the error: counted here, and only here.
        if record.trigger == "failed" and record.detail.get("error") == "ConfigError":
            self._config_errors.inc()

    def reconcile(self, result: str, seconds: float) -> None:
        self._reconciles.labels(result).inc()
        self._reconcile_seconds.observe(seconds)

    def kubelet_restarted(self, count: int) -> None:
        self._kubelet_restarts.inc(count)

    def rpc(self, resource: str, method: str, seconds: float, code: str) -> None:
        self._rpcs.labels(resource, method, code).inc()
        self._rpc_seconds.labels(resource, method).observe(seconds)

    def health(self, change: HealthChange) -> None:
        # Moves inside the machine that the kubelet does not see (unhealthy ->
        # recovering) are on /state; the counter follows what is advertised.
        if not change.kubelet_changed:
            return
        healthy = change.dest is DeviceHealth.HEALTHY
        health = Health.HEALTHY if healthy else Health.UNHEALTHY
        self._health_transitions.labels(str(health), change.reason).inc()

    def render(self) -> bytes:
        return telemetry.render(self._registry)
