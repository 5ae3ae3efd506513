"""The MPS gate, per resource: an edit or a lost daemon concerns only its own resource."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from mps.layout import MpsLayout
from mps.limits import daemon_specs
from reconciler.mps_gate import MpsGate
from reconciler.plan import ResourceIntent
from resources.allocation import Allocator
from resources.builder import ResourceSet, build_resources
from resources.options import ResourceOptions, SharingOptions, SharingStrategy
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


async def test_probe_waits_for_the_daemon_to_start(tmp_path: Path) -> None:
    problem = await MpsGate.probe(tmp_path, mps_intent(2))
    assert problem is not None
    assert "has not finished starting" in problem.reason
    assert not problem.other_limits


async def test_probe_refuses_a_daemon_applying_other_limits(tmp_path: Path) -> None:
    # The daemon still runs the limits of 2 replicas; the plugin's plan has 4.
    (spec,) = daemon_specs([mps_intent(2).allocator.resource])
    started(tmp_path, spec.marker)
    problem = await MpsGate.probe(tmp_path, mps_intent(4))
    assert problem is not None
    assert problem.other_limits
    assert "applies other limits than this config asks for" in problem.reason
    applied, asked = "50% of threads, 20480M pinned", "25% of threads, 10240M pinned"
    assert f"({applied} on 2 GPU(s), not {asked} on 2 GPU(s))" in problem.reason


async def test_probe_with_the_same_limits_asks_the_daemon_itself(tmp_path: Path) -> None:
    (spec,) = daemon_specs([mps_intent(4).allocator.resource])
    assert "set_default_active_thread_percentage 25" in spec.marker
    started(tmp_path, spec.marker)
    problem = await MpsGate.probe(tmp_path, mps_intent(4))
    # The marker matches, so the next question is the daemon's own answer,
    # and there is no daemon in this directory.
    assert problem is not None
    assert not problem.other_limits
    assert "has not finished starting" not in problem.reason


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
