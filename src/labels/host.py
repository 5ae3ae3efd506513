"""Facts about the node that do not come from NVML: machine type, PCI class, vGPUs.

The reference reads these from the host (DMI, sysfs, PCI config space). A
simulated node carries them in its profile instead, because a simulated node
must not pick up the properties of whatever machine the tests run on; with
the real backend, the inventory leaves them unset and they are read here.
Every failure here is a warning that adjusts a label, never a failed pass,
except a vGPU whose well-formed capability lacks its host-driver record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from devices.model import Gpu, Inventory, VgpuDevice
from devices.pci import sysfs_bus_id
from labels.vgpu import VgpuScanError, scan_vgpus

__all__ = [
    "DEFAULT_MACHINE_TYPE_FILE",
    "NodeFacts",
    "gather_facts",
    "gpu_mode",
    "read_machine_type",
]

DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
UNKNOWN = "unknown"
_VGA_CONTROLLER = 0x030000
_3D_CONTROLLER = 0x030200


@dataclass(frozen=True)
class NodeFacts:
    """Inputs of the node-level labels besides NVML's."""

    machine_type: str  # as read (trimmed), sanitised when it becomes a label
    gpu_mode: str  # graphics | compute | unknown
    vgpus: tuple[VgpuDevice, ...] | None  # None: the scan failed, no vGPU labels


def read_machine_type(path: str) -> str:
    """The trimmed content of the machine-type file; ``unknown`` if it cannot be read."""
    if not path:
        return UNKNOWN
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError as error:
        logger.warning(
            "Error getting machine type from {path}: {error}",
            path=path,
            error=error.strerror or error,
        )
        return UNKNOWN


def _read_pci_class(gpu: Gpu, sysfs_root: Path) -> int | None:
    if gpu.pci_class is not None:
        return gpu.pci_class
    path = sysfs_root / "bus" / "pci" / "devices" / sysfs_bus_id(gpu.pci_bus_id) / "class"
    try:
        return int(path.read_text(encoding="ascii").strip(), 16)
    except (OSError, ValueError) as error:
        logger.warning("Cannot read the PCI class of GPU {}: {}", gpu.index, error)
        return None


def gpu_mode(classes: Sequence[int | None]) -> str:
    """``graphics`` or ``compute`` when every GPU has that one class, else ``unknown``."""
    distinct = set(classes)
    if distinct == {_VGA_CONTROLLER}:
        return "graphics"
    if distinct == {_3D_CONTROLLER}:
        return "compute"
    return UNKNOWN


def _vgpus(
    inventory: Inventory | None, *, simulated: bool, sysfs_root: Path
) -> tuple[VgpuDevice, ...] | None:
    if inventory is not None and inventory.vgpu_devices is not None:
        return inventory.vgpu_devices
    if simulated:
        # A simulated node that could not be read has no PCI bus to scan.
        return ()
    try:
        return scan_vgpus(sysfs_root)
    except VgpuScanError as error:
        logger.warning("Skipping the vGPU labels: {}", error)
        return None


def gather_facts(
    inventory: Inventory | None,
    *,
    machine_type_file: str,
    machine_type_file_set: bool,
    sysfs_root: Path,
    simulated: bool,
) -> NodeFacts:
    """Resolve the host facts for one pass.

    A machine-type file named explicitly (flag, environment or config file)
    is always read; otherwise a machine type the backend knows (a simulated
    node's) wins over the default DMI file.

    Raises:
        LabelError: a vGPU whose well-formed records have no host driver's.
    """
    if not machine_type_file_set and inventory is not None and inventory.machine_type is not None:
        machine = inventory.machine_type.strip()
    else:
        machine = read_machine_type(machine_type_file)
    gpus = inventory.gpus if inventory is not None else ()
    mode = gpu_mode([_read_pci_class(gpu, sysfs_root) for gpu in gpus])
    vgpus = _vgpus(inventory, simulated=simulated, sysfs_root=sysfs_root)
    return NodeFacts(machine_type=machine, gpu_mode=mode, vgpus=vgpus)
