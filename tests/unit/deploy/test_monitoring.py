"""Prometheus monitoring: the monitors, the alert rules and the Grafana dashboard.

kubernetes-validate knows no Prometheus Operator CRDs, so the monitoring
objects are checked structurally here: every field is one the CRD defines at
that place (a typo would be dropped silently by the API server), selectors
pick the plugin's pods and never the MPS daemon's or GFD's. The PromQL of the
alerts and of the dashboard is checked against a scrape of a running plugin in
tests/e2e/deploy/test_monitoring_scrape.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.deploy.chart import (
    FULLNAME,
    GFD_CONTAINER,
    MPS_CONTAINER,
    NAMESPACE,
    PLUGIN_CONTAINER,
    REPO_ROOT,
    daemonset_with,
    find,
    kinds_and_names,
    one,
    plugin_container,
    render,
    render_error,
    validate,
)
from tests.unit.deploy.crds import check_monitoring_object
from tests.unit.deploy.monitoring import (
    ALL_MONITORING,
    DASHBOARD,
    MONITORING_KINDS,
    alert_rules,
    dashboard_targets,
    matches,
    selectors,
)

# --- rendering ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="default"),
        pytest.param({"devicePlugin": {"enabled": False}, **ALL_MONITORING}, id="no-plugin"),
    ],
)
def test_nothing_is_rendered_unless_asked_for(values: dict[str, Any]) -> None:
    objects = render(values)
    assert not {o["kind"] for o in objects} & MONITORING_KINDS
    assert not find(objects, "Service")


def test_monitoring_objects_are_structurally_valid() -> None:
    objects = render(ALL_MONITORING)
    assert {("PodMonitor", FULLNAME), ("ServiceMonitor", FULLNAME), ("PrometheusRule", FULLNAME),
            ("Service", f"{FULLNAME}-metrics")} <= kinds_and_names(objects)  # fmt: skip
    for obj in objects:
        if obj["kind"] in MONITORING_KINDS:
            check_monitoring_object(obj)
            assert obj["metadata"]["namespace"] == NAMESPACE
        else:
            validate(obj)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="default-labels"),
        pytest.param({"selectorLabelsOverride": {"app": "gpu"}}, id="selector-override"),
        pytest.param({"podLabels": {"team": "ml"}}, id="pod-labels"),
    ],
)
def test_monitors_select_the_plugin_pods_only(values: dict[str, Any]) -> None:
    objects = render({**ALL_MONITORING, **values})
    pods = {
        name: daemonset_with(objects, name)["spec"]["template"]["metadata"]["labels"]
        for name in (PLUGIN_CONTAINER, MPS_CONTAINER, GFD_CONTAINER)
    }
    service = one(objects, "Service", f"{FULLNAME}-metrics")
    selectors = {
        "PodMonitor": one(objects, "PodMonitor")["spec"]["selector"]["matchLabels"],
        "Service": service["spec"]["selector"],
    }
    for what, selector in selectors.items():
        assert matches(selector, pods[PLUGIN_CONTAINER]), what
        assert not matches(selector, pods[MPS_CONTAINER]), f"{what} selects the MPS daemon"
        assert not matches(selector, pods[GFD_CONTAINER]), f"{what} selects GFD"
    # The ServiceMonitor finds the Service, whose port points at the container's.
    service_monitor = one(objects, "ServiceMonitor")
    assert matches(
        service_monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]
    )
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics"
    assert port["port"] == plugin_container(objects)["ports"][0]["containerPort"]
    assert service["spec"]["clusterIP"] == "None"


def test_monitor_values_reach_the_objects() -> None:
    objects = render(
        {
            "metrics": {
                "podMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "kps"}},
                "prometheusRule": {"enabled": True, "labels": {"release": "kps"},
                                   "blockedFor": "10m", "unhealthyFor": "2m"},
            },
            "devicePlugin": {"inspection": {"port": 9100}},
        }
    )  # fmt: skip
    monitor = one(objects, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "15s"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    rules = {r["alert"]: r for r in one(objects, "PrometheusRule")["spec"]["groups"][0]["rules"]}
    assert rules["NvidiaDevicePluginBlocked"]["for"] == "10m"
    assert rules["NvidiaGPUUnhealthy"]["for"] == "2m"
    assert one(objects, "PrometheusRule")["metadata"]["labels"]["release"] == "kps"


def test_alerts_are_the_three_operators_need() -> None:
    rules = alert_rules()
    scope = f'namespace="{NAMESPACE}"'
    # A GPU cordoned on purpose (node annotation nvidia.com/gpu.cordon) raises no alert.
    assert rules["NvidiaGPUUnhealthy"]["expr"] == (
        f'nvidia_device_plugin_devices{{health="Unhealthy",{scope}}}'
        f" - ignoring(health) nvidia_device_plugin_devices_cordoned{{{scope}}} > 0"
    )
    assert rules["NvidiaDevicePluginBlocked"]["expr"] == (
        f'nvidia_device_plugin_lifecycle_state{{state="blocked_on_error",{scope}}} == 1'
    )
    assert rules["NvidiaDevicePluginBlocked"]["for"] == "5m"
    assert rules["NvidiaDevicePluginConfigRejected"]["expr"] == (
        f"increase(nvidia_device_plugin_config_load_errors_total{{{scope}}}[10m]) > 0"
    )
    for rule in rules.values():
        assert rule["labels"]["severity"] in ("warning", "critical")
        # Prometheus templates reach the rule unexpanded by Helm.
        assert "{{ $labels.node }}" in rule["annotations"]["description"]


def test_dashboard_is_importable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "nvidia-device-plugin"
    assert dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            # Every query follows the node picker.
            assert 'node=~"$node"' in target["expr"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
    # Every alert has a panel that shows its metric.
    exprs = " ".join(dashboard_targets())
    for rule in alert_rules().values():
        for metric, _ in selectors(rule["expr"]):
            assert metric in exprs


def test_dashboard_path_is_documented() -> None:
    guide = (REPO_ROOT / "docs" / "deployment.md").read_text()
    assert str(DASHBOARD.relative_to(REPO_ROOT)) in guide


@pytest.mark.parametrize(
    "label", ["app.kubernetes.io/component", "app.kubernetes.io/name", "app.kubernetes.io/instance"]
)
def test_pod_labels_cannot_take_over_the_selector_labels(label: str) -> None:
    error = render_error({"podLabels": {label: "device-plugin"}})
    assert f"invalid propertyName '{label}'" in error
