"""The command line given an invalid input exits 1 printing only its one line.

The inputs and their lines are the unit table's (`tests/unit/settings/test_validation.py`),
which checks every message in process. Here a process is run for one case of
each way a bad value arrives (a flag, an unknown or extra argument, two forms of
one flag, an environment variable, a file that is missing, not YAML, not a
mapping, of an unknown version, a bad field, a value spanning lines): what the
process adds, exit status 1 and nothing but the line, is the same for the rest.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.settings.test_validation import CASES, Case, case_inputs

PATHS = {
    "mig-strategy-flag", "unknown-flag", "positional", "two-forms", "mig-strategy-env",
    "bool-env", "missing-file", "yaml-syntax", "top-level-list", "unknown-version",
    "replicas-one", "multiline-value",
}  # fmt: skip


def test_each_way_in_is_a_case_of_the_unit_table() -> None:
    assert {case.id for case in CASES} >= PATHS


@pytest.mark.parametrize(
    "case", [pytest.param(case, id=case.id) for case in CASES if case.id in PATHS]
)
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
