"""The configuration commands run as a node runs them: ``python -m settings``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def run_settings() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m settings`` as the plugin's entry point would be run."""

    def run(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO / "src")}
        return subprocess.run(
            [sys.executable, "-m", "settings", *args],
            env={**base, **(env or {})},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    return run
