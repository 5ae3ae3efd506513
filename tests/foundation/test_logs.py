"""Log records as flat JSON lines, and native stderr routed into them.

The routing test runs in a child process: it replaces file descriptor 2,
which must not happen to the test runner itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from foundation import logs
from foundation.version import DISTRIBUTION, _from_pyproject, build_info, version

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def captured() -> Any:
    lines: list[str] = []
    handle = logger.add(lambda message: lines.append(logs.json_line(message.record)))
    yield lines
    logger.remove(handle)


def test_a_record_is_one_flat_object(captured: list[str]) -> None:
    logger.bind(resource="nvidia.com/gpu").warning("lost {uuid}", uuid="GPU-1")
    (line,) = captured
    record = json.loads(line)
    assert list(record)[:4] == ["ts", "level", "msg", "logger"]
    assert record["level"] == "warning"
    assert record["msg"] == "lost GPU-1"
    assert record["logger"] == __name__
    assert record["resource"] == "nvidia.com/gpu"
    assert record["uuid"] == "GPU-1"
    assert "\n" not in line


def test_a_traceback_goes_into_one_field(captured: list[str]) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    record = json.loads(captured[0])
    assert record["level"] == "error"
    assert record["error"].startswith("Traceback")
    assert record["error"].endswith("ValueError: boom")


def test_fields_that_are_not_json_are_written_as_text(captured: list[str]) -> None:
    logger.bind(path=Path("/x"), own=object()).info("odd")
    record = json.loads(captured[0])
    assert record["path"] == "/x"
    assert record["own"].startswith("<object object")


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={"PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_native_stderr_becomes_json() -> None:
    result = _child(
        """
        import os
        from foundation import logs
        from loguru import logger
        logs.configure("json", route_native_stderr=True)
        logger.info("before")
        os.write(2, b"E1201 12:00:00.000000   42 add_port.cc:83] Failed to add port\\n")
        os.write(2, b"something else\\n")
        logger.info("after")
        """
    )
    assert result.returncode == 0
    records = [json.loads(line) for line in result.stderr.splitlines()]
    by_msg = {record["msg"]: record for record in records}
    assert set(by_msg) == {"before", "Failed to add port", "something else", "after"}
    native = by_msg["Failed to add port"]
    assert (native["level"], native["logger"], native["source"]) == (
        "error",
        "grpc",
        "add_port.cc:83",
    )
    assert by_msg["something else"]["logger"] == "stderr"


def test_a_crash_still_shows_its_traceback() -> None:
    """Python's own writes bypass the pipe, so nothing is lost when the process dies."""
    result = _child(
        """
        from foundation import logs
        logs.configure("json", route_native_stderr=True)
        raise RuntimeError("fatal")
        """
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback")
    assert result.stderr.rstrip().endswith("RuntimeError: fatal")


def test_text_format_keeps_the_resource_at_the_end() -> None:
    result = _child(
        """
        from foundation import logs
        from loguru import logger
        logs.configure("text")
        logger.bind(resource="nvidia.com/gpu").info("served")
        """
    )
    assert result.stderr.rstrip().endswith("INFO    served resource=nvidia.com/gpu")


def test_version_from_metadata_or_the_checkout(tmp_path: Path) -> None:
    assert version()
    assert version() != "unknown"
    assert build_info()["version"] == version()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project]\nname = "{DISTRIBUTION}"\nversion = "9.8.7"\n')
    assert _from_pyproject(pyproject) == "9.8.7+source"
    pyproject.write_text('[project]\nname = "something-else"\nversion = "1.0"\n')
    assert _from_pyproject(pyproject) is None
    pyproject.write_text("not toml [")
    assert _from_pyproject(pyproject) is None
    assert _from_pyproject(tmp_path / "missing.toml") is None
