"""The monitoring objects the chart renders and the dashboard, read for the monitoring tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.unit.deploy.chart import REPO_ROOT, one, render

DASHBOARD = REPO_ROOT / "docs" / "grafana-dashboard.json"
ALL_MONITORING = {
    "gfd": {"enabled": True},
    "metrics": {
        "podMonitor": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
    },
}
MONITORING_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
# Labels Prometheus adds from the target, not the plugin.
TARGET_LABELS = {"namespace", "node", "pod", "job", "instance", "container", "endpoint"}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def alert_rules() -> dict[str, dict[str, Any]]:
    rule = one(render(ALL_MONITORING), "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def dashboard_targets() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


METRIC = re.compile(r"\b(nvidia_device_plugin_[a-z0-9_]+)\b(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def selectors(expr: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(metric, {label: value}) of every selector in a PromQL expression (= matchers only)."""
    for metric, body in METRIC.findall(expr):
        equal = {k: v for k, op, v in MATCHER.findall(body or "") if op == "="}
        yield metric, equal
