"""The labeller labels only the GPUs --include-devices/--exclude-devices leave to the node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from labels.cli import serve
from labels.output import parse_labels
from labels.waiting import Wake
from tests.unit.labels.helpers import NOW, ScriptedWaiter, gpu_spec, run_oneshot, write_profile


def test_excluded_gpu_is_not_counted(tmp_path: Path) -> None:
    code, labels = run_oneshot(tmp_path, "--mock-nvml", "dgx-a100", "--exclude-devices", "3")
    assert code == 0
    assert labels is not None
    assert labels["nvidia.com/gpu.count"] == "7"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"


def test_exclude_from_the_environment_and_include_from_the_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nflags:\n  plugin:\n    includeDevices: ['0000:3b:00.0', 1, 2]\n"
    )
    code, labels = run_oneshot(
        tmp_path,
        "--mock-nvml", "t4x4", "--config-file", str(config),
        env={"EXCLUDE_DEVICES": "GPU-274C30B2-2BEA-5C78-9D5A-34D2566CF150"},  # GPU 2
    )  # fmt: skip
    assert code == 0
    assert labels is not None
    assert labels["nvidia.com/gpu.count"] == "2"


def test_product_labels_follow_the_model_of_the_gpus_kept(tmp_path: Path) -> None:
    # Three T4s and one A100: the A100 alone is labelled once the T4s are left out.
    profile = write_profile(
        tmp_path / "node.yaml",
        [
            gpu_spec(0, name="Tesla T4", memoryMiB=15360, computeCapability="7.5"),
            gpu_spec(1, name="Tesla T4", memoryMiB=15360, computeCapability="7.5"),
            gpu_spec(2, name="Tesla T4", memoryMiB=15360, computeCapability="7.5"),
            gpu_spec(3),
        ],
    )
    _, everything = run_oneshot(tmp_path, "--mock-nvml", str(profile))
    assert everything is not None
    assert everything["nvidia.com/gpu.product"] == "Tesla-T4"
    _, labels = run_oneshot(tmp_path, "--mock-nvml", str(profile), "--include-devices", "3")
    assert labels is not None
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.memory"] == "40960"
    assert labels["nvidia.com/gpu.family"] == "ampere"


def test_replicas_labels_count_only_the_gpus_kept(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    argv = ["--mock-nvml", "dgx-a100", "--config-file", str(config)]
    _, labels = run_oneshot(tmp_path, *argv, "--exclude-devices", "0,1")
    assert labels is not None
    assert labels["nvidia.com/gpu.count"] == "6"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


def test_an_excluded_mig_gpu_takes_its_profile_labels(tmp_path: Path) -> None:
    argv = ["--mock-nvml", "a100-mig-mixed", "--mig-strategy", "mixed"]
    _, everything = run_oneshot(tmp_path, *argv)
    assert everything is not None
    assert everything["nvidia.com/mig-7g.40gb.count"] == "1"
    _, labels = run_oneshot(tmp_path, *argv, "--exclude-devices", "0000:4e:00.0")  # GPU 3
    assert labels is not None
    assert not any(key.startswith("nvidia.com/mig-7g.40gb.") for key in labels)
    # GPU 0 keeps its seven 1g.5gb devices; GPUs 4 and 7 hold one more each.
    assert labels["nvidia.com/mig-1g.5gb.count"] == everything["nvidia.com/mig-1g.5gb.count"]


def test_a_selection_of_no_gpu_labels_a_node_without_gpus(tmp_path: Path) -> None:
    code, labels = run_oneshot(tmp_path, "--mock-nvml", "t4x4", "--include-devices", "7")
    assert code == 0
    assert labels is not None
    assert not any(key.startswith(("nvidia.com/gpu.", "nvidia.com/cuda.")) for key in labels)
    assert labels["nvidia.com/gfd.timestamp"] == str(NOW)


def test_a_bad_entry_is_a_one_line_error_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, labels = run_oneshot(tmp_path, "--mock-nvml", "t4x4", "--exclude-devices", "x")
    assert code == 1
    assert labels is None
    assert capsys.readouterr().err.splitlines() == [
        'gpu-feature-discovery: command line: --exclude-devices: invalid device "x": expected '
        "a GPU index, a GPU UUID (GPU-...) or a PCI bus ID (0000:07:00.0)"
    ]


@pytest.fixture
def warnings_logged() -> Iterator[list[str]]:
    records: list[str] = []
    handler = logger.add(lambda m: records.append(m.record["message"]), level="WARNING")
    try:
        yield records
    finally:
        logger.remove(handler)


def test_a_no_match_warning_is_logged_once_per_run(
    tmp_path: Path, warnings_logged: list[str]
) -> None:
    out = tmp_path / "gfd"
    waiter = ScriptedWaiter([Wake.TIMER, Wake.TIMER])
    argv = ["--mock-nvml", "t4x4", "-o", str(out), "--exclude-devices", "1,9"]
    assert serve(argv, {}, waiter, now=lambda: NOW, configure_logging=False) == 0
    assert len(waiter.timeouts) == 3  # three passes
    warning = "command line: --exclude-devices: index 9 matches no GPU on this node"
    assert warnings_logged.count(warning) == 1


def test_the_file_key_is_read_again_on_reload(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  plugin:\n    excludeDevices: [0]\n")
    out = tmp_path / "gfd"
    counts: list[str] = []

    def on_wait(index: int) -> None:
        counts.append(parse_labels(out.read_text())["nvidia.com/gpu.count"])
        config.write_text("version: v1\nflags:\n  plugin:\n    excludeDevices: [0, 1]\n")

    waiter = ScriptedWaiter([Wake.RELOAD], on_wait)
    argv = ["--mock-nvml", "t4x4", "-o", str(out), "--config-file", str(config)]
    assert serve(argv, {}, waiter, now=lambda: NOW, configure_logging=False) == 0
    assert counts == ["3", "2"]
