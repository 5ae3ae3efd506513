"""The chart's DRA mode: values, mounts, environment, DeviceClass, refusals.

Two ways in: `kubeletApi=dra` moves every node (KUBELET_API=dra wins over the
config files), `dra.enabled=true` with `kubeletApi=device-plugin` renders the
same parts but leaves each node's API to the config its label selects. Either
way every object validates against Kubernetes 1.34 (the first release with
`resource.k8s.io/v1`) and the newest schema kubernetes-validate ships. The
default install renders none of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from settings.flags import FLAGS_BY_FIELD
from tests.unit.deploy.chart import (
    DRA_KUBERNETES_VERSION,
    FULLNAME,
    KUBERNETES_VERSION,
    PLUGIN_CONTAINER,
    REPO_ROOT,
    env_of,
    find,
    mounts_of,
    one,
    plugin_container,
    pod_spec,
    render,
    render_error,
    render_notes,
    validate,
    volumes_of,
)
from tests.unit.deploy.helm_cli import heredocs, installs
from tests.unit.deploy.seed import CONFIG0, DRA_CONFIG

DRA = {"kubeletApi": "dra"}
PER_NODE = {"dra": {"enabled": True}}
MODES = [pytest.param(DRA, id="dra"), pytest.param(PER_NODE, id="per-node")]
REGISTRY = "/var/lib/kubelet/plugins_registry"
PLUGINS = "/var/lib/kubelet/plugins"
DRA_ENV = {"KUBELET_API", "DRA_DRIVER_NAME", "KUBELET_REGISTRAR_DIRECTORY_PATH",
           "KUBELET_PLUGINS_DIRECTORY_PATH"}  # fmt: skip


def dra_parts(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """What the DRA parts add: objects, plugin environment and volumes."""
    found = {(o["kind"], o["metadata"]["name"]) for o in objects
             if o["kind"] == "DeviceClass" or "-dra-" in o["metadata"]["name"]}  # fmt: skip
    found |= {("env", name) for name in env_of(plugin_container(objects)) if name in DRA_ENV}
    found |= {("volume", name) for name in volumes_of(pod_spec(objects, PLUGIN_CONTAINER))
              if name in ("plugins-registry", "plugins")}  # fmt: skip
    return found


# --- both modes render and validate -------------------------------------------------------


@pytest.mark.parametrize("version", [DRA_KUBERNETES_VERSION, KUBERNETES_VERSION])
@pytest.mark.parametrize(
    "values",
    [
        *MODES,
        pytest.param({**DRA, "dra": {"deviceClass": {"extendedResourceName": "nvidia.com/gpu"}},
                      "gfd": {"enabled": True, "writeNodeLabels": True},
                      "config": {"map": {"default": CONFIG0, "dra": DRA_CONFIG}}},
                     id="dra-everything"),
        pytest.param({**PER_NODE, "devicePlugin": {"events": {"enabled": False}}},
                     id="per-node-without-events"),
    ],
)  # fmt: skip
def test_every_object_validates(values: dict[str, Any], version: str) -> None:
    objects = render(values)
    assert one(objects, "DeviceClass")
    for obj in objects:
        validate(obj, version)


def test_the_default_install_renders_no_dra_part() -> None:
    objects = render({})
    assert dra_parts(objects) == set()
    assert not find(objects, "DeviceClass")
    assert set(mounts_of(plugin_container(objects))) == {
        "device-plugin", "mps-shm", "mps-root", "cdi-root"}  # fmt: skip


@pytest.mark.parametrize("values", MODES)
def test_both_modes_render_the_same_parts_but_only_dra_sets_the_api(
    values: dict[str, Any],
) -> None:
    objects = render(values)
    env = env_of(plugin_container(objects))
    # KUBELET_API wins over the config files, so only kubeletApi=dra may set it:
    # with dra.enabled each node's config decides.
    assert env.get("KUBELET_API") == ("dra" if values is DRA else None)
    assert {k: env[k] for k in DRA_ENV - {"KUBELET_API"}} == {
        "DRA_DRIVER_NAME": "gpu.nvidia.com",
        "KUBELET_REGISTRAR_DIRECTORY_PATH": REGISTRY,
        "KUBELET_PLUGINS_DIRECTORY_PATH": PLUGINS,
    }
    assert dra_parts(objects) - {("env", "KUBELET_API")} == {
        ("DeviceClass", "gpu.nvidia.com"),
        ("ClusterRole", f"{FULLNAME}-dra-role"),
        ("ClusterRoleBinding", f"{FULLNAME}-dra-role-binding"),
        ("ValidatingAdmissionPolicy", f"{FULLNAME}-dra-resourceslices"),
        ("ValidatingAdmissionPolicyBinding", f"{FULLNAME}-dra-resourceslices"),
        ("env", "DRA_DRIVER_NAME"),
        ("env", "KUBELET_REGISTRAR_DIRECTORY_PATH"),
        ("env", "KUBELET_PLUGINS_DIRECTORY_PATH"),
        ("volume", "plugins-registry"),
        ("volume", "plugins"),
    }


@pytest.mark.parametrize("values", MODES)
def test_the_kubelet_directories_are_mounted_at_their_host_paths(values: dict[str, Any]) -> None:
    """The kubelet dials the socket path the plugin reports: container and host paths agree."""
    objects = render(values)
    mounts = mounts_of(plugin_container(objects))
    volumes = volumes_of(pod_spec(objects, PLUGIN_CONTAINER))
    for name, path in (("plugins-registry", REGISTRY), ("plugins", PLUGINS)):
        assert mounts[name] == {"name": name, "mountPath": path}
        assert volumes[name] == {"name": name, "hostPath": {"path": path, "type": "Directory"}}
    # The device-plugin directory stays: a node may go back to the device plugin.
    assert "device-plugin" in mounts


def test_moved_kubelet_directories_and_driver_name_follow_the_values() -> None:
    values = {**DRA, "dra": {
        "driverName": "gpu.example.com",
        "kubeletRegistrarDirectoryPath": "/var/lib/k0s/kubelet/plugins_registry",
        "kubeletPluginsDirectoryPath": "/var/lib/k0s/kubelet/plugins",
    }}  # fmt: skip
    objects = render(values)
    ctr = plugin_container(objects)
    env = env_of(ctr)
    assert env["DRA_DRIVER_NAME"] == "gpu.example.com"
    mounts = mounts_of(ctr)
    volumes = volumes_of(pod_spec(objects, PLUGIN_CONTAINER))
    for name, variable in (("plugins-registry", "KUBELET_REGISTRAR_DIRECTORY_PATH"),
                           ("plugins", "KUBELET_PLUGINS_DIRECTORY_PATH")):  # fmt: skip
        assert env[variable].startswith("/var/lib/k0s/kubelet/")
        assert mounts[name]["mountPath"] == volumes[name]["hostPath"]["path"] == env[variable]
    device_class = one(objects, "DeviceClass")
    assert device_class["metadata"]["name"] == "gpu.example.com"
    assert device_class["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "gpu.example.com"'}}
    ]


# --- the DeviceClass ------------------------------------------------------------------------


@pytest.mark.parametrize("values", MODES)
def test_the_device_class_selects_the_drivers_devices(values: dict[str, Any]) -> None:
    device_class = one(render(values), "DeviceClass")
    assert device_class["apiVersion"] == "resource.k8s.io/v1"
    assert "namespace" not in device_class["metadata"]
    assert device_class["metadata"]["name"] == "gpu.nvidia.com"
    assert device_class["spec"] == {
        "selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]
    }


def test_the_device_class_can_serve_the_extended_resource() -> None:
    values = {**DRA, "dra": {"deviceClass": {"extendedResourceName": "nvidia.com/gpu"}}}
    spec = one(render(values), "DeviceClass")["spec"]
    assert spec["extendedResourceName"] == "nvidia.com/gpu"
    assert spec["selectors"] == [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]
    notes = render_notes(values)
    assert "pods requesting nvidia.com/gpu are served from it" in notes


def test_the_device_class_can_be_left_to_another_release() -> None:
    objects = render({**DRA, "dra": {"deviceClass": {"create": False}}})
    assert not find(objects, "DeviceClass")
    assert find(objects, "ClusterRole", f"{FULLNAME}-dra-role")


# --- the account --------------------------------------------------------------------------


@pytest.mark.parametrize("values", MODES)
def test_the_dra_parts_give_the_plugin_its_account_even_without_events(
    values: dict[str, Any],
) -> None:
    objects = render({**values, "devicePlugin": {"events": {"enabled": False}}})
    spec = pod_spec(objects, PLUGIN_CONTAINER)
    assert spec["serviceAccountName"] == f"{FULLNAME}-service-account"
    assert "automountServiceAccountToken" not in spec
    # It reads its node (the slices' owner) under the node role.
    assert one(objects, "ClusterRole", f"{FULLNAME}-role")["rules"][0]["verbs"] == [
        "get", "list", "watch"]  # fmt: skip
    assert not find(objects, "Role")  # no Events


def test_no_dra_part_without_the_device_plugin() -> None:
    objects = render({**DRA, "devicePlugin": {"enabled": False}})
    assert not find(objects, "DeviceClass")
    assert not [o for o in objects if "-dra-" in o["metadata"]["name"]]


def test_notes_say_how_each_mode_moves_nodes() -> None:
    assert "every node publishes its GPUs as ResourceSlices" in render_notes(DRA)
    assert "flags.plugin.kubeletApi: dra" in render_notes(PER_NODE)
    assert "ResourceSlices" not in render_notes({})


# --- values the chart refuses -------------------------------------------------------------


def test_schema_offers_exactly_the_plugins_kubelet_apis() -> None:
    error = render_error({"kubeletApi": "grpc"})
    line = "- at '/kubeletApi': value must be one of 'device-plugin', 'dra'"
    assert line in error.splitlines()
    choices = set(FLAGS_BY_FIELD["kubelet_api"].choices)
    assert choices == {"device-plugin", "dra"}


@pytest.mark.parametrize(
    ("values", "path"),
    [
        pytest.param({"dra": {"enabled": "yes"}}, "/dra/enabled", id="enabled"),
        pytest.param({"dra": {"driverName": "GPU.nvidia.com"}}, "/dra/driverName", id="driver"),
        pytest.param({"dra": {"driverName": "a" * 64}}, "/dra/driverName", id="driver-long"),
        pytest.param({"dra": {"kubeletPluginsDirectoryPath": "var/lib/kubelet/plugins"}},
                     "/dra/kubeletPluginsDirectoryPath", id="relative-dir"),
        pytest.param({"dra": {"deviceClass": {"extendedResourceName": "gpu"}}},
                     "/dra/deviceClass/extendedResourceName", id="resource-without-domain"),
        pytest.param({"dra": {"deviceClass": {"extendedResourceName": True}}},
                     "/dra/deviceClass/extendedResourceName", id="resource-bool"),
        pytest.param({"dra": {"dynamicMig": "true"}}, "/dra/dynamicMig", id="dynamic-mig-text"),
        pytest.param({"dra": {"deviceclass": {}}}, "/dra", id="misspelt-key"),
    ],
)  # fmt: skip
def test_schema_rejects_bad_dra_values(values: dict[str, Any], path: str) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert f"at '{path}'" in error


@pytest.mark.parametrize("values", MODES)
def test_dynamic_mig_is_set_on_every_node_only_when_asked(values: dict[str, Any]) -> None:
    """DRA_DYNAMIC_MIG wins over the config files: unset by default, so each node's decides."""
    variable = FLAGS_BY_FIELD["dra_dynamic_mig"].env[0]
    assert variable not in env_of(plugin_container(render(values)))
    on = {**values, "dra": {**values.get("dra", {}), "dynamicMig": True}}
    objects = render(on)
    assert env_of(plugin_container(objects))[variable] == "true"
    for obj in objects:
        validate(obj, DRA_KUBERNETES_VERSION)
    assert variable not in env_of(plugin_container(render({"dra": {"dynamicMig": True}})))


def test_kubelet_api_dra_with_the_dra_parts_turned_off_is_refused() -> None:
    error = render_error({**DRA, "dra": {"enabled": False}})
    assert "validation.yml" in error
    assert error.endswith(
        "\nkubeletApi=dra needs the DRA parts (the kubelet's plugin directories, ResourceSlice "
        "and ResourceClaim access), which dra.enabled=false leaves out."
        "\nLeave dra.enabled unset (or true) with kubeletApi=dra, or set "
        "kubeletApi=device-plugin."
    )


@pytest.mark.parametrize(
    "config",
    [DRA_CONFIG, "version: v1\nFlags:\n  Plugin:\n    KubeletApi: dra\n"],
    ids=["plain", "any-case-keys"],
)
def test_an_embedded_config_naming_dra_needs_the_dra_parts(config: str) -> None:
    values = {"config": {"map": {"default": CONFIG0, "dra": config, "dra2": config}}}
    error = render_error(values)
    assert error.endswith(
        "\nThe config(s) dra, dra2 of 'config.map' set flags.plugin.kubeletApi: dra, but the DRA "
        "parts are not rendered."
        "\nSet dra.enabled=true to move nodes to DRA one at a time with their config label, or "
        "kubeletApi=dra to move every node."
    )
    objects = render({**values, **PER_NODE})
    assert "KUBELET_API" not in env_of(plugin_container(objects))
    assert render({**values, **DRA})


# --- the deployment guide's DRA commands ----------------------------------------------------


def test_the_guides_dra_installs_render_both_ways(tmp_path: Path) -> None:
    guide = (REPO_ROOT / "docs" / "deployment.md").read_text()
    assert yaml.safe_load(heredocs(guide)["/tmp/dp-example-dra.yaml"]) == yaml.safe_load(DRA_CONFIG)
    found = {}
    for install in installs(guide, tmp_path):
        if "kubeletApi=dra" in install.command or "dra.enabled=true" in install.command:
            objects = render(install.values, release=install.release)
            found[install.values.get("kubeletApi", "device-plugin")] = objects
            for obj in objects:
                validate(obj, DRA_KUBERNETES_VERSION)
    assert set(found) == {"dra", "device-plugin"}
    assert env_of(plugin_container(found["dra"]))["KUBELET_API"] == "dra"
    per_node = found["device-plugin"]
    assert "KUBELET_API" not in env_of(plugin_container(per_node))
    assert one(per_node, "DeviceClass")["metadata"]["name"] == "gpu.nvidia.com"
    assert set(one(per_node, "ConfigMap")["data"]) == {"config0", "dra"}


# --- the MIG DeviceClass --------------------------------------------------------------------

MIG_SELECTOR = (
    'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"'
)


@pytest.mark.parametrize(
    ("values", "created"),
    [
        pytest.param(DRA, False, id="dra"),
        pytest.param({**DRA, "dra": {"dynamicMig": True}}, True, id="dynamic-mig"),
        pytest.param({**DRA, "dra": {"migDeviceClass": {"create": True}}}, True, id="asked-for"),
        pytest.param(
            {**DRA, "dra": {"dynamicMig": True, "migDeviceClass": {"create": False}}},
            False,
            id="left-to-another-release",
        ),
        pytest.param({"dra": {"dynamicMig": True}}, False, id="no-dra"),
    ],
)
def test_the_mig_device_class_ships_with_dynamic_mig(
    values: dict[str, Any], created: bool
) -> None:
    objects = render(values)
    found = find(objects, "DeviceClass", "mig.nvidia.com")
    assert len(found) == int(created)
    for mig in found:
        for obj in objects:
            validate(obj, DRA_KUBERNETES_VERSION)
        assert mig["spec"] == {"selectors": [{"cel": {"expression": MIG_SELECTOR}}]}
        assert one(objects, "DeviceClass", "gpu.nvidia.com")
