"""Fixtures of the device tests: a fake two-GPU node behind the NVML backend."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import devices.nvml
from devices.nvml import NvmlLibrary

from .fake_nvml_driver import fake_driver, fake_nvml_library
from .fake_pynvml import FakeNvml, two_gpu_node

__all__ = ["fake_driver", "fake_nvml_library"]  # fixtures of the C fake NVML


@dataclass
class FakeNode:
    nvml: FakeNvml
    library: NvmlLibrary
    sysfs: Path
    mig_minors: Path

    def set_numa(self, bus_id: str, text: str) -> None:
        directory = self.sysfs / "bus" / "pci" / "devices" / bus_id
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "numa_node").write_text(text)


@pytest.fixture
def fake_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    fake = two_gpu_node()
    monkeypatch.setattr(devices.nvml, "pynvml", fake)
    sysfs = tmp_path / "sys"
    minors = tmp_path / "mig-minors"
    minors.write_text(
        "config 1\nmonitor 2\n"
        "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
        "gpu0/gi13/access 120\ngpu0/gi13/ci0/access 121\n"
    )
    node = FakeNode(fake, NvmlLibrary(sysfs_root=sysfs, mig_minors_path=minors), sysfs, minors)
    node.set_numa("0000:07:00.0", "0\n")
    node.set_numa("0000:4e:00.0", "-1\n")
    return node
