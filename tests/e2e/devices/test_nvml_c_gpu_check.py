"""`scripts/gpu-check` on its real-GPU path, with the fake `libnvidia-ml.so.1` as the driver.

The check is meant for GPU nodes, which the suite does not have, so without
this test its real-backend path (NVML discovery and the comparison,
gpu-feature-discovery without `--mock-nvml`, registration for NVML events)
would only ever run by hand; the plugin step is left out, as the plugin on
the real backend has end-to-end tests of its own. Here the loader finds the fake library through
`LD_LIBRARY_PATH`, as it would find a driver's, for the script and the
processes it starts; nvidia-smi's table is given as a saved file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from devices.simulated import PROFILES_DIR
from scripts.gpu_check.smi import render_profile
from tests.unit.devices.fake_nvml_driver import FakeDriver

Install = Callable[[str | Path], FakeDriver]
REPO = Path(__file__).resolve().parents[3]


def test_the_gpu_check_passes_on_the_real_backend_over_the_fake_driver(
    fake_driver: Install, tmp_path: Path
) -> None:
    driver = fake_driver("dgx-a100")
    smi = tmp_path / "smi.csv"
    smi.write_text(render_profile(yaml.safe_load((PROFILES_DIR / "dgx-a100.yaml").read_text())))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(driver.env, LD_LIBRARY_PATH=str(driver.root / "usr" / "lib64"), TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu-check"), "--smi-csv", str(smi),
         "--health-seconds", "0.5", "--steps", "discovery,compare,health,gfd"],
        capture_output=True, text=True, timeout=90, env=env, cwd=REPO, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert out.startswith("gpu-check: backend nvml (the real GPU backend)")
    assert "library: nvml" in out
    assert "driver 550.54.15, CUDA driver API 12.4, 8 GPU(s)" in out
    assert len(re.findall(r"\sMATCH$", out, flags=re.MULTILINE)) == 8 * 7
    assert "source: health-nvml, watching 8 GPU(s)" in out
    assert "nvidia.com/gpu.count=8" in out
    assert out.rstrip().endswith("gpu-check: PASS")
