"""What each value does to the device plugin's container: env, mounts, probes, privileges."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart import (
    FULLNAME,
    env_of,
    mounts_of,
    plugin_container,
    pod_spec,
    render,
    render_error,
    resolved_env,
    volumes_of,
)
from tests.unit.deploy.seed import CONFIG0, CONFIG1

DROP_ALL = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
SYS_ADMIN = {"capabilities": {"add": ["SYS_ADMIN"]}}
PRIVILEGED = {"privileged": True}

MIG_SINGLE_FOLDED_KEYS = "VERSION: v1\nFLAGS:\n  MIGSTRATEGY: single\n"
VOLUME_MOUNTS_LIST = """\
version: v1
flags:
  plugin:
    deviceListStrategy: [envvar, volume-mounts]
"""


def plugin_env(values: dict[str, Any]) -> dict[str, Any]:
    return env_of(plugin_container(render(values)))


def test_default_container_env_is_exactly_the_fixed_set() -> None:
    ctr = plugin_container(render({}))
    assert ctr["command"] == ["nvidia-device-plugin"]
    assert "args" not in ctr
    assert resolved_env(ctr, node_name="gpu-node-1") == {
        "MPS_ROOT": "/run/nvidia/mps",
        "NODE_NAME": "gpu-node-1",
        "EVENTS": "true",
        "POD_NAME": "pod",
        "CDI_SPEC_DIR": "/var/run/cdi",
        "STATE_ADDRESS": "0.0.0.0:9040",
        "PROBE_ADDRESS": "0.0.0.0:9041",
        "LOG_FORMAT": "json",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }


def test_node_name_comes_from_the_downward_api() -> None:
    assert plugin_env({})["NODE_NAME"] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}
    }


@pytest.mark.parametrize(
    ("values", "name", "expected"),
    [
        pytest.param({"migStrategy": "mixed"}, "MIG_STRATEGY", "mixed", id="migStrategy"),
        pytest.param({"failOnInitError": False}, "FAIL_ON_INIT_ERROR", "false", id="failOnInit"),
        pytest.param({"failOnInitError": True}, "FAIL_ON_INIT_ERROR", "true", id="failOnInit-on"),
        pytest.param({"compatWithCPUManager": True}, "PASS_DEVICE_SPECS", "true", id="compat"),
        pytest.param(
            {"compatWithCPUManager": False}, "PASS_DEVICE_SPECS", "false", id="compat-off"
        ),
        pytest.param(
            {"deviceListStrategy": "envvar,cdi-cri"},
            "DEVICE_LIST_STRATEGY",
            "envvar,cdi-cri",
            id="deviceListStrategy",
        ),
        pytest.param({"deviceIDStrategy": "index"}, "DEVICE_ID_STRATEGY", "index", id="deviceID"),
        pytest.param(
            {"nvidiaDriverRoot": "/run/nvidia/driver"},
            "NVIDIA_DRIVER_ROOT",
            "/run/nvidia/driver",
            id="driverRoot",
        ),
        pytest.param({"nvidiaDevRoot": "/"}, "NVIDIA_DEV_ROOT", "/", id="devRoot"),
        pytest.param({"gdrcopyEnabled": True}, "GDRCOPY_ENABLED", "true", id="gdrcopy"),
        pytest.param({"gdsEnabled": True}, "GDS_ENABLED", "true", id="gds"),
        pytest.param({"mofedEnabled": False}, "MOFED_ENABLED", "false", id="mofed"),
        pytest.param(
            {"deviceDiscoveryStrategy": "nvml"}, "DEVICE_DISCOVERY_STRATEGY", "nvml", id="discovery"
        ),
        pytest.param(
            {"cdi": {"nvidiaHookPath": "/usr/local/bin/nvidia-cdi-hook"}},
            "NVIDIA_CDI_HOOK_PATH",
            "/usr/local/bin/nvidia-cdi-hook",
            id="cdiHook",
        ),
        pytest.param(
            {"cdi": {"featureFlags": "a,b"}}, "CDI_FEATURE_FLAGS", "a,b", id="cdiFeatureFlags"
        ),
        pytest.param({"mps": {"root": "/var/mps"}}, "MPS_ROOT", "/var/mps", id="mpsRoot"),
        pytest.param({"logFormat": "text"}, "LOG_FORMAT", "text", id="logFormat"),
        pytest.param(
            {"devicePlugin": {"inspection": {"address": "127.0.0.1", "port": 9100}}},
            "STATE_ADDRESS",
            "127.0.0.1:9100",
            id="inspection",
        ),
    ],
)
def test_value_sets_its_env_var(values: dict[str, Any], name: str, expected: str) -> None:
    assert plugin_env(values)[name] == expected


@pytest.mark.parametrize(
    "name",
    [
        "MIG_STRATEGY",
        "FAIL_ON_INIT_ERROR",
        "PASS_DEVICE_SPECS",
        "DEVICE_LIST_STRATEGY",
        "DEVICE_ID_STRATEGY",
        "NVIDIA_DRIVER_ROOT",
        "NVIDIA_DEV_ROOT",
        "GDRCOPY_ENABLED",
        "DEVICE_DISCOVERY_STRATEGY",
        "NVIDIA_CDI_HOOK_PATH",
        "CDI_FEATURE_FLAGS",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "CONFIG_DIRECTORY",
        "CONFIG_FILE",
    ],
)
def test_unset_values_leave_the_binary_defaults(name: str) -> None:
    assert name not in plugin_env({})


def test_driver_root_is_mounted_read_only_at_driver_root() -> None:
    objects = render({"nvidiaDriverRoot": "/run/nvidia/driver"})
    mount = mounts_of(plugin_container(objects))["driver-root"]
    assert mount == {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}
    volume = volumes_of(pod_spec(objects, "nvidia-device-plugin-ctr"))["driver-root"]
    assert volume["hostPath"] == {"path": "/run/nvidia/driver", "type": "Directory"}
    assert "driver-root" not in mounts_of(plugin_container(render({})))


def test_fixed_mounts_and_host_paths() -> None:
    objects = render({"mps": {"root": "/var/mps"}})
    mounts = mounts_of(plugin_container(objects))
    assert {name: m["mountPath"] for name, m in mounts.items()} == {
        "device-plugin": "/var/lib/kubelet/device-plugins",
        "mps-shm": "/dev/shm",
        "mps-root": "/mps",
        "cdi-root": "/var/run/cdi",
    }
    volumes = volumes_of(pod_spec(objects, "nvidia-device-plugin-ctr"))
    assert volumes["device-plugin"]["hostPath"]["type"] == "Directory"
    assert volumes["mps-root"]["hostPath"] == {"path": "/var/mps", "type": "DirectoryOrCreate"}
    assert volumes["mps-shm"]["hostPath"] == {"path": "/var/mps/shm"}
    assert volumes["cdi-root"]["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"map": {"config": CONFIG0}}, id="embedded"),
        pytest.param({"name": "nvidia-plugin-configs"}, id="external"),
    ],
)
def test_config_map_is_a_directory_the_plugin_selects_from(config: dict[str, Any]) -> None:
    objects = render({"config": config})
    spec = pod_spec(objects, "nvidia-device-plugin-ctr")
    ctr = plugin_container(objects)
    env = env_of(ctr)
    assert env["CONFIG_DIRECTORY"] == "/available-configs"
    assert env["FALLBACK_STRATEGIES"] == "named,single"
    assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    assert "DEFAULT_CONFIG" not in env
    assert "CONFIG_FILE" not in env
    assert mounts_of(ctr)["available-configs"] == {
        "name": "available-configs",
        "mountPath": "/available-configs",
        "readOnly": True,
    }
    expected_cm = config.get("name") or f"{FULLNAME}-configs"
    assert volumes_of(spec)["available-configs"] == {
        "name": "available-configs",
        "configMap": {"name": expected_cm},
    }
    # The plugin follows the label itself: no config-manager containers.
    assert [c["name"] for c in spec["containers"]] == ["nvidia-device-plugin-ctr"]
    assert "initContainers" not in spec
    assert "shareProcessNamespace" not in spec


def test_config_default_fallbacks_and_label_are_passed_through() -> None:
    env = plugin_env(
        {
            "config": {
                "map": {"a": CONFIG0, "b": CONFIG1},
                "default": "b",
                "fallbackStrategies": ["empty"],
                "nodeLabel": "example.com/gpu-config",
            }
        }
    )
    assert env["DEFAULT_CONFIG"] == "b"
    assert env["FALLBACK_STRATEGIES"] == "empty"
    assert env["NODE_LABEL"] == "example.com/gpu-config"


@pytest.mark.parametrize(("port", "probe_port"), [(9040, 9041), (9100, 9200)])
def test_probes_have_a_listener_of_their_own(port: int, probe_port: int) -> None:
    inspection = {"port": port, "probePort": probe_port}
    ctr = plugin_container(render({"devicePlugin": {"inspection": inspection}}))
    assert ctr["ports"] == [
        {"name": "metrics", "containerPort": port, "protocol": "TCP"},
        {"name": "probes", "containerPort": probe_port, "protocol": "TCP"},
    ]
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert env_of(ctr)["STATE_ADDRESS"] == f"0.0.0.0:{port}"
    assert env_of(ctr)["PROBE_ADDRESS"] == f"0.0.0.0:{probe_port}"


def test_probes_on_the_inspection_endpoint_without_a_probe_port() -> None:
    inspection = {"port": 9100, "probePort": None}
    ctr = plugin_container(render({"devicePlugin": {"inspection": inspection}}))
    assert ctr["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "PROBE_ADDRESS" not in env_of(ctr)


def test_a_probe_port_equal_to_the_inspection_port_is_refused() -> None:
    error = render_error({"devicePlugin": {"inspection": {"port": 9040, "probePort": 9040}}})
    assert "probePort must differ from devicePlugin.inspection.port" in error


def test_probe_timings_come_from_values() -> None:
    ctr = plugin_container(
        render({"devicePlugin": {"livenessProbe": {"periodSeconds": 30, "failureThreshold": 5}}})
    )
    assert ctr["livenessProbe"]["periodSeconds"] == 30
    assert ctr["livenessProbe"]["failureThreshold"] == 5
    assert ctr["livenessProbe"]["initialDelaySeconds"] == 10  # default kept


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({}, DROP_ALL, id="default"),
        pytest.param({"compatWithCPUManager": True}, PRIVILEGED, id="compat"),
        pytest.param({"compatWithCPUManager": False}, DROP_ALL, id="compat-false"),
        pytest.param({"migStrategy": "single"}, SYS_ADMIN, id="mig-single"),
        pytest.param({"migStrategy": "mixed"}, SYS_ADMIN, id="mig-mixed"),
        pytest.param({"migStrategy": "none"}, DROP_ALL, id="mig-none"),
        pytest.param({"deviceListStrategy": "volume-mounts"}, SYS_ADMIN, id="volume-mounts"),
        pytest.param(
            {"deviceListStrategy": "envvar,volume-mounts"}, SYS_ADMIN, id="envvar+volume-mounts"
        ),
        pytest.param({"config": {"name": "x"}}, SYS_ADMIN, id="external-unknown"),
        pytest.param(
            {"config": {"name": "x"}, "migStrategy": "none"}, SYS_ADMIN, id="external-mig-none"
        ),
        pytest.param(
            {"config": {"name": "x"}, "migStrategy": "none", "deviceListStrategy": "envvar"},
            DROP_ALL,
            id="external-both-known",
        ),
        pytest.param({"config": {"map": {"config": CONFIG0}}}, DROP_ALL, id="embedded-no-mig"),
        pytest.param(
            {"config": {"map": {"config0": CONFIG0, "config1": CONFIG1}, "default": "config0"}},
            SYS_ADMIN,
            id="embedded-one-mixed",
        ),
        pytest.param(
            {
                "config": {"map": {"config0": CONFIG0, "config1": CONFIG1}, "default": "config0"},
                "migStrategy": "none",
            },
            DROP_ALL,
            id="value-overrides-files",
        ),
        pytest.param(
            {"config": {"map": {"config": MIG_SINGLE_FOLDED_KEYS}}}, SYS_ADMIN, id="keys-any-case"
        ),
        pytest.param(
            {"config": {"map": {"config": VOLUME_MOUNTS_LIST}}}, SYS_ADMIN, id="embedded-list"
        ),
        pytest.param({"config": {"map": {"config": "- not a map"}}}, SYS_ADMIN, id="unparsable"),
        pytest.param({"config": {"map": {"default": ""}}}, DROP_ALL, id="empty-file"),
        pytest.param(
            {"compatWithCPUManager": True, "securityContext": {"runAsUser": 0}},
            {"runAsUser": 0},
            id="user-wins",
        ),
    ],
)
def test_security_context(values: dict[str, Any], expected: dict[str, Any]) -> None:
    assert plugin_container(render(values))["securityContext"] == expected


@pytest.mark.parametrize(
    ("values", "monitored"),
    [
        pytest.param({}, False, id="default"),
        pytest.param({"migStrategy": "single"}, True, id="mig"),
        pytest.param({"deviceListStrategy": "volume-mounts"}, False, id="volume-mounts-only"),
        pytest.param({"config": {"name": "x"}}, True, id="external"),
        pytest.param({"config": {"map": {"config": CONFIG0}}}, False, id="embedded-none"),
        pytest.param({"config": {"map": {"c": CONFIG1}}}, True, id="embedded-mixed"),
    ],
)
def test_mig_monitoring_follows_possible_mig_use(values: dict[str, Any], monitored: bool) -> None:
    env = plugin_env(values)
    assert ("NVIDIA_MIG_MONITOR_DEVICES" in env) is monitored
    if monitored:
        assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
