"""What one MPS replica is worth, and what a container holding several gets.

The control daemon of a shared resource gives every client the same default
share of each GPU (`mps.limits` sends it): per GPU, its memory divided by its
replica count; and one active thread percentage for the whole daemon, 100
divided by the largest replica count among its GPUs, so that no GPU is
promised more than it has when the counts differ per GPU (several sharing
entries over disjoint devices). Both are computed here, once, for the daemon
and for Allocate.

With ``failRequestsGreaterThanOne: false`` a container may hold several
replicas (v0.20.0 of the reference allows it and leaves the container with
one replica's default limits). Here such a container is told the sum of its
replicas' limits through the variables MPS clients read:
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``<ordinal>=<MiB>M`` per GPU, the
ordinals counting the container's GPUs in index order, which is the order
CUDA enumerates GPUs of one model in) and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (the replicas it holds of its
least-held GPU times one replica's percentage, at most 100). A container
holding at most one replica of each GPU gets neither variable: the daemon's
defaults are its share, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from resources.ids import has_annotation
from resources.model import PluginDevice

__all__ = [
    "PINNED_LIMIT_ENV",
    "THREAD_PERCENTAGE_ENV",
    "container_limits",
    "replica_memory_mib",
    "replica_thread_percentage",
]

MIB = 1024 * 1024
PINNED_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREAD_PERCENTAGE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def replica_memory_mib(memory_mib: int, replicas: int) -> int:
    """Pinned memory of one replica: bytes / replicas / 1024 / 1024, each rounding down."""
    return memory_mib * MIB // max(replicas, 1) // 1024 // 1024


def replica_thread_percentage(replica_counts: Iterable[int]) -> int | None:
    """100 / the largest replica count (rounding down); None without devices."""
    largest = max((max(count, 1) for count in replica_counts), default=0)
    return 100 // largest if largest else None


def _index_key(index: str) -> tuple[int, int, str]:
    return (0, int(index), "") if index.isdigit() else (1, 0, index)


def container_limits(
    ids: Sequence[str], devices: Mapping[str, PluginDevice], thread_percentage: int | None
) -> dict[str, str]:
    """The MPS variables for a container holding the replicas `ids` (known, without repeats).

    Empty unless the container holds two or more replicas of some GPU.
    """
    held = Counter(devices[i].uuid for i in ids if has_annotation(i))
    if not held or max(held.values()) < 2:
        return {}
    gpus = {devices[i].uuid: devices[i] for i in ids}
    ordered = sorted(gpus.values(), key=lambda device: _index_key(device.index))
    limits = [
        f"{ordinal}={held[gpu.uuid] * replica_memory_mib(gpu.memory_mib, gpu.replicas)}M"
        for ordinal, gpu in enumerate(ordered)
        if gpu.memory_mib > 0 and held[gpu.uuid]
    ]
    env = {PINNED_LIMIT_ENV: ",".join(limits)} if limits else {}
    if thread_percentage is not None:
        least = min(held[uuid] for uuid in gpus)
        env[THREAD_PERCENTAGE_ENV] = str(min(100, least * thread_percentage))
    return env
