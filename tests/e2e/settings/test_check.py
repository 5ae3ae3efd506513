"""``nvidia-device-plugin check FILE`` (and ``python -m settings --check FILE``).

The checker approves exactly what the plugin loads: silent on success unless
asked to print the effective config, every problem on stderr otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
GOOD = "version: v1\nflags:\n  migStrategy: single\n  surprise: 1\n"
BAD = "version: v1\nflags:\n  migStrategy: bogus\nhealth:\n  quietPeriod: -1\n"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env={"PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


CHECKERS = [
    pytest.param(("-m", "reconciler", "check"), id="nvidia-device-plugin-check"),
    pytest.param(("-m", "settings", "--check"), id="python-m-settings"),
]


@pytest.mark.parametrize("checker", CHECKERS)
def test_a_valid_file_is_silent(checker: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    result = run(*checker, str(path))
    assert result.returncode == 0
    assert result.stdout == ""
    assert result.stderr == f"warning: {path}: flags.surprise: unknown key, ignored\n"


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("option", ["--print", "-v"])
def test_print_shows_the_effective_config(
    checker: tuple[str, ...], option: str, tmp_path: Path
) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    result = run(*checker, option, str(path), "--pass-device-specs")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["flags"]["mig_strategy"] == "single"
    assert config["sources"]["pass_device_specs"] == "flag"
    assert config["unknown_keys"] == ["flags.surprise"]


@pytest.mark.parametrize("checker", CHECKERS)
def test_every_problem_on_stderr(checker: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = run(*checker, str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{path}: health.quietPeriod: expected a number of seconds >= 0; found -1",
        f"{path}: flags.migStrategy: unknown MIG strategy: bogus",
    ]


@pytest.mark.parametrize(
    "args",
    [pytest.param((), id="no-file"), pytest.param(("--mig-strategy", "x"), id="flag-first")],
)
def test_a_command_line_the_checker_does_not_understand_exits_2_with_its_usage(
    args: tuple[str, ...],
) -> None:
    result = run("-m", "reconciler", "check", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: nvidia-device-plugin check [--print|-v] FILE")


def test_a_missing_file_is_one_line_and_exits_1(tmp_path: Path) -> None:
    result = run("-m", "reconciler", "check", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert result.stderr == (
        f"{tmp_path / 'nope.yaml'}: error opening config file: No such file or directory\n"
    )
