"""The node-profile fields labels need: PCI class, fabric, vGPU, MIG attributes."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.backends import open_library
from devices.errors import ProfileError
from devices.model import Fabric, Inventory, MigAttributes, VgpuDevice
from tests.unit.labels.helpers import gpu_spec, mig_spec, write_profile

CLUSTER = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"


def load(path: Path) -> Inventory:
    library = open_library(str(path))
    library.init()
    try:
        return library.inventory()
    finally:
        library.shutdown()


def test_defaults_describe_a_bare_metal_compute_node(tmp_path: Path) -> None:
    inventory = load(write_profile(tmp_path / "n.yaml", [gpu_spec(0)]))
    (gpu,) = inventory.gpus
    assert (gpu.pci_class, gpu.fabric) == (0x030200, None)
    assert inventory.vgpu_devices == ()


def test_stated_fields(tmp_path: Path) -> None:
    spec = gpu_spec(
        0,
        pciClass=0x030000,
        fabric={"clusterUUID": CLUSTER, "cliqueID": 7},
        vgpu={"hostDriverVersion": "550.54.16", "hostDriverBranch": "r550_40"},
    )
    inventory = load(write_profile(tmp_path / "n.yaml", [spec]))
    (gpu,) = inventory.gpus
    assert gpu.pci_class == 0x030000
    assert gpu.fabric == Fabric(CLUSTER, 7)
    assert inventory.vgpu_devices == (VgpuDevice("00000000:01:00.0", "550.54.16", "r550_40"),)


def test_mig_attributes_known_stated_and_unknown(tmp_path: Path) -> None:
    stated = {
        "multiprocessors": 20,
        "copyEngines": 2,
        "decoders": 1,
        "encoders": 1,
        "jpegs": 1,
        "ofas": 0,
    }
    a100 = gpu_spec(
        0,
        migEnabled=True,
        migDevices=[
            mig_spec(0, 0, "3g.20gb", 19968),
            mig_spec(0, 1, "2g.10gb", 9984, attributes=stated),
        ],
    )
    other = gpu_spec(
        1, name="Other GPU", migEnabled=True, migDevices=[mig_spec(1, 0, "1c.2g.10gb", 9984)]
    )
    inventory = load(write_profile(tmp_path / "n.yaml", [a100, other]))
    known, given = inventory.gpus[0].mig_devices
    assert known.attributes == MigAttributes(42, 3, 3, 3, 2, 0, 0, 0)
    assert given.attributes == MigAttributes(20, 2, 2, 2, 1, 1, 1, 0)
    assert inventory.gpus[1].mig_devices[0].attributes is None


def test_shipped_vgpu_profile() -> None:
    library = open_library("vgpu")
    library.init()
    inventory = library.inventory()
    assert [gpu.name for gpu in inventory.gpus] == ["GRID T4-16Q", "GRID T4-16Q"]
    assert {gpu.pci_class for gpu in inventory.gpus} == {0x030000}
    assert inventory.vgpu_devices is not None
    assert len(inventory.vgpu_devices) == 2


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(
            {"fabric": {"clusterUUID": "00000000-0000-0000-0000-000000000000", "cliqueID": 1}},
            "gpus[0].fabric.clusterUUID: must be a non-zero lowercase 8-4-4-4-12 UUID",
            id="zero-uuid",
        ),
        pytest.param(
            {"fabric": {"clusterUUID": CLUSTER.upper(), "cliqueID": 1}},
            "gpus[0].fabric.clusterUUID: must be a non-zero lowercase",
            id="upper-case-uuid",
        ),
        pytest.param(
            {"vgpu": {"hostDriverVersion": "550.54.16"}},
            "gpus[0].vgpu.hostDriverBranch: required key is missing",
            id="vgpu-missing-branch",
        ),
        pytest.param({"pciClass": "0x030000"}, "gpus[0].pciClass: ", id="class-as-text"),
    ],
)
def test_invalid_fields(tmp_path: Path, change: dict[str, object], problem: str) -> None:
    path = write_profile(tmp_path / "n.yaml", [gpu_spec(0, **change)])
    with pytest.raises(ProfileError) as caught:
        load(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert problem in str(caught.value)
