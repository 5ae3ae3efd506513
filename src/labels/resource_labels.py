"""Per-resource labels: full GPUs, then the MIG overlay of the active strategy.

The node carries one ``nvidia.com/gpu.*`` label set, however many GPU models
it has. Label sets are merged key by key, later ones winning, in the
reference's order: full-GPU sets of models with MIG enabled (no sharing),
then those of models with MIG disabled (with sharing), then the MIG labels of
the ``single`` or ``mixed`` strategy.

Heterogeneous nodes: the reference merges one set per model in map order, so
which model a node advertises changes from run to run. Here the rule is fixed:
within each of the two passes, the model with the most GPUs wins, and among
models with as many GPUs, the one holding the lowest GPU index. The count is
that model's own count (as in the reference), never a node total.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from loguru import logger

from devices.migprofile import profile_slices
from devices.model import Gpu, MigDevice
from labels import keys
from labels.naming import (
    architecture_family,
    full_gpu_product,
    mig_product,
    mig_profile_label_name,
    sanitise,
)
from labels.sharing import NOT_SHARED, ResourceSharing, SharingView
from settings import MigStrategy

__all__ = ["resource_labels"]

Labels = dict[str, str]


def _key(resource: str, suffix: str) -> str:
    return keys.resource_key(resource, suffix)


def _common(
    resource: str, *, product: str, count: int, sharing: ResourceSharing, memory_mib: int
) -> Labels:
    return {
        _key(resource, keys.PRODUCT): product,
        _key(resource, keys.COUNT): str(count),
        _key(resource, keys.REPLICAS): str(sharing.replicas),
        _key(resource, keys.SHARING_STRATEGY): sharing.strategy,
        _key(resource, keys.MEMORY): str(memory_mib),
    }


def _full_gpu_set(group: Sequence[Gpu], sharing: ResourceSharing, *, mig_enabled: bool) -> Labels:
    # The model's own facts (memory, family, compute capability) are read from
    # a GPU of this pass: a MIG-disabled one for the pass that wins, as the
    # reference does, since a MIG-enabled parent may report them differently.
    first = next(gpu for gpu in group if gpu.mig_enabled == mig_enabled)
    resource = keys.GPU_RESOURCE
    labels = _common(
        resource,
        product=full_gpu_product(first.name, shared=sharing.shared_suffix),
        count=len(group),
        sharing=sharing,
        memory_mib=first.memory_mib,
    )
    if first.memory_mib == 0:
        # The driver could not say; an absent label beats a wrong one.
        del labels[_key(resource, keys.MEMORY)]
    major, minor = first.cc_major, first.cc_minor
    if major != 0:
        labels[_key(resource, keys.FAMILY)] = architecture_family(major, minor)
        labels[_key(resource, keys.COMPUTE_MAJOR)] = str(major)
        labels[_key(resource, keys.COMPUTE_MINOR)] = str(minor)
    return labels


def _winner_last(groups: Iterable[list[Gpu]]) -> list[list[Gpu]]:
    """Merge order of same-pass models: the one that must win comes last."""
    return sorted(groups, key=lambda group: (len(group), -group[0].index))


def _full_gpu_labels(gpus: Sequence[Gpu], view: SharingView) -> Labels:
    by_name: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        by_name.setdefault(gpu.name, []).append(gpu)
    if len(by_name) > 1:
        logger.warning(
            "Multiple device types detected: {names}; nvidia.com/gpu.* labels describe {winner}",
            names=sorted(by_name),
            winner=_winner_last(by_name.values())[-1][0].name,
        )
    mig_enabled = [group for group in by_name.values() if any(g.mig_enabled for g in group)]
    mig_disabled = [group for group in by_name.values() if any(not g.mig_enabled for g in group)]
    labels: Labels = {}
    for group in _winner_last(mig_enabled):
        labels.update(_full_gpu_set(group, NOT_SHARED, mig_enabled=True))
    shared = view.for_resource(keys.GPU_RESOURCE)
    for group in _winner_last(mig_disabled):
        labels.update(_full_gpu_set(group, shared, mig_enabled=False))
    return labels


def _mig_set(
    resource: str, parent: Gpu, migs: Sequence[MigDevice], sharing: ResourceSharing
) -> Labels:
    first = migs[0]
    labels = _common(
        resource,
        product=mig_product(parent.name, first.profile, shared=sharing.shared_suffix),
        count=len(migs),
        sharing=sharing,
        memory_mib=first.memory_mib,
    )
    attributes = first.attributes
    if attributes is None:
        # Slice counts are part of the profile name; the rest only NVML can tell.
        ci_slices, gi_slices = profile_slices(first.profile)
        labels[_key(resource, keys.SLICES_GI)] = str(gi_slices)
        labels[_key(resource, keys.SLICES_CI)] = str(ci_slices)
        return labels
    labels.update(
        {
            _key(resource, keys.MULTIPROCESSORS): str(attributes.multiprocessors),
            _key(resource, keys.SLICES_GI): str(attributes.gi_slices),
            _key(resource, keys.SLICES_CI): str(attributes.ci_slices),
            _key(resource, keys.ENGINES_COPY): str(attributes.copy_engines),
            _key(resource, keys.ENGINES_DECODER): str(attributes.decoders),
            _key(resource, keys.ENGINES_ENCODER): str(attributes.encoders),
            _key(resource, keys.ENGINES_JPEG): str(attributes.jpegs),
            _key(resource, keys.ENGINES_OFA): str(attributes.ofas),
        }
    )
    return labels


def _single_problem(gpus: Sequence[Gpu]) -> str | None:
    enabled = [gpu for gpu in gpus if gpu.mig_enabled]
    if any(not gpu.mig_devices for gpu in enabled):
        return "at least one device with migEnabled=true was not configured correctly"
    if len(enabled) != len(gpus):
        return "devices with MIG enabled and disabled detected on the same node"
    profiles = {mig.profile for gpu in enabled for mig in gpu.mig_devices}
    if len(profiles) > 1:
        return f"more than one MIG device type present on node: {sorted(profiles)}"
    return None


def _single_labels(gpus: Sequence[Gpu], view: SharingView) -> Labels:
    enabled = [gpu for gpu in gpus if gpu.mig_enabled]
    if not enabled:
        return {}
    resource = keys.GPU_RESOURCE
    problem = _single_problem(gpus)
    if problem is not None:
        logger.warning("Invalid configuration for the single MIG strategy: {}", problem)
        return {
            _key(resource, keys.PRODUCT): "-".join((sanitise(enabled[0].name), "MIG", "INVALID")),
            _key(resource, keys.COUNT): "0",
            _key(resource, keys.REPLICAS): "0",
            _key(resource, keys.SHARING_STRATEGY): "",
            _key(resource, keys.MEMORY): "0",
        }
    migs = [mig for gpu in enabled for mig in gpu.mig_devices]
    return _mig_set(resource, enabled[0], migs, view.for_resource(resource))


def _mixed_labels(gpus: Sequence[Gpu], view: SharingView) -> Labels:
    # Profile -> (parent of the first device seen with it, its devices), first-seen order.
    by_profile: dict[str, tuple[Gpu, list[MigDevice]]] = {}
    for gpu in gpus:
        if not gpu.mig_enabled:
            continue
        for mig in gpu.mig_devices:
            by_profile.setdefault(mig.profile, (gpu, []))[1].append(mig)
    labels: Labels = {}
    for profile, (parent, migs) in by_profile.items():
        resource = keys.MIG_RESOURCE_PREFIX + mig_profile_label_name(profile)
        labels.update(_mig_set(resource, parent, migs, view.for_resource(resource)))
    return labels


def resource_labels(gpus: Sequence[Gpu], strategy: MigStrategy, view: SharingView) -> Labels:
    """Every per-resource label (and ``mig.strategy``) for a node with at least one GPU."""
    labels = _full_gpu_labels(gpus, view)
    if strategy is MigStrategy.SINGLE:
        labels[keys.MIG_STRATEGY] = strategy.value
        labels.update(_single_labels(gpus, view))
    elif strategy is MigStrategy.MIXED:
        labels[keys.MIG_STRATEGY] = strategy.value
        labels.update(_mixed_labels(gpus, view))
    return labels
