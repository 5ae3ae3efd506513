"""Shared pieces of the MPS tests: the stand-in programs, MPS trees, cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from mps.layout import MpsLayout

FAKES = Path(__file__).resolve().parents[2] / "fakes"
PID_FILE = "nvidia-cuda-mps-control.pid"
GPU = "nvidia.com/gpu"

DGX_A100_UUIDS = (
    "GPU-a0bba3c3-c007-582d-8278-aefa736de776",
    "GPU-617c2b05-a0a7-57bb-bba0-ec49d460ab59",
    "GPU-6af16517-963e-5e4c-b60b-0b9f96af1e59",
    "GPU-184b362b-70e2-50de-b227-3a382639ed11",
)


def path_with_fakes() -> str:
    return f"{FAKES}{os.pathsep}{os.environ.get('PATH', '')}"


def state(layout: MpsLayout, resource: str = GPU) -> dict[str, Any]:
    """What the stand-in daemon recorded for ``resource`` (empty before anything)."""
    try:
        return dict(json.loads((layout.pipe_dir(resource) / "fake-state.json").read_text()))
    except (OSError, ValueError):
        return {}


def daemon_pid(layout: MpsLayout, resource: str = GPU) -> int | None:
    try:
        return int((layout.pipe_dir(resource) / PID_FILE).read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_fake_daemons(root: Path) -> None:
    """SIGKILL every stand-in daemon that recorded a pid under ``root``."""
    for pid_file in root.rglob(PID_FILE):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def set_faults(layout: MpsLayout, faults: dict[str, str], resource: str = GPU) -> None:
    layout.pipe_dir(resource).mkdir(parents=True, exist_ok=True)
    (layout.pipe_dir(resource) / "fake-faults.json").write_text(json.dumps(faults))


def clear_faults(layout: MpsLayout, resource: str = GPU) -> None:
    (layout.pipe_dir(resource) / "fake-faults.json").unlink(missing_ok=True)


def write_config(path: Path, *, replicas: int = 10, extra: str = "", section: str = "mps") -> Path:
    path.write_text(
        "version: v1\n"
        "sharing:\n"
        f"  {section}:\n"
        f"{extra}"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        f"      replicas: {replicas}\n"
    )
    return path
