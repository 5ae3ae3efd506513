"""The GPU check's steps against the real NVML backend (needs an NVIDIA GPU and its driver).

Marked `gpu` and skipped wherever NVML cannot initialise, so the suite still
passes on machines without a GPU. On a GPU node each step must pass as it
does in `scripts/gpu-check`; the printed lines are the failure message.
"""

from __future__ import annotations

import pytest

from devices.backends import open_library
from devices.errors import NvmlUnavailable
from scripts.gpu_check.plugin_step import plugin_step
from scripts.gpu_check.steps import (
    Backend,
    StepResult,
    compare_step,
    discovery_step,
    gfd_step,
    health_step,
)

pytestmark = pytest.mark.gpu
REAL = Backend(None)


@pytest.fixture(scope="module", autouse=True)
def _nvml() -> None:
    library = open_library(None)
    try:
        library.init()
    except NvmlUnavailable as exc:
        pytest.skip(f"NVML cannot initialise here: {exc}")
    library.shutdown()


def explain(result: StepResult, lines: list[str]) -> str:
    return "\n".join([f"{result.name}: {result.summary}", *lines])


def test_discovery_matches_nvidia_smi() -> None:
    lines: list[str] = []
    found, inventory = discovery_step(REAL, lines.append)
    assert found.ok, explain(found, lines)
    assert inventory is not None
    compared = compare_step(REAL, inventory, lines.append)
    assert compared.ok, explain(compared, lines)
    assert any(line.startswith("reference: nvidia-smi ") for line in lines), lines


def test_plugin_registers_and_answers_allocate() -> None:
    lines: list[str] = []
    result = plugin_step(REAL, lines.append, timeout=30)
    assert result.ok, explain(result, lines)
    assert any(line.startswith("/state:") for line in lines)
    assert "plugin exited with code 0 after SIGTERM" in lines


def test_health_events_register_and_stop() -> None:
    lines: list[str] = []
    result = health_step(REAL, lines.append, seconds=2)
    assert result.ok, explain(result, lines)
    assert lines[0].startswith("source: health-nvml, watching ")
    assert "stopped: yes" in lines


def test_gpu_feature_discovery_labels_the_gpus() -> None:
    lines: list[str] = []
    _, inventory = discovery_step(REAL, lines.append)
    result = gfd_step(REAL, inventory, lines.append, timeout=30)
    assert result.ok, explain(result, lines)
    assert any(line.startswith("nvidia.com/gpu.product=") for line in lines)
