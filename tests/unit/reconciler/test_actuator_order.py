"""The actuators' order is data: every step is declared, each implements the one protocol.

A new actuator is added by adding a step to `ORDER` (and, if a GPU must not
be served through it and another at once, a `SERVES_AFTER` entry); these
checks keep the declared list and what the loop runs the same thing.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from foundation.backoff import Backoff
from foundation.outcome import Kind, Retries
from reconciler.actuators.dra import DraSide
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.mps_gate import MpsProbes
from reconciler.actuators.order import ORDER, SERVES_AFTER, Actuators


def actuators(tmp_path: Path) -> Actuators:
    return Actuators(
        fleet=PluginFleet(kubelet_socket=tmp_path / "kubelet.sock", register=False),
        health=None,
        retries=Retries(Backoff()),
        dra=DraSide(env={}, notify=lambda: None),
        probes=MpsProbes(lambda: None),
    )


def test_every_declared_step_has_one_actuator_and_every_actuator_is_declared(
    tmp_path: Path,
) -> None:
    names = list(ORDER)
    assert len(set(names)) == len(names)
    assert set(actuators(tmp_path).steps) == set(names)
    assert set(SERVES_AFTER) | set(SERVES_AFTER.values()) <= set(names)


def test_every_actuator_implements_the_protocol(tmp_path: Path) -> None:
    for name, actuator in actuators(tmp_path).steps.items():
        assert isinstance(actuator.kind, Kind), name
        assert inspect.iscoroutinefunction(actuator.converge), name
        for method in ("pending", "serves", "holds_nothing", "status"):
            assert callable(getattr(actuator, method)), (name, method)


def test_names_go_on_disk_first_and_come_off_last_and_the_apis_exclude_each_other() -> None:
    names = list(ORDER)
    assert names.index("cdi") < names.index("resources") < names.index("cdi-prune")
    assert names[-1] == "cdi-prune"
    assert SERVES_AFTER == {"resources": "slices", "slices": "resources"}
