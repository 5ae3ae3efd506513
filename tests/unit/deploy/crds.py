"""Structural checks of the Prometheus Operator objects the chart renders.

kubernetes-validate ships the schemas of Kubernetes' own kinds only, and the
monitoring.coreos.com CRDs are not available offline, so these objects are
checked against the subset of the CRDs' fields the chart may use: an unknown
field (which the API server would drop silently) or a field of the wrong shape
fails. `chart.validate` sends every such object here.
"""

from __future__ import annotations

import re
from typing import Any

MONITORING_GROUP = "monitoring.coreos.com"

# The fields of monitoring.coreos.com/v1 this chart may use, by place.
ALLOWED: dict[str, set[str]] = {
    "PodMonitor.spec": {"selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel"},
    "PodMonitor.endpoint": {"port", "path", "interval", "scrapeTimeout", "relabelings", "scheme"},
    "ServiceMonitor.spec": {"selector", "namespaceSelector", "endpoints", "jobLabel"},
    "ServiceMonitor.endpoint": {"port", "path", "interval", "scrapeTimeout", "relabelings"},
    "relabeling": {"sourceLabels", "targetLabel", "regex", "replacement", "action", "separator"},
    "selector": {"matchLabels", "matchExpressions"},
    "namespaceSelector": {"matchNames", "any"},
    "PrometheusRule.spec": {"groups"},
    "group": {"name", "rules", "interval"},
    "rule": {"alert", "record", "expr", "for", "labels", "annotations", "keep_firing_for"},
}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def _keys(obj: dict[str, Any], place: str) -> None:
    unknown = set(obj) - ALLOWED[place]
    assert not unknown, f"{place}: fields the CRD does not define: {unknown}"


def _check_selector(selector: dict[str, Any]) -> None:
    _keys(selector, "selector")
    assert all(isinstance(v, str) for v in selector["matchLabels"].values())


def _check_endpoint(endpoint: dict[str, Any], place: str) -> None:
    _keys(endpoint, place)
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    assert DURATION.match(endpoint["interval"])
    for relabeling in endpoint.get("relabelings", []):
        _keys(relabeling, "relabeling")
        assert all(isinstance(label, str) for label in relabeling.get("sourceLabels", []))
        assert isinstance(relabeling.get("targetLabel", ""), str)


def check_monitoring_object(obj: dict[str, Any]) -> None:
    """The structural check of a monitoring.coreos.com/v1 object."""
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    meta = obj["metadata"]
    assert set(meta) == {"name", "namespace", "labels"}
    assert all(isinstance(v, str) for v in meta["labels"].values())
    spec = obj["spec"]
    kind = obj["kind"]
    assert kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule"), kind
    _keys(spec, f"{kind}.spec")
    if kind in ("PodMonitor", "ServiceMonitor"):
        _check_selector(spec["selector"])
        _keys(spec["namespaceSelector"], "namespaceSelector")
        assert all(isinstance(n, str) for n in spec["namespaceSelector"]["matchNames"])
        endpoints = spec["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
        assert len(endpoints) == 1
        _check_endpoint(endpoints[0], f"{kind}.endpoint")
    else:
        for group in spec["groups"]:
            _keys(group, "group")
            for rule in group["rules"]:
                _keys(rule, "rule")
                assert isinstance(rule["expr"], str)
                assert isinstance(rule["alert"], str)
                assert all(isinstance(v, str) for v in rule["labels"].values())
                assert "for" not in rule or DURATION.match(rule["for"])
                assert all(isinstance(v, str) for v in rule["annotations"].values())
