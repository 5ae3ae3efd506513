"""`scripts/gpu-check` as a file (tests/e2e/gpu runs it)."""

from __future__ import annotations

import os
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu-check"


def test_the_script_is_executable() -> None:
    assert os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text().startswith("#!/usr/bin/env python3\n")
