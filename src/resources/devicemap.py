"""Which devices make up which resource, per MIG strategy.

`none` exposes every GPU whole, MIG-enabled or not. `single` exposes the MIG
devices as `nvidia.com/gpu` and insists the node is uniform: every MIG device
of one type, no MIG-enabled GPU left empty, no mix of MIG and full GPUs.
`mixed` exposes full GPUs as `nvidia.com/gpu` and each MIG profile as its own
`nvidia.com/mig-<profile>`; an empty MIG-enabled GPU only earns a warning.
Checks run in the reference's order so a node with several problems reports
the same one first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devices.model import Gpu, Inventory, MigDevice
from resources.devnodes import mig_device_paths
from resources.errors import ResourceError
from resources.model import PluginDevice
from resources.naming import GPU_RESOURCE, mig_resource_name
from resources.options import MigStrategy

# Display controllers on DGX stations; never exposed, and their index is not reused.
SKIPPED_PRODUCTS = frozenset({"DGX Display", "NVIDIA DGX Display"})


@dataclass(frozen=True)
class DeviceMap:
    """Resource name -> devices (in NVML order), plus warnings to report."""

    resources: dict[str, tuple[PluginDevice, ...]]
    warnings: tuple[str, ...] = ()


def _numa(gpu: Gpu) -> int | None:
    return gpu.numa_node if gpu.numa_node is not None and gpu.numa_node >= 0 else None


def gpu_device(gpu: Gpu) -> PluginDevice:
    """A whole GPU: its UUID, NVML index and `/dev/nvidia<minor>`."""
    return PluginDevice(
        id=gpu.uuid,
        uuid=gpu.uuid,
        gpu_uuid=gpu.uuid,
        index=str(gpu.index),
        paths=(gpu.device_path,),
        numa_node=_numa(gpu),
        memory_mib=gpu.memory_mib,
        compute_capability=gpu.compute_capability,
    )


def mig_device(gpu: Gpu, mig: MigDevice) -> PluginDevice:
    """A MIG device: its UUID, index `<gpu>:<slot>`, parent node and capability nodes."""
    return PluginDevice(
        id=mig.uuid,
        uuid=mig.uuid,
        gpu_uuid=gpu.uuid,
        index=mig.index,
        paths=mig_device_paths(gpu, mig),
        numa_node=_numa(gpu),
        memory_mib=mig.memory_mib,
        compute_capability=gpu.compute_capability,
        gi=mig.gi,
        ci=mig.ci,
    )


def visible_gpus(inventory: Inventory) -> list[Gpu]:
    return [gpu for gpu in inventory.gpus if gpu.name not in SKIPPED_PRODUCTS]


def _add(table: dict[str, list[PluginDevice]], name: str, device: PluginDevice) -> None:
    table.setdefault(name, []).append(device)


def device_map(inventory: Inventory, strategy: MigStrategy) -> DeviceMap:
    """Group the node's devices into resources under `strategy`.

    Raises:
        ResourceError: the node cannot be exposed under this strategy.
    """
    gpus = visible_gpus(inventory)
    full: dict[str, list[PluginDevice]] = {}
    for gpu in gpus:
        if gpu.mig_enabled and strategy is not MigStrategy.NONE:
            continue
        _add(full, GPU_RESOURCE, gpu_device(gpu))
    if strategy is MigStrategy.NONE:
        return DeviceMap(_frozen(full))

    mig: dict[str, list[PluginDevice]] = {}
    for gpu in gpus:
        if not gpu.mig_enabled:
            continue
        for instance in sorted(gpu.mig_devices, key=lambda m: m.slot):
            name = (
                GPU_RESOURCE
                if strategy is MigStrategy.SINGLE
                else mig_resource_name(instance.profile)
            )
            _add(mig, name, mig_device(gpu, instance))

    warnings = _check_mig(gpus, strategy)
    if strategy is MigStrategy.SINGLE and full and mig:
        raise ResourceError(
            "all devices on the node must be configured with the same migEnabled value"
        )
    merged = dict(full)
    for name, devices in mig.items():
        merged.setdefault(name, []).extend(devices)
    return DeviceMap(_frozen(merged), warnings)


def _check_mig(gpus: Sequence[Gpu], strategy: MigStrategy) -> tuple[str, ...]:
    warnings: list[str] = []
    for gpu in gpus:
        if gpu.mig_enabled and not gpu.mig_devices:
            message = f"device {gpu.index} has no MIG devices configured"
            if strategy is MigStrategy.SINGLE:
                raise ResourceError(
                    "invalid MIG configuration: at least one device with migEnabled=true "
                    f"was not configured correctly: {message}"
                )
            warnings.append(message)
    if strategy is MigStrategy.SINGLE:
        # The reference compares the whole NVML attribute record; the profile
        # and memory size are what the inventory carries of it.
        kinds = {
            (instance.profile, instance.memory_mib)
            for gpu in gpus
            if gpu.mig_enabled
            for instance in gpu.mig_devices
        }
        if len(kinds) > 1:
            raise ResourceError(
                "invalid MIG configuration: more than one MIG device type present on node"
            )
    return tuple(warnings)


def _frozen(table: dict[str, list[PluginDevice]]) -> dict[str, tuple[PluginDevice, ...]]:
    return {name: tuple(devices) for name, devices in table.items() if devices}
