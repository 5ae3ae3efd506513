"""The install commands of the reference README, as the values Helm builds from them.

Users of the reference plugin install with these exact flags, so each one must
render with this chart, unchanged. `--set-file` entries hold the README's
example config files.
"""

from __future__ import annotations

from typing import Any

import pytest

CONFIG0 = """\
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
"""

CONFIG1 = """\
version: v1
flags:
  migStrategy: "mixed"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
"""

# A config that moves the node it is chosen for to DRA.
DRA_CONFIG = """\
version: v1
flags:
  plugin:
    kubeletApi: dra
"""

NS = "nvidia-device-plugin"

# (id, namespace, values) of every `helm upgrade -i` in the reference README.
SEED_INSTALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("basic", NS, {}),
    ("single-config-file", NS, {"config": {"map": {"config": CONFIG0}}}),
    ("external-configmap", NS, {"config": {"name": "nvidia-plugin-configs"}}),
    (
        "multiple-config-files",
        NS,
        {"config": {"default": "config0", "map": {"config0": CONFIG0, "config1": CONFIG1}}},
    ),
    (
        "multiple-external-configmap",
        NS,
        {"config": {"default": "config0", "name": "nvidia-plugin-configs"}},
    ),
    (
        "cpumanager-resources",
        NS,
        {
            "compatWithCPUManager": True,
            "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "512Mi"}},
        },
    ),
    ("cpumanager-mig-mixed", NS, {"compatWithCPUManager": True, "migStrategy": "mixed"}),
    ("gfd", NS, {"gfd": {"enabled": True}}),
    ("gfd-standalone", "gpu-feature-discovery", {"devicePlugin": {"enabled": False}}),
    (
        "gfd-standalone-default-namespace",
        "default",
        {
            "allowDefaultNamespace": True,
            "nfd": {"enabled": False},
            "migStrategy": "mixed",
            "devicePlugin": {"enabled": False},
        },
    ),
    ("chart-url", NS, {}),
]


# The README's `--set` flags, verbatim, for the installs that use no `--set-file`.
SEED_SET_FLAGS: dict[str, list[str]] = {
    "basic": [],
    "external-configmap": ["config.name=nvidia-plugin-configs"],
    "multiple-external-configmap": ["config.default=config0", "config.name=nvidia-plugin-configs"],
    "cpumanager-resources": [
        "compatWithCPUManager=true",
        "resources.requests.cpu=100m",
        "resources.limits.memory=512Mi",
    ],
    "cpumanager-mig-mixed": ["compatWithCPUManager=true", "migStrategy=mixed"],
    "gfd": ["gfd.enabled=true"],
    "gfd-standalone": ["devicePlugin.enabled=false"],
    "gfd-standalone-default-namespace": [
        "allowDefaultNamespace=true",
        "nfd.enabled=false",
        "migStrategy=mixed",
        "devicePlugin.enabled=false",
    ],
    "chart-url": [],
}


def seed_params() -> list[Any]:
    return [pytest.param(ns, values, id=case) for case, ns, values in SEED_INSTALLS]


def seed(case: str) -> tuple[str, dict[str, Any]]:
    """(namespace, values) of one README install, by id."""
    return next((ns, values) for name, ns, values in SEED_INSTALLS if name == case)
