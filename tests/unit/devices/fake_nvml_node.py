"""The node description the C fake NVML (`tests/unit/devices/fakenvml/`) reads, from a node profile.

The fake library serves a node as the hardware would present it, so the
description is written in hardware terms, not in the plugin's terms:
NVLink lanes are links with a far end (a GPU, or an NVSwitch whose bus id is
no GPU's), MIG devices are GPU-instance and compute-instance *profile
constants* with the profile ids the driver reports for them, and the
profile name (`1g.5gb`) is nowhere: the backend has to derive it from the
constants and the memory size, as on a real node.

The profile's inventory as the simulated backend builds it is the input
(links already mirrored, slots and MIG attributes filled in), so for any
profile both backends describe the same node, and the inventory read through
the C API must equal the simulated one. What NVML does not report (machine
type, PCI class, vGPU host details) is left to the host files the tests
write beside the node, as on a real machine.

The format is documented at the top of `fakenvml/node.c`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from devices.migprofile import GI_PROFILES, profile_slices
from devices.model import Gpu, Inventory, MigDevice, MigPlacement
from devices.pci import sysfs_bus_id
from devices.topology import NVML_TOPOLOGY_LEVELS

MIB = 1 << 20
MAX_LINKS = 36

# nvmlEventType*: single- and double-bit ECC, P-state, XID, clock changes.
SUPPORTED_EVENTS = 0x1 | 0x2 | 0x4 | 0x8 | 0x10
NVLINK_GPU = 0x00
NVLINK_SWITCH = 0x02
FABRIC_STATE_COMPLETED = 3

# GPU-instance profile constant -> profile id as `nvidia-smi mig -lgip` lists them on
# A100 and H100; constants those parts do not offer get made-up ids (distinct ones,
# which is all the backend relies on).
_GI_PROFILE_IDS = {0: 19, 7: 20, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}
# go-nvlib's brand names -> nvmlBrandType_t (the ones the profiles use).
_BRAND_CODES = {"Tesla": 2, "Nvidia": 14}
_OFFERED_GI_PROFILES = (0, 7, 9, 1, 2, 3, 4)
# GPU-instance profile constant -> eighths of the GPU's memory it holds.
_GI_MEMORY_EIGHTHS = {0: 1, 7: 1, 9: 2, 10: 1, 13: 1, 15: 1, 1: 2, 8: 2, 11: 2, 14: 2, 16: 2,
                      2: 4, 3: 4, 12: 4, 17: 4, 6: 6, 4: 8, 5: 8}  # fmt: skip
# Compute-instance profile constant -> compute slices (ids equal the constants).
_CI_PROFILES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}

_PCI_DEVICE_IDS = {
    "NVIDIA A100-SXM4-40GB": (0x20B010DE, 0x134F10DE),
    "NVIDIA H100 80GB HBM3": (0x233010DE, 0x16C110DE),
    "Tesla T4": (0x1EB810DE, 0x12A210DE),
}

# The text of a profile's `initError` -> the NVML return code that prints as it.
_INIT_ERRORS = {
    "version mismatch": 18,  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    "Driver Not Loaded": 9,  # NVML_ERROR_DRIVER_NOT_LOADED
    "GPU is lost": 15,  # NVML_ERROR_GPU_IS_LOST
}
_NVML_LEVELS = {level: value for value, level in NVML_TOPOLOGY_LEVELS.items()}


def init_error_code(text: str) -> int:
    """The NVML code whose message ends a profile's `initError` text (999, UNKNOWN, if none)."""
    for fragment, code in _INIT_ERRORS.items():
        if fragment in text:
            return code
    return 999


def gi_profile_constant(mig: MigDevice | MigPlacement, parent_mib: int) -> int:
    """The GPU-instance profile constant a MIG device (or placement) of this profile name
    was created from.

    1-slice profiles without a suffix come in two sizes (1_SLICE and
    1_SLICE_REV2, `1g.5gb` and `1g.10gb` on an A100-40GB); the memory
    decides which.
    """
    _, slices = profile_slices(mig.profile)
    suffix = re.sub(r"^(?:\d+c\.)?\d+g\.\d+gb", "", mig.profile)
    candidates = [c for c, (g, s) in GI_PROFILES.items() if g == slices and s == suffix]
    if not candidates:
        raise ValueError(f"no GPU-instance profile constant for {mig.profile!r}")
    eighths = math.ceil(mig.memory_mib * 8 / parent_mib)
    return min(candidates, key=lambda c: (abs(_GI_MEMORY_EIGHTHS[c] - eighths), c))


def ci_profile_constant(mig: MigDevice) -> int:
    compute, _ = profile_slices(mig.profile)
    for constant, slices in _CI_PROFILES.items():
        if slices == compute:
            return constant
    raise ValueError(f"no compute-instance profile constant for {mig.profile!r}")


def _gi_profile_id(constant: int) -> int:
    return _GI_PROFILE_IDS.get(constant, 32 + constant)


def _components(gpus: tuple[Gpu, ...]) -> list[list[int]]:
    """Groups of GPU positions joined by NVLink, in index order."""
    position = {gpu.index: pos for pos, gpu in enumerate(gpus)}
    seen: set[int] = set()
    groups: list[list[int]] = []
    for start in range(len(gpus)):
        if start in seen or not gpus[start].nvlinks:
            continue
        group, todo = [], [start]
        while todo:
            pos = todo.pop()
            if pos in seen:
                continue
            seen.add(pos)
            group.append(pos)
            todo.extend(position[peer] for peer in gpus[pos].nvlinks)
        groups.append(sorted(group))
    return groups


def _links(gpus: tuple[Gpu, ...]) -> list[list[tuple[str, int]]]:
    """Per GPU position, its NVLinks as (far-end bus id, far-end device type).

    A group in which every pair has the same lane count is wired through
    NVSwitches, as DGX and HGX boards are: each GPU spreads its lanes over up
    to six switches, the same way, so any two meet on as many lanes as they
    have. Any other group is wired GPU to GPU.
    """
    links: list[list[tuple[str, int]]] = [[] for _ in gpus]
    gpu_buses = {sysfs_bus_id(g.pci_bus_id) for g in gpus}
    for number, group in enumerate(_components(gpus)):
        lanes = {gpus[a].nvlinks.get(gpus[b].index) for a in group for b in group if a != b}
        if len(lanes) == 1 and None not in lanes:
            (count,) = lanes
            assert count is not None
            switches = [f"00000001:{number * 8 + s:02X}:00.0" for s in range(min(count, 6))]
            assert not gpu_buses & {sysfs_bus_id(b) for b in switches}
            for pos in group:
                links[pos] = [(switches[k % len(switches)], NVLINK_SWITCH) for k in range(count)]
            continue
        by_index = {g.index: g for g in gpus}
        for pos in group:
            for peer, count in sorted(gpus[pos].nvlinks.items()):
                links[pos] += [(by_index[peer].pci_bus_id, NVLINK_GPU)] * count
    for pos, wired in enumerate(links):
        if len(wired) > MAX_LINKS:
            raise ValueError(f"GPU {gpus[pos].index} needs {len(wired)} NVLinks; NVML has 36")
    return links


def _placed_profiles(gpu: Gpu) -> dict[int, tuple[MigPlacement, list[int]]]:
    """GPU-instance profile constant -> (its first placement, every start), from the inventory.

    A GPU with placements serves exactly those profiles' facts (id, memory,
    engines) and placements, so the backend reads back what the simulated
    one lists.
    """
    placed: dict[int, tuple[MigPlacement, list[int]]] = {}
    for placement in gpu.mig_placements:
        constant = gi_profile_constant(placement, gpu.memory_mib)
        first, starts = placed.setdefault(constant, (placement, []))
        if first.profile_id != placement.profile_id:
            raise ValueError(
                f"profile ids {first.profile_id} and {placement.profile_id} "
                f"are both GPU-instance profile constant {constant}"
            )
        starts.append(placement.start)
    return placed


def _mig_lines(gpu: Gpu) -> Iterable[str]:
    if not gpu.mig_capable:
        return
    enabled = int(gpu.mig_enabled)
    yield f"mig {enabled} {enabled} 7"
    used = {gi_profile_constant(m, gpu.memory_mib): m for m in gpu.mig_devices}
    placed = _placed_profiles(gpu)
    for constant in sorted(set(_OFFERED_GI_PROFILES) | set(used) | set(placed)):
        slices, _ = GI_PROFILES[constant]
        if constant in placed:
            first, starts = placed[constant]
            a = first.attributes
            yield (
                f"giprofile {constant} {first.profile_id} {slices} {len(starts)}"
                f" {first.memory_mib} {a.multiprocessors} {a.copy_engines} {a.decoders}"
                f" {a.encoders} {a.jpegs} {a.ofas}"
            )
            yield f"giplacements {constant} {first.size} " + " ".join(str(n) for n in starts)
            continue
        eighths = _GI_MEMORY_EIGHTHS[constant]
        memory = gpu.memory_mib * eighths // 8
        yield (
            f"giprofile {constant} {_gi_profile_id(constant)} {slices} {7 // slices} {memory}"
            " 0 0 0 0 0 0"
        )
    for constant, slices in _CI_PROFILES.items():
        yield f"ciprofile {constant} {constant} {slices}"
    for mig in gpu.mig_devices:
        gi_constant = gi_profile_constant(mig, gpu.memory_mib)
        yield (
            f"migdev {mig.slot} {mig.uuid} {mig.gi} {mig.ci} {gi_constant}"
            f" {ci_profile_constant(mig)} {mig.memory_mib}"
        )
        if mig.placement_start is not None:
            yield f"migplacement {mig.placement_start}"
        a = mig.attributes
        if a is not None:
            yield f"migattrs {a.multiprocessors} {a.copy_engines} {a.decoders} {a.encoders}" + (
                f" {a.jpegs} {a.ofas}"
            )


def _gpu_lines(gpu: Gpu, links: list[tuple[str, int]], index_of: Mapping[int, int]) -> list[str]:
    device_id, subsystem_id = _PCI_DEVICE_IDS.get(gpu.name, (0x000010DE, 0x000010DE))
    lines = [
        f"gpu {gpu.uuid}",
        f"name {gpu.name}",
        f"bus {gpu.pci_bus_id}",
        f"pciid 0x{device_id:08X} 0x{subsystem_id:08X}",
        f"minor {gpu.minor}",
        f"memory {gpu.memory_mib * MIB}",
        f"cc {gpu.cc_major} {gpu.cc_minor}",
        f"events 0x{SUPPORTED_EVENTS:x}",
        f"memerrors {'remap' if gpu.cc_major >= 8 else 'retire'}",
    ]
    if gpu.brand is not None:
        lines.append(f"brand {_BRAND_CODES[gpu.brand]}")
    if links:
        lines.append(f"links {len(links)}")
        lines += [f"link {n} 1 {bus} {kind}" for n, (bus, kind) in enumerate(links)]
    for peer, level in sorted(gpu.p2p.items()):
        lines.append(f"topo {index_of[peer]} {_NVML_LEVELS[level]}")
    if gpu.fabric is not None:
        cluster = gpu.fabric.cluster_uuid.replace("-", "")
        lines.append(f"fabric {cluster} {gpu.fabric.clique_id} {FABRIC_STATE_COMPLETED} 0")
    lines += _mig_lines(gpu)
    return lines


def describe_node(inventory: Inventory, *, control: Path, init_error: str | None = None) -> str:
    """The description file of the node `inventory` describes; faults are read from `control`."""
    cuda_major, cuda_minor = (int(part) for part in inventory.cuda_driver_version.split("."))
    lines = [
        f"driver {inventory.driver_version}",
        f"cuda {cuda_major * 1000 + cuda_minor * 10}",
        f"control {control}",
    ]
    if init_error is not None:
        lines.append(f"initerror {init_error_code(init_error)}")
    # NVML numbers GPUs 0..n-1; a profile's indices are its positions, so they agree.
    index_of = {gpu.index: pos for pos, gpu in enumerate(inventory.gpus)}
    for gpu, links in zip(inventory.gpus, _links(inventory.gpus), strict=True):
        lines += _gpu_lines(gpu, links, index_of)
    return "\n".join(lines) + "\n"
