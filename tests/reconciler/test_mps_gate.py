"""The MPS gate, per resource: an edit or a lost daemon concerns only its own resource."""

from __future__ import annotations

from pathlib import Path

from reconciler.mps_gate import MpsGate
from reconciler.plan import ResourceIntent
from resources.allocation import Allocator
from resources.builder import ResourceSet


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


async def test_probe_says_why_a_daemon_is_not_ready(tmp_path: Path) -> None:
    reason = await MpsGate.probe(tmp_path, "nvidia.com/gpu")
    assert reason is not None
    assert "has not finished starting" in reason
