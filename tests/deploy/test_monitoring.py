"""Prometheus monitoring: the monitors, the alert rules and the Grafana dashboard.

kubernetes-validate knows no Prometheus Operator CRDs, so the monitoring
objects are checked structurally here: every field is one the CRD defines at
that place (a typo would be dropped silently by the API server), selectors
pick the plugin's pods and never the MPS daemon's or GFD's. The PromQL of the
alerts and of the dashboard is checked against what a running plugin really
exports: every metric and label value they select must exist in a scrape of
`/metrics`, so a renamed metric breaks this test rather than an alert.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubelet.simulator import KubeletSimulator
from tests.deploy.chart import (
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
from tests.deploy.crds import check_monitoring_object
from tests.integration.harness import PluginProcess, plugin_args

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


def alert_rules() -> dict[str, dict[str, Any]]:
    rule = one(render(ALL_MONITORING), "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_alerts_are_the_three_operators_need() -> None:
    rules = alert_rules()
    scope = f'namespace="{NAMESPACE}"'
    assert rules["NvidiaGPUUnhealthy"]["expr"] == (
        f'nvidia_device_plugin_devices{{health="Unhealthy",{scope}}} > 0'
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


# --- PromQL against a real scrape ------------------------------------------------------

METRIC = re.compile(r"\b(nvidia_device_plugin_[a-z0-9_]+)\b(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def selectors(expr: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(metric, {label: value}) of every selector in a PromQL expression (= matchers only)."""
    for metric, body in METRIC.findall(expr):
        equal = {k: v for k, op, v in MATCHER.findall(body or "") if op == "="}
        yield metric, equal


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, str]]]:
    """Sample name -> label sets, from a plugin serving a simulated DGX A100."""

    async def run() -> str:
        directory = tmp_path_factory.mktemp("kubelet")
        async with (
            KubeletSimulator(directory, write_snapshot_file=False) as sim,
            PluginProcess(plugin_args(sim.directory)) as plugin,
        ):
            await sim.wait_registered("nvidia.com/gpu", timeout=20)
            await plugin.wait_state(lambda s: s["state"] == "serving", timeout=20)
            reply = await plugin.get("/metrics")
            assert reply.status == 200
            return reply.body.decode()

    text = asyncio.run(run())
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        # A family with no samples yet (a labelled counter never incremented)
        # still exists under its sample names.
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        for suffix in suffixes.get(family.type, [""]):
            samples.setdefault(family.name + suffix, [])
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample.labels)
    return samples


def check_expression(expr: str, scrape: dict[str, list[dict[str, str]]]) -> int:
    found = 0
    for metric, wanted in selectors(expr):
        found += 1
        assert metric in scrape, f"{metric} is not exported by the plugin"
        own = {k: v for k, v in wanted.items() if k not in TARGET_LABELS}
        if own:
            assert any(matches(own, labels) for labels in scrape[metric]), (
                f"no series {metric}{own} in a scrape of the plugin"
            )
    return found


@pytest.mark.integration
def test_alert_expressions_select_series_the_plugin_exports(
    scrape: dict[str, list[dict[str, str]]],
) -> None:
    for name, rule in alert_rules().items():
        assert check_expression(rule["expr"], scrape) == 1, name


def dashboard_targets() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


@pytest.mark.integration
def test_dashboard_queries_select_series_the_plugin_exports(
    scrape: dict[str, list[dict[str, str]]],
) -> None:
    exprs = dashboard_targets()
    assert sum(check_expression(e, scrape) for e in exprs) >= len(exprs)


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
