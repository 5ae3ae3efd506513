"""The whole label set of one pass, merged in the reference's order.

`compute_labels` is a pure function of the inventory, the resolved host facts,
the MIG strategy, the sharing configuration and the run's timestamp, so every
label can be tested exactly without a driver or a filesystem. The merge order
matters because later groups overwrite earlier keys: timestamp, then (only on
a node with GPUs) machine, CUDA versions, MIG capability, MPS capability,
resources and MIG strategy, GPU mode and clique, and finally vGPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from loguru import logger

from devices.model import Gpu, Inventory, VgpuDevice
from labels import keys
from labels.errors import LabelError
from labels.host import NodeFacts
from labels.naming import sanitise
from labels.resource_labels import resource_labels
from labels.sharing import SharingView
from settings import MigStrategy, SharingStrategy

__all__ = ["compute_labels", "version_labels"]

Labels = dict[str, str]


def _bool(value: bool) -> str:
    return "true" if value else "false"


def version_labels(driver_version: str, cuda_driver_version: str) -> Labels:
    """The twelve ``cuda.*`` labels. Driver fields stay text (``06`` keeps its zero).

    Raises:
        LabelError: the driver version is not ``X.Y`` or ``X.Y.Z``.
    """
    fields = driver_version.split(".")
    if len(fields) not in (2, 3):
        raise LabelError(f"driver version {driver_version!r} does not match format X.Y[.Z]")
    major, minor = fields[0], fields[1]
    revision = fields[2] if len(fields) == 3 else ""
    try:
        cuda_major, cuda_minor = (int(part) for part in cuda_driver_version.split("."))
    except ValueError:
        raise LabelError(f"CUDA driver version {cuda_driver_version!r} is not X.Y") from None
    return {
        keys.CUDA_DRIVER_MAJOR: major,
        keys.CUDA_DRIVER_MINOR: minor,
        keys.CUDA_DRIVER_REV: revision,
        keys.CUDA_RUNTIME_MAJOR: str(cuda_major),
        keys.CUDA_RUNTIME_MINOR: str(cuda_minor),
        keys.DRIVER_VERSION_MAJOR: major,
        keys.DRIVER_VERSION_MINOR: minor,
        keys.DRIVER_VERSION_REVISION: revision,
        keys.DRIVER_VERSION_FULL: driver_version,
        keys.RUNTIME_VERSION_MAJOR: str(cuda_major),
        keys.RUNTIME_VERSION_MINOR: str(cuda_minor),
        keys.RUNTIME_VERSION_FULL: f"{cuda_major}.{cuda_minor}",
    }


def _mps_capable(gpus: Sequence[Gpu], view: SharingView) -> str:
    if view.active is not SharingStrategy.MPS:
        return _bool(False)
    enabled = [gpu.index for gpu in gpus if gpu.mig_enabled]
    if enabled:
        raise LabelError(
            f"MPS sharing is not supported for MIG devices (MIG is enabled on GPUs {enabled})"
        )
    return _bool(True)


def _clique(gpus: Sequence[Gpu]) -> Labels:
    cliques = {(gpu.fabric.cluster_uuid, gpu.fabric.clique_id) for gpu in gpus if gpu.fabric}
    if not cliques:
        return {}
    if len(cliques) > 1:
        logger.warning(
            "GPUs of this node are in different NVLink cliques {}; no gpu.clique label",
            sorted(cliques),
        )
        return {}
    ((cluster, clique),) = cliques
    return {keys.GPU_CLIQUE: f"{cluster}.{clique}"}


def _device_labels(
    inventory: Inventory, facts: NodeFacts, strategy: MigStrategy, view: SharingView
) -> Labels:
    gpus = inventory.gpus
    labels: Labels = {keys.MACHINE: sanitise(facts.machine_type)}
    labels.update(version_labels(inventory.driver_version, inventory.cuda_driver_version))
    labels[keys.MIG_CAPABLE] = _bool(any(gpu.mig_capable for gpu in gpus))
    labels[keys.MPS_CAPABLE] = _mps_capable(gpus, view)
    labels.update(resource_labels(gpus, strategy, view))
    labels[keys.GPU_MODE] = facts.gpu_mode
    labels.update(_clique(gpus))
    return labels


def _vgpu_labels(vgpus: tuple[VgpuDevice, ...] | None) -> Labels:
    if vgpus is None:
        return {}
    labels = {keys.VGPU_PRESENT: _bool(bool(vgpus))}
    last = vgpus[-1] if vgpus else None
    if last is not None and last.host_driver_version is not None:
        labels[keys.VGPU_HOST_DRIVER_VERSION] = last.host_driver_version
    if last is not None and last.host_driver_branch is not None:
        labels[keys.VGPU_HOST_DRIVER_BRANCH] = last.host_driver_branch
    return labels


def compute_labels(
    inventory: Inventory | None,
    facts: NodeFacts,
    *,
    mig_strategy: MigStrategy,
    sharing: SharingView,
    timestamp: int | None,
) -> Labels:
    """Every label of the node. ``inventory`` None means no device library (no GPUs).

    Raises:
        LabelError: the pass cannot produce a correct label set.
    """
    labels: Labels = {}
    if timestamp is not None:
        labels[keys.TIMESTAMP] = str(timestamp)
    if inventory is not None and inventory.gpus:
        labels.update(_device_labels(inventory, facts, mig_strategy, sharing))
    labels.update(_vgpu_labels(facts.vgpus))
    if len(labels) <= 1:
        logger.warning("No labels generated from any source")
    return labels
