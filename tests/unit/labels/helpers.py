"""Shared pieces of the labeller tests: scripted waiters, in-process runs, profiles."""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import yaml

from labels.cli import serve
from labels.output import parse_labels
from labels.waiting import Wake

NOW = 1724632719


class ScriptedWaiter:
    """Ends each wait with the next scripted outcome (STOP once the script is used up).

    ``on_wait`` runs before each answer, so a test can change the world between passes.
    """

    def __init__(
        self, script: Sequence[Wake] = (), on_wait: Callable[[int], None] | None = None
    ) -> None:
        self.script = list(script)
        self.timeouts: list[float] = []
        self.watched: list[Callable[[], Hashable] | None] = []
        self._on_wait = on_wait

    def watch(self, fingerprint: Callable[[], Hashable] | None) -> None:
        self.watched.append(fingerprint)

    def wait(self, timeout: float) -> Wake:
        if self._on_wait is not None:
            self._on_wait(len(self.timeouts))
        self.timeouts.append(timeout)
        return self.script.pop(0) if self.script else Wake.STOP


def run_oneshot(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, str] | None]:
    """Run the command once in-process; (exit code, labels written or None)."""
    out = tmp_path / "features.d" / "gfd"
    out.parent.mkdir(exist_ok=True)
    code = serve(
        ["--oneshot", "--output-file", str(out), *args],
        env or {},
        ScriptedWaiter(),
        now=lambda: NOW + 0.75,
        configure_logging=False,
    )
    return code, parse_labels(out.read_text()) if out.exists() else None


GPU_A = "GPU-0a0a0a0a-0000-4000-8000-000000000000"

BASE_PROFILE: dict[str, Any] = {
    "driverVersion": "550.54.15",
    "cudaDriverVersion": "12.4",
    "machineType": "Test Machine",
    "gpus": [],
}


def gpu_spec(index: int, **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "uuid": f"GPU-{index:08x}-0000-4000-8000-000000000000",
        "name": "NVIDIA A100-SXM4-40GB",
        "memoryMiB": 40960,
        "pciBusID": f"00000000:{index + 1:02X}:00.0",
        "numaNode": 0,
        "computeCapability": "8.0",
    }
    spec.update(changes)
    return spec


def mig_spec(gpu: int, slot: int, profile: str, memory: int, **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "uuid": f"MIG-{gpu:04x}{slot:04x}-0000-4000-8000-000000000000",
        "profile": profile,
        "memoryMiB": memory,
        "gi": slot + 1,
        "ci": 0,
    }
    spec.update(changes)
    return spec


def write_profile(path: Path, gpus: list[dict[str, Any]], **changes: Any) -> Path:
    data = copy.deepcopy(BASE_PROFILE)
    data["gpus"] = gpus
    data.update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
