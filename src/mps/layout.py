"""Where the MPS files live under a root directory.

The same tree is seen from three places: the host (``--mps-root``, by default
``/run/nvidia/mps``), the control-daemon container and the plugin container
(both mount it at ``/mps``, the container root). Paths embed the full resource
name, so ``nvidia.com/gpu`` gives a ``nvidia.com/`` directory level::

    <root>/shm/                  tmpfs shared by the daemons and their clients
    <root>/.ready                every daemon of this node has started
    <root>/<resource>/pipe/      CUDA_MPS_PIPE_DIRECTORY of the resource's daemon
    <root>/<resource>/log/       CUDA_MPS_LOG_DIRECTORY (control.log lives here)
    <root>/<resource>/.started   that daemon has started and has its limits (which: one JSON line)

`MpsLayout` is a plain value so the daemon, the probe and the tests agree on
these paths without passing strings around.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONTAINER_ROOT", "MpsLayout"]

CONTAINER_ROOT = Path("/mps")


@dataclass(frozen=True)
class MpsLayout:
    """The MPS tree under ``root`` (the container root unless stated otherwise)."""

    root: Path = CONTAINER_ROOT

    @property
    def shm(self) -> Path:
        return self.root / "shm"

    @property
    def ready(self) -> Path:
        return self.root / ".ready"

    def resource_dir(self, resource: str) -> Path:
        return self.root / resource

    def pipe_dir(self, resource: str) -> Path:
        return self.resource_dir(resource) / "pipe"

    def log_dir(self, resource: str) -> Path:
        return self.resource_dir(resource) / "log"

    def control_log(self, resource: str) -> Path:
        return self.log_dir(resource) / "control.log"

    def started(self, resource: str) -> Path:
        return self.resource_dir(resource) / ".started"

    def environment(self, resource: str) -> dict[str, str]:
        """The only variables the control program is run with for ``resource``."""
        return {
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir(resource)),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir(resource)),
        }
