"""Build the set of resources to serve from the inventory.

This first version covers full GPUs under the `none` MIG strategy: every GPU
becomes one `nvidia.com/gpu` device keyed by its UUID.
"""

from __future__ import annotations

from dataclasses import dataclass

from devices.model import Gpu, Inventory
from resources.model import RESOURCE_PREFIX, PluginDevice


@dataclass(frozen=True)
class ResourceSet:
    """One kubelet resource: its full name and the devices it advertises."""

    name: str
    devices: tuple[PluginDevice, ...]


def gpu_device(gpu: Gpu) -> PluginDevice:
    return PluginDevice(
        id=gpu.uuid,
        uuid=gpu.uuid,
        gpu_uuid=gpu.uuid,
        index=str(gpu.index),
        paths=(gpu.device_path,),
        numa_node=gpu.numa_node,
        memory_mib=gpu.memory_mib,
        compute_capability=gpu.compute_capability,
    )


def build_resources(inventory: Inventory) -> tuple[ResourceSet, ...]:
    """Resources with at least one device, in name order."""
    devices = tuple(gpu_device(gpu) for gpu in inventory.gpus)
    if not devices:
        return ()
    return (ResourceSet(name=RESOURCE_PREFIX + "gpu", devices=devices),)
