"""Who may do what: service accounts, RBAC and the admission policy, per values.

RBAC is rendered only for what a component does with the values given: the
plugin for the watch of its node (GPU cordon annotation, config label) and its
Events, gpu-feature-discovery for
its config-label watch, direct node labels and the NodeFeature object, the
MPS daemon for its config-label watch and nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart import (
    FULLNAME,
    GFD_CONTAINER,
    MPS_CONTAINER,
    NAMESPACE,
    PLUGIN_CONTAINER,
    container,
    env_of,
    find,
    kinds_and_names,
    one,
    pod_spec,
    render,
)
from tests.unit.deploy.seed import CONFIG0

PLUGIN_SA = f"{FULLNAME}-service-account"
GFD_SA = f"{FULLNAME}-gfd-service-account"
MPS_SA = f"{FULLNAME}-mps-service-account"
CONFIG_MAPS = [
    pytest.param({"map": {"config": CONFIG0}}, id="chart-map"),
    pytest.param({"name": "mine"}, id="own-map"),
]
GFD = {"gfd": {"enabled": True}}
NO_EVENTS = {"devicePlugin": {"events": {"enabled": False}}}

# What the plugin does with Events: create them, and PATCH their series.
EVENT_RULES = [
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
]
NODEFEATURE_RULES = [
    {
        "apiGroups": ["nfd.k8s-sigs.io"],
        "resources": ["nodefeatures"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
]


def rbac(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    return {(k, n) for k, n in kinds_and_names(objects) if k in kinds}


def node_verbs(objects: list[dict[str, Any]], role: str) -> list[str]:
    (rule,) = one(objects, "ClusterRole", role)["rules"]
    assert (rule["apiGroups"], rule["resources"]) == ([""], ["nodes"])
    verbs: list[str] = rule["verbs"]
    return verbs


def binding_of(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    binding = one(objects, kind, name)
    role_kind = "ClusterRole" if kind == "ClusterRoleBinding" else "Role"
    assert binding["roleRef"] == {
        "kind": role_kind,
        "name": name.removesuffix("-binding") if role_kind == "ClusterRole" else name,
        "apiGroup": "rbac.authorization.k8s.io",
    }
    return binding


# --- the device plugin -----------------------------------------------------------------


def test_no_api_access_renders_no_rbac_and_mounts_no_token() -> None:
    objects = render(NO_EVENTS)
    assert rbac(objects) == set()
    spec = pod_spec(objects, PLUGIN_CONTAINER)
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    assert env_of(container(objects, PLUGIN_CONTAINER))["EVENTS"] == "false"


def test_events_grant_event_writes_in_default_and_reads_of_the_node_for_the_cordon() -> None:
    objects = render({})
    assert env_of(container(objects, PLUGIN_CONTAINER))["EVENTS"] == "true"
    assert pod_spec(objects, PLUGIN_CONTAINER)["serviceAccountName"] == PLUGIN_SA
    role = one(objects, "Role", f"{FULLNAME}-events")
    # Node events are accepted only in "default", whatever the release namespace.
    assert role["metadata"]["namespace"] == "default"
    assert role["rules"] == EVENT_RULES
    binding = binding_of(objects, "RoleBinding", f"{FULLNAME}-events")
    assert binding["metadata"]["namespace"] == "default"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": PLUGIN_SA, "namespace": NAMESPACE}
    ]
    # Its own node: the uid of the node the events are about, and the watch
    # that reads the GPU cordon annotation.
    assert node_verbs(objects, f"{FULLNAME}-role") == ["get", "list", "watch"]
    cluster_binding = binding_of(objects, "ClusterRoleBinding", f"{FULLNAME}-role-binding")
    assert cluster_binding["subjects"] == binding["subjects"]


def test_events_name_the_reporting_pod() -> None:
    on = env_of(container(render({}), PLUGIN_CONTAINER))
    assert "POD_NAME" in on
    off = render({"devicePlugin": {"events": {"enabled": False}}})
    assert "POD_NAME" not in env_of(container(off, PLUGIN_CONTAINER))


@pytest.mark.parametrize(
    ("readiness", "env"), [("auto", None), ("running", "running"), ("serving", "serving")]
)
def test_readiness_is_passed_on_only_when_chosen(readiness: str, env: str | None) -> None:
    objects = render({"devicePlugin": {"readiness": readiness}})
    assert env_of(container(objects, PLUGIN_CONTAINER)).get("READINESS") == env


def test_events_follow_namespace_override_in_the_subject_only() -> None:
    objects = render({"namespaceOverride": "gpu-operator"})
    binding = one(objects, "RoleBinding", f"{FULLNAME}-events")
    assert binding["metadata"]["namespace"] == "default"
    assert binding["subjects"][0]["namespace"] == "gpu-operator"


@pytest.mark.parametrize("events", [True, False])
@pytest.mark.parametrize("config", [{"map": {"config": CONFIG0}}, {"name": "mine"}])
def test_a_config_map_lets_the_plugin_watch_its_node(config: dict[str, Any], events: bool) -> None:
    objects = render({"config": config, "devicePlugin": {"events": {"enabled": events}}})
    assert node_verbs(objects, f"{FULLNAME}-role") == ["get", "list", "watch"]
    assert pod_spec(objects, PLUGIN_CONTAINER)["serviceAccountName"] == PLUGIN_SA
    assert bool(find(objects, "Role")) is events


def test_plugin_account_never_writes_nodes() -> None:
    objects = render({"config": {"name": "mine"}, **GFD, "gfd": {"enabled": True}})
    for role in find(objects, "ClusterRole"):
        if role["metadata"]["name"] == f"{FULLNAME}-role":
            for rule in role["rules"]:
                assert set(rule["verbs"]) <= {"get", "list", "watch"}


def test_mps_daemon_without_a_config_map_gets_no_token() -> None:
    objects = render({})
    spec = pod_spec(objects, MPS_CONTAINER)
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    assert not {n for _, n in rbac(objects) if "mps" in n}


@pytest.mark.parametrize("config", CONFIG_MAPS)
def test_a_config_map_lets_the_mps_daemon_watch_its_node(config: dict[str, Any]) -> None:
    """It must run the daemons of the config the node label selects, as the plugin does."""
    objects = render({"config": config})
    spec = pod_spec(objects, MPS_CONTAINER)
    assert spec["serviceAccountName"] == MPS_SA
    assert "automountServiceAccountToken" not in spec
    env = env_of(container(objects, MPS_CONTAINER))
    assert env["NODE_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}
    assert env["CONFIG_DIRECTORY"] == "/available-configs"
    assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    assert one(objects, "ServiceAccount", MPS_SA)["metadata"]["namespace"] == NAMESPACE
    assert node_verbs(objects, f"{FULLNAME}-mps-role") == ["get", "list", "watch"]
    binding = binding_of(objects, "ClusterRoleBinding", f"{FULLNAME}-mps-role-binding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": MPS_SA, "namespace": NAMESPACE}
    ]
    # Its account is its own: nothing else is bound to it.
    bound = [
        o["metadata"]["name"]
        for kind in ("ClusterRoleBinding", "RoleBinding")
        for o in find(objects, kind)
        if any(s["name"] == MPS_SA for s in o["subjects"])
    ]
    assert bound == [f"{FULLNAME}-mps-role-binding"]


def test_mps_daemon_account_follows_the_plugin_switch() -> None:
    objects = render({"config": {"name": "mine"}, "devicePlugin": {"enabled": False}})
    assert not find(objects, "ServiceAccount", MPS_SA)
    assert not find(objects, "ClusterRole", f"{FULLNAME}-mps-role")


def test_disabled_plugin_has_no_account_even_with_events_on() -> None:
    objects = render({"devicePlugin": {"enabled": False, "events": {"enabled": True}}})
    assert rbac(objects) == set()


# --- gpu-feature-discovery -------------------------------------------------------------


def test_gfd_defaults_to_the_features_file_without_api_access() -> None:
    objects = render(GFD)
    env = env_of(container(objects, GFD_CONTAINER))
    assert env["GFD_WRITE_NODE_LABELS"] == "false"
    assert env["GFD_USE_NODE_FEATURE_API"] == "false"
    assert not {n for _, n in rbac(objects) if "gfd" in n}
    spec = pod_spec(objects, GFD_CONTAINER)
    assert spec["automountServiceAccountToken"] is False
    assert not find(objects, "ValidatingAdmissionPolicy")


@pytest.mark.parametrize("config", CONFIG_MAPS)
def test_a_config_map_lets_gfd_watch_its_node(config: dict[str, Any]) -> None:
    """Its labels must describe the config the node label selects, as the plugin serves."""
    objects = render({**GFD, "config": config})
    assert pod_spec(objects, GFD_CONTAINER)["serviceAccountName"] == GFD_SA
    env = env_of(container(objects, GFD_CONTAINER))
    assert env["NODE_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}
    assert env["CONFIG_DIRECTORY"] == "/available-configs"
    # Read only: patching nodes comes with gfd.writeNodeLabels alone.
    assert node_verbs(objects, f"{FULLNAME}-gfd-role") == ["get", "list", "watch"]
    binding = binding_of(objects, "ClusterRoleBinding", f"{FULLNAME}-gfd-role-binding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": GFD_SA, "namespace": NAMESPACE}
    ]
    assert not find(objects, "ValidatingAdmissionPolicy")


def test_gfd_config_map_and_direct_labels_share_one_role() -> None:
    objects = render({"gfd": {"enabled": True, "writeNodeLabels": True}, "config": {"name": "x"}})
    assert node_verbs(objects, f"{FULLNAME}-gfd-role") == ["get", "list", "watch", "patch"]
    assert len(find(objects, "ClusterRole")) == 3  # the plugin's, GFD's, the MPS daemon's


def test_gfd_direct_labels_grant_node_patch_under_the_admission_policy() -> None:
    objects = render({"gfd": {"enabled": True, "writeNodeLabels": True}})
    assert env_of(container(objects, GFD_CONTAINER))["GFD_WRITE_NODE_LABELS"] == "true"
    assert pod_spec(objects, GFD_CONTAINER)["serviceAccountName"] == GFD_SA
    assert node_verbs(objects, f"{FULLNAME}-gfd-role") == ["get", "list", "watch", "patch"]
    binding = binding_of(objects, "ClusterRoleBinding", f"{FULLNAME}-gfd-role-binding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": GFD_SA, "namespace": NAMESPACE}
    ]
    policy = one(objects, "ValidatingAdmissionPolicy")
    assert policy["metadata"]["name"] == f"{FULLNAME}-gfd-node-labels"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{GFD_SA}'"
    )
    policy_binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert policy_binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }


def test_admission_policy_can_be_turned_off() -> None:
    objects = render(
        {"gfd": {"enabled": True, "writeNodeLabels": True, "admissionPolicy": {"enabled": False}}}
    )
    assert not find(objects, "ValidatingAdmissionPolicy")
    assert not find(objects, "ValidatingAdmissionPolicyBinding")
    assert node_verbs(objects, f"{FULLNAME}-gfd-role")[-1] == "patch"


@pytest.mark.parametrize(
    ("values", "uses"),
    [
        pytest.param({"nfd": {"enableNodeFeatureApi": True}}, True, id="reference-key"),
        pytest.param({"gfd": {"useNodeFeatureAPI": True}}, True, id="own-key"),
        pytest.param(
            {"nfd": {"enableNodeFeatureApi": True}, "gfd": {"useNodeFeatureAPI": False}},
            False,
            id="own-key-wins",
        ),
        pytest.param({"nfd": {"enableNodeFeatureApi": False}}, False, id="reference-off"),
        pytest.param({}, False, id="default"),
    ],
)
def test_node_feature_api_mode_and_its_role(values: dict[str, Any], uses: bool) -> None:
    merged = {**values, "gfd": {"enabled": True, **values.get("gfd", {})}}
    objects = render(merged)
    env = env_of(container(objects, GFD_CONTAINER))
    assert env["GFD_USE_NODE_FEATURE_API"] == str(uses).lower()
    roles = find(objects, "Role", f"{FULLNAME}-gfd-nodefeatures")
    assert bool(roles) is uses
    if uses:
        (role,) = roles
        # Its own namespace only, and never `delete`.
        assert role["metadata"]["namespace"] == NAMESPACE
        assert role["rules"] == NODEFEATURE_RULES
        binding = binding_of(objects, "RoleBinding", f"{FULLNAME}-gfd-nodefeatures")
        assert binding["metadata"]["namespace"] == NAMESPACE
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": GFD_SA, "namespace": NAMESPACE}
        ]
        assert pod_spec(objects, GFD_CONTAINER)["serviceAccountName"] == GFD_SA
        # No node writes come with it.
        assert not find(objects, "ClusterRole", f"{FULLNAME}-gfd-role")


def test_node_feature_mode_has_the_downward_api_fields_gfd_needs() -> None:
    env = env_of(container(render({**GFD, "nfd": {"enableNodeFeatureApi": True}}), GFD_CONTAINER))
    fields = {
        name: env[name]["fieldRef"]["fieldPath"] for name in ("NODE_NAME", "NAMESPACE", "POD_NAME")
    }
    assert fields == {
        "NODE_NAME": "spec.nodeName",
        "NAMESPACE": "metadata.namespace",
        "POD_NAME": "metadata.name",
    }


def test_node_feature_api_without_gfd_renders_nothing_for_it() -> None:
    objects = render({"nfd": {"enableNodeFeatureApi": True}})
    assert not find(objects, "Role", f"{FULLNAME}-gfd-nodefeatures")
    assert not find(objects, "DaemonSet", f"{FULLNAME}-gpu-feature-discovery")


def test_no_rule_anywhere_deletes() -> None:
    objects = render(
        {
            "config": {"name": "mine"},
            "gfd": {"enabled": True, "writeNodeLabels": True, "useNodeFeatureAPI": True},
        }
    )
    rules = [r for kind in ("ClusterRole", "Role") for o in find(objects, kind) for r in o["rules"]]
    assert rules
    for rule in rules:
        assert not {"delete", "deletecollection", "*", "escalate", "bind"} & set(rule["verbs"])
        assert "*" not in rule["resources"]
