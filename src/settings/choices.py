"""The closed sets of values some flags accept.

Each is a `StrEnum` so a value compares equal to the plain string users type
and serialises as that string; the member order is the canonical order used
when a set of values (the device-list strategies) is normalised.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AllocationPolicy",
    "DeviceIdStrategy",
    "DeviceListStrategy",
    "DiscoveryStrategy",
    "ErrorClass",
    "FallbackStrategy",
    "KubeletApi",
    "LogFormat",
    "MigStrategy",
    "Readiness",
    "SharingStrategy",
]


class MigStrategy(StrEnum):
    """How MIG devices on MIG-capable GPUs are exposed."""

    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class DeviceListStrategy(StrEnum):
    """How the list of allocated devices is passed to the container runtime."""

    ENVVAR = "envvar"
    VOLUME_MOUNTS = "volume-mounts"
    CDI_ANNOTATIONS = "cdi-annotations"
    CDI_CRI = "cdi-cri"


class DeviceIdStrategy(StrEnum):
    """Which identifier names an allocated device: its UUID or its index."""

    UUID = "uuid"
    INDEX = "index"


class AllocationPolicy(StrEnum):
    """How replicas of shared devices are picked for a request."""

    DISTRIBUTED = "distributed"
    PACKED = "packed"


class DiscoveryStrategy(StrEnum):
    """Which backend discovers the devices."""

    AUTO = "auto"
    NVML = "nvml"
    TEGRA = "tegra"


class LogFormat(StrEnum):
    """One JSON object per log record, or one human-readable line."""

    JSON = "json"
    TEXT = "text"


class FallbackStrategy(StrEnum):
    """What to use when the node label names no config and no default is set."""

    NAMED = "named"
    SINGLE = "single"
    EMPTY = "empty"


class Readiness(StrEnum):
    """When `/readyz` answers 200 (see docs/inspection.md, Readiness)."""

    AUTO = "auto"  # serving when failOnInitError is true, running when it is false
    SERVING = "serving"  # serving, with every resource registered with the kubelet
    RUNNING = "running"  # the first start-up attempt is over and the loop runs


class SharingStrategy(StrEnum):
    """The active way of sharing a GPU between containers."""

    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


class ErrorClass(StrEnum):
    """How the device health machine treats an error (`states.health_policy`)."""

    IGNORED = "ignored"  # changes nothing
    TRANSIENT = "transient"  # unhealthy until quiet for a while and a probe succeeds
    STICKY = "sticky"  # as transient, and the device must have been reset


class KubeletApi(StrEnum):
    """Which kubelet API serves this node's GPUs: one at a time."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"
