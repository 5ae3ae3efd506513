"""The node's GPUs narrowed to the ones the config lets the plugin use.

`select_gpus` is the one place ``--include-devices`` and ``--exclude-devices``
take effect, and every consumer of an inventory applies it before anything
else: the plugin (`reconciler.plan.desired`: resources, CDI specs, the health
source and `/state` all see the result), the labeller (`labels.runner`) and
the MPS daemon (`mps.plan`). A GPU left out is dropped from the inventory
whole, with its MIG devices, so nothing downstream can advertise, replicate,
watch, label or write a CDI device for it; ``Gpu.index`` keeps the NVML index,
so the GPUs that remain are named as before.

What an operator should fix comes back as warnings, one line each in the
reference's ``<origin>: <key>: <problem>`` style: an entry that names no GPU
of this node, a GPU named in both lists (left out: the exclusion wins), and
a selection that leaves none of the node's GPUs (the plugin then serves
nothing, as on a node without GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from devices.model import Gpu, Inventory
from settings.gpu_refs import GpuRef
from settings.gpu_selector import GpuSelector

__all__ = ["GpuSelection", "select_gpus"]


@dataclass(frozen=True)
class GpuSelection:
    """The inventory to use, the GPUs left out of it, and what to warn about."""

    inventory: Inventory
    left_out: tuple[Gpu, ...] = ()
    warnings: tuple[str, ...] = ()


def _named(ref: GpuRef, gpu: Gpu) -> bool:
    return ref.matches(gpu.index, gpu.uuid, gpu.pci_bus_id)


def _unmatched(refs: tuple[GpuRef, ...], gpus: tuple[Gpu, ...], origin: str) -> list[str]:
    return [
        f"{origin}: {ref.kind} {ref} matches no GPU on this node"
        for ref in refs
        if not any(_named(ref, gpu) for gpu in gpus)
    ]


def select_gpus(inventory: Inventory, selector: GpuSelector) -> GpuSelection:
    """The GPUs ``selector`` keeps: all, or those included; then minus those excluded."""
    if selector.selects_all:
        return GpuSelection(inventory)
    gpus = inventory.gpus
    warnings = _unmatched(selector.include, gpus, selector.include_origin)
    warnings += _unmatched(selector.exclude, gpus, selector.exclude_origin)
    kept: list[Gpu] = []
    left_out: list[Gpu] = []
    for gpu in gpus:
        included = not selector.include or any(_named(ref, gpu) for ref in selector.include)
        excluded = any(_named(ref, gpu) for ref in selector.exclude)
        if included and excluded and selector.include:
            warnings.append(
                f"{selector.exclude_origin}: GPU {gpu.index} ({gpu.uuid}) is also in "
                f"{_key(selector.include_origin)}; it is excluded"
            )
        (kept if included and not excluded else left_out).append(gpu)
    if gpus and not kept:
        origin = selector.include_origin if selector.include else selector.exclude_origin
        warnings.append(f"{origin}: none of the {len(gpus)} GPUs on this node is selected")
    if not left_out:
        return GpuSelection(inventory, (), tuple(warnings))
    return GpuSelection(replace(inventory, gpus=tuple(kept)), tuple(left_out), tuple(warnings))


def _key(origin: str) -> str:
    """``--include-devices`` out of ``command line: --include-devices``."""
    return origin.rpartition(": ")[2]
