"""The chart across a matrix that touches every value: lint, schemas, consistency.

For each values set: `helm lint --strict` reports nothing above INFO, every
rendered object validates (strictly, unknown fields are errors) against the
newest Kubernetes schema kubernetes-validate ships, and the objects agree with
each other (selectors match pod labels, mounts name volumes, service accounts
and ConfigMaps exist, names fit in 63 characters).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from tests.unit.deploy.chart import (
    CHART_DIR,
    CHART_VERSION,
    KUBERNETES_VERSION,
    NAMESPACE,
    REPO_ROOT,
    find,
    one,
    render,
    validate,
)
from tests.unit.deploy.seed import CONFIG0, CONFIG1, DRA_CONFIG, SEED_INSTALLS

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "DeviceClass",
}
LONG_RELEASE = "a-very-long-release-name-that-reaches-the-helm-limit-of-53"

EVERY_PLUGIN_VALUE: dict[str, Any] = {
    "migStrategy": "mixed",
    "failOnInitError": False,
    "compatWithCPUManager": True,
    "deviceListStrategy": "envvar,cdi-annotations",
    "deviceIDStrategy": "index",
    "nvidiaDriverRoot": "/run/nvidia/driver",
    "nvidiaDevRoot": "/",
    "gdrcopyEnabled": True,
    "gdsEnabled": False,
    "mofedEnabled": True,
    "deviceDiscoveryStrategy": "nvml",
    "cdi": {"nvidiaHookPath": "/usr/bin/nvidia-cdi-hook", "featureFlags": "flag-a"},
    "logFormat": "text",
    "mps": {"root": "/var/run/mps", "enableHostPID": False, "enableHostNetwork": True},
}

EVERY_GENERIC_VALUE: dict[str, Any] = {
    "nameOverride": "gpu-plugin",
    "namespaceOverride": "gpu-operator",
    "imagePullSecrets": [{"name": "regcred"}],
    "image": {"repository": "registry.example.com/dp", "tag": "dev", "pullPolicy": "Always"},
    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
    "podAnnotations": {"prometheus.io/scrape": "true"},
    "podLabels": {"team": "ml"},
    "podSecurityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    "securityContext": {"privileged": True},
    "resources": {"requests": {"cpu": "50m"}, "limits": {"memory": "256Mi"}},
    "nodeSelector": {"pool": "gpu"},
    "affinity": None,
    "tolerations": [{"operator": "Exists"}],
    "priorityClassName": "",
    "runtimeClassName": "nvidia",
    "devicePlugin": {"enableHostNetwork": True},
    "gfd": {"enabled": True, "enableHostNetwork": True},
}

CASES: list[Any] = [
    *(
        pytest.param(values, namespace, "nvdp", id=f"readme-{case}")
        for case, namespace, values in SEED_INSTALLS
    ),
    pytest.param(
        {"config": {"map": {"config0": CONFIG0, "config1": CONFIG1, "default": ""}}},
        NAMESPACE,
        "nvdp",
        id="label-selected-named-default",
    ),
    pytest.param(
        {"config": {"map": {"a": CONFIG0, "b": CONFIG1}, "fallbackStrategies": ["empty"]}},
        NAMESPACE,
        "nvdp",
        id="fallback-empty",
    ),
    pytest.param({"migStrategy": "mixed"}, NAMESPACE, "nvdp", id="mig-mixed"),
    pytest.param(
        {"gfd": {"enabled": True, "useNodeFeatureAPI": True}, "nfd": {"enabled": True}},
        NAMESPACE,
        "nvdp",
        id="gfd-nfd-nodefeature",
    ),
    pytest.param({"allowDefaultNamespace": True}, "default", "nvdp", id="default-ns-allowed"),
    pytest.param(EVERY_PLUGIN_VALUE, NAMESPACE, "nvdp", id="every-plugin-value"),
    pytest.param(EVERY_GENERIC_VALUE, NAMESPACE, "nvdp", id="every-generic-value"),
    pytest.param(
        {"selectorLabelsOverride": {"app": "gpu"}, "fullnameOverride": "gpu"},
        NAMESPACE,
        "nvdp",
        id="selector-override",
    ),
    pytest.param({"gfd": {"enabled": True}}, NAMESPACE, LONG_RELEASE, id="long-release"),
    pytest.param(
        {"gfd": {"enabled": True, "writeNodeLabels": True}, "nfd": {"enableNodeFeatureApi": True}},
        NAMESPACE,
        LONG_RELEASE,
        id="gfd-every-api-use",
    ),
    pytest.param(
        {
            "devicePlugin": {"events": {"enabled": False}},
            "gfd": {"enabled": True},
            "resources": None,
            "mps": {"resources": None},
        },
        NAMESPACE,
        "nvdp",
        id="no-api-access",
    ),
    pytest.param(
        {
            "kubeletApi": "dra",
            "dra": {
                "driverName": "gpu.example.com",
                "kubeletRegistrarDirectoryPath": "/var/lib/k0s/kubelet/plugins_registry",
                "kubeletPluginsDirectoryPath": "/var/lib/k0s/kubelet/plugins",
                "deviceClass": {"extendedResourceName": "nvidia.com/gpu"},
            },
            "devicePlugin": {"events": {"enabled": False}},
        },
        NAMESPACE,
        LONG_RELEASE,
        id="dra",
    ),
    pytest.param(
        {
            "dra": {"enabled": True, "admissionPolicy": {"enabled": False}},
            "config": {"map": {"default": CONFIG0, "dra": DRA_CONFIG}},
            "gfd": {"enabled": True, "writeNodeLabels": True},
        },
        NAMESPACE,
        "nvdp",
        id="dra-per-node",
    ),
    pytest.param(
        {
            "metrics": {
                "podMonitor": {"enabled": True, "labels": {"release": "kps"}},
                "serviceMonitor": {"enabled": True, "interval": "1m"},
                "prometheusRule": {"enabled": True},
            },
            "namespaceOverride": "monitoring-test",
        },
        NAMESPACE,
        LONG_RELEASE,
        id="monitoring",
    ),
]


@pytest.mark.parametrize(("values", "namespace", "release"), CASES)
def test_lint_is_clean(values: dict[str, Any], namespace: str, release: str) -> None:
    report = helm.lint(
        CHART_DIR, values, namespace=namespace, strict=True, kube_version=f"v{KUBERNETES_VERSION}"
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize(("values", "namespace", "release"), CASES)
def test_every_object_is_valid(values: dict[str, Any], namespace: str, release: str) -> None:
    for obj in render(values, release=release, namespace=namespace):
        validate(obj)


@pytest.mark.parametrize(("values", "namespace", "release"), CASES)
def test_objects_are_consistent(values: dict[str, Any], namespace: str, release: str) -> None:
    objects = render(values, release=release, namespace=namespace)
    expected_ns = values.get("namespaceOverride") or namespace
    accounts = {o["metadata"]["name"] for o in find(objects, "ServiceAccount")}
    configmaps = {o["metadata"]["name"] for o in find(objects, "ConfigMap")}
    external = values.get("config", {}).get("name")
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), "two objects share a kind and name"
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta
        elif obj["metadata"]["name"].endswith("-events"):
            assert meta["namespace"] == "default"  # where Events about nodes must live
        else:
            assert meta["namespace"] == expected_ns
        assert len(meta["name"]) <= 63
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in find(objects, kind):
            role = binding["roleRef"]
            assert one(objects, role["kind"], role["name"])["metadata"].get("namespace") == (
                binding["metadata"].get("namespace")
            )
            assert {s["name"] for s in binding["subjects"]} <= accounts
            assert {s["namespace"] for s in binding["subjects"]} == {expected_ns}
    for ds in find(objects, "DaemonSet"):
        template = ds["spec"]["template"]
        selector = ds["spec"]["selector"]["matchLabels"]
        assert selector.items() <= template["metadata"]["labels"].items()
        spec = template["spec"]
        if "serviceAccountName" in spec:
            assert spec["serviceAccountName"] in accounts
        else:
            assert spec["automountServiceAccountToken"] is False
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for ctr in spec["containers"] + spec.get("initContainers", []):
            assert ctr["image"]
            assert ctr["imagePullPolicy"]
            for mount in ctr.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{ctr['name']} mounts a missing volume"
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] in configmaps | {external}


def test_chart_identity_follows_the_project_version() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    with helm.Chart.load(CHART_DIR) as chart:
        meta = chart.metadata
        assert chart.dependencies == []
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "nvidia-device-plugin"
    assert meta["type"] == "application"
    assert meta["version"] == meta["appVersion"] == project


def test_packaged_chart_renders_like_the_directory(tmp_path: Path) -> None:
    archive = Path(helm.package(CHART_DIR, destination=tmp_path))
    assert archive.name == f"nvidia-device-plugin-{CHART_VERSION}.tgz"
    with helm.Chart.load(archive) as chart:
        packaged = chart.render({"gfd": {"enabled": True}}, name="nvdp", namespace=NAMESPACE)
    with helm.Chart.load(CHART_DIR) as chart:
        direct = chart.render({"gfd": {"enabled": True}}, name="nvdp", namespace=NAMESPACE)
    assert packaged == direct


def _schema_gaps(values: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    props = schema.get("properties")
    if props is None:
        return []  # a free-form map (annotations, resources, ...)
    gaps = []
    for key, value in values.items():
        if key not in props:
            gaps.append(f"{path}{key}")
        elif isinstance(value, dict):
            gaps.extend(_schema_gaps(value, props[key], f"{path}{key}."))
    return gaps


def test_every_declared_value_has_a_schema_entry() -> None:
    with helm.Chart.load(CHART_DIR) as chart:
        values, schema = chart.values, chart.schema
    assert schema is not None
    assert _schema_gaps(values, schema, "") == []
