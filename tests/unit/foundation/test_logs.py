"""Log records as flat JSON lines (tests/e2e/foundation routes native stderr into them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from foundation import logs
from foundation.version import DISTRIBUTION, _from_pyproject, build_info, version


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
