"""``python -m settings --check`` refuses a pipe and replica counts no node can serve."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

RunSettings = Callable[..., subprocess.CompletedProcess[str]]


def sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


def test_check_refuses_a_pipe_at_once(tmp_path: Path, run_settings: RunSettings) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    result = run_settings("--check", str(fifo))
    assert result.returncode == 1
    assert result.stderr == (
        f"{fifo}: error opening config file: not a regular file (a named pipe (FIFO))\n"
    )


def test_check_refuses_a_million_replicas(tmp_path: Path, run_settings: RunSettings) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(sliced(1_000_000))
    result = run_settings("--check", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"{path}: sharing.timeSlicing.resources[0].replicas: 1000000 replicas of even a single "
        "device do not fit in the kubelet's 4194304-byte ListAndWatch message (at most 67829 "
        "with deviceIDStrategy uuid), on any node\n"
    )


def test_check_accepts_a_count_that_fits_one_device(
    tmp_path: Path, run_settings: RunSettings
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(sliced(67829))
    result = run_settings("--check", str(path))
    assert result.returncode == 0, result.stderr
