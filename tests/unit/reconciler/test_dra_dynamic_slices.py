"""The slices actuator with dynamic MIG: the server version, read once per connection, off the loop.

`--dra-dynamic-mig` adds counter sets to the DRA plan; where they go depends
on the API server's version (separate slices from Kubernetes 1.35). The
publisher is a stand-in that answers a version (or fails to) and counts the
reads; the plan is built from A100s in MIG mode without instances.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from foundation.backoff import Backoff
from foundation.outcome import Retries
from kube.errors import KubeError
from kube.server_version import ServerVersion
from reconciler.actuators.dra import SLICES_KEY, DraParts, DraSide, catalog_of
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.order import Actuators
from reconciler.plan.desired import Desired, build_desired
from settings import load_config
from tests.unit.reconciler.test_dra_side import Preparer, Server
from tests.unit.resources.mig_a100 import PLACEMENTS_PER_GPU, dynamic_gpu
from tests.unit.resources.nodes import inventory, make_gpu

NODE = "gpu-node-1"


@dataclass
class Publisher:
    """Holds what the last write made the API hold; answers `version` (None: cannot)."""

    version: str | None = "v1.35.0"
    held: list[Any] | None = None
    lists: int = 1
    reads: int = 0
    read_at: int | None = None
    found: ServerVersion | None = None
    writes: list[list[Any] | None] = field(default_factory=list)
    refuse: str = ""  # a write fails with this, as a server refusing the layout

    def forget_version(self) -> None:
        self.read_at = None

    def pending(self, slices: Sequence[Mapping[str, Any]] | None) -> bool:
        return (list(slices) if slices is not None else None) != self.held

    def write(
        self, slices: Sequence[Mapping[str, Any]] | None, *, list_timeout: float | None = None
    ) -> None:
        if self.refuse:
            raise KubeError(self.refuse)
        self.held = list(slices) if slices is not None else None
        self.writes.append(self.held)

    def version_due(self) -> bool:
        return self.read_at != self.lists

    @property
    def server_version(self) -> ServerVersion | None:
        return self.found

    def read_version(self) -> ServerVersion:
        self.reads += 1
        self.read_at = self.lists
        if self.version is None:
            self.found = None
            raise KubeError("reading the API server's version: HTTP 404 Not Found")
        major, minor = self.version.lstrip("v").split(".")[:2]
        self.found = ServerVersion(int(major), int(minor), self.version)
        return self.found

    def holds_none(self) -> bool:
        return not self.held

    def state(self) -> None:
        return None

    def close(self) -> None:
        pass


def desired(tmp_path: Path, *flags: str) -> Desired:
    config = load_config(
        ["--kubelet-api", "dra", "--node-name", NODE, "--cdi-spec-dir", str(tmp_path), *flags],
        {},
    )
    node = inventory([dynamic_gpu(0), dynamic_gpu(1), make_gpu(2, mig_capable=False)])
    return build_desired(config, node)


@dataclass
class Rig:
    actuators: Actuators
    side: DraSide
    publisher: Publisher


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    publisher = Publisher()
    side = DraSide(env={}, notify=lambda: None)
    side.parts = DraParts(Preparer(), Server(), publisher)  # type: ignore[arg-type]
    fleet = PluginFleet(kubelet_socket=tmp_path / "kubelet.sock", register=False)
    retries = Retries(Backoff(initial=1.0, cap=8.0))
    return Rig(Actuators(fleet=fleet, health=None, retries=retries, dra=side), side, publisher)


def layout(slices: list[Any] | None) -> list[tuple[int, int]]:
    """(counter sets, devices) of each slice."""
    return [
        (len(s["spec"].get("sharedCounters") or ()), len(s["spec"].get("devices") or ()))
        for s in slices or ()
    ]


PER_GPU = 1 + PLACEMENTS_PER_GPU


async def test_from_1_35_the_counter_sets_are_written_in_a_slice_of_their_own(
    rig: Rig, tmp_path: Path
) -> None:
    want = desired(tmp_path, "--dra-dynamic-mig")
    assert want.dra is not None
    assert [s.name for s in want.dra.counter_sets] == ["gpu-0-counter-set", "gpu-1-counter-set"]
    await rig.actuators.converge(want)
    assert rig.publisher.reads == 1
    assert layout(rig.publisher.held) == [(2, 0), (0, 2 * PER_GPU + 1)]
    # Steady: nothing read or written again.
    assert not rig.actuators.steps["slices"].pending(want)
    await rig.actuators.converge(want)
    assert (rig.publisher.reads, len(rig.publisher.writes)) == (1, 1)


async def test_before_1_35_each_counter_set_goes_with_its_devices(
    rig: Rig, tmp_path: Path
) -> None:
    rig.publisher.version = "v1.34.2"
    await rig.actuators.converge(desired(tmp_path, "--dra-dynamic-mig"))
    assert layout(rig.publisher.held) == [(2, 2 * PER_GPU + 1)]


async def test_an_unreadable_version_is_the_older_layout_until_the_next_connection(
    rig: Rig, tmp_path: Path
) -> None:
    rig.publisher.version = None
    want = desired(tmp_path, "--dra-dynamic-mig")
    await rig.actuators.converge(want)
    assert layout(rig.publisher.held) == [(2, 2 * PER_GPU + 1)]
    assert not rig.actuators.steps["slices"].pending(want)  # not read again meanwhile
    assert rig.publisher.reads == 1
    # The watch lists anew (the server answers again): read once more, and rewritten.
    rig.publisher.version, rig.publisher.lists = "v1.35.0", 2
    assert rig.actuators.steps["slices"].pending(want)
    await rig.actuators.converge(want)
    assert rig.publisher.reads == 2
    assert layout(rig.publisher.held) == [(2, 0), (0, 2 * PER_GPU + 1)]
    # Another connection that finds the same version writes nothing.
    rig.publisher.lists = 3
    await rig.actuators.converge(want)
    assert (rig.publisher.reads, len(rig.publisher.writes)) == (3, 2)


async def test_a_write_refused_while_the_version_is_unread_reads_it_again_at_the_retry(
    rig: Rig, tmp_path: Path
) -> None:
    rig.publisher.version = None
    rig.publisher.refuse = "HTTP 422: only one of `sharedCounters` or `devices` is allowed"
    want = desired(tmp_path, "--dra-dynamic-mig")
    await rig.actuators.converge(want)
    assert rig.publisher.reads == 1
    assert rig.publisher.version_due()  # the layout may be why: read again at the retry
    rig.publisher.version, rig.publisher.refuse = "v1.35.0", ""
    rig.actuators.retries.forget(SLICES_KEY)  # the retry is due
    await rig.actuators.converge(want)
    assert rig.publisher.reads == 2
    assert layout(rig.publisher.held) == [(2, 0), (0, 2 * PER_GPU + 1)]


async def test_without_the_flag_the_version_is_never_read(rig: Rig, tmp_path: Path) -> None:
    want = desired(tmp_path)
    assert want.dra is not None
    assert want.dra.counter_sets == ()
    await rig.actuators.converge(want)
    assert rig.publisher.reads == 0
    assert layout(rig.publisher.held) == [(0, 3)]  # the three GPUs whole, as before


async def test_the_catalog_tells_the_claim_side_what_each_placement_creates(
    tmp_path: Path,
) -> None:
    want = desired(tmp_path, "--dra-dynamic-mig")
    assert want.dra is not None
    catalog = catalog_of(want.dra, want, {})
    placed = {name: d for name, d in catalog.devices.items() if d.placement is not None}
    assert len(placed) == 2 * PLACEMENTS_PER_GPU
    device = catalog.devices["gpu-1-mig-3g20gb-9-4"]
    assert device.placement is not None
    assert (device.placement.profile, device.placement.start) == ("3g.20gb", 4)
    assert device.uuid == want.inventory.gpus[1].uuid
    assert catalog.devices["gpu-0"].placement is None


def test_the_slices_key_is_the_one_the_loop_retries() -> None:
    assert str(SLICES_KEY) == "dra:slices"
