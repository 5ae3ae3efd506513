"""Frozen facts about the GPUs of one node.

These objects cross every layer (resources, labels, health, inspection), so
they are immutable and hold plain values only: no NVML handles, no callbacks.
A new inventory is a new object; comparing two inventories tells whether the
hardware changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class P2PLevel(StrEnum):
    """NVML topology levels between two GPUs, closest first (nvmlGpuTopologyLevel_t)."""

    INTERNAL = "INTERNAL"  # same board (multi-GPU board)
    SINGLE = "SINGLE"  # one PCIe switch
    MULTIPLE = "MULTIPLE"  # several PCIe switches, no host bridge
    HOSTBRIDGE = "HOSTBRIDGE"  # through a host bridge
    NODE = "NODE"  # same NUMA node, across host bridges
    SYSTEM = "SYSTEM"  # across NUMA nodes (SMP interconnect)


@dataclass(frozen=True)
class MigAttributes:
    """What NVML's device attributes say about one MIG device (published as node labels)."""

    multiprocessors: int
    gi_slices: int  # GPU-instance slice count
    ci_slices: int  # compute-instance slice count
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int  # optical-flow accelerators


@dataclass(frozen=True)
class Fabric:
    """The NVLink fabric (IMEX) domain of a GPU whose fabric registration completed."""

    cluster_uuid: str  # canonical lowercase 8-4-4-4-12 form
    clique_id: int


@dataclass(frozen=True)
class VgpuDevice:
    """An NVIDIA PCI function of a virtual machine that is a vGPU, with its host's driver."""

    pci_bus_id: str
    # None, both: the capability's records are malformed, so the host driver is unknown.
    host_driver_version: str | None  # e.g. "550.54.16"
    host_driver_branch: str | None  # e.g. "r550_40"


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a GPU instance + compute instance) carved out of a GPU."""

    uuid: str
    parent_index: int
    slot: int  # NVML MIG handle slot j; the plugin's index is "<parent_index>:<slot>"
    gi: int  # GPU instance id
    ci: int  # compute instance id
    profile: str  # e.g. "1g.5gb", "3g.20gb", "1g.10gb+me"
    memory_mib: int
    gi_cap_minor: int | None = None  # /dev/nvidia-caps/nvidia-cap<minor> for the GI
    ci_cap_minor: int | None = None  # same for the CI
    # None when the backend does not read them (labels then publish only the slice counts)
    attributes: MigAttributes | None = None
    # The GPU-instance profile id (`nvidia-smi mig -lgip`'s ID, e.g. 19 for an A100's
    # 1g.5gb) and the first memory slice the instance occupies: together they name
    # the device the way NVIDIA's DRA driver does. None when the backend does not know.
    profile_id: int | None = None
    placement_start: int | None = None

    @property
    def index(self) -> str:
        return f"{self.parent_index}:{self.slot}"


@dataclass(frozen=True)
class MigPlacement:
    """One place a MIG profile can be created on a GPU: NVML's possible GPU-instance placements.

    DRA's dynamic MIG publishes each placement as a device; preparing it
    creates a GPU instance of `profile_id` at `start` and one compute
    instance spanning it.
    """

    profile: str  # NVIDIA's name: "1g.5gb", "1g.5gb+me", "7g.40gb"
    profile_id: int  # GPU-instance profile id (`nvidia-smi mig -lgip` ID: 19 for 1g.5gb)
    start: int  # first memory slice it occupies
    size: int  # memory slices it occupies
    memory_mib: int
    attributes: MigAttributes  # multiprocessors, slice counts, engines


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as NVML reports it."""

    index: int
    minor: int
    uuid: str
    name: str
    memory_mib: int
    pci_bus_id: str  # NVML form, e.g. "00000000:07:00.0"
    numa_node: int | None
    compute_capability: str  # "8.0"
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    # peer GPU index -> number of NVLink lanes to it (empty for PCIe-only GPUs)
    nvlinks: Mapping[int, int] = field(default_factory=dict)
    # peer GPU index -> NVML P2P topology level
    p2p: Mapping[int, P2PLevel] = field(default_factory=dict)
    # PCI class code (0x030200 3D controller, 0x030000 VGA); None: read it from sysfs
    pci_class: int | None = None
    # set only for a GPU attached to an NVLink fabric; None otherwise or when unknown
    fabric: Fabric | None = None
    # NVML's product brand as NVIDIA's tools spell it ("Nvidia", "Tesla", ...); None: unknown
    brand: str | None = None
    # Every placement of every MIG profile, read only where MIG mode is on; ()
    # where it is off, or the backend does not read them. Sorted by profile id,
    # then start, in both backends.
    mig_placements: tuple[MigPlacement, ...] = ()

    @property
    def memory_slices(self) -> int:
        """How many memory slices MIG divides the GPU into (8 on an A100); 0: unknown."""
        return max((p.start + p.size for p in self.mig_placements), default=0)

    @property
    def device_path(self) -> str:
        return f"/dev/nvidia{self.minor}"

    @property
    def cc_major(self) -> int:
        return int(self.compute_capability.split(".")[0])

    @property
    def cc_minor(self) -> int:
        return int(self.compute_capability.split(".")[1])


@dataclass(frozen=True)
class Inventory:
    """Everything discovered on the node in one pass."""

    driver_version: str
    cuda_driver_version: str  # "12.4"
    gpus: tuple[Gpu, ...] = ()
    # DMI product name when the backend knows it (the simulated one does); labels
    # otherwise read it from the host themselves.
    machine_type: str | None = None
    # vGPU functions seen on the node's PCI bus, in bus order. None: the backend
    # did not look (labels scan sysfs themselves); (): looked, found none.
    vgpu_devices: tuple[VgpuDevice, ...] | None = None
