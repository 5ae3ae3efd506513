"""Inventories and host probes for the resource tests.

UUIDs are built so that their sort order is the NVML index order, which keeps
"inputs sorted" and "index order" the same thing in the allocation tables.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from devices.model import Gpu, Inventory, MigDevice, P2PLevel
from resources.options import ResourceOptions

A100_MIB = 40960


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-0000-0000-0000-000000000000"


def mig_uuid(gpu: int, slot: int) -> str:
    return f"MIG-{gpu:04x}{slot:04x}-0000-0000-0000-000000000000"


def make_gpu(
    index: int,
    *,
    minor: int | None = None,
    name: str = "NVIDIA A100-SXM4-40GB",
    numa: int | None = 0,
    mig_capable: bool = True,
    migs: Sequence[tuple[int, str, int]] | None = None,
    nvlinks: Mapping[int, int] | None = None,
    p2p: Mapping[int, P2PLevel] | None = None,
) -> Gpu:
    """A GPU; `migs` = (slot, profile, memory MiB) turns MIG on with those devices."""
    minor = index if minor is None else minor
    devices = tuple(
        MigDevice(
            uuid=mig_uuid(index, slot),
            parent_index=index,
            slot=slot,
            gi=slot + 1,
            ci=0,
            profile=profile,
            memory_mib=memory,
            gi_cap_minor=100 * (minor + 1) + 2 * slot,
            ci_cap_minor=100 * (minor + 1) + 2 * slot + 1,
        )
        for slot, profile, memory in migs or ()
    )
    return Gpu(
        index=index,
        minor=minor,
        uuid=gpu_uuid(index),
        name=name,
        memory_mib=A100_MIB,
        pci_bus_id=f"00000000:{index + 7:02X}:00.0",
        numa_node=numa,
        compute_capability="8.0",
        mig_capable=mig_capable,
        mig_enabled=migs is not None,
        mig_devices=devices,
        nvlinks=dict(nvlinks or {}),
        p2p=dict(p2p or {}),
    )


def inventory(gpus: Iterable[Gpu]) -> Inventory:
    return Inventory(driver_version="550.54.15", cuda_driver_version="12.4", gpus=tuple(gpus))


def plain_node(count: int, **kwargs: object) -> Inventory:
    return inventory(make_gpu(i, **kwargs) for i in range(count))  # type: ignore[arg-type]


def topology_node(
    count: int,
    nvlinks: Mapping[tuple[int, int], int],
    p2p: Mapping[tuple[int, int], P2PLevel],
) -> Inventory:
    """GPUs whose links are given per unordered pair (and mirrored to both sides)."""
    lanes: list[dict[int, int]] = [{} for _ in range(count)]
    levels: list[dict[int, P2PLevel]] = [{} for _ in range(count)]
    for (a, b), value in nvlinks.items():
        lanes[a][b] = lanes[b][a] = value
    for (a, b), level in p2p.items():
        levels[a][b] = levels[b][a] = level
    return inventory(
        make_gpu(i, mig_capable=False, numa=i * 2 // count, nvlinks=lanes[i], p2p=levels[i])
        for i in range(count)
    )


def _two_sockets(single: Iterable[tuple[int, int]]) -> dict[tuple[int, int], P2PLevel]:
    """8 GPUs, 4 per socket: listed pairs share a switch, others a host bridge or nothing."""
    levels: dict[tuple[int, int], P2PLevel] = {}
    pairs = set(single)
    for a in range(8):
        for b in range(a + 1, 8):
            if a // 4 != b // 4:
                levels[a, b] = P2PLevel.SYSTEM
            else:
                levels[a, b] = P2PLevel.SINGLE if (a, b) in pairs else P2PLevel.HOSTBRIDGE
    return levels


def _lanes(text: str) -> dict[tuple[int, int], int]:
    """`"0-1:2 0-3:1"` -> {(0, 1): 2, (0, 3): 1}."""
    links = {}
    for item in text.split():
        pair, lanes = item.split(":")
        a, b = pair.split("-")
        links[int(a), int(b)] = int(lanes)
    return links


# The DGX-1 hybrid cube meshes used by the reference allocator's own tests.
DGX1_VOLTA = topology_node(
    8,
    _lanes(
        "0-1:1 0-2:1 0-3:2 0-4:2 1-2:2 1-3:1 1-5:2 2-3:2 "
        "2-6:1 3-7:1 4-5:1 4-6:1 4-7:2 5-6:2 5-7:1 6-7:2"
    ),
    _two_sockets([(0, 1), (2, 3), (4, 5), (6, 7)]),
)
DGX1_PASCAL = topology_node(
    8,
    _lanes(
        "0-1:1 0-2:1 0-3:1 0-4:1 1-2:1 1-3:1 1-5:1 2-3:1 "
        "2-6:1 3-7:1 4-5:1 4-6:1 4-7:1 5-6:1 5-7:1 6-7:1"
    ),
    _two_sockets([(0, 2), (1, 3), (4, 6), (5, 7)]),
)
RTX8000_X4 = topology_node(
    4,
    {(0, 3): 2, (1, 2): 2},
    {
        (0, 1): P2PLevel.NODE,
        (0, 2): P2PLevel.SYSTEM,
        (1, 3): P2PLevel.SYSTEM,
        (2, 3): P2PLevel.NODE,
    },
)


@dataclass
class FakeHost:
    """The plugin container's view of `/dev`, for the injected probes."""

    files: set[str] = field(default_factory=set)
    char_devices: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.char_devices or path in self.dirs

    def is_char(self, path: str) -> bool:
        return path in self.char_devices

    def is_dir(self, path: str) -> bool:
        return path in self.dirs

    def glob(self, pattern: str) -> list[str]:
        return sorted(p for p in self.files | self.char_devices if fnmatch.fnmatch(p, pattern))

    def options(self, **kwargs: object) -> ResourceOptions:
        base = ResourceOptions(
            host_dev_exists=self.exists,
            is_char_device=self.is_char,
            is_dir=self.is_dir,
            glob=self.glob,
        )
        return replace(base, **kwargs)  # type: ignore[arg-type]


CONTROL = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}
