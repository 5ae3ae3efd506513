"""The generic Helm knobs reach every DaemonSet as documented."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart import (
    FULLNAME,
    MPS_CONTAINER,
    NAMESPACE,
    find,
    kinds_and_names,
    one,
    plugin_container,
    pod_spec,
    render,
)

ALL = {"gfd": {"enabled": True}}
DEFAULT_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]
AFFINITY_KEYS = [
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/cpu-model.vendor_id",
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.count",
]


def daemonsets(values: dict[str, Any]) -> list[dict[str, Any]]:
    dss = find(render({**ALL, **values}), "DaemonSet")
    assert len(dss) == 3
    return dss


def pods(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [ds["spec"]["template"] for ds in daemonsets(values)]


def all_containers(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        ctr
        for pod in pods(values)
        for ctr in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
    ]


def test_default_image_is_the_app_version_tag() -> None:
    assert {c["image"] for c in all_containers({})} == {"nvidia-device-plugin-py:v0.1.0"}
    assert {c["imagePullPolicy"] for c in all_containers({})} == {"IfNotPresent"}


def test_image_values_apply_to_every_container() -> None:
    values = {"image": {"repository": "reg.example/dp", "tag": "1.2", "pullPolicy": "Always"}}
    assert {c["image"] for c in all_containers(values)} == {"reg.example/dp:1.2"}
    assert {c["imagePullPolicy"] for c in all_containers(values)} == {"Always"}


def test_default_placement() -> None:
    # GFD follows the top-level affinity unless it writes node labels itself.
    for pod in pods({}):
        spec = pod["spec"]
        assert spec["tolerations"] == DEFAULT_TOLERATIONS
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        keys = [t["matchExpressions"][0]["key"] for t in terms["nodeSelectorTerms"]]
        assert keys == AFFINITY_KEYS
        assert spec["priorityClassName"] == "system-node-critical"
        assert "runtimeClassName" not in spec
        assert spec["securityContext"] == {}


@pytest.mark.parametrize(
    ("values", "field", "expected"),
    [
        pytest.param({"affinity": None}, "affinity", None, id="affinity-cleared"),
        pytest.param({"tolerations": []}, "tolerations", None, id="tolerations-cleared"),
        pytest.param(
            {"tolerations": [{"operator": "Exists"}]},
            "tolerations",
            [{"operator": "Exists"}],
            id="tolerations",
        ),
        pytest.param({"priorityClassName": ""}, "priorityClassName", None, id="no-priority"),
        pytest.param({"runtimeClassName": "nvidia"}, "runtimeClassName", "nvidia", id="runtime"),
        pytest.param(
            {"imagePullSecrets": [{"name": "regcred"}]},
            "imagePullSecrets",
            [{"name": "regcred"}],
            id="pull-secrets",
        ),
        pytest.param(
            {"podSecurityContext": {"runAsNonRoot": False}},
            "securityContext",
            {"runAsNonRoot": False},
            id="pod-security",
        ),
    ],
)
def test_pod_spec_values(values: dict[str, Any], field: str, expected: Any) -> None:
    for pod in pods(values):
        assert pod["spec"].get(field) == expected


def test_node_selector_applies_everywhere_and_keeps_the_mps_label() -> None:
    objects = render({**ALL, "nodeSelector": {"pool": "gpu"}})
    for ds in find(objects, "DaemonSet"):
        assert ds["spec"]["template"]["spec"]["nodeSelector"]["pool"] == "gpu"
    assert pod_spec(objects, MPS_CONTAINER)["nodeSelector"]["nvidia.com/mps.capable"] == "true"


def test_pod_annotations_and_labels() -> None:
    values = {"podAnnotations": {"a.example/x": "1"}, "podLabels": {"team": "ml"}}
    components = set()
    for pod in pods(values):
        assert pod["metadata"]["annotations"] == {"a.example/x": "1"}
        assert pod["metadata"]["labels"]["team"] == "ml"
        components.add(pod["metadata"]["labels"]["app.kubernetes.io/component"])
    assert components == {"device-plugin", "gpu-feature-discovery", "mps-control-daemon"}


def test_no_config_checksum_annotation_so_config_changes_do_not_restart_pods() -> None:
    for pod in pods({"config": {"map": {"default": "version: v1\n"}}}):
        assert "annotations" not in pod["metadata"]


@pytest.mark.parametrize(
    "strategy",
    [{"type": "OnDelete"}, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}],
)
def test_update_strategy(strategy: dict[str, Any]) -> None:
    for ds in daemonsets({"updateStrategy": strategy}):
        assert ds["spec"]["updateStrategy"] == strategy


def test_resources_go_to_the_main_containers_and_the_mps_mount_step() -> None:
    resources = {"requests": {"cpu": "100m"}, "limits": {"memory": "512Mi"}}
    with_resources = {
        c["name"] for c in all_containers({"resources": resources}) if c.get("resources")
    }
    assert with_resources == {
        "nvidia-device-plugin-ctr",
        "gpu-feature-discovery-ctr",
        "mps-control-daemon-ctr",
        "mps-control-daemon-mounts",
    }


def test_labels_and_selectors() -> None:
    objects = render(ALL)
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "nvidia-device-plugin-0.1.0"
        assert labels["app.kubernetes.io/name"] == "nvidia-device-plugin"
        assert labels["app.kubernetes.io/instance"] == "nvdp"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
    for ds in find(objects, "DaemonSet"):
        assert ds["spec"]["selector"]["matchLabels"] == {
            "app.kubernetes.io/name": "nvidia-device-plugin",
            "app.kubernetes.io/instance": "nvdp",
        }


def test_selector_labels_override_replaces_the_selector() -> None:
    for ds in daemonsets({"selectorLabelsOverride": {"app": "gpu"}}):
        assert ds["spec"]["selector"]["matchLabels"] == {"app": "gpu"}
        assert ds["metadata"]["labels"]["app"] == "gpu"
        assert ds["spec"]["template"]["metadata"]["labels"]["app"] == "gpu"


@pytest.mark.parametrize(
    ("release", "values", "fullname"),
    [
        pytest.param("nvdp", {}, FULLNAME, id="release-plus-chart"),
        pytest.param("nvidia-device-plugin", {}, "nvidia-device-plugin", id="release-has-chart"),
        pytest.param("nvdp", {"nameOverride": "gpu"}, "nvdp-gpu", id="name-override"),
        pytest.param("nvdp", {"fullnameOverride": "gpu-dp"}, "gpu-dp", id="fullname-override"),
    ],
)
def test_naming(release: str, values: dict[str, Any], fullname: str) -> None:
    objects = render(values, release=release)
    assert kinds_and_names(objects) == {
        ("DaemonSet", fullname),
        ("DaemonSet", f"{fullname}-mps-control-daemon"),
        ("ServiceAccount", f"{fullname}-service-account"),
        ("ClusterRole", f"{fullname}-role"),
        ("ClusterRoleBinding", f"{fullname}-role-binding"),
        ("Role", f"{fullname}-events"),
        ("RoleBinding", f"{fullname}-events"),
    }


def test_namespace_override_moves_namespaced_objects_and_the_binding_subject() -> None:
    objects = render({"namespaceOverride": "gpu-operator"})
    for obj in objects:
        if obj["kind"] in ("Role", "RoleBinding"):
            assert obj["metadata"]["namespace"] == "default"  # Events about nodes live there
        elif obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "gpu-operator"
    binding = one(objects, "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "gpu-operator"
    assert NAMESPACE != "gpu-operator"


def test_long_release_names_give_distinct_daemonset_names() -> None:
    release = "a-very-long-release-name-that-reaches-the-helm-limit-of-53"
    names = [ds["metadata"]["name"] for ds in find(render(ALL, release=release), "DaemonSet")]
    assert len(set(names)) == 3
    assert all(len(name) <= 63 for name in names)
    assert any(name.endswith("-gpu-feature-discovery") for name in names)
    assert any(name.endswith("-mps-control-daemon") for name in names)


def test_user_security_context_only_replaces_the_plugin_one() -> None:
    objects = render({**ALL, "securityContext": {"runAsUser": 0}})
    assert plugin_container(objects)["securityContext"] == {"runAsUser": 0}
    assert pod_spec(objects, MPS_CONTAINER)["containers"][0]["securityContext"] == {
        "privileged": True
    }
