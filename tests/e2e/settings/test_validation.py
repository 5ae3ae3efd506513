"""The command line given an invalid input exits 1 printing only its one line.

The inputs and their lines are the unit table's (`tests/unit/settings/test_validation.py`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.settings.test_validation import CASES, Case, case_inputs


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
def test_command_line_exits_1_with_one_line(
    case: Case,
    tmp_path: Path,
    run_settings: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    argv, env, path = case_inputs(case, tmp_path)
    result = run_settings(*argv, env=env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == case.message.replace("{file}", path) + "\n"
    assert "Traceback" not in result.stderr
