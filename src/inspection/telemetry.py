"""Prometheus plumbing shared by the three programs: process series, build info, no `_created`.

The plugin, ``gpu-feature-discovery`` and ``mps-control-daemon`` each serve
``/metrics`` from a registry built by `program_registry`, so all three show
the same things an operator looks for first:

- prometheus-client's process collector under the standard ``process_*``
  names (resident memory, open descriptors, CPU seconds, start time), which
  existing dashboards and alerts already know, so they are not prefixed;
- ``<prefix>build_info``, always 1, labelled with the installed version of
  this project (the same `version()` that ``--version`` prints) and the
  Python version;
- no ``*_created`` series: they double the size of every counter and carry
  nothing a scraper needs (the process start time already says it).

Only this package and the plugin's `reconciler.observation.metrics` talk to
prometheus-client; `SideMetrics` gives the two side programs counters and
gauges without the library leaking into their packages.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from inspection import CONTENT_TYPE

__all__ = [
    "CONTENT_TYPE",
    "DISTRIBUTION",
    "SideMetrics",
    "program_registry",
    "render",
    "version",
]

DISTRIBUTION = "nvidia-device-plugin-py"


def version() -> str:
    """The installed version of this project, or ``unknown`` when run from a bare checkout."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def program_registry(prefix: str) -> CollectorRegistry:
    """A fresh registry with the process collector and ``<prefix>build_info``."""
    # A process-wide switch in prometheus-client; every program wants it off.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    info = Gauge(
        prefix + "build_info",
        "Always 1; the labels say which build is running.",
        ["version", "python_version"],
        registry=registry,
    )
    info.labels(version(), platform.python_version()).set(1)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


class _Readings(Collector):
    """Gauges whose value is read at scrape time, so they never go stale."""

    def __init__(self) -> None:
        self._gauges: list[tuple[str, str, Callable[[], float | None]]] = []

    def add(self, name: str, help_text: str, read: Callable[[], float | None]) -> None:
        self._gauges.append((name, help_text, read))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, help_text, read in self._gauges:
            value = read()
            if value is not None:  # unknown yet: no sample rather than a made-up one
                yield GaugeMetricFamily(name, help_text, value=value)


class SideMetrics:
    """The metrics of a side program: process, build info, and a few of its own.

    ``counter`` hands back an incrementing function and ``reading`` registers
    a gauge read at scrape time; the caller never sees prometheus-client.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.registry = program_registry(prefix)
        self._readings = _Readings()
        self.registry.register(self._readings)

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Callable[..., None]:
        """``inc(*label_values)`` for a counter ``<prefix><name>_total``."""
        counter = Counter(self.prefix + name, help_text, list(labels), registry=self.registry)

        def inc(*values: str) -> None:
            (counter.labels(*values) if values else counter).inc()

        return inc

    def reading(self, name: str, help_text: str, read: Callable[[], float | None]) -> None:
        """A gauge ``<prefix><name>`` whose value is ``read()`` at each scrape (None: absent)."""
        self._readings.add(self.prefix + name, help_text, read)

    def render(self) -> bytes:
        return render(self.registry)
