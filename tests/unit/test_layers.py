"""The test layers: which layer a file is in, and the unit layer's refusal to start processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.layers import TESTS, SubprocessInUnitTest, build_step, layer_of


@pytest.mark.parametrize(
    ("path", "layer"),
    [
        pytest.param("e2e/test_plugin_process.py", "e2e", id="e2e"),
        pytest.param("e2e/mps/test_cli.py", "e2e", id="e2e-area"),
        pytest.param("reliability/test_soak.py", "reliability", id="reliability"),
        pytest.param("kubelet/test_server.py", "unit", id="area"),
        pytest.param("unit/kubelet/test_server.py", "unit", id="unit-folder"),
        pytest.param("test_readme.py", "unit", id="top-level"),
    ],
)
def test_the_first_directory_decides_the_layer(path: str, layer: str) -> None:
    assert layer_of(TESTS / path) == layer


def test_this_file_is_marked_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("e2e") is None


def test_a_unit_test_cannot_start_a_subprocess() -> None:
    with pytest.raises(SubprocessInUnitTest, match=r"^unit tests run in-process .* tests/e2e/"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


async def test_a_unit_test_cannot_start_an_asyncio_subprocess() -> None:
    with pytest.raises(SubprocessInUnitTest):
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")


def test_a_unit_test_cannot_fork_or_run_a_shell() -> None:
    with pytest.raises(SubprocessInUnitTest):
        os.fork()
    with pytest.raises(SubprocessInUnitTest):
        os.system("true")


def test_the_message_is_one_line_naming_the_program() -> None:
    with pytest.raises(SubprocessInUnitTest) as refused:
        subprocess.run(["gcc", "--version"], check=False)
    message = str(refused.value)
    assert "\n" not in message
    assert "'gcc'" in message


def test_a_build_step_may_run_a_tool(tmp_path: Path) -> None:
    with build_step():
        done = subprocess.run([sys.executable, "-c", "print('built')"], capture_output=True)
    assert done.stdout == b"built\n"
    with pytest.raises(SubprocessInUnitTest):  # and only inside it
        subprocess.run([sys.executable, "-c", "pass"], check=False)
