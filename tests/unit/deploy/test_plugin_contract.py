"""The chart and the plugin agree on option names and choices.

The plugin's flag table (`settings.flag_table`) is the source of truth for the
environment variables it reads and the values it accepts; the chart must only
set variables the plugin knows (a misspelt one would be silently ignored), and
its values schema must offer exactly the plugin's choices.
"""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest

from labels.flags import GFD_FLAGS
from settings.flags import FLAGS, FLAGS_BY_FIELD
from tests.unit.deploy.chart import (
    CHART_DIR,
    GFD_CONTAINER,
    MPS_CONTAINER,
    container,
    env_of,
    plugin_container,
    render,
)
from tests.unit.deploy.seed import CONFIG0

# Read by the NVIDIA container runtime, not by the plugin.
RUNTIME_ENV = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES"}
# Read by the plugin but not a flag: the pod's own name, which Events carry as
# their reportingInstance (the downward API sets it).
POD_ENV = {"POD_NAME"}

EVERYTHING: dict[str, Any] = {
    "migStrategy": "mixed",
    "failOnInitError": False,
    "compatWithCPUManager": True,
    "deviceListStrategy": "envvar",
    "deviceIDStrategy": "index",
    "nvidiaDriverRoot": "/run/nvidia/driver",
    "nvidiaDevRoot": "/",
    "gdrcopyEnabled": True,
    "gdsEnabled": True,
    "mofedEnabled": True,
    "deviceDiscoveryStrategy": "nvml",
    "cdi": {"nvidiaHookPath": "/usr/bin/nvidia-cdi-hook", "featureFlags": "x"},
    "config": {"map": {"a": CONFIG0, "b": CONFIG0}, "default": "a"},
    "kubeletApi": "dra",
}


def _schema() -> dict[str, Any]:
    with helm.Chart.load(CHART_DIR) as chart:
        schema = chart.schema
    assert schema is not None
    props: dict[str, Any] = schema["properties"]
    return props


def test_every_plugin_env_var_is_a_plugin_flag() -> None:
    known = {name for spec in FLAGS for name in spec.env} | RUNTIME_ENV | POD_ENV
    rendered = set(env_of(plugin_container(render(EVERYTHING))))
    assert rendered - known == set()
    # Every value above did render something.
    assert len(rendered) >= 32
    assert {"KUBELET_API", "DRA_DRIVER_NAME", "KUBELET_REGISTRAR_DIRECTORY_PATH",
            "KUBELET_PLUGINS_DIRECTORY_PATH"} <= rendered  # fmt: skip


def test_every_gfd_env_var_is_a_gfd_flag() -> None:
    values = {
        **EVERYTHING,
        "gfd": {"enabled": True, "writeNodeLabels": True, "noTimestamp": True,
                "sleepInterval": "30s", "useNodeFeatureAPI": True},
    }  # fmt: skip
    known = {name for flag in GFD_FLAGS for name in flag.env} | RUNTIME_ENV
    rendered = set(env_of(container(render(values), GFD_CONTAINER)))
    assert rendered - known == set()
    assert {"GFD_USE_NODE_FEATURE_API", "GFD_WRITE_NODE_LABELS", "POD_NAME"} <= rendered


def test_every_mps_daemon_env_var_is_a_plugin_flag() -> None:
    known = {name for spec in FLAGS for name in spec.env} | RUNTIME_ENV
    rendered = set(env_of(container(render(EVERYTHING), MPS_CONTAINER)))
    assert rendered - known == set()


@pytest.mark.parametrize(
    ("schema_path", "field"),
    [
        pytest.param(("migStrategy",), "mig_strategy", id="migStrategy"),
        pytest.param(("deviceIDStrategy",), "device_id_strategy", id="deviceIDStrategy"),
        pytest.param(("logFormat",), "log_format", id="logFormat"),
        pytest.param(("kubeletApi",), "kubelet_api", id="kubeletApi"),
    ],
)
def test_schema_choices_are_the_plugin_choices(schema_path: tuple[str, ...], field: str) -> None:
    node = _schema()[schema_path[0]]
    assert {c for c in node["enum"] if c is not None} == set(FLAGS_BY_FIELD[field].choices)


def test_fallback_strategy_choices() -> None:
    items = _schema()["config"]["properties"]["fallbackStrategies"]["items"]
    assert set(items["enum"]) == set(FLAGS_BY_FIELD["fallback_strategies"].choices)


def test_discovery_strategy_choices_cover_the_plugin() -> None:
    enum = set(_schema()["deviceDiscoveryStrategy"]["enum"])
    assert set(FLAGS_BY_FIELD["device_discovery_strategy"].choices) <= enum


def test_device_list_strategy_pattern_accepts_exactly_comma_lists_of_choices() -> None:
    pattern = re.compile(_schema()["deviceListStrategy"]["pattern"])
    choices = FLAGS_BY_FIELD["device_list_strategy"].choices
    for choice in choices:
        assert pattern.search(choice)
    assert pattern.search(",".join(choices))
    for bad in ("", "envvar,", "envvar,,cdi-cri", "bogus", "envvar bogus"):
        assert not pattern.search(bad)
