"""The node-label admission policy, evaluated: its rendered CEL run on sample requests.

The ValidatingAdmissionPolicy the chart renders for gfd.writeNodeLabels is
executed here the way the API server runs one (`tests.unit.deploy.admission`).
The requests are node updates as the API server sees them: the stored node
(oldObject), the node after the patch (object) and the requester
(request.userInfo), whose bound service-account token carries the node its
pod runs on.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.deploy.admission import ALLOWED, Policy
from tests.unit.deploy.chart import FULLNAME, NAMESPACE, one, render

GFD_USER = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}-gfd-service-account"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-1",
        "labels": {
            "kubernetes.io/hostname": "gpu-1",
            "node-role.kubernetes.io/worker": "",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        },
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
    },
    "spec": {"podCIDR": "10.0.1.0/24", "taints": []},
}


def policy_spec() -> dict[str, Any]:
    objects = render({"gfd": {"enabled": True, "writeNodeLabels": True}})
    spec: dict[str, Any] = one(objects, "ValidatingAdmissionPolicy")["spec"]
    return spec


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(policy_spec())


def gfd_on(node: str) -> dict[str, Any]:
    return {"username": GFD_USER, "groups": [], "extra": {NODE_NAME_KEY: [node]}}


def patched(**changes: Any) -> dict[str, Any]:
    """NODE with labels set (None removes) or other top-level fields replaced."""
    node = copy.deepcopy(NODE)
    for key, value in changes.pop("labels", {}).items():
        if value is None:
            node["metadata"]["labels"].pop(key)
        else:
            node["metadata"]["labels"][key] = value
    for path, value in changes.items():
        section, field = path.split("__")
        node[section][field] = value
    return node


NOT_OWN_NODE = "gpu-feature-discovery may only change the node its pod runs on"
NOT_NVIDIA = "gpu-feature-discovery may only change labels under nvidia.com/"
NOT_SPEC = "gpu-feature-discovery may not change a node's annotations or spec"


@pytest.mark.parametrize(
    ("user", "new", "expected"),
    [
        pytest.param(gfd_on("gpu-1"), patched(labels={"nvidia.com/gpu.count": "4"}), ALLOWED,
                     id="change-own-nvidia-label"),
        pytest.param(gfd_on("gpu-1"), patched(labels={"nvidia.com/mig.capable": "true"}), ALLOWED,
                     id="add-nvidia-label"),
        pytest.param(gfd_on("gpu-1"), patched(labels={"nvidia.com/gpu.product": None}), ALLOWED,
                     id="remove-nvidia-label"),
        pytest.param(gfd_on("gpu-1"), patched(), ALLOWED, id="no-op"),
        pytest.param(gfd_on("gpu-2"), patched(labels={"nvidia.com/gpu.count": "4"}), NOT_OWN_NODE,
                     id="another-node"),
        pytest.param({"username": GFD_USER}, patched(labels={"nvidia.com/gpu.count": "4"}),
                     NOT_OWN_NODE, id="token-without-node"),
        pytest.param({"username": GFD_USER, "extra": {NODE_NAME_KEY: ["gpu-1", "gpu-2"]}},
                     patched(), NOT_OWN_NODE, id="two-node-names"),
        pytest.param(gfd_on("gpu-1"), patched(labels={"team": "ml"}), NOT_NVIDIA,
                     id="add-foreign-label"),
        pytest.param(gfd_on("gpu-1"), patched(labels={"kubernetes.io/hostname": "x"}), NOT_NVIDIA,
                     id="change-foreign-label"),
        pytest.param(gfd_on("gpu-1"), patched(labels={"node-role.kubernetes.io/worker": None}),
                     NOT_NVIDIA, id="remove-foreign-label"),
        pytest.param(gfd_on("gpu-1"), patched(labels={"nvidia.com.evil/x": "1"}), NOT_NVIDIA,
                     id="lookalike-prefix"),
        pytest.param(gfd_on("gpu-1"), patched(labels={"feature.node.kubernetes.io/x": "1"}),
                     NOT_NVIDIA, id="nfd-namespace"),
        pytest.param(gfd_on("gpu-1"),
                     patched(spec__taints=[{"key": "x", "effect": "NoSchedule"}]), NOT_SPEC,
                     id="taint"),
        pytest.param(gfd_on("gpu-1"), patched(spec__unschedulable=True), NOT_SPEC,
                     id="cordon"),
        pytest.param(gfd_on("gpu-1"), patched(metadata__annotations={}), NOT_SPEC,
                     id="annotations"),
        pytest.param({"username": "system:node:gpu-1"}, patched(labels={"team": "ml"}),
                     "not matched", id="other-requester"),
        pytest.param({"username": "system:serviceaccount:other:gfd-service-account"},
                     patched(spec__unschedulable=True), "not matched", id="same-name-other-ns"),
    ],
)  # fmt: skip
def test_policy_decision(
    policy: Policy, user: dict[str, Any], new: dict[str, Any], expected: str
) -> None:
    assert policy.decide(user=user, old=NODE, new=new) == expected


def test_a_node_without_labels_or_annotations_can_be_labelled(policy: Policy) -> None:
    bare = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}, "spec": {}}
    labelled = copy.deepcopy(bare)
    labelled["metadata"]["labels"] = {"nvidia.com/gpu.count": "1"}
    assert policy.decide(user=gfd_on("gpu-1"), old=bare, new=labelled) == ALLOWED
    labelled["metadata"]["labels"]["team"] = "ml"
    assert policy.decide(user=gfd_on("gpu-1"), old=bare, new=labelled) == NOT_NVIDIA


def test_policy_names_the_release_namespace_account() -> None:
    objects = render(
        {"gfd": {"enabled": True, "writeNodeLabels": True}, "namespaceOverride": "gpu-operator"}
    )
    (condition,) = one(objects, "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert "system:serviceaccount:gpu-operator:" in condition["expression"]
