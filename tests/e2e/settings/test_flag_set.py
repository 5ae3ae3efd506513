"""Every entry point answers ``--version`` from its flag set, as a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from foundation.version import version

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["-m", "reconciler"], "nvidia-device-plugin"),
        (["-m", "labels.cli"], "gpu-feature-discovery"),
        (["-m", "mps"], "mps-control-daemon"),
        (["-m", "kubelet_sim.cli"], "kubelet-sim"),
    ],
)
@pytest.mark.parametrize("option", ["--version", "-v"])
def test_every_entry_point_prints_its_version(
    command: list[str], program: str, option: str
) -> None:
    result = subprocess.run(
        [sys.executable, *command, option],
        env={"PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{program} version {version()}\n"
    assert result.stderr == ""
