"""A small CDI injector: what containerd or CRI-O do with a CDI device name.

Written from the CDI specification, independently of the plugin's code:

1. read every `*.json` spec in the spec directories (a spec that fails to
   parse or validate hides all its devices, as in the real registry);
2. resolve each fully qualified name `<vendor>/<class>=<device>`; an unknown
   name fails the whole injection, as it fails the container start;
3. apply, once per spec used, the spec's common edits, then each named
   device's edits, to an OCI runtime spec: `env` to `process.env` (a later
   value of the same variable replaces the earlier one), device nodes to
   `linux.devices` plus a cgroup allow rule, mounts to `mounts` (a mount on
   the same destination replaces the earlier one; sorted by destination depth
   so parents come first), hooks to `hooks.<hookName>`.

A runtime stats each device node's host path for its type and numbers; here
`host` maps a host path to where the test's fake host keeps that file, and a
node or mount whose file is missing there fails the injection, as it would
fail the runtime.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

NAME = re.compile(r"^(?P<kind>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9_-]*)=(?P<dev>.+)$")
HOOK_NAMES = {
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
}


class InjectionError(Exception):
    """The runtime would refuse to start the container."""


def _valid(spec: Any) -> bool:
    return (
        isinstance(spec, dict)
        and isinstance(spec.get("cdiVersion"), str)
        and isinstance(spec.get("kind"), str)
        and isinstance(spec.get("devices"), list)
        and all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in spec["devices"])
    )


def load_registry(directories: Iterable[Path]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Qualified device name -> (spec, device) over every valid spec file."""
    registry: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for directory in directories:
        for path in sorted(Path(directory).glob("*.json")):
            try:
                spec = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not _valid(spec):
                continue
            for device in spec["devices"]:
                registry[f"{spec['kind']}={device['name']}"] = (spec, device)
    return registry


def empty_oci_spec() -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "root": {"path": "rootfs"},
        "mounts": [],
        "linux": {"devices": [], "resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }


def _node_info(host_path: str, host: Callable[[str], Path]) -> tuple[str, int, int]:
    local = host(host_path)
    try:
        info = os.stat(local)
    except OSError as error:
        raise InjectionError(f"device node {host_path} is missing on the host") from error
    if stat.S_ISCHR(info.st_mode):
        return "c", os.major(info.st_rdev), os.minor(info.st_rdev)
    if stat.S_ISBLK(info.st_mode):
        return "b", os.major(info.st_rdev), os.minor(info.st_rdev)
    # A fake host without mknod keeps "major:minor" in a regular file.
    major, _, minor = local.read_text().strip().partition(":")
    return "c", int(major), int(minor)


def _apply(oci: dict[str, Any], edits: dict[str, Any], host: Callable[[str], Path]) -> None:
    env: list[str] = oci["process"]["env"]
    for item in edits.get("env", []):
        key = item.split("=", 1)[0]
        env[:] = [e for e in env if e.split("=", 1)[0] != key] + [item]
    devices: list[dict[str, Any]] = oci["linux"]["devices"]
    rules: list[dict[str, Any]] = oci["linux"]["resources"]["devices"]
    for node in edits.get("deviceNodes", []):
        host_path = node.get("hostPath", node["path"])
        kind, major, minor = _node_info(host_path, host)
        devices[:] = [d for d in devices if d["path"] != node["path"]]
        devices.append({"path": node["path"], "type": kind, "major": major, "minor": minor})
        rules.append({"allow": True, "type": kind, "major": major, "minor": minor, "access": "rwm"})
    mounts: list[dict[str, Any]] = oci["mounts"]
    for mount in edits.get("mounts", []):
        if not host(mount["hostPath"]).exists():
            raise InjectionError(f"mount source {mount['hostPath']} is missing on the host")
        mounts[:] = [m for m in mounts if m["destination"] != mount["containerPath"]]
        entry = {
            "destination": mount["containerPath"],
            "source": mount["hostPath"],
            "options": list(mount.get("options", [])),
        }
        if mount.get("type"):
            entry["type"] = mount["type"]
        mounts.append(entry)
    for hook in edits.get("hooks", []):
        if hook["hookName"] not in HOOK_NAMES:
            raise InjectionError(f"unknown hook {hook['hookName']!r}")
        entry = {"path": hook["path"], "args": list(hook.get("args", []))}
        if hook.get("env"):
            entry["env"] = list(hook["env"])
        oci.setdefault("hooks", {}).setdefault(hook["hookName"], []).append(entry)


def inject(
    oci: dict[str, Any],
    names: Sequence[str],
    spec_dirs: Iterable[Path],
    host: Callable[[str], Path] = Path,
) -> dict[str, Any]:
    """Apply the named CDI devices to `oci` (changed in place and returned).

    Raises:
        InjectionError: a name is malformed or unknown, or a node or mount
            source does not exist on the host.
    """
    registry = load_registry(spec_dirs)
    resolved = []
    for name in names:
        if not NAME.match(name):
            raise InjectionError(f"{name!r} is not a qualified CDI device name")
        if name not in registry:
            raise InjectionError(f"unresolvable CDI device {name}")
        resolved.append(registry[name])
    applied_specs: list[int] = []
    for spec, _ in resolved:
        if id(spec) not in applied_specs:
            applied_specs.append(id(spec))
            _apply(oci, spec.get("containerEdits") or {}, host)
    for _, device in resolved:
        _apply(oci, device.get("containerEdits") or {}, host)
    oci["mounts"].sort(key=lambda m: m["destination"].rstrip("/").count("/"))
    return oci
