"""The image build, checked without a container engine.

The Dockerfile cannot be built here, so these tests check what would break it
or the deployment: every command the image starts with and every command the
chart runs must be a console script the project installs, the build context
must contain what the Dockerfile copies, and both stages use the same slim
Python base (the virtual environment's interpreter links into it).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass

import pytest

from tests.deploy.chart import REPO_ROOT, find, render

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
PYPROJECT = REPO_ROOT / "pyproject.toml"

# The chart's components, each started by its own console script.
COMPONENT_COMMANDS = ("nvidia-device-plugin", "gpu-feature-discovery", "mps-control-daemon")
# Commands the image needs besides the project's own entry points.
SYSTEM_COMMANDS = {"mount"}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions() -> list[Instruction]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, args = stripped.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    return out


def of(keyword: str) -> list[str]:
    return [i.args for i in instructions() if i.keyword == keyword]


def console_scripts() -> set[str]:
    return set(tomllib.loads(PYPROJECT.read_text())["project"]["scripts"])


def chart_commands() -> set[str]:
    """The executables the chart starts, across every component."""
    objects = render({"gfd": {"enabled": True}})
    commands = set()
    for ds in find(objects, "DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        for ctr in spec["containers"] + spec.get("initContainers", []):
            commands.add(ctr["command"][0])
    return commands


def checked_commands() -> set[str]:
    """The commands the build's RUN step requires to be on PATH."""
    for run in of("RUN"):
        match = re.search(r"for cmd in ([^;]+);", run)
        if match:
            return set(match.group(1).split())
    raise AssertionError("the Dockerfile has no entry-point check")


def test_entrypoint_is_the_device_plugin_console_script() -> None:
    (entrypoint,) = of("ENTRYPOINT")
    argv = json.loads(entrypoint)
    assert argv == ["nvidia-device-plugin"]
    assert argv[0] in console_scripts()
    assert of("CMD") == []


def test_chart_commands_are_the_three_components() -> None:
    assert chart_commands() == {
        "nvidia-device-plugin",
        "gpu-feature-discovery",
        "mps-control-daemon",
    }


@pytest.mark.parametrize("command", COMPONENT_COMMANDS)
def test_every_chart_command_is_a_console_script(command: str) -> None:
    assert command in console_scripts(), (
        f"pyproject.toml [project.scripts] must define {command!r}: the chart runs it"
    )


def test_build_fails_when_an_entry_point_is_missing() -> None:
    assert checked_commands() == chart_commands() | SYSTEM_COMMANDS


def test_multi_stage_build_on_one_slim_python_base() -> None:
    assert "PYTHON_IMAGE=python:3.12-slim" in of("ARG")
    stages = of("FROM")
    assert stages == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    assert any(c.startswith("--from=build /opt/venv ") for c in of("COPY"))
    assert any(run.startswith("python -m venv /opt/venv") for run in of("RUN"))
    assert any("pip install ." in run for run in of("RUN"))
    assert any(env.startswith("PATH=/opt/venv/bin:$PATH") for env in of("ENV"))


def test_image_carries_the_example_configs_and_runs_as_an_explicit_user() -> None:
    assert any(c.startswith("config/ ") for c in of("COPY"))
    assert of("USER") == ["0:0"]


def test_build_context_holds_everything_the_dockerfile_copies() -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "the context is an allow-list"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    for copy in of("COPY"):
        if copy.startswith("--from="):
            continue
        *sources, _dest = copy.split()
        for source in sources:
            assert source.rstrip("/") in allowed, f"{source} is excluded from the build context"
            assert (REPO_ROOT / source).exists()
    readme = tomllib.loads(PYPROJECT.read_text())["project"]["readme"]
    assert readme in allowed
