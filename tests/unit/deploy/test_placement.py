"""Where the pods run without Node Feature Discovery, and what they request.

The default affinity accepts any of several labels that mark a GPU node, so
NFD is one source among others. The chicken-and-egg case is GFD's own label
(`nvidia.com/gpu.count`): GFD must run on a node before any GPU label exists,
so when it writes node labels itself it runs on every node not marked
GPU-less, and labels the GPU-less ones without crash-looping. The match is
checked the way the scheduler evaluates required node affinity: terms are
ORed, expressions within a term ANDed.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart import (
    GFD_CONTAINER,
    MPS_CONTAINER,
    MPS_MOUNT_CONTAINER,
    PLUGIN_CONTAINER,
    container,
    env_of,
    find,
    merge,
    pod_spec,
    render,
)

GFD_LABELS = {"gfd": {"enabled": True, "writeNodeLabels": True}}


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    match op:
        case "In":
            return key in labels and labels[key] in values
        case "NotIn":
            return key not in labels or labels[key] not in values
        case "Exists":
            return key in labels
        case "DoesNotExist":
            return key not in labels
        case "Gt" | "Lt":
            if key not in labels:
                return False
            number, bound = int(labels[key]), int(values[0])
            return number > bound if op == "Gt" else number < bound
    raise AssertionError(f"unknown operator {op}")


def schedules_on(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the pod's nodeSelector and required node affinity admit a node."""
    if not spec.get("nodeSelector", {}).items() <= labels.items():
        return False
    required = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required is None:
        return True
    return any(
        all(_expression_matches(e, labels) for e in term.get("matchExpressions", []))
        for term in required["nodeSelectorTerms"]
    )


UNLABELLED: dict[str, str] = {"kubernetes.io/hostname": "new-node"}
NODES: dict[str, dict[str, str]] = {
    "unlabelled": UNLABELLED,
    "nfd": {"feature.node.kubernetes.io/pci-10de.present": "true"},
    "nfd-tegra": {"feature.node.kubernetes.io/cpu-model.vendor_id": "NVIDIA"},
    "provisioned": {"nvidia.com/gpu.present": "true"},
    "gfd-labelled": {"nvidia.com/gpu.count": "8", "nvidia.com/gfd.timestamp": "1"},
    "gfd-mig-invalid": {"nvidia.com/gpu.count": "0"},
    "gfd-no-gpu": {"nvidia.com/gfd.timestamp": "1"},
    "opted-out": {"nvidia.com/gpu.present": "false"},
}


@pytest.mark.parametrize(
    ("node", "plugin"),
    [
        ("unlabelled", False),
        ("nfd", True),
        ("nfd-tegra", True),
        ("provisioned", True),
        ("gfd-labelled", True),
        # GFD writes a count of 0 when the single MIG strategy is invalid: the
        # node has GPUs, and the plugin there reports the problem.
        ("gfd-mig-invalid", True),
        ("gfd-no-gpu", False),
        ("opted-out", False),
    ],
)
def test_plugin_runs_where_any_label_marks_a_gpu_node(node: str, plugin: bool) -> None:
    objects = render({})
    for name in (PLUGIN_CONTAINER, MPS_CONTAINER):
        spec = dict(pod_spec(objects, name))
        spec.pop("nodeSelector", None)  # the MPS daemon's mps.capable selector is GFD's business
        assert schedules_on(spec, NODES[node]) is plugin


def test_gfd_writing_labels_bootstraps_new_gpu_nodes() -> None:
    objects = render(GFD_LABELS)
    gfd = pod_spec(objects, GFD_CONTAINER)
    plugin = pod_spec(objects, PLUGIN_CONTAINER)
    # A node nobody has labelled yet gets GFD, not yet the plugin ...
    assert schedules_on(gfd, UNLABELLED)
    assert not schedules_on(plugin, UNLABELLED)
    # ... GFD labels it with what it found, and the plugin follows.
    assert schedules_on(plugin, NODES["gfd-labelled"])
    assert schedules_on(gfd, NODES["gfd-labelled"])
    # GPU-less nodes keep only GFD, unless marked as such.
    assert not schedules_on(plugin, NODES["gfd-no-gpu"])
    assert not schedules_on(gfd, NODES["opted-out"])
    # There GFD labels the node as one without GPUs instead of exiting.
    assert env_of(container(objects, GFD_CONTAINER))["FAIL_ON_INIT_ERROR"] == "false"


@pytest.mark.parametrize(
    ("values", "fail_on_init_error"),
    [
        pytest.param({"gfd": {"enabled": True}}, None, id="follows-affinity"),
        pytest.param(GFD_LABELS, "false", id="every-node"),
        pytest.param({**GFD_LABELS, "failOnInitError": True}, "true", id="top-level-wins"),
        pytest.param(
            {"gfd": {"enabled": True, "writeNodeLabels": True, "failOnInitError": True}},
            "true",
            id="own-key",
        ),
        pytest.param(
            {"gfd": {"enabled": True, "failOnInitError": False}, "failOnInitError": True},
            "false",
            id="own-key-beats-top-level",
        ),
    ],
)
def test_gfd_fail_on_init_error(values: dict[str, Any], fail_on_init_error: str | None) -> None:
    env = env_of(container(render(values), GFD_CONTAINER))
    assert env.get("FAIL_ON_INIT_ERROR") == fail_on_init_error


def test_gfd_follows_the_top_level_affinity_when_it_does_not_label() -> None:
    objects = render({"gfd": {"enabled": True}})
    gfd = pod_spec(objects, GFD_CONTAINER)
    assert gfd["affinity"] == pod_spec(objects, PLUGIN_CONTAINER)["affinity"]
    assert not schedules_on(gfd, UNLABELLED)


@pytest.mark.parametrize(
    ("gfd_affinity", "expected"),
    [
        pytest.param(
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}},
            {"pool": "gpu"},
            id="own",
        ),
        pytest.param({}, None, id="empty-means-none"),
    ],
)  # fmt: skip
def test_gfd_affinity_value_wins(gfd_affinity: dict[str, Any], expected: Any) -> None:
    spec = pod_spec(render({**GFD_LABELS, "gfd": {**GFD_LABELS["gfd"], "affinity": gfd_affinity}}),
                    GFD_CONTAINER)  # fmt: skip
    assert spec.get("affinity") == (gfd_affinity or None)
    if expected is not None:
        assert schedules_on(spec, expected)
        assert not schedules_on(spec, UNLABELLED)


def test_blanket_deployment_runs_everywhere() -> None:
    """The documented alternative: no affinity, idle where there is no GPU."""
    objects = render({"affinity": None, "failOnInitError": False})
    spec = pod_spec(objects, PLUGIN_CONTAINER)
    assert "affinity" not in spec
    assert schedules_on(spec, UNLABELLED)
    assert env_of(container(objects, PLUGIN_CONTAINER))["FAIL_ON_INIT_ERROR"] == "false"


# --- resources ---------------------------------------------------------------------------

ALL = {"gfd": {"enabled": True}}


def resources_by_container(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for ds in find(render(merge(ALL, values)), "DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        for ctr in spec["containers"] + spec.get("initContainers", []):
            out[ctr["name"]] = ctr.get("resources")
    return out


def test_every_container_requests_cpu_and_memory_by_default() -> None:
    resources = resources_by_container({})
    assert set(resources) == {PLUGIN_CONTAINER, GFD_CONTAINER, MPS_CONTAINER, MPS_MOUNT_CONTAINER}
    for name, value in resources.items():
        assert set(value["requests"]) == {"cpu", "memory"}, name
        # No default limits: a limit too low would kill a component on a big node.
        assert "limits" not in value, name


def test_component_resources_can_be_changed_one_by_one() -> None:
    resources = resources_by_container(
        {
            "devicePlugin": {"resources": {"limits": {"memory": "1Gi"}}},
            "gfd": {"resources": None},
        }
    )
    plugin = resources[PLUGIN_CONTAINER]
    assert plugin["limits"] == {"memory": "1Gi"}
    assert set(plugin["requests"]) == {"cpu", "memory"}  # merged with the default
    assert resources[GFD_CONTAINER] is None
    assert resources[MPS_CONTAINER] == resources[MPS_MOUNT_CONTAINER]


def test_top_level_resources_replace_every_default() -> None:
    given = {"requests": {"cpu": "100m"}, "limits": {"memory": "512Mi"}}
    resources = resources_by_container({"resources": given})
    assert all(value == given for value in resources.values())
