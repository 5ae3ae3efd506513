"""gpu-feature-discovery on the real NVML backend over the fake `libnvidia-ml.so.1`.

The labeller runs in-process twice for each node and MIG strategy: once on
the simulated backend (`--mock-nvml`), once without it, finding the fake
library under `--driver-root-ctr-path` and the host facts NVML does not give
(PCI class, vGPU capability, machine type) under `--sysfs-root` and
`--machine-type-file`.
Both runs must write exactly the same labels.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.labels.helpers import run_oneshot

from .fake_nvml_driver import FakeDriver
from .nvml_c_profiles import CLIQUE, CLUSTER, fabric_node, mig_variety

Install = Callable[[str | Path], FakeDriver]
CUSTOM: dict[str, Callable[[Path], Path]] = {"mig-variety": mig_variety, "fabric": fabric_node}


def labels(directory: Path, *args: str) -> dict[str, str]:
    directory.mkdir()
    code, written = run_oneshot(directory, *args)
    assert code == 0
    assert written is not None
    return written


@pytest.mark.parametrize(
    ("profile", "strategy"),
    [
        ("dgx-a100", "none"),
        ("dgx-h100", "single"),
        ("hgx-16", "none"),
        ("a100-mig-mixed", "mixed"),
        ("a100-mig-single", "single"),
        ("t4x4", "none"),
        ("vgpu", "none"),
        ("no-gpus", "none"),
        ("mig-variety", "mixed"),
        ("fabric", "none"),
    ],
)
def test_labels_from_the_c_api_equal_the_simulated_ones(
    fake_driver: Install, tmp_path: Path, profile: str, strategy: str
) -> None:
    node: str | Path = (
        CUSTOM[profile](tmp_path / f"{profile}.yaml") if profile in CUSTOM else profile
    )
    driver = fake_driver(node)
    common = ["--mig-strategy", strategy, "--machine-type-file", str(driver.machine_type_file)]
    simulated = labels(tmp_path / "simulated", "--mock-nvml", str(node), *common)
    nvml = labels(
        tmp_path / "nvml",
        "--driver-root-ctr-path", str(driver.root),
        "--sysfs-root", str(driver.sysfs),
        *common,
    )  # fmt: skip
    assert nvml == simulated
    if strategy == "none" and driver.inventory.gpus:
        assert nvml["nvidia.com/gpu.count"] == str(len(driver.inventory.gpus))
    if profile == "fabric":
        assert nvml["nvidia.com/gpu.clique"] == f"{CLUSTER}.{CLIQUE}"
