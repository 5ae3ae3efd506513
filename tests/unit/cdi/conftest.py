"""Fixtures for the CDI tests: a node profile's inventory and a fake driver root for it.

The compiled libraries are built once per session; each test gets its own
tree (copies, a fresh ld cache, fresh nodes), so a test may break its install
without affecting another.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from devices.model import Inventory
from devices.simulated import SimulatedLibrary

from .fakeroot import FakeDriverRoot, build_driver_root, compile_driver_libraries


def profile_inventory(name: str) -> Inventory:
    library = SimulatedLibrary.from_argument(name)
    library.init()
    try:
        return library.inventory()
    finally:
        library.shutdown()


@pytest.fixture(scope="session")
def driver_libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_driver_libraries(tmp_path_factory.mktemp("driver-libraries"))


@pytest.fixture
def dgx() -> Inventory:
    return profile_inventory("dgx-a100")


@pytest.fixture
def fake_root(tmp_path: Path, driver_libraries: Path, dgx: Inventory) -> FakeDriverRoot:
    """The dgx-a100 profile's GPUs on a driver-container style root (with `dev/`)."""
    return build_driver_root(tmp_path, driver_libraries, dgx.gpus)


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
