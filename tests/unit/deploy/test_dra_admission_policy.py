"""The ResourceSlice admission policy (DRA), evaluated: its rendered CEL run on sample requests.

RBAC grants the plugin's account create, update and delete on every
ResourceSlice; the policy must narrow that to slices of its driver on the node
its pod runs on, for slices as written (CREATE, UPDATE) and as stored (UPDATE,
DELETE). It is executed the way the API server runs one
(`tests.unit.deploy.admission`) on requests built like the publisher's.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.deploy.admission import ALLOWED, NOT_MATCHED, Policy
from tests.unit.deploy.chart import FULLNAME, NAMESPACE, find, one, render

PLUGIN_USER = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}-service-account"
OTHER_NAMESPACE_USER = f"system:serviceaccount:other:{FULLNAME}-service-account"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
DRIVER = "gpu.nvidia.com"
POLICY = f"{FULLNAME}-dra-resourceslices"

NOT_OWN_NODE = "the device plugin may only write ResourceSlices of the node its pod runs on"
NOT_OWN_DRIVER = f"the device plugin may only write ResourceSlices of driver {DRIVER}"


def a_slice(node: str | None = "gpu-1", driver: str = DRIVER) -> dict[str, Any]:
    """A ResourceSlice as the publisher writes one (one device is enough here)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node or "shared", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}],
    }
    if node is None:
        spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["gpu"]}]}]}  # fmt: skip
    else:
        spec["nodeName"] = node
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-0", "resourceVersion": "7"},
        "spec": spec,
    }


def plugin_on(*nodes: str) -> dict[str, Any]:
    return {"username": PLUGIN_USER, "groups": [], "extra": {NODE_NAME_KEY: list(nodes)}}


def policy_spec(values: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = one(render(values), "ValidatingAdmissionPolicy", POLICY)["spec"]
    return spec


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(policy_spec({"kubeletApi": "dra"}))


MINE = a_slice()
TAINTED = copy.deepcopy(MINE)
TAINTED["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79",
                                            "effect": "NoSchedule"}]  # fmt: skip
OTHER_NODE = a_slice("gpu-2")
OTHER_DRIVER = a_slice(driver="net.example.com")
NOT_ON_A_NODE = a_slice(None)


@pytest.mark.parametrize(
    ("operation", "user", "old", "new", "expected"),
    [
        # What the publisher does on its own node: allowed.
        pytest.param("CREATE", plugin_on("gpu-1"), None, MINE, ALLOWED, id="create-own"),
        pytest.param("UPDATE", plugin_on("gpu-1"), MINE, TAINTED, ALLOWED, id="update-own"),
        pytest.param("DELETE", plugin_on("gpu-1"), MINE, None, ALLOWED, id="delete-own"),
        # Another node's slice: refused, whichever way it is reached.
        pytest.param("CREATE", plugin_on("gpu-1"), None, OTHER_NODE, NOT_OWN_NODE,
                     id="create-other-node"),
        pytest.param("UPDATE", plugin_on("gpu-1"), OTHER_NODE, OTHER_NODE, NOT_OWN_NODE,
                     id="update-other-node"),
        pytest.param("DELETE", plugin_on("gpu-1"), OTHER_NODE, None, NOT_OWN_NODE,
                     id="delete-other-node"),
        pytest.param("UPDATE", plugin_on("gpu-1"), MINE, OTHER_NODE, NOT_OWN_NODE,
                     id="move-own-away"),
        pytest.param("UPDATE", plugin_on("gpu-1"), OTHER_NODE, MINE, NOT_OWN_NODE,
                     id="take-other-over"),
        pytest.param("CREATE", plugin_on("gpu-1"), None, NOT_ON_A_NODE, NOT_OWN_NODE,
                     id="create-node-selector-slice"),
        # The token must name exactly one node.
        pytest.param("CREATE", {"username": PLUGIN_USER}, None, MINE, NOT_OWN_NODE,
                     id="token-without-node"),
        pytest.param("CREATE", plugin_on(), None, MINE, NOT_OWN_NODE, id="empty-node-list"),
        pytest.param("DELETE", plugin_on("gpu-1", "gpu-2"), MINE, None, NOT_OWN_NODE,
                     id="two-node-names"),
        # Another driver's slice on its own node (NVIDIA's DRA driver beside it).
        pytest.param("CREATE", plugin_on("gpu-1"), None, OTHER_DRIVER, NOT_OWN_DRIVER,
                     id="create-other-driver"),
        pytest.param("DELETE", plugin_on("gpu-1"), OTHER_DRIVER, None, NOT_OWN_DRIVER,
                     id="delete-other-driver"),
        pytest.param("UPDATE", plugin_on("gpu-1"), OTHER_DRIVER, MINE, NOT_OWN_DRIVER,
                     id="take-other-driver-over"),
        # Everyone else is not the policy's business.
        pytest.param("DELETE", {"username": "system:node:gpu-2"}, MINE, None, NOT_MATCHED,
                     id="kubelet"),
        pytest.param("CREATE", {**plugin_on("gpu-1"), "username": OTHER_NAMESPACE_USER}, None,
                     OTHER_NODE, NOT_MATCHED, id="same-name-other-namespace"),
    ],
)  # fmt: skip
def test_policy_decision(
    policy: Policy,
    operation: str,
    user: dict[str, Any],
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    expected: str,
) -> None:
    assert policy.decide(user=user, old=old, new=new, operation=operation) == expected


def test_policy_follows_the_driver_name_and_the_release_namespace() -> None:
    spec = policy_spec(
        {"kubeletApi": "dra", "dra": {"driverName": "gpu.example.com"},
         "namespaceOverride": "gpu-operator"}
    )  # fmt: skip
    policy = Policy(spec)
    account = f"system:serviceaccount:gpu-operator:{FULLNAME}-service-account"
    user = {**plugin_on("gpu-1"), "username": account}
    ours = a_slice(driver="gpu.example.com")
    assert policy.decide(user=user, old=None, new=ours, operation="CREATE") == ALLOWED
    assert policy.decide(user=user, old=None, new=MINE, operation="CREATE") == (
        "the device plugin may only write ResourceSlices of driver gpu.example.com"
    )
    assert policy.decide(user=plugin_on("gpu-1"), old=None, new=ours, operation="CREATE") == (
        NOT_MATCHED
    )


def test_policy_covers_every_write_of_slices_in_every_version() -> None:
    objects = render({"kubeletApi": "dra"})
    spec = one(objects, "ValidatingAdmissionPolicy", POLICY)["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourceslices"],
        }
    ]
    binding = one(objects, "ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"kubeletApi": "dra"}, id="dra"),
        pytest.param({"dra": {"enabled": True}}, id="per-node"),
    ],
)
def test_policy_comes_with_the_dra_parts_and_can_be_turned_off(values: dict[str, Any]) -> None:
    assert find(render(values), "ValidatingAdmissionPolicy", POLICY)
    off = {**values, "dra": {**values.get("dra", {}), "admissionPolicy": {"enabled": False}}}
    objects = render(off)
    assert not find(objects, "ValidatingAdmissionPolicy", POLICY)
    assert not find(objects, "ValidatingAdmissionPolicyBinding", POLICY)
    assert find(objects, "ClusterRole", f"{FULLNAME}-dra-role")  # the RBAC stays


def test_no_policy_without_the_dra_parts() -> None:
    assert not find(render({}), "ValidatingAdmissionPolicy", POLICY)
