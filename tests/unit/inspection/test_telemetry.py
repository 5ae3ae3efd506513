"""What every program's /metrics carries: process series, build info, no `_created`."""

from __future__ import annotations

import os
import platform
import re
from importlib import metadata

from prometheus_client import Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families

from inspection.telemetry import DISTRIBUTION, SideMetrics, program_registry, render, version


def samples(text: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], parsed by prometheus-client's own parser."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_version_is_the_installed_distribution() -> None:
    assert version() == metadata.version(DISTRIBUTION)
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", version())


def test_registry_has_process_series_and_build_info() -> None:
    registry = program_registry("x_")
    found = samples(render(registry))
    for name in (
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
    ):
        assert name in found, name
    ((_, fds),) = found["process_open_fds"]
    assert abs(fds - len(os.listdir("/proc/self/fd"))) <= 2  # this very process
    (info,) = found["x_build_info"]
    assert info == ({"version": version(), "python_version": platform.python_version()}, 1.0)


def test_no_created_series_for_counters_and_histograms() -> None:
    registry = program_registry("y_")
    Counter("y_things", "things", ["kind"], registry=registry).labels("a").inc()
    Histogram("y_seconds", "time", registry=registry).observe(0.1)
    text = render(registry).decode()
    assert "y_things_total" in text
    assert "y_seconds_count" in text
    assert "_created" not in text


def test_side_metrics_counters_and_readings() -> None:
    metrics = SideMetrics("z_")
    passes = metrics.counter("passes", "passes")
    by_kind = metrics.counter("events", "events", ["kind"])
    value: list[float | None] = [None]
    metrics.reading("labels", "labels", lambda: value[0])
    found = samples(metrics.render())
    assert "z_labels" not in found  # unknown yet: no sample at all
    passes()
    passes()
    by_kind("a")
    value[0] = 7
    found = samples(metrics.render())
    assert found["z_passes_total"] == [({}, 2.0)]
    assert found["z_events_total"] == [({"kind": "a"}, 1.0)]
    assert found["z_labels"] == [({}, 7.0)]
    assert "z_build_info" in found
