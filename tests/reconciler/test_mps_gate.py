"""The MPS gate, per resource: an edit or a lost daemon concerns only its own resource."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mps.control import start_control_daemon
from mps.layout import MpsLayout
from mps.limits import daemon_specs
from reconciler.mps_gate import MpsGate
from reconciler.plan import ResourceIntent
from resources.allocation import Allocator
from resources.builder import ResourceSet, build_resources
from resources.options import ResourceOptions, SharingOptions, SharingStrategy
from tests.mps.helpers import kill_fake_daemons, path_with_fakes
from tests.mps.test_limits import node

GPU = "nvidia.com/gpu"


def intent(name: str, mps_key: str | None) -> ResourceIntent:
    return ResourceIntent(allocator=Allocator(ResourceSet(name, ())), mps_key=mps_key)


def test_admission_is_per_resource_and_per_key() -> None:
    gate = MpsGate()
    a, b = intent("nvidia.com/a", "k1"), intent("nvidia.com/b", "k1")
    plain = intent("nvidia.com/gpu", None)
    assert gate.admits(plain)  # no daemon needed
    assert not gate.admits(a)
    assert not gate.admits(b)
    gate.admit(a)
    gate.admit(b)
    edited = intent("nvidia.com/a", "k2")  # replicas or behaviour changed for `a` only
    assert not gate.admits(edited)
    assert gate.admitted("nvidia.com/a")
    assert gate.admits(b)
    gate.withdraw("nvidia.com/b")  # b's daemon was lost
    assert not gate.admitted("nvidia.com/b")
    assert gate.admitted("nvidia.com/a")
    gate.forget_others({"nvidia.com/b"})
    assert not gate.admitted("nvidia.com/a")


def mps_intent(replicas: int, *, cc: str = "8.0") -> ResourceIntent:
    """nvidia.com/gpu shared through MPS on two 40 GiB GPUs, as the plugin plans it."""
    options = ResourceOptions(
        sharing=SharingOptions(strategy=SharingStrategy.MPS, replicas={GPU: replicas}),
        mps_root="/run/nvidia/mps",
    )
    (resource,) = build_resources(node(40 * 1024, 40 * 1024, cc=cc), options)
    return ResourceIntent.of(Allocator(resource))


def started(root: Path, text: str) -> Path:
    marker = MpsLayout(root).started(GPU)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(text)
    return marker


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


def marker_of(replicas: int) -> str:
    (spec,) = daemon_specs([mps_intent(replicas).allocator.resource])
    return spec.marker


async def test_probe_waits_for_the_daemon_to_start(tmp_path: Path) -> None:
    problem = await MpsGate.probe(tmp_path, mps_intent(2))
    assert problem is not None
    assert "has not finished starting" in problem.reason
    assert not problem.other_limits


async def test_probe_admits_a_daemon_with_the_limits_of_the_plan(mps_root: Path) -> None:
    await start_daemon(mps_root)
    assert "set_default_active_thread_percentage 25" in marker_of(4)
    started(mps_root, marker_of(4))
    assert await MpsGate.probe(mps_root, mps_intent(4)) is None


async def test_probe_refuses_a_daemon_applying_other_limits(mps_root: Path) -> None:
    # The daemon runs and answers with the limits of 2 replicas; the plan has 4.
    await start_daemon(mps_root)
    started(mps_root, marker_of(2))
    problem = await MpsGate.probe(mps_root, mps_intent(4))
    assert problem is not None
    assert problem.other_limits
    assert "applies other limits than this config asks for" in problem.reason
    applied, asked = "50% of threads, 20480M pinned", "25% of threads, 10240M pinned"
    assert f"({applied} on 2 GPU(s), not {asked} on 2 GPU(s))" in problem.reason


async def test_an_empty_marker_from_an_earlier_daemon_is_trusted(mps_root: Path) -> None:
    # Daemons before this release touched the marker without content; a
    # plugin that is upgraded first keeps serving with them.
    await start_daemon(mps_root)
    started(mps_root, "")
    assert await MpsGate.probe(mps_root, mps_intent(4)) is None


async def test_a_marker_left_by_a_daemon_that_is_gone_is_not_other_limits(
    mps_root: Path,
) -> None:
    # Whatever the marker says, a daemon that does not answer backs nothing:
    # the resource is withdrawn rather than kept for those limits.
    started(mps_root, marker_of(2))
    problem = await MpsGate.probe(mps_root, mps_intent(4))
    assert problem is not None
    assert not problem.other_limits
    assert "not ready" in problem.reason


async def test_probe_never_blocks_on_a_pipe_at_the_marker(tmp_path: Path) -> None:
    marker = MpsLayout(tmp_path).started(GPU)
    marker.parent.mkdir(parents=True)
    os.mkfifo(marker)
    async with asyncio.timeout(5):
        problem = await MpsGate.probe(tmp_path, mps_intent(2))
    assert problem is not None
    assert "not a regular file" in problem.reason


async def test_probe_names_replicas_beyond_what_mps_accepts(tmp_path: Path) -> None:
    problem = await MpsGate.probe(tmp_path, mps_intent(17, cc="7.0"))
    assert problem is not None
    assert "MPS for nvidia.com/gpu" in problem.reason
    assert "16" in problem.reason
