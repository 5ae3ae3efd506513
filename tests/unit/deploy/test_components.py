"""Which objects each switch renders, and the GFD, MPS and RBAC objects in detail."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart import (
    FULLNAME,
    GFD_CONTAINER,
    MPS_CONTAINER,
    MPS_MOUNT_CONTAINER,
    container,
    env_of,
    find,
    kinds_and_names,
    mounts_of,
    pod_spec,
    render,
    render_notes,
    volumes_of,
)
from tests.unit.deploy.seed import CONFIG0

# The plugin's account exists by default because Events are on.
PLUGIN_RBAC = {
    ("ServiceAccount", f"{FULLNAME}-service-account"),
    ("ClusterRole", f"{FULLNAME}-role"),
    ("ClusterRoleBinding", f"{FULLNAME}-role-binding"),
    ("Role", f"{FULLNAME}-events"),
    ("RoleBinding", f"{FULLNAME}-events"),
}
PLUGIN_DS = {("DaemonSet", FULLNAME), ("DaemonSet", f"{FULLNAME}-mps-control-daemon")}
GFD_DS = {("DaemonSet", f"{FULLNAME}-gpu-feature-discovery")}
CONFIGMAP = {("ConfigMap", f"{FULLNAME}-configs")}
# With a ConfigMap the MPS daemon reads its node's config label, as the plugin does.
MPS_RBAC = {
    ("ServiceAccount", f"{FULLNAME}-mps-service-account"),
    ("ClusterRole", f"{FULLNAME}-mps-role"),
    ("ClusterRoleBinding", f"{FULLNAME}-mps-role-binding"),
}
# ... and so does gpu-feature-discovery.
GFD_RBAC = {
    ("ServiceAccount", f"{FULLNAME}-gfd-service-account"),
    ("ClusterRole", f"{FULLNAME}-gfd-role"),
    ("ClusterRoleBinding", f"{FULLNAME}-gfd-role-binding"),
}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({}, PLUGIN_RBAC | PLUGIN_DS, id="default"),
        pytest.param({"gfd": {"enabled": True}}, PLUGIN_RBAC | PLUGIN_DS | GFD_DS, id="gfd"),
        pytest.param({"devicePlugin": {"enabled": False}}, GFD_DS, id="gfd-only"),
        pytest.param(
            {"devicePlugin": {"enabled": False}, "gfd": {"enabled": False}}, set(), id="nothing"
        ),
        pytest.param({"gfd": {"enabled": False}}, PLUGIN_RBAC | PLUGIN_DS, id="gfd-off"),
        pytest.param({"nfd": {"enabled": True}}, PLUGIN_RBAC | PLUGIN_DS, id="nfd-alone"),
        pytest.param(
            {"config": {"map": {"config": CONFIG0}}},
            PLUGIN_RBAC | PLUGIN_DS | CONFIGMAP | MPS_RBAC,
            id="map",
        ),
        pytest.param(
            {"config": {"name": "mine"}}, PLUGIN_RBAC | PLUGIN_DS | MPS_RBAC, id="external"
        ),
        pytest.param(
            {"config": {"name": "mine"}, "gfd": {"enabled": True}},
            PLUGIN_RBAC | PLUGIN_DS | MPS_RBAC | GFD_DS | GFD_RBAC,
            id="external-with-gfd",
        ),
        pytest.param(
            {"config": {"name": "mine"}, "devicePlugin": {"enabled": False}},
            GFD_DS | GFD_RBAC,
            id="gfd-only-with-config",
        ),
    ],
)
def test_rendered_objects(values: dict[str, Any], expected: set[tuple[str, str]]) -> None:
    assert kinds_and_names(render(values)) == expected


def test_gfd_container() -> None:
    objects = render(
        {
            "gfd": {"enabled": True, "noTimestamp": True, "sleepInterval": "30s"},
            "migStrategy": "single",
            "failOnInitError": False,
            "deviceDiscoveryStrategy": "nvml",
            "config": {"name": "mine", "default": "a"},
        }
    )
    ctr = container(objects, GFD_CONTAINER)
    assert ctr["command"] == ["gpu-feature-discovery"]
    env = env_of(ctr)
    assert env["NODE_NAME"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NAMESPACE"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["MIG_STRATEGY"] == "single"
    assert env["FAIL_ON_INIT_ERROR"] == "false"
    assert env["GFD_NO_TIMESTAMP"] == "true"
    assert env["GFD_SLEEP_INTERVAL"] == "30s"
    assert env["DEVICE_DISCOVERY_STRATEGY"] == "nvml"
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert env["CONFIG_DIRECTORY"] == "/available-configs"
    assert env["DEFAULT_CONFIG"] == "a"
    assert env["GFD_USE_NODE_FEATURE_API"] == "false"
    assert env["GFD_WRITE_NODE_LABELS"] == "false"
    assert ctr["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}
    mounts = mounts_of(ctr)
    assert mounts["output-dir"]["mountPath"] == "/etc/kubernetes/node-feature-discovery/features.d"
    assert mounts["host-sys"] == {"name": "host-sys", "mountPath": "/sys", "readOnly": True}
    assert mounts["available-configs"]["mountPath"] == "/available-configs"
    volumes = volumes_of(pod_spec(objects, GFD_CONTAINER))
    assert volumes["output-dir"]["hostPath"]["type"] == "DirectoryOrCreate"
    assert volumes["available-configs"]["configMap"] == {"name": "mine"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {},
            {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            id="unprivileged",
        ),
        pytest.param(
            {"gfd": {"securityContext": {"privileged": True}}}, {"privileged": True}, id="user"
        ),
    ],
)
def test_gfd_security_context(values: dict[str, Any], expected: dict[str, Any]) -> None:
    objects = render({**values, "gfd": {"enabled": True, **values.get("gfd", {})}})
    assert container(objects, GFD_CONTAINER)["securityContext"] == expected


def test_gfd_top_level_timestamp_and_interval_keys_still_work() -> None:
    objects = render({"gfd": {"enabled": True}, "noTimestamp": False, "sleepInterval": "infinite"})
    env = env_of(container(objects, GFD_CONTAINER))
    assert env["GFD_NO_TIMESTAMP"] == "false"
    assert env["GFD_SLEEP_INTERVAL"] == "infinite"


def test_mps_daemon_set() -> None:
    objects = render(
        {
            "migStrategy": "mixed",
            "config": {"map": {"config": CONFIG0}},
            "nodeSelector": {"pool": "gpu"},
            "resources": {"limits": {"memory": "1Gi"}},
        }
    )
    spec = pod_spec(objects, MPS_CONTAINER)
    assert spec["hostPID"] is True
    assert "shareProcessNamespace" not in spec
    assert spec["nodeSelector"] == {"nvidia.com/mps.capable": "true", "pool": "gpu"}
    init = container(objects, MPS_MOUNT_CONTAINER)
    assert [c["name"] for c in spec["initContainers"]] == [MPS_MOUNT_CONTAINER]
    assert init["command"] == ["mps-control-daemon", "mount-shm"]
    assert init["securityContext"] == {"privileged": True}
    assert init["volumeMounts"] == [
        {"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}
    ]
    assert init["resources"] == {"limits": {"memory": "1Gi"}}
    ctr = container(objects, MPS_CONTAINER)
    assert [c["name"] for c in spec["containers"]] == [MPS_CONTAINER]
    assert ctr["command"] == ["mps-control-daemon"]
    assert ctr["securityContext"] == {"privileged": True}
    assert ctr["resources"] == {"limits": {"memory": "1Gi"}}
    env = env_of(ctr)
    assert env["NODE_NAME"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["MIG_STRATEGY"] == "mixed"
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert env["CONFIG_DIRECTORY"] == "/available-configs"
    assert set(mounts_of(ctr)) == {"mps-shm", "mps-root", "available-configs"}


def test_mps_without_host_pid_shares_a_process_namespace() -> None:
    spec = pod_spec(render({"mps": {"enableHostPID": False}}), MPS_CONTAINER)
    assert "hostPID" not in spec
    assert spec["shareProcessNamespace"] is True


@pytest.mark.parametrize(
    ("values", "container_name"),
    [
        pytest.param({"devicePlugin": {"enableHostNetwork": True}}, "nvidia-device-plugin-ctr"),
        pytest.param({"mps": {"enableHostNetwork": True}}, MPS_CONTAINER),
        pytest.param({"gfd": {"enabled": True, "enableHostNetwork": True}}, GFD_CONTAINER),
    ],
)
def test_host_network_switches(values: dict[str, Any], container_name: str) -> None:
    objects = render(values)
    spec = pod_spec(objects, container_name)
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    others = [d for d in find(objects, "DaemonSet") if container_name not in str(d)]
    assert all("hostNetwork" not in d["spec"]["template"]["spec"] for d in others)


@pytest.mark.parametrize(
    ("values", "fragments"),
    [
        pytest.param({}, ["kubectl label node <node-name> nvidia.com/gpu.present=true"], id="base"),
        pytest.param(
            {"config": {"map": {"config": CONFIG0}}},
            ["--overwrite nvidia.com/device-plugin.config=<config-name>"],
            id="config",
        ),
        pytest.param(
            {"gfd": {"enabled": True}},
            ["not bundled", "Without NFD nothing publishes them", "gfd.writeNodeLabels=true"],
            id="gfd",
        ),
        pytest.param(
            {"gfd": {"enabled": True, "writeNodeLabels": True}},
            [
                "writes its nvidia.com/* labels to its own node",
                "ValidatingAdmissionPolicy nvdp-nvidia-device-plugin-gfd-node-labels",
                "new GPU nodes get the plugin",
            ],
            id="gfd-writes-labels",
        ),
        pytest.param(
            {"gfd": {"enabled": True}, "nfd": {"enabled": True}},
            ["oci://registry.k8s.io/nfd/charts/node-feature-discovery", "which NFD publishes"],
            id="nfd",
        ),
        pytest.param(
            {"gfd": {"enabled": True}, "nfd": {"enableNodeFeatureApi": True}},
            ["NodeFeature object", "nvidia-features-for-<node>"],
            id="node-feature-api",
        ),
        pytest.param(
            {},
            ["kubectl get events -n default --field-selector involvedObject.kind=Node"],
            id="events",
        ),
    ],
)
def test_notes_explain_next_steps(values: dict[str, Any], fragments: list[str]) -> None:
    notes = render_notes(values)
    for fragment in fragments:
        assert fragment in notes
