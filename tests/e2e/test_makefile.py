"""The Makefile's environment rules, read with `make -n` (nothing is installed).

`make demo` needs the runtime dependencies only (its DRA mode also the
emulated Kubernetes API, a development package); `make test` adds the
development tools. A `.venv` made by another Python, or whose interpreter is
gone, is made again instead of being reused half-broken; a good one is left
alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(venv: Path, target: str, *variables: str) -> str:
    """What `make TARGET` would run with the environment in `venv`."""
    result = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            target,
            f"VENV={venv}",
            f"PYTHON={sys.executable}",
            *variables,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def fake_venv(root: Path, *, python: str | None, stamps: bool = True) -> Path:
    """A .venv whose `bin/python` is `python` (a script's text; None: missing)."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    if python is not None:
        interpreter = venv / "bin" / "python"
        interpreter.write_text(python)
        interpreter.chmod(0o755)
    if stamps:
        # Newer than pyproject.toml, as after a complete install.
        for name in (f".python-{VERSION}", ".runtime", ".installed"):
            (venv / name).touch()
        future = (REPO / "pyproject.toml").stat().st_mtime + 60
        for name in (f".python-{VERSION}", ".runtime", ".installed"):
            os.utime(venv / name, (future, future))
    return venv


def test_demo_installs_the_runtime_only(tmp_path: Path) -> None:
    plan = dry_run(tmp_path / "none", "demo")
    assert f"-m venv {tmp_path / 'none'}" in plan
    assert "pip install --quiet -e .\n" in plan
    assert ".[dev]" not in plan
    assert "scripts/demo.py" in plan


def test_the_dra_demo_adds_the_development_tools_for_its_emulated_api(tmp_path: Path) -> None:
    plan = dry_run(tmp_path / "none", "demo", "KUBELET_API=dra")
    assert "pip install --quiet -e '.[dev]'" in plan
    assert "scripts/demo.py" in plan


def test_test_adds_the_development_tools(tmp_path: Path) -> None:
    plan = dry_run(tmp_path / "none", "test")
    # One install with the development tools: the packages are resolved once on a
    # fresh clone, not once for the runtime and again for the rest.
    assert "pip install --quiet -e .\n" not in plan
    assert "pip install --quiet -e '.[dev]'" in plan


def test_a_good_environment_is_reused(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path, python=f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    assert dry_run(venv, "demo").strip() == f"{venv}/bin/python scripts/demo.py"


@pytest.mark.parametrize(
    "python",
    [
        pytest.param("#!/bin/sh\necho 3.9\n", id="made-by-another-python"),
        pytest.param(None, id="interpreter-gone"),
        pytest.param("#!/bin/sh\nexit 1\n", id="interpreter-broken"),
    ],
)
def test_a_broken_environment_is_made_again(tmp_path: Path, python: str | None) -> None:
    venv = fake_venv(tmp_path, python=python)
    plan = dry_run(venv, "demo")
    assert 'if [ -n "yes" ]; then' in plan
    assert f"rm -rf {venv} && {sys.executable} -m venv {venv}" in plan
    assert "pip install --quiet -e ." in plan


def pytest_runs(plan: str) -> list[str]:
    """The pytest command lines of a plan, in order."""
    return [line for line in plan.splitlines() if "/bin/pytest " in line]


def good_venv(root: Path) -> Path:
    return fake_venv(root, python=f'#!/bin/sh\nexec {sys.executable} "$@"\n')


def test_each_layer_has_its_target(tmp_path: Path) -> None:
    venv = good_venv(tmp_path)
    [unit] = pytest_runs(dry_run(venv, "unit"))
    assert "-m unit " in unit
    [e2e] = pytest_runs(dry_run(venv, "e2e"))
    assert '-m "e2e or (reliability and not long)"' in e2e
    [reliability] = pytest_runs(dry_run(venv, "reliability"))
    assert "-m reliability " in reliability


def test_test_runs_unit_then_e2e_and_leaves_the_long_suites_out(tmp_path: Path) -> None:
    plan = dry_run(good_venv(tmp_path), "test")
    runs = pytest_runs(plan)
    assert len(runs) == 2
    assert "-m unit " in runs[0]
    assert '-m "e2e or' in runs[1]
    assert "not long" in runs[1]
    for tool in ("ruff check", "mypy src", "lint-imports"):
        assert tool in plan
