"""Upgrading from the reference chart: its values work, its dead keys are refused.

A user of the reference chart keeps their values file. Everything in it must
either work as before or fail the install with a message that says what to
do; nothing may be silently ignored. `REFERENCE_VALUES` is the reference
chart's own values.yaml (v0.20.0) as a tree, including the bundled NFD
sub-chart's settings under `nfd`, which this chart no longer has.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.deploy.chart import (
    GFD_CONTAINER,
    MPS_CONTAINER,
    PLUGIN_CONTAINER,
    Obj,
    find,
    mounts_of,
    pod_spec,
    render,
    render_error,
    validate,
    volumes_of,
)

REFERENCE_VALUES: dict[str, Any] = {
    "config": {"map": {}, "default": "", "fallbackStrategies": ["named", "single"], "name": ""},
    "compatWithCPUManager": None,
    "migStrategy": None,
    "failOnInitError": None,
    "deviceListStrategy": None,
    "deviceIDStrategy": None,
    "nvidiaDriverRoot": None,
    "gdrcopyEnabled": None,
    "gdsEnabled": None,
    "mofedEnabled": None,
    "deviceDiscoveryStrategy": None,
    "nameOverride": "",
    "fullnameOverride": "",
    "namespaceOverride": "",
    "selectorLabelsOverride": {},
    "allowDefaultNamespace": False,
    "imagePullSecrets": [],
    "image": {"repository": "nvcr.io/nvidia/k8s-device-plugin", "pullPolicy": "IfNotPresent",
              "tag": ""},
    "updateStrategy": {"type": "RollingUpdate"},
    "podAnnotations": {},
    "podSecurityContext": {},
    "securityContext": {},
    "resources": {},
    "nodeSelector": {},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present",
                                   "operator": "In", "values": ["true"]}]},
            {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id",
                                   "operator": "In", "values": ["NVIDIA"]}]},
            {"matchExpressions": [{"key": "nvidia.com/gpu.present",
                                   "operator": "In", "values": ["true"]}]},
        ]}}},
    "tolerations": [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ],
    "priorityClassName": "system-node-critical",
    "runtimeClassName": None,
    "devicePlugin": {"enabled": True},
    "gfd": {
        "enabled": False,
        "nameOverride": "gpu-feature-discovery",
        "namespaceOverride": "",
        "noTimestamp": None,
        "sleepInterval": None,
        "securityContext": {"privileged": True},
    },
    "mps": {"enableHostPID": True, "root": "/run/nvidia/mps"},
    "cdi": {"nvidiaHookPath": None},
    "nfd": {
        "nameOverride": "node-feature-discovery",
        "enableNodeFeatureApi": False,
        "master": {
            "serviceAccount": {"name": "node-feature-discovery", "create": True},
            "config": {"extraLabelNs": ["nvidia.com"]},
        },
        "worker": {
            "tolerations": [
                {"key": "node-role.kubernetes.io/master", "operator": "Equal", "value": "",
                 "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                 "effect": "NoSchedule"},
            ],
            "config": {"sources": {"pci": {"deviceClassWhitelist": ["02", "03"],
                                           "deviceLabelFields": ["vendor"]}}},
        },
    },
}  # fmt: skip

STALE_NFD_MESSAGE = (
    "Value(s) nfd.master, nfd.nameOverride, nfd.worker configured the Node Feature Discovery "
    "sub-chart, which this chart no longer bundles."
)


def without_nfd_sub_chart(values: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(values)
    out["nfd"] = {k: v for k, v in out["nfd"].items() if k in ("enabled", "enableNodeFeatureApi")}
    return out


def test_reference_values_file_fails_only_on_the_nfd_sub_chart() -> None:
    error = render_error(REFERENCE_VALUES)
    assert "validation.yml" in error
    assert STALE_NFD_MESSAGE in error
    assert "helm upgrade -i nfd oci://registry.k8s.io/nfd/charts/node-feature-discovery" in error
    assert "Then set nfd.enabled=true here." in error


@pytest.mark.parametrize("gfd", [False, True])
def test_reference_values_file_renders_once_nfd_is_moved_out(gfd: bool) -> None:
    values = without_nfd_sub_chart(REFERENCE_VALUES)
    values["gfd"]["enabled"] = gfd
    objects = render(values)
    assert len(find(objects, "DaemonSet")) == (3 if gfd else 2)
    for obj in objects:
        validate(obj)
    if gfd:
        # The reference's privileged GFD default is kept when the file says so.
        gfd_ctr = pod_spec(objects, GFD_CONTAINER)["containers"][0]
        assert gfd_ctr["securityContext"] == {"privileged": True}


@pytest.mark.parametrize(
    "nfd",
    [
        {"master": {"config": {}}},
        {"worker": {"tolerations": []}},
        {"gc": {"enable": False}},
        {"topologyUpdater": {"enable": True}},
        {"nameOverride": "nfd"},
        {"enabeld": True},  # a typo of a key that exists fails the same way
    ],
)
def test_each_nfd_sub_chart_key_is_refused_by_name(nfd: dict[str, Any]) -> None:
    (key,) = nfd
    error = render_error({"nfd": nfd})
    assert f"Value(s) nfd.{key} configured the Node Feature Discovery sub-chart" in error


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"nfd": {"enabled": True, "enableNodeFeatureApi": True}}, id="nfd-keys"),
        pytest.param({"gfd": {"nameOverride": "x", "namespaceOverride": "y"}}, id="unused-gfd"),
        pytest.param({"global": {"imageRegistry": "reg.example"}}, id="umbrella-global"),
    ],
)
def test_keys_the_reference_or_umbrella_charts_pass_are_accepted(values: dict[str, Any]) -> None:
    assert render(values)


@pytest.mark.parametrize(
    ("values", "path", "key"),
    [
        pytest.param({"migStrategyy": "mixed"}, "", "migStrategyy", id="top-level"),
        pytest.param({"nvidiaDriverRooot": "/"}, "", "nvidiaDriverRooot", id="top-level-2"),
        pytest.param({"config": {"nmae": "x"}}, "/config", "nmae", id="config"),
        pytest.param({"devicePlugin": {"enable": False}}, "/devicePlugin", "enable", id="dp"),
        pytest.param({"devicePlugin": {"events": {"on": True}}}, "/devicePlugin/events", "on",
                     id="events"),
        pytest.param({"gfd": {"enable": True}}, "/gfd", "enable", id="gfd"),
        pytest.param({"gfd": {"writeNodeLabel": True}}, "/gfd", "writeNodeLabel", id="gfd-2"),
        pytest.param({"mps": {"rot": "/x"}}, "/mps", "rot", id="mps"),
        pytest.param({"cdi": {"hookPath": "/x"}}, "/cdi", "hookPath", id="cdi"),
        pytest.param({"image": {"tagg": "x"}}, "/image", "tagg", id="image"),
        pytest.param({"metrics": {"podmonitor": {}}}, "/metrics", "podmonitor", id="metrics"),
        pytest.param({"metrics": {"podMonitor": {"enable": True}}}, "/metrics/podMonitor",
                     "enable", id="pod-monitor"),
        pytest.param({"devicePlugin": {"resources": {"request": {}}}},
                     "/devicePlugin/resources", "request", id="resources"),
    ],
)  # fmt: skip
def test_schema_refuses_unknown_keys(values: dict[str, Any], path: str, key: str) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert f"at '{path}': additional properties '{key}' not allowed" in error


def test_reference_volume_names_are_kept() -> None:
    objects = render({"gfd": {"enabled": True}, "nvidiaDriverRoot": "/run/nvidia/driver",
                      "config": {"name": "mine"}})  # fmt: skip
    plugin = pod_spec(objects, PLUGIN_CONTAINER)
    assert list(volumes_of(plugin)) == [
        "device-plugin",
        "mps-root",
        "mps-shm",
        "driver-root",
        "cdi-root",
        "available-configs",
    ]
    assert list(mounts_of(plugin["containers"][0])) == [
        "device-plugin",
        "driver-root",
        "mps-shm",
        "mps-root",
        "cdi-root",
        "available-configs",
    ]
    assert list(volumes_of(pod_spec(objects, GFD_CONTAINER))) == [
        "output-dir",
        "host-sys",
        "available-configs",
    ]
    assert list(volumes_of(pod_spec(objects, MPS_CONTAINER))) == [
        "mps-root",
        "mps-shm",
        "available-configs",
    ]


def _merge_by_name(items: list[Obj], patches: list[Obj]) -> list[Obj]:
    """A list under strategic merge: an entry whose `name` exists is merged into it."""
    merged = [copy.deepcopy(item) for item in items]
    for patch in patches:
        same = [item for item in merged if item["name"] == patch["name"]]
        if same:
            _merge(same[0], patch)
        else:
            merged.append(copy.deepcopy(patch))
    return merged


def _merge(target: Obj, patch: Obj) -> None:
    # `containers`, `volumes` and `volumeMounts` merge on `name` in the Kubernetes API.
    for key, value in patch.items():
        if key in ("containers", "volumes", "volumeMounts"):
            target[key] = _merge_by_name(target.get(key, []), value)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def test_a_kustomize_patch_of_the_reference_device_plugin_volume_moves_the_kubelet_dir() -> None:
    # What k0s and MicroK8s users patch into the reference chart's DaemonSet: their
    # kubelet's device-plugins directory, by the reference's volume name.
    kubelet_dir = "/var/lib/k0s/kubelet/device-plugins"
    patch = {"spec": {"template": {"spec": {"volumes": [
        {"name": "device-plugin", "hostPath": {"path": kubelet_dir}}]}}}}  # fmt: skip
    daemonset = next(d for d in find(render(), "DaemonSet") if PLUGIN_CONTAINER in str(d))
    _merge(daemonset, patch)
    validate(daemonset)
    spec = daemonset["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"]].count("device-plugin") == 1
    assert volumes_of(spec)["device-plugin"]["hostPath"] == {"path": kubelet_dir,
                                                             "type": "Directory"}  # fmt: skip
    mount = mounts_of(spec["containers"][0])["device-plugin"]
    assert mount["mountPath"] == "/var/lib/kubelet/device-plugins"
