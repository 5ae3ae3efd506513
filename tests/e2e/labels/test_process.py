"""The real command in a subprocess: exit codes, stderr, signals, config changes."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from labels.output import parse_labels
from tests.unit.labels.helpers import gpu_spec, write_profile
from tests.waiting import eventually_sync

SCRIPT = Path(sys.executable).parent / "gpu-feature-discovery"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "labels.cli"]
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
TIMEOUT = 30.0


def labels_in(path: Path) -> dict[str, str]:
    try:
        return parse_labels(path.read_text())
    except FileNotFoundError:
        return {}


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [*COMMAND, *args],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=TIMEOUT)


def test_oneshot_writes_the_file_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    result = subprocess.run(
        [*COMMAND, "--oneshot", "--mock-nvml", "dgx-a100", "--output-file", str(out)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    labels = labels_in(out)
    assert re.fullmatch(r"[0-9]{10}", labels.pop("nvidia.com/gfd.timestamp"))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert len(labels) == 25
    assert result.stdout == ""


def test_malformed_config_exits_1_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: [unclosed\n")
    out = tmp_path / "gfd"
    result = subprocess.run(
        [*COMMAND, "--oneshot", "--mock-nvml", "dgx-a100", "-o", str(out)],
        env={**ENV, "CONFIG_FILE": str(config)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert re.fullmatch(
        rf"gpu-feature-discovery: {re.escape(str(config))}: [^\n]+\n", result.stderr
    )
    assert not out.exists()


def test_sigterm_removes_the_file_and_exits_0(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    out = tmp_path / "gfd"
    process = spawn("--mock-nvml", "t4x4", "-o", str(out), "--sleep-interval", "60s")
    eventually_sync(out.exists, what="the features file", timeout=TIMEOUT)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=TIMEOUT) == 0
    assert not out.exists()


def test_sighup_relabels_with_a_fresh_run(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    out = tmp_path / "gfd"
    profile = write_profile(tmp_path / "node.yaml", [gpu_spec(0)])
    # No timer: only the signal can start another pass.
    process = spawn("--mock-nvml", str(profile), "-o", str(out), "--sleep-interval=infinite")
    eventually_sync(
        lambda: labels_in(out).get("nvidia.com/gpu.count") == "1",
        what="the first pass",
        timeout=TIMEOUT,
    )
    write_profile(profile, [gpu_spec(0), gpu_spec(1)])
    process.send_signal(signal.SIGHUP)
    eventually_sync(
        lambda: labels_in(out).get("nvidia.com/gpu.count") == "2",
        what="the pass after SIGHUP",
        timeout=TIMEOUT,
    )
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=TIMEOUT) == 0
    assert out.exists()  # labels written with an infinite interval stay


def test_config_change_relabels_without_a_signal(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    out = tmp_path / "gfd"
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    process = spawn(
        "--mock-nvml", "t4x4", "-o", str(out), "--sleep-interval=infinite",
        "--config-file", str(config),
    )  # fmt: skip
    eventually_sync(
        lambda: labels_in(out).get("nvidia.com/gpu.replicas") == "1",
        what="the first pass",
        timeout=TIMEOUT,
    )
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 3}\n"
    )
    eventually_sync(
        lambda: labels_in(out).get("nvidia.com/gpu.replicas") == "3",
        what="the relabel",
        timeout=TIMEOUT,
    )
    assert labels_in(out)["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=TIMEOUT) == 0
