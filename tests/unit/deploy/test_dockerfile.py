"""The image build, checked without a container engine.

The Dockerfile cannot be built here, so these tests check what would break it
or the deployment: every command the image starts with and every command the
chart runs must be a console script the project installs, the build context
must contain what the Dockerfile copies, and both stages use the same slim
Python base (the virtual environment's interpreter links into it). The build
is reproducible and multi-architecture: the base image is pinned exactly,
every Python distribution it installs is pinned in constraints.txt, and no
step depends on the architecture being built.
"""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.unit.deploy.chart import REPO_ROOT, find, render

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
PYPROJECT = REPO_ROOT / "pyproject.toml"
CONSTRAINTS = REPO_ROOT / "constraints.txt"
GUIDE = REPO_ROOT / "docs" / "deployment.md"

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


def base_image() -> str:
    (arg,) = [a for a in of("ARG") if a.startswith("PYTHON_IMAGE=")]
    return arg.removeprefix("PYTHON_IMAGE=")


def test_base_image_is_pinned_exactly() -> None:
    image = base_image()
    # An exact Python patch release on a named Debian release, or a digest.
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", image), image


def test_multi_stage_build_on_one_slim_python_base() -> None:
    assert base_image().startswith("python:3.12.")
    stages = of("FROM")
    assert stages == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    assert any(c.startswith("--from=build /opt/venv ") for c in of("COPY"))
    assert any(run.startswith("python -m venv /opt/venv") for run in of("RUN"))
    assert any("pip install --constraint constraints.txt ." in run for run in of("RUN"))
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


# --- reproducible, multi-architecture build ----------------------------------------------


def _load_generator() -> ModuleType:
    path = REPO_ROOT / "scripts" / "gen_constraints.py"
    spec = importlib.util.spec_from_file_location("gen_constraints", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_constraints = _load_generator()


def pinned() -> dict[str, Version]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{line}: not an exact pin"
        pins[canonicalize_name(requirement.name)] = Version(spec.version)
    return pins


def test_every_runtime_distribution_and_build_tool_is_pinned() -> None:
    closure = gen_constraints.runtime_closure()
    assert {"grpcio", "kubernetes", "pydantic-core", "watchfiles"} <= set(closure)
    expected = set(closure) | {canonicalize_name(t) for t in gen_constraints.BUILD_TOOLS}
    assert set(pinned()) == expected, "constraints.txt is stale: run scripts/gen_constraints.py"


def test_pins_satisfy_the_project_requirements() -> None:
    pins = pinned()
    project = tomllib.loads(PYPROJECT.read_text())
    requirements = [Requirement(r) for r in project["project"]["dependencies"]]
    requirements += [Requirement(r) for r in project["build-system"]["requires"]]
    for requirement in requirements:
        version = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version), f"{requirement} excludes {version}"


def test_constraints_are_for_the_image_python() -> None:
    minor = re.match(r"python:(3\.\d+)\.", base_image())
    assert minor is not None
    assert minor.group(1) == gen_constraints.IMAGE_PYTHON
    assert set(gen_constraints.IMAGE_MACHINES) == {"x86_64", "aarch64"}


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    out = tmp_path / "constraints.txt"
    assert gen_constraints.main(["--out", str(out)]) == 0
    assert gen_constraints.main(["--check", "--out", str(out)]) == 0
    out.write_text(out.read_text().replace("==", "==0.0.0+", 1))
    assert gen_constraints.main(["--check", "--out", str(out)]) == 1


def test_every_pip_install_uses_the_constraints() -> None:
    env = " ".join(of("ENV"))
    assert "PIP_CONSTRAINT=/src/constraints.txt" in env  # also reaches the isolated build
    installs = [part for run in of("RUN") for part in run.split("&&") if "pip install" in part]
    assert installs
    for install in installs:
        assert "--constraint constraints.txt" in install, install
    assert any("pip check" in run for run in of("RUN"))


def test_no_step_depends_on_the_architecture() -> None:
    for instruction in instructions():
        text = instruction.args.lower()
        assert instruction.keyword != "ADD", "ADD may download; use COPY and pip"
        for word in ("curl ", "wget ", "targetarch", "amd64", "arm64", "x86_64", "aarch64"):
            assert word not in text, f"{instruction.keyword} {instruction.args}"


def test_docs_say_where_the_image_comes_from() -> None:
    first = GUIDE.read_text().splitlines()[2]
    assert "no registry" in first
    text = GUIDE.read_text()
    assert "docker buildx build --platform linux/amd64,linux/arm64" in text
    assert "--push" in text
