"""The effective config's digest, as other processes compute it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from settings import load_config

REPO = Path(__file__).resolve().parents[3]
SHARED = """
version: v1
flags:
  migStrategy: single
  plugin:
    deviceListStrategy: [cdi-cri, envvar]
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - name: gpu
      replicas: 4
"""


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], str]:
    def write(text: str) -> str:
        path = tmp_path / "config.yaml"
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write


def test_digest_is_stable_across_processes(write_config: Callable[[str], str]) -> None:
    path = write_config(SHARED)
    here = load_config(["--mps-root=/m"], {"CONFIG_FILE": path}).digest
    script = (
        "import sys; from settings import load_config; "
        f"print(load_config(['--mps-root=/m'], {{'CONFIG_FILE': {path!r}}}).digest)"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={"PYTHONPATH": str(REPO / "src"), "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert runs == {here}
