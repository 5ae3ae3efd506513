"""``python -m settings``: the help text and the effective config, from a process."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from settings import cli_help


def test_help_on_the_command_line_prints_the_help_text(
    run_settings: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    result = run_settings("--help")
    assert result.returncode == 0
    assert cli_help() in result.stdout


def test_check_prints_the_effective_config_and_warns_on_stderr(
    run_settings: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\nflags: {migStrategy: single, surprise: 1}\n", encoding="utf-8")
    result = run_settings("--check", str(path), "--print", "--pass-device-specs")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["flags"]["mig_strategy"] == "single"
    assert data["sources"]["pass_device_specs"] == "flag"
    assert result.stderr == f"warning: {path}: flags.surprise: unknown key, ignored\n"
