"""Suite-wide hooks and fixtures.

Every test is marked with its layer (`unit`, `e2e` or `reliability`) from the
directory it lives in, and unit tests are refused subprocesses (tests/layers.py
says why and where such tests go). Fixtures: short socket directories, a full
tmpfs, the kubelet simulator, and guards against leaked processes and tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kubelet_sim import KubeletSimulator
from tests.layers import GUARD, guarding, layer_of, running_children
from tests.waiting import eventually_sync


def pytest_configure(config: pytest.Config) -> None:
    GUARD.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    GUARD.uninstall()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(layer_of(item.path))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with guarding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with guarding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with guarding(item):
        return (yield)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets (AF_UNIX paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sim_dir(sock_dir: Path) -> Path:
    """Where `sim` serves kubelet.sock; a module overrides it for another directory."""
    return sock_dir


@pytest.fixture
async def sim(sim_dir: Path) -> AsyncIterator[KubeletSimulator]:
    """A kubelet simulator serving `sim_dir`/kubelet.sock in this process, stopped afterwards."""
    async with KubeletSimulator(sim_dir, write_snapshot_file=False) as simulator:
        yield simulator


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, mounted for the test and filled by its file `filler`.

    Deleting `filler` gives the space back. Needs root (mount(2)); skipped
    with the reason elsewhere.
    """
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    target = tmp_path / "small"
    target.mkdir()
    # The mount(2) and umount2(2) calls themselves: no `mount` process.
    libc = ctypes.CDLL(None, use_errno=True)
    path = os.fsencode(target)
    if libc.mount(b"tmpfs", path, b"tmpfs", 0, b"size=64k") != 0:
        pytest.skip(f"cannot mount a tmpfs here: {os.strerror(ctypes.get_errno())}")
    try:
        with (target / "filler").open("wb") as handle, contextlib.suppress(OSError):
            handle.write(b"x" * (1 << 20))
        yield target
    finally:
        libc.umount2(path, 0)


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a process it started running behind it.

    The processes looked at are the children this process started during the
    test (tests/layers.py records each one, however it was started).
    """
    first = len(GUARD.pids)
    yield
    started = GUARD.pids[first:]
    if running_children(started):
        # A process that was just signalled may need a moment to exit.
        eventually_sync(
            lambda: not running_children(started),
            what="the processes this test started to exit (leaked processes)",
            timeout=5.0,
            interval=0.05,
            detail=lambda: sorted(running_children(started)),
        )


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
