"""The MPS gate's probe against a running control daemon (the stand-in program on PATH)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mps.control import start_control_daemon
from mps.errors import OtherLimits
from mps.layout import MpsLayout
from reconciler.actuators.mps_gate import probe
from tests.unit.mps.helpers import kill_fake_daemons, path_with_fakes
from tests.unit.reconciler.test_mps_gate import GPU, marker_of, mps_intent, started


@pytest.fixture
def mps_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short MPS root (unix socket paths) with the stand-in control program on PATH."""
    monkeypatch.setenv("PATH", path_with_fakes())
    workdir = Path(tempfile.mkdtemp(prefix="gate-", dir="/tmp"))
    try:
        yield workdir
    finally:
        kill_fake_daemons(workdir)
        shutil.rmtree(workdir, ignore_errors=True)


async def start_daemon(root: Path) -> None:
    """A control daemon for nvidia.com/gpu that answers, as the real one does once it runs."""
    layout = MpsLayout(root)
    layout.pipe_dir(GPU).mkdir(parents=True)
    layout.log_dir(GPU).mkdir(parents=True)
    await start_control_daemon(environment=layout.environment(GPU), timeout=5)


async def test_probe_accepts_a_daemon_applying_the_limits_wanted(mps_root: Path) -> None:
    await start_daemon(mps_root)
    assert "set_default_active_thread_percentage 25" in marker_of(4)
    started(mps_root, marker_of(4))
    assert await probe(mps_root, mps_intent(4)) is None


async def test_probe_refuses_a_daemon_applying_other_limits(mps_root: Path) -> None:
    # The daemon runs and answers with the limits of 2 replicas; the plan has 4.
    await start_daemon(mps_root)
    started(mps_root, marker_of(2))
    problem = await probe(mps_root, mps_intent(4))
    assert problem is not None
    assert isinstance(problem, OtherLimits)
    assert "applies other limits than this config asks for" in str(problem)
    applied, asked = "50% of threads, 20480M pinned", "25% of threads, 10240M pinned"
    assert f"({applied} on 2 GPU(s), not {asked} on 2 GPU(s))" in str(problem)


async def test_an_empty_marker_from_an_earlier_daemon_is_trusted(mps_root: Path) -> None:
    # Daemons before this release touched the marker without content; a
    # plugin that is upgraded first keeps serving with them.
    await start_daemon(mps_root)
    started(mps_root, "")
    assert await probe(mps_root, mps_intent(4)) is None
