"""Discovery through pynvml and the C API: the NVML backend on the fake `libnvidia-ml.so.1`.

For each shipped profile the fake library serves the node in hardware terms
(links to NVSwitches, MIG profile constants and ids, struct versions), and
the inventory the real backend reads through ctypes must equal the
simulated backend's inventory of the same profile, field for field. Fields
NVML does not report (machine type, PCI class, vGPU host details) are the
only ones set aside; NUMA nodes and MIG capability minors come from the
host files the driver fixture writes, as on a node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devices.errors import NvmlUnavailable
from devices.model import Inventory
from devices.nvml import NvmlLibrary
from devices.simulated import SimulatedLibrary

from .fake_nvml_driver import FakeDriver
from .nvml_c_profiles import CLIQUE, CLUSTER, fabric_node, mig_variety

Install = Callable[[str | Path], FakeDriver]
PROFILES = ["dgx-a100", "dgx-h100", "hgx-16", "a100-mig-mixed", "a100-mig-single",
            "a100-mig-dynamic", "t4x4",
            "rtx-pro-6000-mig",
            "vgpu", "no-gpus"]  # fmt: skip


def as_nvml_sees_it(inventory: Inventory) -> Inventory:
    """The simulated inventory without what only the host (not NVML) knows."""
    return dataclasses.replace(
        inventory,
        machine_type=None,
        vgpu_devices=None,
        gpus=tuple(dataclasses.replace(gpu, pci_class=None) for gpu in inventory.gpus),
    )


def unstated_left_out(got: Inventory, simulated: Inventory) -> Inventory:
    """`got` without the GPU-instance profile ids and placements the profile does not state.

    The fake NVML has to answer something for them; a profile of a part
    whose numbers are not public leaves them out, and so does this comparison.
    """
    stated = {
        mig.uuid: mig
        for gpu in simulated.gpus
        for mig in gpu.mig_devices
        if mig.profile_id is not None
    }
    return dataclasses.replace(
        got,
        gpus=tuple(
            dataclasses.replace(
                gpu,
                mig_devices=tuple(
                    mig
                    if mig.uuid in stated
                    else dataclasses.replace(mig, profile_id=None, placement_start=None)
                    for mig in gpu.mig_devices
                ),
            )
            for gpu in got.gpus
        ),
    )


def library_for(driver: FakeDriver) -> NvmlLibrary:
    return NvmlLibrary(
        driver_root=str(driver.root), sysfs_root=driver.sysfs, mig_minors_path=driver.mig_minors
    )


@contextmanager
def started(driver: FakeDriver) -> Iterator[NvmlLibrary]:
    library = library_for(driver)
    library.init()
    try:
        yield library
    finally:
        library.shutdown()


@pytest.mark.parametrize("profile", PROFILES)
def test_inventory_read_through_the_c_api_equals_the_simulated_one(
    fake_driver: Install, profile: str
) -> None:
    driver = fake_driver(profile)
    with started(driver) as library:
        got = library.inventory()
    simulated = SimulatedLibrary.from_argument(profile)
    simulated.init()
    got = unstated_left_out(got, simulated.inventory())
    assert got == as_nvml_sees_it(simulated.inventory())
    assert got == as_nvml_sees_it(driver.inventory)


def test_mig_profiles_are_named_from_nvml_constants_and_memory(
    fake_driver: Install, tmp_path: Path
) -> None:
    profile = mig_variety(tmp_path / "mig-variety.yaml")
    with started(fake_driver(profile)) as library:
        got = library.inventory()
    simulated = SimulatedLibrary(profile)
    simulated.init()
    assert got == as_nvml_sees_it(simulated.inventory())
    a30, h100, _ = got.gpus
    assert [m.profile for m in a30.mig_devices] == ["1g.6gb", "1c.2g.12gb", "1c.2g.12gb"]
    assert {m.attributes for m in a30.mig_devices} == {None}  # not offered: memory asked instead
    assert [m.profile for m in h100.mig_devices] == ["1g.10gb", "1g.20gb", "1g.10gb+me", "3g.40gb"]


def test_suffixed_profiles_are_named_from_their_gpu_instance_profile_constants(
    fake_driver: Install,
) -> None:
    # The fake serves each MIG device as NVML constants (1_SLICE_GFX, 1_SLICE_ALL_ME,
    # 2_SLICE_NO_ME, 4_SLICE_GFX, ...), never as a name.
    driver = fake_driver("rtx-pro-6000-mig")
    served = driver.node_file.read_text()
    assert "+" not in served
    assert "gfx" not in served
    with started(driver) as library:
        got = library.inventory()
    assert [[m.profile for m in gpu.mig_devices] for gpu in got.gpus] == [
        ["1g.24gb+gfx"] * 4,
        ["2g.48gb-me", "1g.24gb+me.all", "1g.24gb-me"],
        ["2g.48gb", "1g.24gb+gfx", "1g.24gb+me"],
        ["4g.96gb+gfx"],
    ]


def test_nvlink_fabric_membership_is_read_through_the_versioned_query(
    fake_driver: Install, tmp_path: Path
) -> None:
    profile = fabric_node(tmp_path / "fabric.yaml")
    with started(fake_driver(profile)) as library:
        got = library.inventory()
    simulated = SimulatedLibrary(profile)
    simulated.init()
    assert got == as_nvml_sees_it(simulated.inventory())
    assert {(g.fabric.cluster_uuid, g.fabric.clique_id) for g in got.gpus if g.fabric} == {
        (CLUSTER, CLIQUE)
    }
    assert all(g.fabric is not None for g in got.gpus)


def test_a_driver_that_cannot_start_says_why_like_the_simulated_one(fake_driver: Install) -> None:
    driver = fake_driver("nvml-broken")
    simulated = SimulatedLibrary.from_argument("nvml-broken")
    with pytest.raises(NvmlUnavailable) as simulated_error:
        simulated.init()
    with pytest.raises(NvmlUnavailable) as nvml_error:
        library_for(driver).init()
    assert str(nvml_error.value) == str(simulated_error.value)


@pytest.mark.parametrize("profile", ["dgx-a100", "a100-mig-mixed"])
def test_a_gpu_that_falls_off_the_bus_keeps_its_record_and_the_node_stays_readable(
    fake_driver: Install, profile: str
) -> None:
    driver = fake_driver(profile)
    lost = driver.inventory.gpus[4].uuid
    with started(driver) as library:
        before = library.inventory()
        driver.lost(lost)
        assert library.inventory() == before
        driver.reset(lost)
        assert library.inventory() == before
    assert before == as_nvml_sees_it(driver.inventory)


def test_a_gpu_lost_before_it_was_ever_read_is_left_out(fake_driver: Install) -> None:
    driver = fake_driver("dgx-a100")
    lost = driver.inventory.gpus[6]
    driver.lost(lost.uuid)
    with started(driver) as library:
        got = library.inventory()
        driver.reset(lost.uuid)
        again = library.inventory()
    everything = as_nvml_sees_it(driver.inventory)
    others = tuple(
        dataclasses.replace(
            gpu,
            nvlinks={p: n for p, n in gpu.nvlinks.items() if p != lost.index},
            p2p={p: level for p, level in gpu.p2p.items() if p != lost.index},
        )
        for gpu in everything.gpus
        if gpu.index != lost.index
    )
    assert got == dataclasses.replace(everything, gpus=others)
    assert again == everything  # read again once it answers


def test_mig_placements_are_read_through_the_c_api_count_first(fake_driver: Install) -> None:
    # The NULL-array count query, then the array: the records are pynvml's own ctypes ones.
    driver = fake_driver("a100-mig-dynamic")
    assert "giplacements 0 1 0 1 2 3 4 5 6" in driver.node_file.read_text()
    with started(driver) as library:
        got = library.inventory()
    for gpu in got.gpus:
        assert len(gpu.mig_placements) == 25
        assert gpu.memory_slices == 8
        assert {(p.profile, p.start, p.size) for p in gpu.mig_placements if p.profile_id == 9} == {
            ("3g.20gb", 0, 4),
            ("3g.20gb", 4, 4),
        }
