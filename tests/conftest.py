"""Suite-wide fixtures: short socket directories and a guard against leaked tasks."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets (AF_UNIX paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it."""
    before = set(asyncio.all_tasks())
    yield
    current = asyncio.current_task()
    leftover = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    if leftover:
        # gRPC finishes a cancelled call's status in a task of its own; give
        # tasks that are already winding down a moment to end.
        await asyncio.wait(leftover, timeout=2.0)
        leftover = [t for t in leftover if not t.done()]
    assert not leftover, f"leaked tasks: {[t.get_name() for t in leftover]}"
