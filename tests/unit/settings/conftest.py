"""Shared helpers for the configuration tests: temp config files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str, str], str]:
    """Write config text to a file in a temp dir and return its path."""

    def write(text: str, name: str = "config.yaml") -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write
