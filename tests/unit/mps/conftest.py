"""Fixtures of the MPS tests: a short MPS root, the stand-in programs on PATH, cleanup."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mps.layout import MpsLayout

from .helpers import kill_fake_daemons, path_with_fakes
from .process import DaemonProcess


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short temporary directory (unix socket paths must stay under 107 bytes).

    Every stand-in daemon started under it is killed afterwards, whatever the
    test did; removing the directory also makes any survivor exit by itself.
    """
    path = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))
    try:
        yield path
    finally:
        kill_fake_daemons(path)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def layout(workdir: Path) -> MpsLayout:
    root = workdir / "mps"
    root.mkdir()
    return MpsLayout(root)


@pytest.fixture
def fakes_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in control program first on PATH."""
    monkeypatch.setenv("PATH", path_with_fakes())


@pytest.fixture
def daemon(workdir: Path, layout: MpsLayout, fakes_on_path: None) -> Iterator[DaemonProcess]:
    """An ``mps-control-daemon`` to start; killed after the test if still running."""
    process = DaemonProcess(workdir, layout)
    try:
        yield process
    finally:
        process.kill()
