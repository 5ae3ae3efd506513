"""A fake NVIDIA driver for the tests: the C fake `libnvidia-ml.so.1`, a node, host files, faults.

`fake_nvml_library` (a session fixture) compiles `tests/unit/devices/fakenvml/*.c`
once with the system C compiler and skips, saying why, where there is none.
`install_driver` then lays out one node the way a driver install and the host
present it:

- a driver root holding `usr/lib64/libnvidia-ml.so.1` (a hard link to the
  one built library: in one process pynvml binds the library once, and
  whichever copy it bound reads the node named at `nvmlInit`);
- the node description (`fake_nvml_node`) and an empty control file;
- a sysfs tree with each GPU's `numa_node`, PCI vendor, class and
  configuration space (a vGPU's with its host-driver capability), the driver's
  `mig-minors` table and a DMI product name: what the backend and the
  labeller read from the host rather than from NVML.

The library reads the node from `$FAKE_NVML_NODE` at init (`FakeDriver.env`).
Faults are lines appended to the control file while the code under test
runs; the library sees each one at its next call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import pytest

from devices.model import Gpu, Inventory, VgpuDevice
from devices.pci import sysfs_bus_id
from devices.simulated import PROFILES_DIR, build_inventory, load_profile
from tests.layers import build_step

from .fake_nvml_node import describe_node

SOURCES = Path(__file__).resolve().parent / "fakenvml"
LIBRARY_NAME = "libnvidia-ml.so.1"
_built: dict[str, Path] = {}


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def build_library(directory: Path) -> Path:
    """Compile the fake library into `directory` (once per process).

    Raises:
        RuntimeError: the compiler failed; the message holds its output.
    """
    if "library" in _built:
        return _built["library"]
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler")
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / LIBRARY_NAME
    command = [
        cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-O1",
        "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
        f"-Wl,-soname,{LIBRARY_NAME}", "-Wl,--no-undefined",
        "-o", str(output), *sorted(str(p) for p in SOURCES.glob("*.c")),
    ]  # fmt: skip
    with build_step():
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed:\n{done.stderr}")
    _built["library"] = output
    return output


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled fake `libnvidia-ml.so.1` (skips where there is no C compiler)."""
    if compiler() is None:
        pytest.skip("no C compiler (cc or gcc) to build the fake libnvidia-ml.so.1")
    return build_library(tmp_path_factory.mktemp("fakenvml"))


@dataclass(frozen=True)
class FakeDriver:
    """One node served by the fake library, and the ways to break it."""

    root: Path  # the driver root: usr/lib64/libnvidia-ml.so.1
    node_file: Path
    control: Path
    sysfs: Path
    mig_minors: Path
    machine_type_file: Path
    inventory: Inventory  # the simulated backend's view of the same node

    @property
    def env(self) -> dict[str, str]:
        return {"FAKE_NVML_NODE": str(self.node_file)}

    def inject(self, line: str) -> None:
        with self.control.open("a") as control:
            control.write(line + "\n")

    def xid(self, uuid: str, xid: int, gi: int | None = None, ci: int | None = None) -> None:
        where = "" if gi is None or ci is None else f" {gi} {ci}"
        self.inject(f"xid {uuid} {xid}{where}")

    def ecc(self, uuid: str) -> None:
        self.inject(f"ecc {uuid}")

    def lost(self, uuid: str) -> None:
        self.inject(f"lost {uuid}")

    def pending(self, uuid: str) -> None:
        self.inject(f"pending {uuid}")

    def reset(self, uuid: str) -> None:
        self.inject(f"reset {uuid}")

    def wait_error(self, code: int, count: int) -> None:
        self.inject(f"waiterror {code} {count}")


def _mig_minors(inventory: Inventory) -> str:
    """The driver's capability-minor table: every GI and CI slot of every GPU, by minor number."""
    lines = ["config 1", "monitor 2"]
    for gpu in inventory.gpus:
        for gi in range(15):
            base = 3 + (gpu.minor * 15 + gi) * 9
            lines.append(f"gpu{gpu.minor}/gi{gi}/access {base}")
            lines += [f"gpu{gpu.minor}/gi{gi}/ci{ci}/access {base + 1 + ci}" for ci in range(8)]
    return "\n".join(lines) + "\n"


def _config_space(gpu: Gpu, vgpu: VgpuDevice | None) -> bytes:
    """256 bytes of PCI configuration space; a vGPU carries NVIDIA's `VF` capability."""
    config = bytearray(256)
    config[0:2] = (0x10DE).to_bytes(2, "little")
    if vgpu is not None:
        config[0x06] = 0x10  # status: has a capability list ...
        config[0x34] = 0xD0  # ... starting here
        record = bytes([0, 22]) + vgpu.host_driver_version.encode().ljust(10, b"\0")
        record += vgpu.host_driver_branch.encode().ljust(10, b"\0")
        capability = bytes([0x09, 0x00, 5 + len(record)]) + b"VF" + record
        config[0xD0 : 0xD0 + len(capability)] = capability
    return bytes(config)


def _host_files(inventory: Inventory, sysfs: Path) -> None:
    """What the host's sysfs says about each GPU: NUMA node, PCI vendor, class and config."""
    vgpus = {v.pci_bus_id: v for v in inventory.vgpu_devices or ()}
    bridge = sysfs / "bus" / "pci" / "devices" / "0000:00:00.0"  # not NVIDIA's: never looked at
    bridge.mkdir(parents=True)
    (bridge / "vendor").write_text("0x8086\n")
    (bridge / "class").write_text("0x060000\n")
    for gpu in inventory.gpus:
        device = sysfs / "bus" / "pci" / "devices" / sysfs_bus_id(gpu.pci_bus_id)
        device.mkdir(parents=True, exist_ok=True)
        (device / "numa_node").write_text(f"{-1 if gpu.numa_node is None else gpu.numa_node}\n")
        (device / "vendor").write_text("0x10de\n")
        pci_class = 0x030200 if gpu.pci_class is None else gpu.pci_class
        (device / "class").write_text(f"0x{pci_class:06x}\n")
        (device / "config").write_bytes(_config_space(gpu, vgpus.get(gpu.pci_bus_id)))


def install_driver(library: Path, directory: Path, profile: str | Path) -> FakeDriver:
    """Lay out the node of `profile` (a shipped name or a YAML path) under `directory`."""
    path = PROFILES_DIR / f"{profile}.yaml" if isinstance(profile, str) else profile
    node = load_profile(path)
    inventory = build_inventory(node)
    root = directory / "driver-root"
    lib64 = root / "usr" / "lib64"
    lib64.mkdir(parents=True)
    try:
        os.link(library, lib64 / LIBRARY_NAME)
    except OSError:
        shutil.copy2(library, lib64 / LIBRARY_NAME)
    control = directory / "nvml-control"
    control.touch()
    node_file = directory / "nvml-node.txt"
    node_file.write_text(describe_node(inventory, control=control, init_error=node.init_error))
    sysfs = directory / "sys"
    _host_files(inventory, sysfs)
    minors = directory / "mig-minors"
    minors.write_text(_mig_minors(inventory))
    machine = directory / "product_name"
    machine.write_text((inventory.machine_type or "unknown") + "\n")
    return FakeDriver(root, node_file, control, sysfs, minors, machine, inventory)


@pytest.fixture
def fake_driver(
    fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str | Path], FakeDriver]:
    """Install a node (`fake_driver("dgx-a100")`) and point this process's NVML at it."""

    numbers = count()

    def install(profile: str | Path) -> FakeDriver:
        directory = tmp_path / f"node-{next(numbers)}"
        driver = install_driver(fake_nvml_library, directory, profile)
        for key, value in driver.env.items():
            monkeypatch.setenv(key, value)
        return driver

    return install
