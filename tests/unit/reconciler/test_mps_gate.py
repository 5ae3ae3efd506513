"""The MPS gate, per resource: an edit or a lost daemon concerns only its own resource."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from foundation.outcome import Change
from mps.errors import MpsNotReady, OtherLimits
from mps.layout import MpsLayout
from mps.limits import daemon_specs
from reconciler.actuators import mps_gate
from reconciler.actuators.mps_gate import MpsGate, MpsProbes, Probed, probe
from reconciler.plan.desired import ResourceIntent
from resources.allocation import Allocator
from resources.builder import ResourceSet, build_resources
from resources.options import ResourceOptions, ShareRule, SharingOptions, SharingStrategy
from tests.unit.mps.test_limits import node

GPU = "nvidia.com/gpu"


def intent(name: str, mps_key: str | None) -> ResourceIntent:
    return ResourceIntent(allocator=Allocator(ResourceSet(name, ())), mps_key=mps_key)


def probed(key: str, problem: MpsNotReady | None = None) -> Probed:
    return Probed(key, problem, at=0.0)


def test_admission_is_per_resource_and_per_key() -> None:
    gate = MpsGate()
    a, b = intent("nvidia.com/a", "k1"), intent("nvidia.com/b", "k1")
    plain = intent("nvidia.com/gpu", None)
    intents = {i.name: i for i in (a, b, plain)}
    assert gate.admits(plain)  # no daemon needed
    assert gate.waiting([a, b, plain]) == ["nvidia.com/a", "nvidia.com/b"]
    done = gate.apply(intents, {"nvidia.com/a": probed("k1"), "nvidia.com/b": probed("k1")})
    assert [(o.name, o.changes, o.converged) for o in done] == [
        ("nvidia.com/a", {Change.ADMITTED}, True),
        ("nvidia.com/b", {Change.ADMITTED}, True),
    ]
    edited = intent("nvidia.com/a", "k2")  # replicas or behaviour changed for `a` only
    assert not gate.admits(edited)
    assert gate.admitted("nvidia.com/a")  # what it serves stays served meanwhile
    assert gate.admits(b)
    lost = gate.apply(intents, {"nvidia.com/b": probed("k1", MpsNotReady("not answering"))})
    assert [(o.changes, str(o.error)) for o in lost] == [({Change.WITHDRAWN}, "not answering")]
    assert not gate.admitted("nvidia.com/b")
    assert gate.admitted("nvidia.com/a")
    gate.forget_others({"nvidia.com/b"})
    assert not gate.admitted("nvidia.com/a")


def test_a_result_for_a_key_no_longer_wanted_is_dropped() -> None:
    gate = MpsGate()
    now = intent("nvidia.com/a", "k2")
    assert gate.apply({now.name: now}, {now.name: probed("k1")}) == []
    assert not gate.admits(now)


def test_a_daemon_on_older_limits_keeps_what_it_backs_until_it_restarts() -> None:
    gate = MpsGate()
    old, new = intent("nvidia.com/a", "k1"), intent("nvidia.com/a", "k2")
    gate.apply({old.name: old}, {old.name: probed("k1")})
    # The plugin followed an edit first; the daemon still applies k1's limits.
    (kept,) = gate.apply({new.name: new}, {new.name: probed("k2", OtherLimits("other limits"))})
    assert kept.changes == frozenset()
    assert not kept.converged
    assert gate.admitted("nvidia.com/a")  # the k1 list stays served
    assert not gate.admits(new)


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


def marker_of(replicas: int) -> str:
    (spec,) = daemon_specs([mps_intent(replicas).allocator.resource])
    return spec.marker


async def test_probe_waits_for_the_daemon_to_start(tmp_path: Path) -> None:
    problem = await probe(tmp_path, mps_intent(2))
    assert problem is not None
    assert "has not finished starting" in str(problem)
    assert not isinstance(problem, OtherLimits)


async def test_a_marker_left_by_a_daemon_that_is_gone_is_not_other_limits(
    tmp_path: Path,
) -> None:
    # Whatever the marker says, a daemon that does not answer backs nothing:
    # the resource is withdrawn rather than kept for those limits.
    started(tmp_path, marker_of(2))
    problem = await probe(tmp_path, mps_intent(4))
    assert problem is not None
    assert not isinstance(problem, OtherLimits)
    assert "not ready" in str(problem)


async def test_probe_never_blocks_on_a_pipe_at_the_marker(tmp_path: Path) -> None:
    marker = MpsLayout(tmp_path).started(GPU)
    marker.parent.mkdir(parents=True)
    os.mkfifo(marker)
    async with asyncio.timeout(5):
        problem = await probe(tmp_path, mps_intent(2))
    assert problem is not None
    assert "not a regular file" in str(problem)


async def test_probe_names_replicas_beyond_what_mps_accepts(tmp_path: Path) -> None:
    problem = await probe(tmp_path, mps_intent(17, cc="7.0"))
    assert problem is not None
    assert "MPS for nvidia.com/gpu" in str(problem)
    assert "16" in str(problem)


async def test_probes_of_one_round_run_together_and_hand_results_over_once() -> None:
    """Two daemons that each answer only once the other is asked: only concurrent probes finish."""
    asked: list[str] = []
    both = asyncio.Event()

    async def answering(root: Path, intent: ResourceIntent) -> None:
        asked.append(intent.name)
        if len(asked) == 2:
            both.set()
        await both.wait()

    notified = asyncio.Event()
    probes = MpsProbes(notified.set)
    pair = [intent("nvidia.com/a", "k1"), intent("nvidia.com/b", "k2")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mps_gate, "probe", answering)
        assert probes.start(Path("/mps"), pair)
        assert not probes.start(Path("/mps"), pair)  # one round at a time
        async with asyncio.timeout(5):
            await notified.wait()
    results = probes.take()
    assert {name: (p.key, p.problem) for name, p in results.items()} == {
        "nvidia.com/a": ("k1", None),
        "nvidia.com/b": ("k2", None),
    }
    assert probes.take() == {}
    await probes.stop()


def test_the_daemon_key_changes_when_only_the_replicas_of_one_gpu_change() -> None:
    def key(first: int, second: int) -> str | None:
        rules = (
            ShareRule(name=GPU, replicas=first, devices=(0,)),
            ShareRule(name=GPU, replicas=second, devices=(1,)),
        )
        options = ResourceOptions(
            sharing=SharingOptions(strategy=SharingStrategy.MPS, rules=rules),
            mps_root="/run/nvidia/mps",
        )
        (resource,) = build_resources(node(40 * 1024, 40 * 1024), options)
        return ResourceIntent.of(Allocator(resource)).mps_key

    # The largest count is 4 in both, but GPU 1's limits differ: ask the daemon again.
    assert key(4, 2) != key(4, 3)
    assert key(4, 2) == key(4, 2)
    # Uniform counts keep the key they had before counts could differ per GPU.
    assert key(2, 2) == mps_intent(2).mps_key
