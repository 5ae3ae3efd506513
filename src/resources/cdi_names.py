"""CDI naming rules: qualified device names, spec kinds, annotation keys, versions.

Written from the Container Device Interface specification:

* vendor: starts with a letter, ends with a letter or digit, otherwise
  letters, digits, `-`, `_` and `.`;
* class: starts with a letter, ends with a letter or digit, otherwise letters,
  digits, `-` and `_` (a `.` needs spec version 0.6.0);
* device name: starts and ends with a letter or digit, otherwise letters,
  digits, `-`, `_`, `.` and `:`;
* a qualified name is `<vendor>/<class>=<device>`;
* a CDI annotation key's name part is at most 63 characters, starts and ends
  with a letter or digit and otherwise holds letters, digits, `-`, `_`, `.`.

The plugin's vendor is `k8s.device-plugin.nvidia.com`, not `nvidia.com`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

VENDOR = "k8s.device-plugin.nvidia.com"
GPU_CLASS = "gpu"
IMEX_CLASS = "imex-channel"
ANNOTATION_PLUGIN_NAME = "nvidia-device-plugin"

# Known spec versions, oldest first.
VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")

_VENDOR = re.compile(r"^[A-Za-z]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_CLASS = re.compile(r"^[A-Za-z]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$")
_ANNOTATION_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def kind(cdi_class: str) -> str:
    return f"{VENDOR}/{cdi_class}"


def qualified_name(cdi_class: str, device: str) -> str:
    """`k8s.device-plugin.nvidia.com/<class>=<device>`."""
    return f"{kind(cdi_class)}={device}"


def kind_error(value: str) -> str | None:
    vendor, sep, cdi_class = value.partition("/")
    if not sep:
        return f"kind {value!r} is not <vendor>/<class>"
    if not _VENDOR.match(vendor):
        return f"invalid vendor {vendor!r}"
    if not _CLASS.match(cdi_class):
        return f"invalid class {cdi_class!r}"
    return None


def device_name_error(name: str) -> str | None:
    return None if _DEVICE.match(name) else f"invalid device name {name!r}"


def qualified_name_error(value: str) -> str | None:
    """Why `value` is not a valid qualified CDI device name, or None."""
    spec_kind, sep, device = value.partition("=")
    if not sep:
        return f"{value!r} is not <vendor>/<class>=<name>"
    return kind_error(spec_kind) or device_name_error(device)


def annotation_key(prefix: str, response_id: str) -> str:
    """`<prefix>nvidia-device-plugin_<id>`; the prefix is used as given (no `/` added)."""
    return f"{prefix}{ANNOTATION_PLUGIN_NAME}_{response_id.replace('/', '_')}"


def annotation_name_error(name: str) -> str | None:
    if len(name) > 63:
        return f"annotation name {name!r} is longer than 63 characters"
    return None if _ANNOTATION_NAME.match(name) else f"invalid annotation name {name!r}"


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The oldest CDI spec version that has every feature `spec` uses."""
    edits = [spec.get("containerEdits") or {}]
    edits += [device.get("containerEdits") or {} for device in spec.get("devices", [])]
    if any("intelRdt" in e or e.get("additionalGids") for e in edits):
        return "0.7.0"
    _, _, cdi_class = str(spec.get("kind", "")).partition("/")
    annotated = spec.get("annotations") or any(
        device.get("annotations") for device in spec.get("devices", [])
    )
    if annotated or "." in cdi_class:
        return "0.6.0"
    digit_name = any(str(d.get("name", ""))[:1].isdigit() for d in spec.get("devices", []))
    host_paths = any(node.get("hostPath") for e in edits for node in e.get("deviceNodes", []))
    if digit_name or host_paths:
        return "0.5.0"
    if any(mount.get("type") for e in edits for mount in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"
