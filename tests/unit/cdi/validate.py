"""The CDI specification's rules for a spec file, restated independently of the code under test."""

from __future__ import annotations

import json
import re
from typing import Any

RELEASED = {"0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"}
VENDOR = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
CLASS = re.compile(r"^[A-Za-z]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
EDIT_KEYS = {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt"}
HOOK_NAMES = {
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _edit_problems(edits: dict[str, Any]) -> list[str]:
    problems = []
    for env in edits.get("env", []):
        if "=" not in env:
            problems.append(f"bad env {env!r}")
    for node in edits.get("deviceNodes", []):
        if not node.get("path", "").startswith("/"):
            problems.append(f"relative device node {node!r}")
        if "hostPath" in node and not node["hostPath"].startswith("/"):
            problems.append(f"relative host path {node!r}")
    for mount in edits.get("mounts", []):
        if not (mount.get("hostPath", "").startswith("/") and mount.get("containerPath", "")):
            problems.append(f"bad mount {mount!r}")
        if not all(isinstance(option, str) for option in mount.get("options", [])):
            problems.append(f"bad mount options {mount!r}")
    for hook in edits.get("hooks", []):
        if hook.get("hookName") not in HOOK_NAMES:
            problems.append(f"bad hook name {hook!r}")
        if not hook.get("path", "").startswith("/"):
            problems.append(f"relative hook path {hook!r}")
    return problems


def cdi_problems(spec: dict[str, Any]) -> list[str]:
    problems = []
    version = spec.get("cdiVersion", "")
    if not re.fullmatch(r"\d+\.\d+\.\d+", version) or version not in RELEASED:
        problems.append(f"unknown cdiVersion {version!r}")
    vendor, _, cdi_class = str(spec.get("kind", "")).partition("/")
    if not VENDOR.match(vendor) or not CLASS.match(cdi_class):
        problems.append(f"bad kind {spec.get('kind')!r}")
    devices = spec.get("devices") or []
    if not devices:
        problems.append("no devices")
    names = [device.get("name", "") for device in devices]
    if len(set(names)) != len(names):
        problems.append("duplicate device names")
    needs_050 = False
    for device in devices:
        name = device.get("name", "")
        if not DEVICE.match(name):
            problems.append(f"bad device name {name!r}")
        needs_050 |= name[:1].isdigit()
        edits = device.get("containerEdits") or {}
        if not any(edits.get(key) for key in EDIT_KEYS):
            problems.append(f"device {name!r} has empty edits")
    all_edits = [spec.get("containerEdits") or {}] + [
        d.get("containerEdits") or {} for d in devices
    ]
    for edits in all_edits:
        problems += _edit_problems(edits)
        needs_050 |= any("hostPath" in node for node in edits.get("deviceNodes", []))
    if needs_050 and version in RELEASED and _version(version) < (0, 5, 0):
        problems.append(f"features need cdiVersion 0.5.0, spec says {version}")
    json.dumps(spec)
    return problems
