"""Fixtures of the labeller tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger


@pytest.fixture
def logs() -> Iterator[list[tuple[str, str]]]:
    """(level, message) of every log record emitted during the test."""
    records: list[tuple[str, str]] = []
    handler = logger.add(
        lambda message: records.append((message.record["level"].name, message.record["message"])),
        level="DEBUG",
    )
    try:
        yield records
    finally:
        logger.remove(handler)
