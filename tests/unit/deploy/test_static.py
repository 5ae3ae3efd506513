"""The committed static manifests are a fresh render of the chart, and they work as documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart import (
    DRA_KUBERNETES_VERSION,
    REPO_ROOT,
    STATIC_DIR,
    env_of,
    find,
    plugin_container,
    validate,
)

SCRIPT = REPO_ROOT / "scripts" / "render_static.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_static", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_static = _load_script()
VARIANTS = list(render_static.VARIANTS)


def static_objects(variant: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((STATIC_DIR / variant).read_text()) if doc]


def test_the_two_reference_file_names_and_the_dra_file_exist() -> None:
    assert VARIANTS == [
        "nvidia-device-plugin.yml",
        "nvidia-device-plugin-compat-with-cpumanager.yml",
        "nvidia-device-plugin-dra.yml",
    ]


@pytest.mark.parametrize("variant", VARIANTS)
def test_committed_file_matches_a_fresh_render(variant: str) -> None:
    assert (STATIC_DIR / variant).read_text() == render_static.render_manifest(variant), (
        f"charts/static/{variant} is stale: run scripts/render_static.py"
    )


def test_check_mode_reports_stale_files(tmp_path: Path) -> None:
    assert render_static.main(["--out", str(tmp_path)]) == 0
    assert render_static.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / VARIANTS[0]).write_text("# edited\n")
    assert render_static.main(["--check", "--out", str(tmp_path)]) == 1


# The account exists for the plugin's Events about its node.
DEVICE_PLUGIN_KINDS = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "DaemonSet",
}
# DRA adds its DeviceClass and the admission policy on ResourceSlice writes.
DRA_KINDS = {"DeviceClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_static_objects_are_valid(variant: str) -> None:
    objects = static_objects(variant)
    dra = variant == "nvidia-device-plugin-dra.yml"
    assert {o["kind"] for o in objects} == DEVICE_PLUGIN_KINDS | (DRA_KINDS if dra else set())
    for obj in objects:
        validate(obj)
        if dra:
            validate(obj, DRA_KUBERNETES_VERSION)


def test_the_dra_file_is_the_plain_one_moved_to_dra() -> None:
    plain = static_objects("nvidia-device-plugin.yml")
    dra = static_objects("nvidia-device-plugin-dra.yml")
    env = env_of(plugin_container(dra))
    assert env["KUBELET_API"] == "dra"
    assert env["DRA_DRIVER_NAME"] == "gpu.nvidia.com"
    moved = {k: v for k, v in env.items() if not k.startswith(("KUBELET_", "DRA_"))}
    assert moved == env_of(plugin_container(plain))
    assert find(dra, "DeviceClass", "gpu.nvidia.com")
    assert find(dra, "ClusterRole", "nvidia-device-plugin-dra-role")
    policy = find(dra, "ValidatingAdmissionPolicy", "nvidia-device-plugin-dra-resourceslices")
    (condition,) = policy[0]["spec"]["matchConditions"]
    account = "system:serviceaccount:kube-system:nvidia-device-plugin-service-account"
    assert account in condition["expression"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_quick_start_label_and_namespace_find_the_plugin_pods(variant: str) -> None:
    objects = static_objects(variant)
    plugin = find(objects, "DaemonSet", "nvidia-device-plugin")[0]
    assert plugin["metadata"]["namespace"] == "kube-system"
    assert plugin["spec"]["template"]["metadata"]["labels"]["app"] == "nvidia-device-plugin"
    spec = plugin["spec"]["template"]["spec"]
    # Runs on any node tolerating the GPU taint, with no NFD labels needed.
    assert "affinity" not in spec
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    for obj in objects:
        assert "helm.sh/chart" not in obj["metadata"]["labels"]


def test_static_variants_differ_only_in_cpu_manager_compatibility() -> None:
    plain = plugin_container(static_objects("nvidia-device-plugin.yml"))
    compat = plugin_container(static_objects("nvidia-device-plugin-compat-with-cpumanager.yml"))
    assert env_of(plain)["FAIL_ON_INIT_ERROR"] == "false"
    assert "PASS_DEVICE_SPECS" not in env_of(plain)
    assert plain["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert env_of(compat)["PASS_DEVICE_SPECS"] == "true"
    assert compat["securityContext"] == {"privileged": True}
    compat_env = {k: v for k, v in env_of(compat).items() if k != "PASS_DEVICE_SPECS"}
    assert compat_env == env_of(plain)
