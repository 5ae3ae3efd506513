"""Host facts: machine type, GPU mode from PCI classes, and which source wins."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from devices.model import Gpu, Inventory, VgpuDevice
from labels.host import NodeFacts, gather_facts, gpu_mode, read_machine_type
from tests.unit.labels.test_vgpu import VGPU_CAPABILITY, add_device, config_space

GPU = Gpu(
    index=0,
    minor=0,
    uuid="GPU-0",
    name="Tesla T4",
    memory_mib=15360,
    pci_bus_id="00000000:3B:00.0",
    numa_node=0,
    compute_capability="7.5",
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("product-name\n", "product-name", id="trailing-newline"),
        pytest.param("  DGX-1 \n\n", "DGX-1", id="surrounding-space"),
        pytest.param("", "", id="empty-file"),
        pytest.param("Google Compute Engine\n", "Google Compute Engine", id="spaces-kept-here"),
    ],
)
def test_machine_type_file(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "product_name"
    path.write_text(content)
    assert read_machine_type(str(path)) == expected


def test_machine_type_unreadable_or_unset(tmp_path: Path, logs: list[tuple[str, str]]) -> None:
    assert read_machine_type(str(tmp_path / "missing")) == "unknown"
    assert any(level == "WARNING" and "machine type" in text for level, text in logs)
    assert read_machine_type("") == "unknown"


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        pytest.param([0x030000, 0x030000], "graphics", id="vga"),
        pytest.param([0x030200], "compute", id="3d"),
        pytest.param([0x030000, 0x030200], "unknown", id="mixed"),
        pytest.param([0x068000], "unknown", id="bridge"),
        pytest.param([0x030200, None], "unknown", id="unreadable"),
        pytest.param([], "unknown", id="none"),
    ],
)
def test_gpu_mode(classes: list[int | None], mode: str) -> None:
    assert gpu_mode(classes) == mode


def _facts(
    tmp_path: Path, inventory: Inventory | None, *, simulated: bool = False, named: bool = False
) -> NodeFacts:
    return gather_facts(
        inventory,
        machine_type_file=str(tmp_path / "product_name"),
        machine_type_file_set=named,
        sysfs_root=tmp_path / "sys",
        simulated=simulated,
    )


def test_real_backend_reads_sysfs(tmp_path: Path) -> None:
    (tmp_path / "product_name").write_text("PowerEdge R740\n")
    add_device(
        tmp_path / "sys",
        "0000:3b:00.0",
        config_space((0xD0, VGPU_CAPABILITY)),
        pci_class="0x030200",
    )
    inventory = Inventory("550.54.15", "12.4", gpus=(GPU,))
    facts = _facts(tmp_path, inventory)
    assert facts == NodeFacts(
        machine_type="PowerEdge R740",
        gpu_mode="compute",
        vgpus=(VgpuDevice("0000:3b:00.0", "460.16", "r460_00"),),
    )


def test_real_backend_without_sysfs_degrades(tmp_path: Path) -> None:
    inventory = Inventory("550.54.15", "12.4", gpus=(GPU,))
    facts = _facts(tmp_path, inventory)
    assert (facts.machine_type, facts.gpu_mode, facts.vgpus) == ("unknown", "unknown", None)


def test_backend_facts_win_unless_a_machine_type_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "product_name").write_text("From File\n")
    inventory = Inventory(
        "550.54.15",
        "12.4",
        gpus=(replace(GPU, pci_class=0x030000),),
        machine_type="From Profile",
        vgpu_devices=(),
    )
    facts = _facts(tmp_path, inventory, simulated=True)
    assert (facts.machine_type, facts.gpu_mode, facts.vgpus) == ("From Profile", "graphics", ())
    named = _facts(tmp_path, inventory, simulated=True, named=True)
    assert named.machine_type == "From File"


def test_simulated_node_without_inventory_does_not_scan_the_host(tmp_path: Path) -> None:
    add_device(tmp_path / "sys", "0000:06:00.0", config_space((0xD0, VGPU_CAPABILITY)))
    assert _facts(tmp_path, None, simulated=True).vgpus == ()
    assert _facts(tmp_path, None).vgpus == (VgpuDevice("0000:06:00.0", "460.16", "r460_00"),)
