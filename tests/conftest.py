"""Suite-wide fixtures: short socket directories and a guard against leaked tasks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
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


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, mounted for the test and filled by its file `filler`.

    Deleting `filler` gives the space back. Needs root and `mount`; skipped
    with the reason elsewhere.
    """
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    target = tmp_path / "small"
    target.mkdir()
    if os.system(f"mount -t tmpfs -o size=64k tmpfs {target} 2>/dev/null") != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with (target / "filler").open("wb") as handle, contextlib.suppress(OSError):
            handle.write(b"x" * (1 << 20))
        yield target
    finally:
        os.system(f"umount {target}")


def _children() -> set[int]:
    """Live (non-zombie) child processes of this test process."""
    me = os.getpid()
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.add(int(entry))
    return found


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a process it started running behind it."""
    before = _children()
    yield
    deadline = time.monotonic() + 5.0
    leftover = _children() - before
    while leftover and time.monotonic() < deadline:
        time.sleep(0.05)  # a process that was just signalled may need a moment to exit
        leftover = _children() - before
    assert not leftover, f"leaked processes: {sorted(leftover)}"


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
