"""Prometheus metrics on `/metrics`, all prefixed `nvidia_device_plugin_`.

Counters are fed by the loop and the gRPC handlers as things happen; gauges
that describe the current state (lifecycle state, devices per resource and
health) are read from the published snapshot at scrape time, so they can
never drift from what `/state` shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from states.health import HealthChange
from states.history import TransitionRecord
from states.names import State

PREFIX = "nvidia_device_plugin_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# RPCs are answered from memory: most take well under a millisecond.
RPC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0)


class _StateCollector(Collector):
    def __init__(self, read: Callable[[], dict[str, object]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._read()
        lifecycle = GaugeMetricFamily(
            PREFIX + "lifecycle_state",
            "1 for the lifecycle state the plugin is in, 0 for the others.",
            labels=["state"],
        )
        for name in State:
            lifecycle.add_metric([str(name)], 1.0 if state.get("state") == str(name) else 0.0)
        yield lifecycle
        devices = GaugeMetricFamily(
            PREFIX + "devices",
            "Devices advertised to the kubelet, by resource and health.",
            labels=["resource", "health"],
        )
        registered = GaugeMetricFamily(
            PREFIX + "resource_registered",
            "1 when the kubelet has accepted the resource's registration.",
            labels=["resource"],
        )
        resources = state.get("resources")
        for resource in resources if isinstance(resources, list) else []:
            counts: dict[str, int] = {"Healthy": 0, "Unhealthy": 0}
            for device in resource["devices"]:
                counts[device["health"]] = counts.get(device["health"], 0) + 1
            for health, count in sorted(counts.items()):
                devices.add_metric([resource["name"], health], float(count))
            registered.add_metric([resource["name"]], 1.0 if resource["registered"] else 0.0)
        yield devices
        yield registered


class Metrics:
    def __init__(self, read_state: Callable[[], dict[str, object]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.transitions = Counter(
            PREFIX + "lifecycle_transitions",
            "Lifecycle transitions, by trigger and destination state.",
            ["trigger", "source", "dest"],
            registry=self.registry,
        )
        self.reconciles = Counter(
            PREFIX + "reconciles",
            "Reconcile steps, by result (applied, unchanged, rejected, error, reregistered).",
            ["result"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            PREFIX + "reconcile_duration_seconds",
            "Time from a hint to the applied (or rejected) plan.",
            registry=self.registry,
        )
        self.config_errors = Counter(
            PREFIX + "config_load_errors",
            "Config files rejected (start-up or reconfiguration).",
            registry=self.registry,
        )
        self.kubelet_restarts = Counter(
            PREFIX + "kubelet_restarts",
            "Kubelet restarts seen (the kubelet socket was re-created).",
            registry=self.registry,
        )
        self.rpcs = Counter(
            PREFIX + "rpc_requests",
            "DevicePlugin RPCs answered, by method and gRPC status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.rpc_seconds = Histogram(
            PREFIX + "rpc_duration_seconds",
            "Time to answer a DevicePlugin RPC, by method.",
            ["method"],
            buckets=RPC_BUCKETS,
            registry=self.registry,
        )
        self.health_transitions = Counter(
            PREFIX + "health_transitions",
            "Device health transitions, by new health and reason.",
            ["health", "reason"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(read_state))

    def transition(self, record: TransitionRecord) -> None:
        self.transitions.labels(record.trigger, record.source, record.dest).inc()
        if record.trigger == "kubelet_restarted":
            restarts = record.detail.get("restarts", 1)
            self.kubelet_restarts.inc(restarts if isinstance(restarts, int) else 1)
        # Every rejected config, at start-up or later, is a `failed` transition
        # that names the error: counted here, and only here.
        if record.trigger == "failed" and record.detail.get("error") == "ConfigError":
            self.config_errors.inc()

    def reconcile(self, result: str, seconds: float) -> None:
        self.reconciles.labels(result).inc()
        self.reconcile_seconds.observe(seconds)

    def rpc(self, method: str, seconds: float, code: str) -> None:
        self.rpcs.labels(method, code).inc()
        self.rpc_seconds.labels(method).observe(seconds)

    def health(self, change: HealthChange) -> None:
        self.health_transitions.labels(str(change.dest), change.reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
