"""`scripts/gpu-check --simulated`: the whole check on the mock backend, as a person runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "gpu-check"
SECTIONS = [
    "== 1. discovery (open_library -> init -> inventory) ==",
    "== 2. discovery vs nvidia-smi ==",
    "== 3. plugin against the kubelet simulator ==",
    "== 4. health events (register, watch, stop) ==",
    "== 5. gpu-feature-discovery --oneshot ==",
    "== summary ==",
]


def gpu_check(*args: str, tmp: Path | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        cwd=REPO,
    )
    return done.returncode, done.stdout + done.stderr


def section(text: str, title: str) -> str:
    start = text.index(title) + len(title)
    end = text.find("\n== ", start)
    return text[start : end if end >= 0 else len(text)]


def test_dry_run_walks_every_step_on_the_mock_backend() -> None:
    code, out = gpu_check("--simulated", "dgx-a100", "--health-seconds", "10")
    assert code == 0, out
    assert out.startswith("gpu-check: backend simulated:dgx-a100 (mock backend everywhere")
    positions = [out.index(title) for title in SECTIONS]
    assert positions == sorted(positions)

    discovery = section(out, SECTIONS[0])
    assert "library: simulated:dgx-a100" in discovery
    assert "driver 550.54.15, CUDA driver API 12.4, 8 GPU(s)" in discovery

    compared = section(out, SECTIONS[1])
    assert "reference: SIMULATED nvidia-smi table rendered from node profile" in compared
    assert "(nvidia-smi was not run)" in compared
    assert compared.count("(paired by UUID)") == 8
    verdicts = re.findall(r"^\s+(\S+)\s.*\s(MATCH|DIFF)$", compared, flags=re.MULTILINE)
    assert len(verdicts) == 8 * 7
    assert {v for _, v in verdicts} == {"MATCH"}
    assert {f for f, _ in verdicts} == {
        "uuid", "name", "memory.total", "pci.bus_id", "compute_cap", "driver_version",
        "mig.mode.current",
    }  # fmt: skip

    plugin = section(out, SECTIONS[2])
    assert "registered nvidia.com/gpu (nvidia-gpu.sock) with 8 device(s), 8 healthy" in plugin
    assert '"state": "serving"' in plugin
    assert re.search(r"Allocate\(nvidia.com/gpu, \[GPU-[0-9a-f-]+\]\) ->", plugin)
    assert '"NVIDIA_VISIBLE_DEVICES": "GPU-' in plugin
    assert "plugin exited with code 0 after SIGTERM" in plugin

    health = section(out, SECTIONS[3])
    assert "source: health-events-file, watching 8 GPU(s)" in health
    assert re.search(r"event: xid 79 on GPU-\S+: injected", health)
    assert "stopped: yes" in health

    labels = section(out, SECTIONS[4])
    assert "--mock-nvml dgx-a100" in labels
    assert "nvidia.com/gpu.count=8" in labels
    assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB" in labels

    summary = section(out, SECTIONS[5]).split("\n")
    steps = [line.split()[:2] for line in summary if line.startswith("  ")]
    assert steps == [[name, "PASS"] for name in ("discovery", "compare", "plugin", "health", "gfd")]
    assert out.rstrip().endswith("gpu-check: PASS")


def test_a_diff_fails_the_check(tmp_path: Path) -> None:
    saved = tmp_path / "smi.csv"
    saved.write_text(
        "GPU-a0bba3c3-c007-582d-8278-aefa736de776, NVIDIA A100-SXM4-80GB, 81920, "
        "00000000:07:00.0, 8.0, 550.54.15, Disabled\n"
    )
    code, out = gpu_check("--simulated", "dgx-a100", "--smi-csv", str(saved), "--steps", "compare")
    assert code == 1, out
    assert f"reference: saved nvidia-smi output in {saved}" in out
    assert re.search(r"name\s+NVIDIA A100-SXM4-40GB\s+NVIDIA A100-SXM4-80GB\s+DIFF", out)
    assert re.search(r"memory\.total\s+40960\s+81920\s+DIFF", out)
    assert out.count("not listed by nvidia-smi") == 7
    assert re.search(r"compare\s+FAIL\s+56 fields, 51 DIFF, 8 GPU\(s\)", out)
    assert "== 3." not in out
    assert "discovery  PASS" not in out
    assert out.rstrip().endswith("gpu-check: FAIL")


@pytest.mark.parametrize(
    ("profile", "discovery"),
    [
        pytest.param(
            "nvml-broken", "init failed: NVML could not start: RM has detected", id="nvml"
        ),
        pytest.param("no-gpus", "no GPUs found", id="no-gpus"),
    ],
)
def test_a_node_nvml_cannot_read_fails(profile: str, discovery: str) -> None:
    code, out = gpu_check("--simulated", profile, "--steps", "discovery,compare")
    assert code == 1, out
    assert re.search(rf"discovery\s+FAIL\s+{re.escape(discovery)}", out)
    assert re.search(r"compare\s+FAIL", out)


def test_unknown_step_is_a_usage_error() -> None:
    code, out = gpu_check("--steps", "discovery,bogus")
    assert code == 2
    assert "steps are a comma list of: discovery, compare, plugin, health, gfd" in out
