"""CDI container edits as frozen values, and their JSON form.

Field names and key order follow the CDI specification's JSON (`deviceNodes`
with `path`/`hostPath`, mounts with `hostPath`/`containerPath`/`options`,
hooks with `hookName`/`path`/`args`). Empty lists are left out of the JSON,
as the reference's spec writer does, so a device without DRM nodes has no
`hooks` key at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Read-only bind mounts that can neither carry setuid binaries nor expose
# device nodes; sockets also get noexec.
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
SOCKET_OPTIONS = (*MOUNT_OPTIONS, "noexec")
CREATE_CONTAINER = "createContainer"


@dataclass(frozen=True)
class DeviceNode:
    path: str  # in the container
    host_path: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "hostPath": self.host_path}


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    options: tuple[str, ...] = MOUNT_OPTIONS

    def to_json(self) -> dict[str, Any]:
        return {
            "hostPath": self.host_path,
            "containerPath": self.container_path,
            "options": list(self.options),
        }


@dataclass(frozen=True)
class Hook:
    """An OCI hook; `name` is the hook subcommand (`create-symlinks`), used to disable it."""

    name: str
    path: str
    args: tuple[str, ...]
    hook_name: str = CREATE_CONTAINER

    def to_json(self) -> dict[str, Any]:
        return {"hookName": self.hook_name, "path": self.path, "args": list(self.args)}


@dataclass(frozen=True)
class Edits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.env or self.device_nodes or self.mounts or self.hooks)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [node.to_json() for node in self.device_nodes]
        if self.mounts:
            out["mounts"] = [mount.to_json() for mount in self.mounts]
        if self.hooks:
            out["hooks"] = [hook.to_json() for hook in self.hooks]
        return out
