"""Facts a DRA device's name and attributes need: brand, GPU-instance profile id, placement."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from devices.errors import ProfileError
from devices.model import Inventory
from devices.nvml_naming import brand_name, placement_start
from devices.simulated import SimulatedLibrary
from devices.simulated_parts import known_brand, known_gi_profile_id
from tests.unit.labels.helpers import gpu_spec, mig_spec, write_profile

from .conftest import FakeNode


def inventory_of(path: Path) -> Inventory:
    library = SimulatedLibrary(path)
    library.init()
    return library.inventory()


@pytest.mark.parametrize(
    ("parent", "profile", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", "1g.5gb", 19),
        ("NVIDIA A100-SXM4-40GB", "1g.5gb+me", 20),
        ("NVIDIA A100-SXM4-40GB", "1c.3g.20gb", 9),  # a compute instance of a 3g GPU instance
        ("NVIDIA A100-SXM4-40GB", "7g.40gb", 0),
        ("NVIDIA H100 80GB HBM3", "1g.20gb", 15),
        ("NVIDIA A30", "1g.6gb", None),  # a part without built-in facts
        ("NVIDIA A100-SXM4-40GB", "1g.10gb+gfx", None),  # a profile the part does not offer
    ],
)
def test_known_gpu_instance_profile_ids_by_part_and_profile(
    parent: str, profile: str, expected: int | None
) -> None:
    assert known_gi_profile_id(parent, profile) == expected


def test_known_brand_only_for_built_in_parts() -> None:
    assert known_brand("NVIDIA H100 80GB HBM3") == "Nvidia"
    assert known_brand("Tesla T4") is None


def test_the_shipped_mig_profile_states_every_placement_and_knows_every_profile_id() -> None:
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    library.init()
    migs = [mig for gpu in library.inventory().gpus for mig in gpu.mig_devices]
    assert migs
    assert all(mig.placement_start is not None for mig in migs)
    assert {(mig.profile, mig.profile_id) for mig in migs} == {
        ("1g.5gb", 19),
        ("1g.5gb+me", 20),
        ("1g.10gb", 15),
        ("2g.10gb", 14),
        ("3g.20gb", 9),
        ("4g.20gb", 5),
        ("7g.40gb", 0),
    }


def test_a_profile_may_state_brand_profile_id_and_placement(tmp_path: Path) -> None:
    gpu = gpu_spec(
        0,
        name="NVIDIA A30",
        brand="Tesla",
        migCapable=True,
        migEnabled=True,
        migDevices=[mig_spec(0, 0, "1g.6gb", 5952, profileId=14, placementStart=3)],
    )
    (found,) = inventory_of(write_profile(tmp_path / "a30.yaml", [gpu])).gpus
    assert found.brand == "Tesla"
    assert (found.mig_devices[0].profile_id, found.mig_devices[0].placement_start) == (14, 3)


def test_unknown_facts_stay_unknown(tmp_path: Path) -> None:
    gpu = gpu_spec(
        0,
        name="NVIDIA A30",
        migCapable=True,
        migEnabled=True,
        migDevices=[mig_spec(0, 0, "1g.6gb", 5952)],
    )
    (found,) = inventory_of(write_profile(tmp_path / "a30.yaml", [gpu])).gpus
    assert found.brand is None
    assert (found.mig_devices[0].profile_id, found.mig_devices[0].placement_start) == (None, None)


def test_two_gpu_instances_starting_at_one_memory_slice_are_refused(tmp_path: Path) -> None:
    gpu = gpu_spec(
        0,
        migCapable=True,
        migEnabled=True,
        migDevices=[
            mig_spec(0, 0, "1g.5gb", 4864, gi=7, placementStart=2),
            mig_spec(0, 1, "1g.5gb", 4864, gi=8, placementStart=2),
        ],
    )
    with pytest.raises(ProfileError, match="GPU instances 7 and 8 both start at memory slice 2"):
        inventory_of(write_profile(tmp_path / "clash.yaml", [gpu]))


def test_compute_instances_of_one_gpu_instance_share_its_placement(tmp_path: Path) -> None:
    gpu = gpu_spec(
        0,
        migCapable=True,
        migEnabled=True,
        migDevices=[
            mig_spec(0, 0, "1c.2g.10gb", 9984, gi=3, ci=0, placementStart=2),
            mig_spec(0, 1, "1c.2g.10gb", 9984, gi=3, ci=1, placementStart=2),
        ],
    )
    (found,) = inventory_of(write_profile(tmp_path / "shared.yaml", [gpu])).gpus
    assert [mig.placement_start for mig in found.mig_devices] == [2, 2]


def test_nvml_brands_read_as_nvidia_tools_spell_them() -> None:
    assert brand_name(pynvml.NVML_BRAND_NVIDIA) == "Nvidia"
    assert brand_name(pynvml.NVML_BRAND_TESLA) == "Tesla"
    assert brand_name(pynvml.NVML_BRAND_GEFORCE_RTX) == "GeForceRTX"
    assert brand_name(99) == "Unknown"  # newer than the table: never a failed discovery


def test_a_placement_is_read_from_the_gpu_instance_record() -> None:
    assert placement_start(SimpleNamespace(placement=SimpleNamespace(start=4, size=4))) == 4
    assert placement_start(SimpleNamespace(profileId=9)) is None


def test_a_driver_without_brands_leaves_the_brand_unknown(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlDeviceGetBrand", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake_node.library.init()
    assert {gpu.brand for gpu in fake_node.library.inventory().gpus} == {None}
